"""Behavior payloads: Go JSON shapes byte for byte, Go-style decoding, and the catalog."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest

from dmsgw.behaviors import (
    BY_NAMESPACE,
    CATALOG,
    BehaviorPayloadError,
    DeploymentStatus,
    ResourceError,
    Resources,
    UnknownBehaviorError,
    catalog,
    get_behavior,
    is_terminal,
)
from dmsgw.behaviors.allocations import AllocationsListResponse
from dmsgw.behaviors.cap_anchors import CapAnchorResponse, CapListResponse, CapTokenAnchorRequest
from dmsgw.behaviors.catalog import DEPLOYMENT_NEW
from dmsgw.behaviors.deployment import (
    DeploymentListRequest,
    DeploymentListResponse,
    DeploymentManifestResponse,
    DeploymentStatusRequest,
    DeploymentStatusResponse,
    NewDeploymentResponse,
)
from dmsgw.behaviors.ensemble import EnsembleConfig
from dmsgw.behaviors.logger import LoggerConfigRequest
from dmsgw.behaviors.onboarding import OffboardRequest, OnboardRequest, OnboardResponse
from dmsgw.behaviors.peers import PeersListResponse, PingRequest, PingResponse
from dmsgw.behaviors.public import DiscoveryStatusResponse, HelloResponse
from dmsgw.behaviors.resources import CPU, GPU, RAM, Disk
from dmsgw.behaviors.status import AllocationStatus
from dmsgw.behaviors.typed_client import build_request
from dmsgw.gojson import GoDecodeError

GIB = 1 << 30
PEER = "12D3KooWA4Xop1JaT3MHxwYMkCepYsv4iPVopMXwCz5iHYdBfeSB"
DID = "did:key:z6MkehRgf7yJbgaGfYsdoAsKdBPE3dj2CYhowQdcjqSJgvVd"
ID_B32 = "BAAREIADUED3746OCC7B24G5DDTUXQEZM7SNMME3UUGV6HO4QZSBEVJRXA======"
HANDLE = (
    f'{{"id":{{"pub":"{ID_B32}"}},"did":{{"uri":"{DID}"}},'
    f'"addr":{{"host":"{PEER}","inbox":"root"}}}}'
)
RESOURCES = (
    '{"cpu":{"clock_speed":3200000000,"cores":4,"model":"EPYC","threads":8,'
    '"architecture":"x86_64"},'
    '"gpus":[{"index":0,"vendor":"NVIDIA","pci_address":"0000:01:00.0","model":"RTX 3090",'
    '"vram":25769803776,"uuid":"GPU-0"}],'
    '"ram":{"size":17179869184,"type":"DDR4"},"disk":{"size":107374182400,"type":"SSD"}}'
)
MANIFEST = (
    '{"id":"e1","metadata":{"pod":"default/web"},"orchestrator":' + HANDLE + ","
    '"allocations":{"web":{"id":"e1_web","node_id":"n1","type":"service","handle":' + HANDLE + ","
    '"dns_name":"web","priv_addr":"10.0.0.2","ports":{"10080":80,"8443":443},'
    '"healthcheck":{"type":"http","exec":null,"endpoint":"http://web/","response":'
    '{"type":"","value":""},"interval":30000000000},"status":"running","is_standby":false}},'
    '"nodes":{"n1":{"id":"n1","peer":"' + PEER + '","handle":' + HANDLE + ","
    '"pub_address":["203.0.113.7"],"location":{"continent":"Europe"},"allocations":["web"],'
    '"status":"active"}},"subnet":{"join":true},"contracts":null}'
)


def _req(name: str) -> type[Any]:
    request = get_behavior(name).request
    assert request is not None
    return request


def _rep(name: str) -> type[Any]:
    return get_behavior(name).reply


TOKENS = json.loads((Path(__file__).parent / "vectors" / "tokens.json").read_text())["tokens"][
    "grant_dms_to_gateway_dms_node"
]["tokens_json"]

# (reply or request model, Go's json.Marshal bytes of the same value)
GO_SHAPES: list[tuple[type[Any], str]] = [
    (PeersListResponse, f'{{"Peers":["{PEER}"]}}'),
    (PeersListResponse, '{"Peers":null}'),
    (_rep("/dms/node/peers/self"), f'{{"id":"{PEER}","listen_addr":"/ip4/1.2.3.4/tcp/9"}}'),
    (PingRequest, f'{{"Host":"{PEER}"}}'),
    (PingResponse, '{"Error":"","RTT":12}'),
    (_req("/dms/node/peers/connect"), f'{{"Address":"/p2p/{PEER}"}}'),
    (_rep("/dms/node/peers/connect"), '{"Status":"CONNECTED","Error":""}'),
    (
        _rep("/dms/node/peers/dht"),
        f'{{"Peers":[{{"Id":"{PEER}","Mode":0,"LastUsefulAt":"2025-01-02T03:04:05.123456789Z",'
        '"LastSuccessfulOutboundQueryAt":"0001-01-01T00:00:00Z",'
        '"AddedAt":"2025-01-02T03:04:05+01:00"}]}',
    ),
    (_rep("/dms/node/peers/score"), '{"Score":{"p":{"Score":1.5,"Topics":null}}}'),
    (
        OnboardRequest,
        '{"NoGPU":true,"GPUs":"","Config":{"ID":"","CreatedAt":"0001-01-01T00:00:00Z",'
        '"UpdatedAt":"0001-01-01T00:00:00Z","DeletedAt":"0001-01-01T00:00:00Z",'
        '"is_onboarded":false,"onboarded_resources":{"cpu":{"cores":2.5},"ram":{"size":4294967296},'
        '"disk":{"size":21474836480}}}}',
    ),
    (OnboardResponse, '{"success":false,"error":"already onboarded","config":{"ID":"",'
     '"CreatedAt":"0001-01-01T00:00:00Z","UpdatedAt":"0001-01-01T00:00:00Z",'
     '"DeletedAt":"0001-01-01T00:00:00Z","is_onboarded":false,'
     '"onboarded_resources":{"cpu":{"cores":0},"ram":{"size":0},"disk":{"size":0}}}}'),
    (OffboardRequest, "{}"),
    (_rep("/dms/node/onboarding/offboard"), '{"success":true}'),
    (_rep("/dms/node/onboarding/status"), '{"onboarded":true}'),
    (_rep("/dms/node/resources/free"), '{"OK":true,"Resources":' + RESOURCES + "}"),
    (_rep("/dms/node/hardware/usage"), '{"OK":false,"Resources":{"cpu":'
     '{"cores":0},"ram":{"size":0},"disk":{"size":0}},"error":"no hardware manager"}'),
    (NewDeploymentResponse, '{"Status":"OK","EnsembleID":"c0ffee"}'),
    (NewDeploymentResponse, '{"Status":"ERROR","Error":"requested deployment time too short"}'),
    (_rep("/dms/node/deployment/update"), '{"OK":true}'),
    (DeploymentListRequest, "{}"),
    (
        DeploymentListRequest,
        '{"metadata":{"pod":"default/web"},"limit":10,"offset":20,"status":[4,5],'
        '"created_after":"2025-01-01T00:00:00Z","sort_by":"-created_at"}',
    ),
    (
        DeploymentListResponse,
        '{"deployments":[{"orchestrator_id":"e1","status":"Running",'
        '"created_at":"2025-01-01T00:00:00Z","updated_at":"2025-01-01T00:01:00.5Z",'
        '"completed_at":"2025-01-01T00:02:00Z","metadata":{"pod":"default/web"}}],'
        '"total":3,"has_more":true,"next_offset":1}',
    ),
    (DeploymentStatusRequest, '{"id":"e1"}'),
    (DeploymentStatusRequest, '{"id":"e1","include_usage":true}'),
    (DeploymentStatusResponse, '{"status":"Running","error":""}'),
    (
        DeploymentStatusResponse,
        '{"status":"Running","error":"","allocation_info":{"e1_web":{"allocation_id":"e1_web",'
        '"status":"running","heartbeat_seq":7,"has_health_check":true,"health":"healthy",'
        '"resource_limit":{"cpu":{"cores":1},"ram":{"size":1073741824},"disk":{"size":1073741824}},'
        '"resource_usage":{"cpu_usage_percent":12.5,"memory_used_bytes":1048576,'
        '"memory_limit_bytes":1073741824,"network_rx_bytes":10,"network_tx_bytes":20},'
        '"dns_name":"web","ip":"10.0.0.2","timestamp":1735689600}}}',
    ),
    (_req("/dms/node/deployment/manifest"), '{"ID":"e1"}'),
    (DeploymentManifestResponse, '{"manifest":' + MANIFEST + "}"),
    (
        _req("/dms/node/deployment/info"),
        '{"id":"e1","include_logs":true,"allocation_names":["web"]}',
    ),
    (
        _rep("/dms/node/deployment/info"),
        '{"id":"e1","status":"Completed","manifest":' + MANIFEST + ',"allocations":{"e1_web":'
        '{"allocation_id":"e1_web","status":"completed","heartbeat_seq":0,"has_health_check":false,'
        '"health":"","resource_limit":{"cpu":{"cores":0},"ram":{"size":0},"disk":{"size":0}},'
        '"resource_usage":{"cpu_usage_percent":0,"memory_used_bytes":0,"memory_limit_bytes":0,'
        '"network_rx_bytes":0,"network_tx_bytes":0},"dns_name":"","ip":"","timestamp":0,'
        '"logs":{"stdout_path":"/w/stdout.log","logs_written_to":"/w"}}}}',
    ),
    (_req("/dms/node/deployment/logs"), '{"EnsembleID":"e1","AllocationName":"web"}'),
    (_rep("/dms/node/deployment/logs"), '{"LogsWrittenTo":"/var/dms/e1","Error":""}'),
    (_req("/dms/node/deployment/shutdown"), '{"ID":"e1"}'),
    (_rep("/dms/node/deployment/shutdown"), '{"OK":false,"Error":"not running"}'),
    (_req("/dms/node/deployment/prune"), '{"before":"7d"}'),
    (_rep("/dms/node/deployment/prune"), '{"ok":true}'),
    (_req("/dms/node/deployment/delete"), '{"orchestrator_id":"e1"}'),
    (_rep("/dms/node/deployment/delete"), '{"ok":false,"error":"not found"}'),
    (AllocationsListResponse, '{"allocations":[]}'),
    (HelloResponse, f'{{"DID":{{"uri":"{DID}"}}}}'),
    (_rep("/public/status"), '{"Status":"OK","Resources":' + RESOURCES + "}"),
    (LoggerConfigRequest, '{"level":"debug","elastic_enabled":false}'),
    (_rep("/dms/node/logger/config"), '{"OK":true}'),
    (_req("/dms/cap/list"), '{"Context":"dms"}'),
    (CapListResponse, f'{{"OK":true,"Error":"","Roots":[{{"uri":"{DID}"}}],"Require":{{}},'
     '"Provide":' + TOKENS + ',"Revoke":{}}'),
    (CapTokenAnchorRequest, '{"Token":' + TOKENS + "}"),
    (_req("/dms/cap/anchor"), '{"Root":null,"Require":{},"Provide":{},"Revoke":{}}'),
    (CapAnchorResponse, '{"OK":true,"Error":""}'),
    (_req("/dms/volume/create"), '{"name":"data","client_pem":"-----BEGIN…"}'),
    (_rep("/dms/volume/create"), '{"OK":true,"ca_data":"-----BEGIN CA…"}'),
    (_rep("/dms/volume/delete"), '{"OK":false,"error":"permission denied"}'),
    (
        DiscoveryStatusResponse,
        f'{{"{PEER}":{{"hostname":"h","did":"{DID}","network":{{"interfaces":[{{"name":"eth0",'
        '"ip":["10.0.0.1/24"],"mac_address":"aa:bb:cc:dd:ee:ff"}],"p2p":{"ID":"x"}},'
        '"onboarded":false,"resources":{"total":' + RESOURCES + ',"onboarded":{"cpu":{"cores":0},'
        '"ram":{"size":0},"disk":{"size":0}},"allocated":{"cpu":{"cores":0},"ram":{"size":0},'
        '"disk":{"size":0}},"free":{"cpu":{"cores":0},"ram":{"size":0},"disk":{"size":0}}},'
        '"config":{"general":{"work_dir":"/w"}},"errors":null}}',
    ),
]  # fmt: skip


@pytest.mark.parametrize(("model", "wire"), GO_SHAPES)
def test_payloads_round_trip_byte_exactly(model: type[Any], wire: str) -> None:
    decoded = model.from_json(wire.encode())
    assert decoded.to_json() == wire.encode()
    assert model.from_json(decoded.to_json()) == decoded


def test_the_reply_in_the_golden_actor_message_decodes(vectors: Any) -> None:
    reply = json.loads(vectors("actor_messages.json")["reply"]["envelope_json"])
    payload = base64.b64decode(reply["msg"])
    peers = get_behavior("/dms/node/peers/list").decode_reply(payload)
    assert peers == PeersListResponse((PEER,))
    assert peers.to_json() == payload


def test_decoding_ignores_unknown_fields_and_folds_key_case() -> None:
    reply = PingResponse.from_json(b'{"error":"timeout","rtt":5,"Extra":[1,2],"tRaCe":{}}')
    assert reply == PingResponse(error="timeout", rtt=5)
    status = DeploymentStatusResponse.from_json(b'{"Status":"Failed","Error":"boom","Usage":1}')
    assert (status.status, status.error) == ("Failed", "boom")


@pytest.mark.parametrize(
    ("behavior", "wire", "error"),
    [
        ("/dms/node/peers/ping", b'{"Error":"failed to dial","RTT":0}', "failed to dial"),
        ("/dms/node/deployment/new", b'{"Status":"ERROR","Error":"no config"}', "no config"),
        ("/dms/node/deployment/status", b'{"status":"","error":"not found"}', "not found"),
        ("/dms/node/deployment/manifest", b'{"manifest":{"id":"e1"},"error":"gone"}', "gone"),
        ("/dms/node/resources/free", b'{"OK":false,"Resources":{},"error":"nope"}', "nope"),
        ("/dms/node/onboarding/onboard", b'{"success":false,"error":"bad config"}', "bad config"),
        ("/dms/cap/list", b'{"OK":false,"Error":"no such context"}', "no such context"),
        ("/dms/volume/start", b'{"OK":false,"error":"no volume"}', "no volume"),
        ("/dms/node/allocations/list", b'{"allocations":null,"error":"busy"}', "busy"),
    ],
)  # fmt: skip
def test_error_replies_decode(behavior: str, wire: bytes, error: str) -> None:
    reply = get_behavior(behavior).decode_reply(wire)
    assert getattr(reply, "error") == error  # noqa: B009 - reply types differ per behavior


def test_v05_deployment_list_reply_becomes_the_newest_shape() -> None:
    reply = DeploymentListResponse.from_json(b'{"Deployments":{"e2":"Running","e1":"Failed"}}')
    assert [(d.orchestrator_id, d.status) for d in reply.deployments or ()] == [
        ("e1", "Failed"),
        ("e2", "Running"),
    ]
    assert reply.total == 2


def test_bad_json_is_a_go_decode_error() -> None:
    with pytest.raises(GoDecodeError, match="cannot unmarshal string"):
        PingResponse.from_json(b'{"RTT":"fast"}')
    with pytest.raises(GoDecodeError, match="parsing time"):
        DeploymentListResponse.from_json(
            b'{"deployments":[{"created_at":"yesterday"}],"total":1,"has_more":false}'
        )
    with pytest.raises(GoDecodeError, match="cannot unmarshal array"):
        DiscoveryStatusResponse.from_json(b"[]")


# --- the catalog ------------------------------------------------------------------------


def test_execution_params_are_go_interface_values() -> None:
    # SpecConfig.Params is a Go map[string]interface{}: a DMS reads every number in it as a
    # float64 and writes it back so; one beyond float64 is its decode error.
    def config(number: str) -> bytes:
        params = '{"type":"docker","params":{"n":' + number + "}}"
        return ('{"v1":{"allocations":{"a":{"execution":' + params + "}}}}").encode()

    params = EnsembleConfig.from_json(config("[9007199254740993,1]"))
    assert params.v1 is not None and params.v1.allocations is not None
    assert params.v1.allocations["a"].execution.params == {"n": [9007199254740992.0, 1.0]}
    assert b'"params":{"n":[9007199254740992,1]}' in params.to_json()
    with pytest.raises(GoDecodeError, match=r"cannot unmarshal number 1000+ into .* float64$"):
        EnsembleConfig.from_json(config("1" + "0" * 400))


def test_structs_kept_as_plain_json_keep_their_integers_exact() -> None:
    # Network statistics are a Go struct with integer fields: exact in Go.
    status = DiscoveryStatusResponse.from_json(
        '{"p":{"network":{"interfaces":null,"p2p":{"in":9007199254740993}}}}'
    )
    assert status.peers is not None and status.peers["p"].network.p2p == {"in": 9007199254740993}


def test_every_behavior_has_a_consistent_entry() -> None:
    assert len(CATALOG) == len(BY_NAMESPACE) >= 35
    for name, behavior in CATALOG.items():
        assert behavior.name == name
        assert behavior.capability == name  # the DMS requires the behavior name itself
        assert BY_NAMESPACE[behavior.namespace] is behavior
        assert behavior.timeout_s >= behavior.min_timeout_s
        assert behavior.doc
        if behavior.request is not None:
            zero = behavior.request.from_json(b"{}")
            assert behavior.decode_request(behavior.encode_request(zero)) == zero
        else:
            assert behavior.encode_request() == b""
            assert behavior.decode_request(b"") is None
        zero_reply = behavior.reply.from_json(b"{}")
        assert behavior.decode_reply(zero_reply.to_json()) == zero_reply


def test_the_seed_and_newest_behavior_names_are_present() -> None:
    for name in (
        "/dms/node/peers/list",
        "/dms/node/peers/self",
        "/dms/node/peers/ping",
        "/dms/node/peers/dht",
        "/dms/node/peers/connect",
        "/dms/node/peers/score",
        "/dms/node/onboarding/onboard",
        "/dms/node/onboarding/offboard",
        "/dms/node/onboarding/status",
        "/dms/node/deployment/new",
        "/dms/node/deployment/list",
        "/dms/node/deployment/status",
        "/dms/node/deployment/logs",
        "/dms/node/deployment/manifest",
        "/dms/node/deployment/shutdown",
        "/dms/node/deployment/update",
        "/dms/node/deployment/info",
        "/dms/node/deployment/prune",
        "/dms/node/deployment/delete",
        "/dms/node/allocations/list",
        "/dms/node/resources/allocated",
        "/dms/node/resources/free",
        "/dms/node/resources/onboarded",
        "/dms/node/hardware/spec",
        "/dms/node/hardware/usage",
        "/dms/node/logger/config",
        "/dms/cap/list",
        "/dms/cap/anchor",
        "/public/hello",
        "/public/status",
        "/broadcast/hello",
    ):
        assert name in CATALOG


def test_deployment_lifetimes_respect_the_dms_minimum() -> None:
    new = get_behavior("/dms/node/deployment/new")
    assert new.min_timeout_s >= 60 and new.timeout_s >= 60  # the DMS wants exp - now >= 59 s
    assert get_behavior("/dms/node/deployment/update").min_timeout_s >= 118


def test_broadcasts_carry_their_topic() -> None:
    assert get_behavior("/broadcast/hello").topic == "/nunet/hello"
    assert get_behavior("/broadcast/dms/status").topic == "/nunet/status"
    assert get_behavior("/dms/cap/revoke/broadcast").topic == "/nunet/revocation"
    assert {b.name for b in CATALOG.values() if b.broadcast} == {
        "/broadcast/hello",
        "/broadcast/dms/status",
        "/dms/cap/revoke/broadcast",
    }


def test_namespaces_drive_a_facade() -> None:
    assert BY_NAMESPACE["peers", "list"].name == "/dms/node/peers/list"
    assert BY_NAMESPACE["deployment", "status"].name == "/dms/node/deployment/status"
    assert BY_NAMESPACE["cap", "provide_anchor"].name == "/dms/cap/provide/anchor"


def test_unknown_behaviors_name_close_matches() -> None:
    with pytest.raises(UnknownBehaviorError, match=r"did you mean /dms/node/peers/list"):
        get_behavior("/dms/node/peer/list")
    with pytest.raises(UnknownBehaviorError, match=r"^unknown behavior 'nonsense'$"):
        get_behavior("nonsense")


def test_payloads_are_type_checked() -> None:
    ping = get_behavior("/dms/node/peers/ping")
    assert ping.encode_request(PingRequest(PEER)) == f'{{"Host":"{PEER}"}}'.encode()
    assert ping.encode_request() == b'{"Host":""}'
    with pytest.raises(BehaviorPayloadError, match="takes a PingRequest, got OffboardRequest"):
        ping.encode_request(OffboardRequest())
    with pytest.raises(BehaviorPayloadError, match="takes no payload"):
        get_behavior("/dms/node/peers/list").encode_request(PingRequest())


# --- deployment status ------------------------------------------------------------------


def test_deployment_status_values_and_names_are_gos() -> None:
    names = ["Preparing", "Generating", "Committing", "Provisioning", "Running", "Failed"]
    names += ["ShuttingDown", "Completed"]
    for value, name in enumerate(names):
        status = DeploymentStatus.parse(name)
        assert (int(status), status.go_name) == (value, name)
        assert DeploymentStatus.parse(value) is status
    assert DeploymentStatus.parse("Updating") is DeploymentStatus.UNKNOWN
    assert DeploymentStatus.parse(42) is DeploymentStatus.UNKNOWN
    assert DeploymentStatus.UNKNOWN.go_name == "Unknown"
    running_or_failed = (DeploymentStatus.RUNNING, DeploymentStatus.FAILED)
    assert DeploymentListRequest(status=running_or_failed).to_json() == b'{"status":[4,5]}'


def test_only_failed_and_completed_are_terminal() -> None:
    assert [s.go_name for s in DeploymentStatus if is_terminal(s)] == ["Failed", "Completed"]
    assert is_terminal("Completed") and is_terminal(5)
    assert not is_terminal("ShuttingDown") and not is_terminal("Unknown")
    assert AllocationStatus.RUNNING == "running"


# --- resources --------------------------------------------------------------------------


def _resources(cores: float, ram_gib: int, disk_gib: int, *gpus: GPU) -> Resources:
    return Resources(CPU(cores=cores), gpus or None, RAM(ram_gib * GIB), Disk(disk_gib * GIB))


RTX = GPU(index=0, vendor="NVIDIA", model="RTX 3090", vram=24 * GIB)


def test_resources_json_is_the_newest_go_shape() -> None:
    resources = Resources(
        CPU(clock_speed=3.2e9, cores=0.1), (RTX,), RAM(16 * GIB), Disk(100 * GIB, type="SSD")
    )
    assert resources.to_json() == (
        b'{"cpu":{"clock_speed":3200000000,"cores":0.1},"gpus":[{"index":0,"vendor":"NVIDIA",'
        b'"pci_address":"","model":"RTX 3090","vram":25769803776,"uuid":""}],'
        b'"ram":{"size":17179869184},"disk":{"size":107374182400,"type":"SSD"}}'
    )


def test_free_is_onboarded_minus_allocated() -> None:
    onboarded = _resources(4, 16, 100, RTX)
    allocated = _resources(1.5, 4, 10).add(_resources(0.25, 2, 5, GPU(index=0, vram=8 * GIB)))
    assert allocated.cpu.cores == 1.75
    free = onboarded.subtract(allocated)
    assert (free.cpu.cores, free.ram.size, free.disk.size) == (2.25, 10 * GIB, 85 * GIB)
    assert free.gpus == (GPU(index=0, vendor="NVIDIA", model="RTX 3090", vram=16 * GIB),)
    assert free.add(allocated) == onboarded


def test_cores_are_rounded_like_the_dms() -> None:
    total = _resources(0.1, 0, 0).add(_resources(0.2, 0, 0))
    assert total.cpu.to_json() == b'{"cores":0.3}'


@pytest.mark.parametrize(
    ("taken", "message"),
    [
        (_resources(5, 1, 1), r"cpu.cores: cannot take 5 cores from 4 cores"),
        (_resources(1, 32, 1), r"ram.size: cannot take 32 GiB from 16 GiB"),
        (_resources(1, 1, 1, GPU(index=1, vram=GIB)), r"no GPU with index 1"),
        (_resources(1, 1, 1, GPU(index=0, vram=32 * GIB)), r"vram: cannot take 32 GiB from 24 GiB"),
    ],
)
def test_taking_more_than_there_is_fails(taken: Resources, message: str) -> None:
    with pytest.raises(ResourceError, match=message):
        _resources(4, 16, 100, RTX).subtract(taken)


def test_a_request_fits_or_says_why_not() -> None:
    free = Resources(
        CPU(clock_speed=3e9, cores=4, architecture="x86_64"), (RTX,), RAM(16 * GIB), Disk(100 * GIB)
    )
    assert free.fits(_resources(4, 16, 100, GPU(vendor="nvidia", vram=20 * GIB)))
    request = Resources(
        CPU(clock_speed=3.5e9, cores=8, architecture="arm64"),
        (GPU(vram=8 * GIB), GPU(vram=8 * GIB)),
        RAM(32 * GIB),
        Disk(10 * GIB),
    )
    assert free.shortfall(request) == (
        "cpu.cores: 8 cores requested, 4 cores available",
        "cpu.clock_speed: 3.5 GHz requested, 3 GHz available",
        "cpu.architecture: arm64 requested, x86_64 available",
        "ram.size: 32 GiB requested, 16 GiB available",
        "gpus: no free GPU for GPU with 8 GiB",
    )


def test_resources_read_like_a_spec_sheet() -> None:
    resources = Resources(
        CPU(clock_speed=3.2e9, cores=4), (RTX, RTX), RAM(16 * GIB), Disk(100 * GIB)
    )
    assert (
        str(resources)
        == "4 cores @ 3.2 GHz, 16 GiB RAM, 100 GiB disk, 2\u00d7 NVIDIA RTX 3090 24 GiB"
    )
    assert str(_resources(0.5, 0, 0)) == "0.5 cores"
    assert str(Resources()) == "no resources"
    assert GPU(vendor="NVIDIA", model="NVIDIA A100").label() == "NVIDIA A100"


def test_each_behavior_is_a_typed_constant_named_after_its_namespace() -> None:
    """Code invokes ``DEPLOYMENT_STATUS``, not a name string: each constant is the catalog's
    entry whose namespace it spells, so a constant cannot stand for another behavior."""
    for b in CATALOG.values():
        assert getattr(catalog, "_".join(b.namespace).upper()) is b
    assert catalog.DEPLOYMENT_STATUS.request is DeploymentStatusRequest


def test_a_one_field_request_is_taken_in_its_wire_shape_or_as_its_field() -> None:
    """``deployment/new`` has one field, the ensemble: a dict is that ensemble, unless it is
    the request as the DMS reads it, keyed by the field's JSON name (case-insensitively)."""
    ensemble = {"v1": {"allocations": {"a": {"type": "task", "executor": "docker"}}}}
    as_field = build_request(DEPLOYMENT_NEW, (ensemble,), {})
    for key in ("ensemble", "Ensemble"):
        as_request = build_request(DEPLOYMENT_NEW, ({key: ensemble},), {})
        assert as_request == as_field
    assert as_field.ensemble.v1 is not None and as_field.ensemble.v1.allocations
