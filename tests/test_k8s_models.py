"""``dmsgw.interlink.wire.apimachinery`` and ``dmsgw.interlink.wire.k8s``: quantities and times as
apimachinery reads and writes them, and pods as interLink sends them.

Quantity expectations are the cases of apimachinery's ``quantity_test.go`` (``TestQuantityParse``,
``TestQuantityString``, ``TestQuantityParseEmit``); pods come from ``tests/data/interlink``.
"""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from dmsgw.errors import DmsgwError
from dmsgw.interlink.wire import k8s
from dmsgw.interlink.wire.apimachinery import (
    QuantityError,
    format_quantity,
    format_time,
    parse_quantity,
    parse_time,
)
from dmsgw.interlink.wire.k8s import (
    ConfigMap,
    ContainerState,
    ContainerStateRunning,
    ContainerStateTerminated,
    ContainerStatus,
    Pod,
    Secret,
    Volume,
)

DATA = Path(__file__).parent / "data" / "interlink"


def load(name: str) -> Any:
    return json.loads((DATA / name).read_text())


def without_nulls(value: Any) -> Any:
    """``value`` with every ``null`` member dropped, as the models read ``null``."""
    if isinstance(value, dict):
        return {k: without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [without_nulls(v) for v in value]
    return value


# --- quantities ----------------------------------------------------------------------------

GIB = 1 << 30


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("0", 0),
        ("0n", 0),
        ("0Ki", 0),
        ("1", 1),
        ("500m", Decimal("0.5")),
        ("1Ki", 1024),
        ("7Mi", 7 << 20),
        ("6Gi", 6 * GIB),
        ("5Ti", 5 << 40),
        ("4Pi", 4 << 50),
        ("3Ei", 3 << 60),
        ("5n", Decimal("5e-9")),
        ("4u", Decimal("4e-6")),
        ("3m", Decimal("0.003")),
        ("8k", 8000),
        ("50k", 50000),
        ("7M", 7 * 10**6),
        ("6G", 6 * 10**9),
        ("5T", 5 * 10**12),
        ("2P", 2 * 10**15),
        ("1E", 10**18),
        ("1E-3", Decimal("0.001")),
        ("1e3", 1000),
        ("1E6", 10**6),
        ("1.3E+6", 1_300_000),
        ("1.7E18", 17 * 10**17),
        ("100.035k", 100035),
        ("0.0005k", Decimal("0.5")),
        ("0.5e-2", Decimal("0.005")),
        ("7.123456M", 7123456),
        ("1.01E", 101 * 10**16),
        ("12E", 12 * 10**18),
        # values finer than 1n round away from zero
        ("3.001n", Decimal("4e-9")),
        ("1.1E-9", Decimal("2e-9")),
        ("0.0000000001", Decimal("1e-9")),
        ("0.5e-9", Decimal("1e-9")),
        ("0.9n", Decimal("1e-9")),
        ("0.00000012345", Decimal("124e-9")),
        # binary quantities are capped at 2**63-1
        ("9Ei", (1 << 63) - 1),
        ("9223372036854775807Ki", (1 << 63) - 1),
        ("100.035Ki", Decimal("102435.84")),
        ("0.5Mi", 1 << 19),
        ("0.025Ti", Decimal("27487790694.4")),
        ("0.000000000001Ki", Decimal("2e-9")),
        (".001", Decimal("0.001")),
        ("1.", 1),
        ("1.G", 10**9),
        ("-1.5Gi", -3 * GIB // 2),
        ("+500m", Decimal("0.5")),
        ("128Gi", 128 * GIB),
    ],
)
def test_parse_quantity_matches_apimachinery(text: str, value: int | Decimal) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize(
    "text",
    [
        "",
        "1.1.M",
        "1+1.0M",
        "0.1mi",
        "0.1am",
        "aoeu",
        ".5i",
        "1i",
        "-3.01i",
        "-3.01e-",
        " 1",
        "1 ",
        "1K",
        "1ki",
        "1e",
        "1Ki5",
        "1e3.5",
        # Go reads these as zero; we take them as the mistakes they are
        "Gi",
        ".",
        "+",
        "m",
        # Go silently wraps an exponent past int32
        "1e2147483648",
        "1e99999999999999999999",
    ],
)
def test_parse_quantity_refuses_with_the_value_named(text: str) -> None:
    with pytest.raises(QuantityError) as info:
        parse_quantity(text)
    assert repr(text) in str(info.value)
    assert isinstance(info.value, DmsgwError)


@pytest.mark.parametrize(
    ("value", "binary", "text"),
    [
        (GIB, True, "1Gi"),
        (300 << 20, True, "300Mi"),
        (6 * 1024, True, "6Ki"),
        (1001 * GIB, True, "1001Gi"),
        (1 << 40, True, "1Ti"),
        (5, True, "5"),
        (Decimal("0.5"), True, "500m"),
        (Decimal("1234.567"), True, "1234567m"),
        (1025, True, "1025"),
        (3 * GIB // 2, True, "1536Mi"),
        (10**9, False, "1G"),
        (Decimal("0.001"), False, "1m"),
        (Decimal("0.08"), False, "80m"),
        (Decimal("1.08"), False, "1080m"),
        (300 * 10**6, False, "300M"),
        (10**12, False, "1T"),
        (10**18, False, "1E"),
        (10**21, False, "1e21"),
        (5 * 10**21, False, "5e21"),
        (1234567 * 10**6, False, "1234567M"),
        (3000, False, "3k"),
        (0, False, "0"),
        (0, True, "0"),
        (Decimal("1e-9"), False, "1n"),
        (Decimal("1.08e-6"), False, "1080n"),
        (Decimal("1.08e-3"), False, "1080u"),
        (Decimal("1.5"), False, "1500m"),
        (256, False, "256"),
        (-GIB, True, "-1Gi"),
        (Decimal("-9.01"), False, "-9010m"),
        (Decimal("1e-12"), False, "1n"),
    ],
)
def test_format_quantity_is_the_canonical_form(
    value: int | Decimal, binary: bool, text: str
) -> None:
    assert format_quantity(value, binary=binary) == text


@pytest.mark.parametrize(
    ("text", "binary", "canonical"),
    [
        ("1024Mi", True, "1Gi"),
        ("1000M", False, "1G"),
        (".001Ki", True, "1024m"),
        (".000001Ki", True, "1024u"),
        (".000000001Ki", True, "1024n"),
        (".000000000001Ki", True, "2n"),
    ],
)
def test_parse_then_format_as_apimachinery_emits(text: str, binary: bool, canonical: str) -> None:
    assert format_quantity(parse_quantity(text), binary=binary) == canonical


def test_format_quantity_refuses_non_finite() -> None:
    with pytest.raises(QuantityError, match="Infinity"):
        format_quantity(Decimal("Infinity"))


_quantity_text = st.builds(
    lambda sign, whole, frac, suffix: f"{sign}{whole}{frac}{suffix}",
    st.sampled_from(["", "+", "-"]),
    st.from_regex(r"[0-9]{1,12}", fullmatch=True),
    st.one_of(st.just(""), st.from_regex(r"\.[0-9]{0,12}", fullmatch=True)),
    st.sampled_from(
        [*"num", "", *"kMGTPE", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "e3", "E-3", "e+12", "e-30"]
    ),
)


@given(_quantity_text, st.booleans())
def test_formatted_quantities_read_back_to_the_same_value(text: str, binary: bool) -> None:
    value = parse_quantity(text)
    assert parse_quantity(format_quantity(value, binary=binary)) == value


# --- times ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-07-14T10:00:00Z", datetime(2026, 7, 14, 10, 0, 0, tzinfo=UTC)),
        ("2026-07-14T12:00:00+02:00", datetime(2026, 7, 14, 10, 0, 0, tzinfo=UTC)),
        ("2026-07-14T09:30:00-00:30", datetime(2026, 7, 14, 10, 0, 0, tzinfo=UTC)),
        ("2026-07-14T10:00:00.123456789Z", datetime(2026, 7, 14, 10, 0, 0, 123456, tzinfo=UTC)),
        ("2026-07-14T10:00:00.5Z", datetime(2026, 7, 14, 10, 0, 0, 500000, tzinfo=UTC)),
    ],
)
def test_times_parse_rfc3339_into_utc(text: str, expected: datetime) -> None:
    parsed = parse_time(text)
    assert parsed == expected
    assert parsed.tzinfo is UTC


@pytest.mark.parametrize(
    "value",
    [
        "",
        "2026-07-14",
        "2026-07-14 10:00:00Z",
        "2026-07-14T10:00:00",
        "2026-07-14T10:00Z",
        "2026-13-01T10:00:00Z",
        "2026-07-14T10:00:60Z",
        "2026-07-14T10:00:00+24:00",
        "9999-12-31T23:00:00-02:00",
        "0001-01-01T00:00:00+01:00",
        1752487200,
        datetime(2026, 7, 14, 10, 0, 0),
    ],
)
def test_times_without_zone_or_out_of_range_are_refused(value: object) -> None:
    with pytest.raises(ValueError):
        parse_time(value)


def test_times_are_written_at_second_precision_in_utc() -> None:
    moment = datetime(2026, 7, 14, 12, 0, 0, 999999, tzinfo=timezone(timedelta(hours=2)))
    assert format_time(moment) == "2026-07-14T10:00:00Z"
    assert format_time(datetime(1, 1, 1, tzinfo=UTC)) == "0001-01-01T00:00:00Z"


@given(st.datetimes(timezones=st.just(UTC)))
def test_times_round_trip_at_second_precision(moment: datetime) -> None:
    assert parse_time(format_time(moment)) == moment.replace(microsecond=0)


def test_unset_times_are_omitted_never_empty() -> None:
    status = ContainerStatus(
        name="main",
        state=ContainerState(
            running=ContainerStateRunning(started_at=None),
            terminated=None,
        ),
    )
    assert status.to_wire() == {"name": "main", "state": {"running": {}}}
    terminated = ContainerStateTerminated(
        exit_code=1, started_at=datetime(2026, 7, 14, 10, 0, tzinfo=UTC)
    )
    assert terminated.to_wire() == {"exitCode": 1, "startedAt": "2026-07-14T10:00:00Z"}


def test_a_time_string_with_another_offset_is_written_in_utc() -> None:
    state = ContainerStateRunning.model_validate({"startedAt": "2026-07-14T12:00:00+02:00"})
    assert state.to_wire() == {"startedAt": "2026-07-14T10:00:00Z"}


# --- pods ----------------------------------------------------------------------------------


def test_the_spec_example_pod() -> None:
    pod = Pod.model_validate(load("create_v05_example.json")["pod"])
    assert pod.metadata.uid == "0b8c6f6e-3d4a-4f0e-9c1e-2f9a7d1b5e11"
    assert pod.metadata.annotations == {"slurm-job.vk.io/flags": "-t 10"}
    assert pod.spec.restart_policy == "Never"
    assert [c.name for c in pod.spec.init_containers] == ["init"]
    main = pod.spec.containers[0]
    assert (main.image, main.command, main.args) == (
        "python:3.11-alpine",
        ["python", "-c"],
        ["print('hi')"],
    )
    assert main.env[0].name == "FOO" and main.env[0].value == "bar"
    assert main.resources.limits == {"cpu": "1", "memory": "1Gi"}
    assert [(m.name, m.read_only) for m in main.volume_mounts] == [
        ("work", False),
        ("cfg", True),
        ("kube-api-access-abcde", True),
    ]
    assert [v.source_kind for v in pod.spec.volumes] == ["emptyDir", "configMap", "projected"]
    projected = pod.spec.volumes[2].projected
    assert projected is not None and projected.sources[0].service_account_token is not None
    assert projected.sources[0].service_account_token.path == "token"
    assert pod.spec.tolerations[0].operator == "Exists"
    assert pod.status.phase == "Pending"


def test_the_seed_quickstart_pod() -> None:
    pod = Pod.model_validate(load("create_v04_quickstart.json")[0]["pod"])
    assert pod.metadata.name == "interlink-quickstart"
    assert pod.metadata.creation_timestamp == datetime(2024, 4, 4, 9, 39, 16, tzinfo=UTC)
    container = pod.spec.containers[0]
    assert container.args == ["-c", "sleep 600 && echo 'FINISHED!'"]
    assert container.image_pull_policy == "Always"
    assert parse_quantity(container.resources.requests["memory"]) == GIB
    assert pod.spec.restart_policy == "Always"
    assert pod.spec.termination_grace_period_seconds == 30
    assert pod.spec.automount_service_account_token is False
    assert pod.spec.node_selector == {"kubernetes.io/hostname": "nunet-node"}
    assert pod.spec.tolerations[1].toleration_seconds == 300
    assert pod.spec.tolerations[0].effect is None  # tolerates every effect
    # conditions carry "lastProbeTime": null
    assert pod.status.conditions[0].last_probe_time is None
    assert pod.status.container_statuses[0].state.running is not None
    assert pod.status.container_statuses[0].last_state == ContainerState()
    # unmodelled fields are kept
    assert pod.metadata.model_extra is not None and "managedFields" in pod.metadata.model_extra
    assert pod.spec.model_extra is not None and pod.spec.model_extra["dnsPolicy"] == "ClusterFirst"


def test_the_seed_gpu_job_pod() -> None:
    pod = Pod.model_validate(load("pod_seed_tensorflow.json"))
    assert pod.model_extra == {"kind": "Pod", "apiVersion": "v1"}
    assert pod.metadata.uid == ""  # the seed's pod was never created
    limits = pod.spec.containers[0].resources.limits
    assert limits["nunet.gpu.nvidia.v100.40gb"] == "1"
    assert parse_quantity(limits["memory"]) == 128 * GIB
    affinity = pod.spec.affinity
    assert affinity is not None and affinity.node_affinity is not None
    required = affinity.node_affinity.required_during_scheduling_ignored_during_execution
    assert required is not None
    expression = required.node_selector_terms[0].match_expressions[0]
    assert (expression.key, expression.operator, expression.values) == (
        "gpu-type",
        "In",
        ["nunet.gpu.nvidia.v100.40gb"],
    )


def test_every_typed_field_of_a_full_pod() -> None:
    pod = Pod.model_validate(load("pod_full.json"))
    spec = pod.spec
    assert spec.restart_policy == "OnFailure"
    assert spec.active_deadline_seconds == 7200
    assert [s.name for s in spec.image_pull_secrets] == ["registry-creds"]
    trainer = spec.containers[0]
    assert trainer.working_dir == "/app"
    env = {e.name: e for e in trainer.env}
    assert env["EMPTY"].value == "" and env["EMPTY"].value_from is None
    secret_ref = env["API_TOKEN"].value_from
    assert secret_ref is not None and secret_ref.secret_key_ref is not None
    assert (secret_ref.secret_key_ref.name, secret_ref.secret_key_ref.key) == (
        "train-secrets",
        "token",
    )
    cm_ref = env["LEARNING_RATE"].value_from
    assert cm_ref is not None and cm_ref.config_map_key_ref is not None
    assert cm_ref.config_map_key_ref.optional is True
    field_ref = env["POD_NAME"].value_from
    assert field_ref is not None and field_ref.field_ref is not None
    assert field_ref.field_ref.field_path == "metadata.name"
    resource_ref = env["MEM_LIMIT_MI"].value_from
    assert resource_ref is not None and resource_ref.resource_field_ref is not None
    assert resource_ref.resource_field_ref.divisor == "1Mi"
    assert trainer.ports[0].container_port == 9090 and trainer.ports[0].protocol == "TCP"
    assert trainer.volume_mounts[1].sub_path == "train.yaml"

    liveness, readiness, startup = (
        trainer.liveness_probe,
        trainer.readiness_probe,
        trainer.startup_probe,
    )
    assert liveness is not None and liveness.exec is not None
    assert liveness.exec.command == ["cat", "/tmp/healthy"]
    assert (liveness.initial_delay_seconds, liveness.period_seconds) == (30, 20)
    assert readiness is not None and readiness.http_get is not None
    assert readiness.http_get.port == "metrics"
    assert readiness.http_get.http_headers[0].name == "X-Probe"
    assert startup is not None and startup.tcp_socket is not None
    assert startup.tcp_socket.port == 9090 and startup.failure_threshold == 30
    lifecycle = trainer.lifecycle
    assert lifecycle is not None and lifecycle.pre_stop is not None and lifecycle.pre_stop.exec
    assert lifecycle.pre_stop.exec.command[-1] == "kill -TERM 1"

    volumes = {v.name: v for v in spec.volumes}
    assert [v.source_kind for v in spec.volumes] == [
        "emptyDir",
        "emptyDir",
        "configMap",
        "secret",
        "projected",
        "downwardAPI",
        "hostPath",
        "persistentVolumeClaim",
        "nfs",
    ]
    shm = volumes["dev-shm"].empty_dir
    assert shm is not None and (shm.medium, shm.size_limit) == ("Memory", "2Gi")
    config = volumes["config"].config_map
    assert config is not None and config.items[0].mode == 0o644 and config.optional is False
    creds = volumes["creds"].secret
    assert creds is not None and (creds.secret_name, creds.default_mode) == ("train-secrets", 0o400)
    projected = volumes["kube-api-access-x7k2p"].projected
    assert projected is not None
    token, ca, namespace, secret = projected.sources
    assert token.service_account_token is not None
    assert token.service_account_token.expiration_seconds == 3607
    assert ca.config_map is not None and ca.config_map.items[0].path == "ca.crt"
    assert namespace.downward_api is not None
    assert namespace.downward_api.items[0].field_ref is not None
    assert secret.secret is not None and secret.secret.optional is True
    podinfo = volumes["podinfo"].downward_api
    assert podinfo is not None and podinfo.items[1].resource_field_ref is not None
    host = volumes["models"].host_path
    assert host is not None and host.type == "DirectoryOrCreate"
    claim = volumes["datasets"].persistent_volume_claim
    assert claim is not None and (claim.claim_name, claim.read_only) == ("datasets-pvc", True)
    assert volumes["archive"].model_extra == {
        "nfs": {"server": "nfs.example.org", "path": "/exports/archive"}
    }

    status = pod.status
    assert status.pod_ip == "127.0.0.1" and status.host_ip == "10.244.0.18"
    terminated = status.init_container_statuses[0].state.terminated
    assert terminated is not None and terminated.reason == "Completed"
    last = status.container_statuses[0].last_state.terminated
    assert last is not None and (last.exit_code, last.signal, last.started_at) == (137, 9, None)
    assert status.container_statuses[0].started is True


@pytest.mark.parametrize(
    "name",
    ["pod_full.json", "pod_seed_tensorflow.json", "delete_request.json"],
)
def test_a_parsed_pod_is_written_back_as_it_arrived(name: str) -> None:
    raw = load(name)
    written = Pod.model_validate(raw).to_wire()
    expected = without_nulls(raw)
    if name == "pod_full.json":  # times are written in UTC at second precision
        condition = expected["status"]["conditions"][1]
        condition["lastTransitionTime"] = "2026-07-14T08:00:03Z"
    assert written == expected


def test_kubernetes_json_keys_keep_their_acronyms() -> None:
    status = ContainerStatus(name="c", image_id="sha256:1", container_id="docker://2")
    assert status.to_wire() == {"name": "c", "imageID": "sha256:1", "containerID": "docker://2"}
    pod = Pod.model_validate({"status": {"hostIP": "10.0.0.1", "podIP": "127.0.0.1"}})
    assert (pod.status.host_ip, pod.status.pod_ip) == ("10.0.0.1", "127.0.0.1")


def test_unknown_fields_are_tolerated_at_every_level() -> None:
    raw = load("create_v05_example.json")["pod"]
    raw["futureTopLevel"] = {"x": 1}
    raw["metadata"]["futureMeta"] = True
    raw["spec"]["futureSpec"] = [1, 2]
    raw["spec"]["containers"][0]["futureContainer"] = "x"
    raw["spec"]["containers"][0]["resources"]["claims"] = [{"name": "gpu"}]
    pod = Pod.model_validate(raw)
    assert pod.to_wire()["spec"]["containers"][0]["futureContainer"] == "x"
    assert pod.to_wire()["futureTopLevel"] == {"x": 1}


def test_null_members_read_as_absent() -> None:
    pod = Pod.model_validate(
        {
            "metadata": {"name": "p", "labels": None, "creationTimestamp": None},
            "spec": {"containers": None, "volumes": None, "affinity": None},
        }
    )
    assert pod.metadata.labels == {} and pod.metadata.creation_timestamp is None
    assert pod.spec.containers == [] and pod.spec.affinity is None


def test_restart_policy_defaults_to_always() -> None:
    assert Pod.model_validate({"spec": {}}).spec.restart_policy == "Always"


def errors_of(call: Any) -> list[tuple[tuple[int | str, ...], str]]:
    with pytest.raises(ValidationError) as info:
        call()
    return [(e["loc"], e["type"]) for e in info.value.errors()]


def test_pods_with_wrong_fields_are_refused_at_the_path() -> None:
    raw = load("create_v05_example.json")["pod"]
    bad = copy.deepcopy(raw)
    del bad["spec"]["containers"][0]["image"]
    bad["spec"]["restartPolicy"] = "Sometimes"
    bad["spec"]["containers"][0]["resources"]["limits"]["cpu"] = "1x"
    bad["spec"]["terminationGracePeriodSeconds"] = "30"  # Go refuses a string for an int
    bad["spec"]["tolerations"][0]["effect"] = "Sometimes"
    found = errors_of(lambda: Pod.model_validate(bad))
    assert set(found) == {
        (("spec", "containers", 0, "image"), "missing"),
        (("spec", "containers", 0, "resources", "limits", "cpu"), "value_error"),
        (("spec", "restartPolicy"), "literal_error"),
        (("spec", "tolerations", 0, "effect"), "literal_error"),
        (("spec", "terminationGracePeriodSeconds"), "int_type"),
    }


def test_quantity_errors_name_the_value() -> None:
    with pytest.raises(ValidationError, match=r"invalid quantity '12 cores'"):
        k8s.ResourceRequirements.model_validate({"limits": {"cpu": "12 cores"}})


def test_quantities_may_arrive_as_json_numbers_or_padded() -> None:
    resources = k8s.ResourceRequirements.model_validate(
        {"limits": {"cpu": 2, "memory": " 1Gi "}, "requests": {"cpu": 0.5}}
    )
    assert resources.limits == {"cpu": "2", "memory": "1Gi"}
    assert resources.requests == {"cpu": "0.5"}
    with pytest.raises(ValidationError, match="got a boolean"):
        k8s.ResourceRequirements.model_validate({"limits": {"cpu": True}})


def test_a_volume_with_two_sources_is_refused() -> None:
    with pytest.raises(ValidationError, match="more than one source: emptyDir, nfs"):
        Volume.model_validate({"name": "v", "emptyDir": {}, "nfs": {"server": "s"}})


def test_a_volume_without_source_is_an_empty_dir() -> None:
    assert Volume.model_validate({"name": "v"}).source_kind == "emptyDir"


def test_secret_data_is_base64_decoded_and_encoded_back() -> None:
    secret = Secret.model_validate(
        {
            "metadata": {"name": "s"},
            "data": {"token": "aGVsbG8=", "wrapped": "aGVs\nbG8="},
            "stringData": {"plain": "x"},
        }
    )
    assert secret.data == {"token": b"hello", "wrapped": b"hello"}
    assert secret.to_wire()["data"] == {"token": "aGVsbG8=", "wrapped": "aGVsbG8="}
    assert secret.string_data == {"plain": "x"}


@pytest.mark.parametrize("value", ["aGVsbG8", "a!==", 5])
def test_bad_secret_data_is_refused(value: object) -> None:
    with pytest.raises(ValidationError, match=r"data\.k"):
        Secret.model_validate({"data": {"k": value}})


def test_config_map_keeps_text_and_binary_data() -> None:
    config_map = ConfigMap.model_validate(
        {"metadata": {"name": "c"}, "data": {"app.conf": "x=1\n"}, "binaryData": {"b": "AAE="}}
    )
    assert config_map.data == {"app.conf": "x=1\n"}
    assert config_map.binary_data == {"b": b"\x00\x01"}


def test_exit_codes_stay_within_int32() -> None:
    with pytest.raises(ValidationError):
        ContainerStateTerminated(exit_code=1 << 31)
    assert ContainerStateTerminated(exit_code=-(1 << 31)).exit_code == -(1 << 31)


def test_strings_are_not_coerced_into_numbers_or_booleans() -> None:
    assert errors_of(lambda: ContainerStatus.model_validate({"name": "c", "ready": "true"})) == [
        (("ready",), "bool_type")
    ]
    assert errors_of(
        lambda: ContainerStatus.model_validate({"name": "c", "restartCount": 1.0})
    ) == [(("restartCount",), "int_type")]
