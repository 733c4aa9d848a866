"""The interLink plugin contract, checked from the Go side.

interLink 0.6.2 (``pkg/interlink/types.go``) sends the bodies in ``tests/data/interlink`` and
decodes our replies with Go's ``encoding/json``. The replies are decoded here with
``dmsgw.gojson`` (a rule-for-rule port of that decoder) into mirrors of the Go types,
declared below with their exact JSON tags, so a key or type mismatch fails as it would in Go.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import json
import re
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from dmsgw.errors import DmsgwError
from dmsgw.gojson import (
    BOOL,
    INT64,
    STRING,
    DecodeContext,
    GoDecodeError,
    GoStruct,
    GoType,
    Ptr,
    SliceOf,
    StructOf,
    go_field,
    marshal,
    unmarshal,
)
from dmsgw.interlink.plugin_errors import PluginRequestError, TooManyPodsError
from dmsgw.interlink.wire import k8s, parsing
from dmsgw.interlink.wire.apimachinery import GoModel, parse_time, wire_json
from dmsgw.interlink.wire.bodies import (
    AcceleratorResponse,
    CreateStruct,
    PingResponse,
    PodStatus,
    ResourcesResponse,
    TaintResponse,
    encode_pod_statuses,
)
from dmsgw.interlink.wire.parsing import (
    MAX_PODS_PER_REQUEST,
    _deeper_than,
    parse_create_body,
    parse_delete_body,
    parse_logs_body,
    parse_status_body,
    read_status_body,
)

DATA = Path(__file__).parent / "data" / "interlink"
UID = "0b8c6f6e-3d4a-4f0e-9c1e-2f9a7d1b5e11"


def body(name: str) -> bytes:
    return (DATA / name).read_bytes()


def load(name: str) -> Any:
    return json.loads(body(name))


def dumps(value: Any) -> bytes:
    return json.dumps(value).encode()


# --- the Go types, as json.Unmarshal sees them ----------------------------------------------

# time.RFC3339 as Go's time.Parse accepts it (what metav1.Time.UnmarshalJSON calls).
GO_RFC3339 = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?(Z|[+-][0-9]{2}:[0-9]{2})"
)


class _MetaTime(GoType):
    """``metav1.Time``: ``null`` or an RFC 3339 string; anything else (``""``!) fails."""

    go_name = "v1.Time"

    def decode(self, raw: Any, current: Any, ctx: DecodeContext) -> Any:
        if raw is None:
            return None
        if not isinstance(raw, str) or not GO_RFC3339.fullmatch(raw):
            raise GoDecodeError(f'parsing time "{raw}" as RFC3339: cannot parse')
        return raw


class _Int32(GoType):
    go_name = "int32"

    def decode(self, raw: Any, current: Any, ctx: DecodeContext) -> Any:
        value = INT64.decode(raw, current, ctx)
        if not -(1 << 31) <= value < 1 << 31:
            raise ctx.type_error(f"number {raw}", self.go_name)
        return value

    def zero(self) -> Any:
        return 0


TIME = _MetaTime()
INT32 = _Int32()


@dataclasses.dataclass(frozen=True, slots=True)
class GoCreateStruct(GoStruct):
    GO_NAME = "CreateStruct"
    pod_uid: str = go_field("PodUID", STRING, default="")
    pod_jid: str = go_field("PodJID", STRING, default="")


@dataclasses.dataclass(frozen=True, slots=True)
class GoWaiting(GoStruct):
    GO_NAME = "ContainerStateWaiting"
    reason: str = go_field("reason", STRING, omitempty=True, default="")
    message: str = go_field("message", STRING, omitempty=True, default="")


@dataclasses.dataclass(frozen=True, slots=True)
class GoRunning(GoStruct):
    GO_NAME = "ContainerStateRunning"
    started_at: str | None = go_field("startedAt", TIME, default=None)


@dataclasses.dataclass(frozen=True, slots=True)
class GoTerminated(GoStruct):
    GO_NAME = "ContainerStateTerminated"
    exit_code: int = go_field("exitCode", INT32, default=0)
    signal: int = go_field("signal", INT32, omitempty=True, default=0)
    reason: str = go_field("reason", STRING, omitempty=True, default="")
    message: str = go_field("message", STRING, omitempty=True, default="")
    started_at: str | None = go_field("startedAt", TIME, default=None)
    finished_at: str | None = go_field("finishedAt", TIME, default=None)
    container_id: str = go_field("containerID", STRING, omitempty=True, default="")


@dataclasses.dataclass(frozen=True, slots=True)
class GoState(GoStruct):
    GO_NAME = "ContainerState"
    waiting: GoWaiting | None = go_field("waiting", Ptr(StructOf(GoWaiting)), default=None)
    running: GoRunning | None = go_field("running", Ptr(StructOf(GoRunning)), default=None)
    terminated: GoTerminated | None = go_field(
        "terminated", Ptr(StructOf(GoTerminated)), default=None
    )


@dataclasses.dataclass(frozen=True, slots=True)
class GoContainerStatus(GoStruct):
    GO_NAME = "ContainerStatus"
    name: str = go_field("name", STRING, default="")
    state: GoState = go_field("state", StructOf(GoState), default_factory=GoState)
    last_state: GoState = go_field("lastState", StructOf(GoState), default_factory=GoState)
    ready: bool = go_field("ready", BOOL, default=False)
    restart_count: int = go_field("restartCount", INT32, default=0)
    image: str = go_field("image", STRING, default="")
    image_id: str = go_field("imageID", STRING, default="")
    container_id: str = go_field("containerID", STRING, omitempty=True, default="")
    started: bool | None = go_field("started", Ptr(BOOL), omitempty=True, default=None)


_STATUSES = SliceOf(StructOf(GoContainerStatus))


@dataclasses.dataclass(frozen=True, slots=True)
class GoPodStatus(GoStruct):
    GO_NAME = "PodStatus"
    name: str = go_field("name", STRING, default="")
    uid: str = go_field("UID", STRING, default="")
    namespace: str = go_field("namespace", STRING, default="")
    jid: str = go_field("JID", STRING, default="")
    containers: tuple[GoContainerStatus, ...] | None = go_field(
        "containers", _STATUSES, default=None
    )
    init_containers: tuple[GoContainerStatus, ...] | None = go_field(
        "initContainers", _STATUSES, default=None
    )


@dataclasses.dataclass(frozen=True, slots=True)
class GoStatusReply(GoStruct):
    """Holds the ``[]PodStatus`` the API decodes the ``/status`` reply into."""

    GO_NAME = "StatusReply"
    items: tuple[GoPodStatus, ...] | None = go_field(
        "items", SliceOf(StructOf(GoPodStatus)), default=None
    )


@dataclasses.dataclass(frozen=True, slots=True)
class GoAccelerator(GoStruct):
    GO_NAME = "AcceleratorResponse"
    resource_type: str = go_field("resourceType", STRING, default="")
    available: str = go_field("available", STRING, default="")


@dataclasses.dataclass(frozen=True, slots=True)
class GoResources(GoStruct):
    GO_NAME = "ResourcesResponse"
    cpu: str = go_field("cpu", STRING, omitempty=True, default="")
    memory: str = go_field("memory", STRING, omitempty=True, default="")
    pods: str = go_field("pods", STRING, omitempty=True, default="")
    accelerators: tuple[GoAccelerator, ...] | None = go_field(
        "accelerators", SliceOf(StructOf(GoAccelerator)), omitempty=True, default=None
    )


@dataclasses.dataclass(frozen=True, slots=True)
class GoTaint(GoStruct):
    GO_NAME = "TaintResponse"
    key: str = go_field("key", STRING, default="")
    value: str = go_field("value", STRING, omitempty=True, default="")
    effect: str = go_field("effect", STRING, default="")


@dataclasses.dataclass(frozen=True, slots=True)
class GoPingResponse(GoStruct):
    GO_NAME = "PingResponse"
    status: str = go_field("status", STRING, omitempty=True, default="")
    resources: GoResources | None = go_field(
        "resources", Ptr(StructOf(GoResources)), omitempty=True, default=None
    )
    taints: tuple[GoTaint, ...] | None = go_field(
        "taints", Ptr(SliceOf(StructOf(GoTaint))), omitempty=True, default=None
    )


@dataclasses.dataclass(frozen=True, slots=True)
class GoLogOpts(GoStruct):
    GO_NAME = "ContainerLogOpts"
    tail: int = go_field("Tail", INT64, default=0)
    limit_bytes: int = go_field("Bytes", INT64, default=0)
    timestamps: bool = go_field("Timestamps", BOOL, default=False)
    follow: bool = go_field("Follow", BOOL, default=False)
    previous: bool = go_field("Previous", BOOL, default=False)
    since_seconds: int = go_field("SinceSeconds", INT64, default=0)
    since_time: str = go_field("SinceTime", STRING, default="0001-01-01T00:00:00Z")


@dataclasses.dataclass(frozen=True, slots=True)
class GoLogStruct(GoStruct):
    GO_NAME = "LogStruct"
    namespace: str = go_field("Namespace", STRING, default="")
    pod_uid: str = go_field("PodUID", STRING, default="")
    pod_name: str = go_field("PodName", STRING, default="")
    container_name: str = go_field("ContainerName", STRING, default="")
    opts: GoLogOpts = go_field("Opts", StructOf(GoLogOpts), default_factory=GoLogOpts)


def go_statuses(reply: bytes) -> tuple[GoPodStatus, ...]:
    """What the API's ``json.Unmarshal(body, &[]types.PodStatus{})`` yields."""
    decoded = unmarshal(GoStatusReply, b'{"items":' + reply + b"}").items
    assert decoded is not None
    return decoded


def no_nulls_or_empty_times(value: Any, key: str = "") -> None:
    """Our replies never write ``null``, and times are RFC 3339, never ``""``."""
    assert value is not None, f"null at {key}"
    if isinstance(value, dict):
        for k, v in value.items():
            no_nulls_or_empty_times(v, k)
    elif isinstance(value, list):
        for item in value:
            no_nulls_or_empty_times(item, key)
    elif key.endswith("At"):
        assert GO_RFC3339.fullmatch(value), f"{key}={value!r}"


# --- /create -------------------------------------------------------------------------------


def test_create_body_of_interlink_0_5_is_one_object() -> None:
    [data] = parse_create_body(body("create_v05_example.json"))
    assert data.pod.metadata.uid == UID
    assert [c.name for c in data.containers] == ["init", "main"]
    init, main = data.containers
    assert init.config_maps == [] and init.secrets == [] and init.empty_dirs == []
    assert main.config_maps[0].metadata.name == "my-cm"
    assert main.config_maps[0].data == {"app.conf": "x=1\n"}
    [projected] = main.projected_volume_maps
    assert projected.metadata.name == "kube-api-access-abcde"
    assert set(projected.data) == {"token", "ca.crt", "namespace"}
    assert set(data.job_config) == {"SingularityHubProxy", "ApptainerOptions", "Volumes"}
    assert data.job_script == ""


def test_create_body_of_interlink_0_4_is_a_list() -> None:
    [data] = parse_create_body(body("create_v04_quickstart.json"))
    assert data.pod.metadata.name == "interlink-quickstart"
    assert data.pod.metadata.uid == "1df0a37e-a29b-426b-9b14-43f95dfc5a2f"
    # the old API sent one nameless entry with null lists
    [container] = data.containers
    assert container.name == "" and container.config_maps == [] and container.secrets == []


def test_a_create_list_of_several_pods_returns_each() -> None:
    first = load("create_v05_example.json")
    second = copy.deepcopy(first)
    second["pod"]["metadata"]["uid"] = "11111111-2222-4333-8444-555555555555"
    parsed = parse_create_body(dumps([first, second]))
    assert [d.pod.metadata.uid for d in parsed] == [UID, "11111111-2222-4333-8444-555555555555"]


def test_create_body_carries_secrets_job_script_and_newer_fields() -> None:
    data = load("create_v05_example.json")
    data["jobScript"] = "#!/bin/sh\necho hi\n"
    main = data["container"][1]
    main["secrets"] = [{"metadata": {"name": "db"}, "data": {"password": "czNjcjN0"}}]
    main["persistentVolumeClaims"] = [{"metadata": {"name": "pvc"}}]  # newer interLink
    [parsed] = parse_create_body(dumps(data))
    assert parsed.job_script == "#!/bin/sh\necho hi\n"
    assert parsed.containers[1].secrets[0].data == {"password": b"s3cr3t"}
    assert parsed.containers[1].model_extra == {
        "persistentVolumeClaims": [{"metadata": {"name": "pvc"}}]
    }


# --- /status, /delete, /getLogs ------------------------------------------------------------


def test_status_body_is_a_list_of_pods() -> None:
    [pod] = parse_status_body(body("status_request.json"))
    assert pod.metadata.uid == UID
    assert pod.metadata.annotations["JobID"] == "job-42"
    waiting = pod.status.container_statuses[0].state.waiting
    assert waiting is not None and waiting.reason == "PodInitializing"


@pytest.mark.parametrize("ping", [b"[]", b" [ ]\n"])
async def test_the_ping_is_an_empty_status_list(ping: bytes) -> None:
    assert parse_status_body(ping) == []
    assert await read_status_body(ping) == []


async def test_status_refs_name_the_pods_and_read_them_whole_on_demand() -> None:
    first, second = load("status_request.json")[0], load("status_request.json")[0]
    second["metadata"] |= {"uid": "11111111-2222-4333-8444-555555555555", "name": "other"}
    raw = f" [ {json.dumps(first)} ,\n{json.dumps(second)} ] ".encode()
    expected = parse_status_body(raw)
    for _ in range(2):  # the second read comes from the remembered identities and places
        refs = await read_status_body(raw)
        assert [(r.uid, r.name) for r in refs] == [
            (p.metadata.uid, p.metadata.name) for p in expected
        ]
        assert [r.pod() for r in reversed(refs)] == expected[::-1]


@pytest.mark.parametrize(
    ("raw", "error"),
    [
        (b'[{"metadata": {"name": "a"}}]', "[0].metadata.uid: field required"),
        (b'[{"metadata": {"uid": "u", "name": ""}}]', "[0].metadata.name: field required"),
        (b'[{"metadata": []}]', "[0].metadata: expected an object, got an array"),
        (
            b'[{"metadata": {"name": "a", "uid": "u"}}, {"metadata": {"name": 7, "uid": "v"}}]',
            "[1].metadata.name: expected a string, got a number",
        ),
        (b'[{"metadata": {"name": "a", "uid": "u", "namespace": {}}}]',
         "[0].metadata.namespace: expected a string, got an object"),
        (b'[{"metadata": {"name": "a", "uid": "u"}}, 1]', "[1]: expected an object, got a number"),
    ],
)  # fmt: skip
async def test_a_status_body_naming_a_pod_badly_is_refused_every_time(
    raw: bytes, error: str
) -> None:
    """What /status reads of each pod on first sight (who it is) is checked as the whole
    read checks it, with the same one-line error; a refused body is never remembered."""
    for _ in range(2):
        with pytest.raises(PluginRequestError) as info:
            await read_status_body(raw)
        assert str(info.value) == error


async def test_the_rest_of_a_status_pod_is_checked_when_it_is_read_whole() -> None:
    """A pod's spec and status are not what /status answers from (a known pod's kept entry
    is): they are checked when the backend reads the pod whole (an unknown pod), with the
    error the whole read of the body gives, and from a remembered body too."""
    bad = {"metadata": {"name": "a", "uid": "u"}, "status": {"phase": "Done"}}
    deep: Any = {"metadata": {"name": "b", "uid": "v"}, "spec": {"nodeSelector": {}}}
    deep["spec"]["x"] = _nested(900, 0)  # read as the body was, close to Python's own limit
    raw = json.dumps([bad, deep]).encode()
    for _ in range(2):
        first, second = await read_status_body(raw)
        assert (first.uid, first.name, second.uid) == ("u", "a", "v")
        with pytest.raises(PluginRequestError) as info:
            first.pod()
        assert str(info.value) == (
            "[0].status.phase: input should be 'Pending', 'Running', 'Succeeded', 'Failed' or "
            "'Unknown' (got \"Done\")"
        )
        with pytest.raises(PluginRequestError, match=r"^body: JSON nested deeper than 100 "):
            second.pod()
    with pytest.raises(PluginRequestError, match=r"^\[0\]\.status\.phase: "):
        parse_status_body(raw)


def test_a_status_is_written_once_and_a_copy_writes_its_own() -> None:
    [status] = _spec_example_statuses()[:1]
    assert status.wire() is status.wire()
    assert status.wire() == wire_json(status.to_wire())
    renamed = status.model_copy(update={"name": "other"})
    assert json.loads(renamed.wire())["name"] == "other"
    with pytest.raises(ValidationError):
        status.name = "changed"  # published snapshots are immutable


_EXTRA_VALUES = (
    st.text(max_size=8)  # lone surrogates included: those go the reference way
    | st.integers()
    | st.booleans()
    | st.floats(allow_nan=False, allow_infinity=False)
)


def _written_alike(model: GoModel) -> None:
    """``to_json`` (pydantic's encoder) writes the bytes of the reference encoder."""
    assert model.to_json() == wire_json(model.to_wire())


@pytest.mark.parametrize("name", ["create_v04_quickstart.json", "create_v05_example.json"])
def test_a_stored_request_is_written_as_the_reference_writes_it(name: str) -> None:
    for data in parse_create_body(body(name)):
        _written_alike(data)


@pytest.mark.parametrize("name", ["pod_full.json", "pod_seed_tensorflow.json"])
def test_a_pod_is_written_as_the_reference_writes_it(name: str) -> None:
    _written_alike(k8s.Pod.model_validate(load(name)))


def test_a_status_entry_is_written_as_the_reference_writes_it() -> None:
    for status in _spec_example_statuses():
        _written_alike(status)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.from_regex(r"x[a-z]{0,6}", fullmatch=True), _EXTRA_VALUES, max_size=4))
def test_unknown_fields_are_written_as_the_same_json(extra: dict[str, Any]) -> None:
    """Any value an unknown field may hold reads back the same, in ASCII (the two encoders
    may differ in spelling: DEL raw or escaped, ``1e-7`` or ``1e-07``)."""
    meta = k8s.ObjectMeta.model_validate({"name": "a", **extra})
    written = meta.to_json()
    assert written.isascii()
    assert json.loads(written) == json.loads(wire_json(meta.to_wire()))


def test_a_lone_surrogate_is_escaped_as_go_reads_it() -> None:
    meta = k8s.ObjectMeta.model_validate({"name": "a", "annotations": {"k": "\ud800x"}})
    assert meta.to_json() == b'{"name":"a","annotations":{"k":"\\ud800x"}}'


def test_delete_body_is_the_clusters_pod() -> None:
    pod = parse_delete_body(body("delete_request.json"))
    assert pod.metadata.uid == UID
    assert pod.metadata.deletion_timestamp == datetime(2026, 7, 14, 10, 5, tzinfo=UTC)
    assert pod.metadata.annotations == {"JobID": "job-42"}
    value_from = pod.spec.containers[0].env[0].value_from
    assert value_from is not None and value_from.secret_key_ref is not None


def test_logs_body() -> None:
    request = parse_logs_body(body("logs_request.json"))
    assert (request.namespace, request.pod_uid, request.pod_name, request.container_name) == (
        "default",
        UID,
        "hello-7f2c",
        "main",
    )
    opts = request.opts
    assert (opts.tail, opts.limit_bytes, opts.follow, opts.previous) == (100, 0, True, False)
    assert opts.since_time is None  # Go's zero time.Time


def test_logs_body_as_go_marshals_it() -> None:
    go_request = GoLogStruct(
        namespace="default",
        pod_uid=UID,
        container_name="main",
        opts=GoLogOpts(limit_bytes=4096, timestamps=True, since_time="2026-07-14T10:00:00Z"),
    )
    request = parse_logs_body(marshal(go_request))
    assert request.pod_name == "" and request.opts.tail == 0
    assert request.opts.limit_bytes == 4096 and request.opts.timestamps
    assert request.opts.since_time == datetime(2026, 7, 14, 10, tzinfo=UTC)


def test_logs_body_may_leave_out_options() -> None:
    request = parse_logs_body(dumps({"PodUID": UID}))
    assert request.container_name == "" and request.opts.tail == 0


# --- bad bodies ----------------------------------------------------------------------------

Parse = Callable[[bytes], object]


def _create_with(change: Callable[[dict[str, Any]], None]) -> bytes:
    data = load("create_v05_example.json")
    change(data)
    return dumps(data)


def _drop_image(data: dict[str, Any]) -> None:
    del data["pod"]["spec"]["containers"][0]["image"]


def _drop_uid(data: dict[str, Any]) -> None:
    del data["pod"]["metadata"]["uid"]


def _bad_selector(data: dict[str, Any]) -> None:
    data["pod"]["spec"]["nodeSelector"] = {"kubernetes.io/hostname": 1}


def _bad_secret(data: dict[str, Any]) -> None:
    data["container"][1]["secrets"] = [{"data": {"token": "ab!d"}}]


def _bad_container_list(data: dict[str, Any]) -> None:
    data["container"] = {"name": "main"}


def _bad_quantity(data: dict[str, Any]) -> None:
    data["pod"]["spec"]["containers"][0]["resources"]["limits"]["memory"] = "1 GB"


def _no_containers(data: dict[str, Any]) -> None:
    data["pod"]["spec"]["containers"] = []


_LIST_WITH_AN_EMPTY_SECOND = dumps(
    [load("create_v05_example.json"), json.loads(_create_with(_no_containers))]
)
_LIST_WITHOUT_SECOND_UID = dumps(
    [load("create_v05_example.json"), {"pod": {"metadata": {"name": "x"}}}]
)

BAD_BODIES: list[tuple[Parse, bytes, str]] = [
    (parse_create_body, b"", "body: empty, expected JSON"),
    (parse_create_body, b" \n", "body: empty, expected JSON"),
    (parse_create_body, b"pod", "body: not JSON: Expecting value at line 1 column 1"),
    (parse_create_body, b'{"pod":', "body: not JSON: Expecting value at line 1 column 8"),
    (parse_create_body, b"\xff{}", "body: not UTF-8 (byte 0)"),
    (parse_create_body, b"NaN", "body: not JSON: NaN is not JSON"),
    (parse_create_body, b"[" * 100_000, "body: JSON nested deeper than 100 levels"),
    (parse_create_body, b"[" * 101 + b"]" * 101, "body: JSON nested deeper than 100 levels"),
    (
        parse_create_body,
        b'"pod"',
        "body: expected a JSON object (RetrievedPodData) or a list of them, got a string",
    ),
    (parse_create_body, b"[]", "body: the list of pods to create is empty"),
    (parse_create_body, b'{"container": []}', "pod: field required"),
    (parse_create_body, b"[5]", "[0]: expected an object, got a number"),
    (parse_create_body, b"[{}, ]", "body: not JSON: Expecting value at line 1 column 6"),
    (parse_create_body, b"[{} {}]", "body: not JSON: Expecting ',' delimiter at line 1 column 5"),
    (parse_create_body, b"[{}] {}", "body: not JSON: Extra data at line 1 column 6"),
    (
        parse_create_body,
        _create_with(_no_containers),
        "pod.spec.containers: a pod needs at least one container",
    ),
    (
        parse_create_body,
        _LIST_WITH_AN_EMPTY_SECOND,
        "[1].pod.spec.containers: a pod needs at least one container",
    ),
    (parse_create_body, _create_with(_drop_uid), "pod.metadata.uid: field required"),
    (parse_create_body, _LIST_WITHOUT_SECOND_UID, "[1].pod.metadata.uid: field required"),
    (parse_create_body, _create_with(_drop_image), "pod.spec.containers[0].image: field required"),
    (
        parse_create_body,
        _create_with(_bad_selector),
        'pod.spec.nodeSelector["kubernetes.io/hostname"]: expected a string, got a number',
    ),
    (
        parse_create_body,
        _create_with(_bad_secret),
        "container[1].secrets[0].data.token: illegal base64 data at input byte 2",
    ),
    (
        parse_create_body,
        _create_with(_bad_container_list),
        "container: expected an array, got an object",
    ),
    (
        parse_create_body,
        _create_with(_bad_quantity),
        "pod.spec.containers[0].resources.limits.memory: invalid quantity '1 GB': expected a "
        "number with an optional suffix (m, k, M, G, Ki, Mi, Gi, …) or exponent (e3)",
    ),
    (parse_delete_body, b"[]", "body: expected a JSON object (a Pod), got an array"),
    (parse_delete_body, b'{"metadata": {"uid": "u"}}', "metadata.name: field required"),
    (parse_delete_body, b'{"metadata": {"name": "n"}}', "metadata.uid: field required"),
    (parse_delete_body, b'{"metadata": {"name": "n", "uid": ""}}', "metadata.uid: field required"),
    (parse_status_body, b"{}", "body: expected a JSON array of pods, got an object"),
    (parse_status_body, b"null", "body: expected a JSON array of pods, got null"),
    (parse_status_body, b"[1]", "[0]: expected an object, got a number"),
    (
        parse_status_body,
        b'[{"metadata": {"name": "a", "uid": "u"}}',
        "body: not JSON: Expecting ',' delimiter at line 1 column 41",
    ),
    (parse_status_body, b"{} []", "body: not JSON: Extra data at line 1 column 4"),
    (parse_status_body, b'[{"metadata": {"name": "a"}}]', "[0].metadata.uid: field required"),
    (
        parse_status_body,
        b'[{"metadata": {"name": "a", "uid": "u"}, "status": {"phase": "Done"}}]',
        "[0].status.phase: input should be 'Pending', 'Running', 'Succeeded', 'Failed' or "
        "'Unknown' (got \"Done\")",
    ),
    (parse_logs_body, b"[]", "body: expected a JSON object (LogStruct), got an array"),
    (parse_logs_body, b'{"Namespace": "default"}', "PodUID: field required"),
    (
        parse_logs_body,
        b'{"PodUID": "u", "Opts": {"Tail": "10"}}',
        "Opts.Tail: expected an integer, got a string",
    ),
    (
        parse_logs_body,
        b'{"PodUID": "u", "Opts": {"Tail": -1}}',
        "Opts.Tail: input should be greater than or equal to 0 (got -1)",
    ),
    (
        parse_logs_body,
        b'{"PodUID": "u", "Opts": {"SinceTime": "yesterday"}}',
        "Opts.SinceTime: 'yesterday' is not an RFC 3339 time such as 2026-07-14T10:00:00Z",
    ),
    (parse_logs_body, b'{"PodUID": "u", "Opts": []}', "Opts: expected an object, got an array"),
]


@pytest.mark.parametrize(("parse", "raw", "message"), BAD_BODIES)
def test_bad_bodies_are_named_by_their_json_path(parse: Parse, raw: bytes, message: str) -> None:
    with pytest.raises(PluginRequestError) as info:
        parse(raw)
    assert str(info.value) == message
    assert isinstance(info.value, DmsgwError)


def test_many_problems_are_summarised() -> None:
    containers = [{"name": f"c{i}"} for i in range(8)]
    raw = dumps(
        {"pod": {"metadata": {"name": "p", "uid": "u"}, "spec": {"containers": containers}}}
    )
    with pytest.raises(PluginRequestError) as info:
        parse_create_body(raw)
    problems = str(info.value).split("; ")
    assert problems[0] == "pod.spec.containers[0].image: field required"
    assert problems[-1] == "and 3 more problems"


# --- replies -------------------------------------------------------------------------------


def test_create_reply_is_the_go_create_struct() -> None:
    reply = CreateStruct(pod_uid=UID, pod_jid="job-42").to_json()
    assert reply == b'{"PodUID":"' + UID.encode() + b'","PodJID":"job-42"}'
    assert unmarshal(GoCreateStruct, reply) == GoCreateStruct(pod_uid=UID, pod_jid="job-42")


def _spec_example_statuses() -> list[PodStatus]:
    def at(text: str) -> datetime:
        return parse_time(text)

    return [
        PodStatus(
            name="hello-7f2c",
            uid=UID,
            namespace="default",
            jid="job-42",
            init_containers=[
                k8s.ContainerStatus(
                    name="init",
                    image="busybox",
                    state=k8s.ContainerState(
                        terminated=k8s.ContainerStateTerminated(
                            exit_code=0,
                            reason="Completed",
                            started_at=at("2026-07-14T10:00:00Z"),
                            finished_at=at("2026-07-14T10:00:02Z"),
                        )
                    ),
                )
            ],
            containers=[
                k8s.ContainerStatus(
                    name="main",
                    ready=True,
                    image="python:3.11-alpine",
                    state=k8s.ContainerState(
                        running=k8s.ContainerStateRunning(started_at=at("2026-07-14T10:00:03Z"))
                    ),
                )
            ],
        )
    ]


def test_status_reply_decodes_in_go_as_the_spec_example() -> None:
    reply = encode_pod_statuses(_spec_example_statuses())
    assert go_statuses(reply) == go_statuses(body("status_response_example.json"))
    no_nulls_or_empty_times(json.loads(reply))


def test_status_reply_always_has_both_container_lists() -> None:
    status = PodStatus(
        name="p", uid="u", namespace="ns", containers=[k8s.ContainerStatus(name="c")]
    )
    assert json.loads(encode_pod_statuses([status])) == [
        {
            "name": "p",
            "UID": "u",
            "namespace": "ns",
            "JID": "",
            "containers": [
                {
                    "name": "c",
                    "state": {},
                    "lastState": {},
                    "ready": False,
                    "restartCount": 0,
                    "image": "",
                    "imageID": "",
                    "containerID": "",
                }
            ],
            "initContainers": [],
        }
    ]


def test_a_status_without_containers_is_refused() -> None:
    """The virtual kubelet would count zero of zero containers terminated: pod Succeeded."""
    with pytest.raises(ValidationError, match="containers"):
        PodStatus(name="p", uid="u", namespace="ns", containers=[])


def test_status_reply_of_no_pods_is_an_empty_array() -> None:
    assert encode_pod_statuses([]) == b"[]"


def test_status_reply_with_unset_times_leaves_them_out() -> None:
    status = PodStatus(
        name="p",
        uid="u",
        namespace="ns",
        containers=[
            k8s.ContainerStatus(
                name="c",
                state=k8s.ContainerState(terminated=k8s.ContainerStateTerminated(exit_code=137)),
            )
        ],
    )
    reply = encode_pod_statuses([status])
    terminated = json.loads(reply)[0]["containers"][0]["state"]["terminated"]
    assert "startedAt" not in terminated and "finishedAt" not in terminated
    [decoded] = go_statuses(reply)
    assert decoded.containers is not None
    go_terminated = decoded.containers[0].state.terminated
    assert go_terminated is not None and go_terminated.exit_code == 137


def test_status_reply_survives_odd_text() -> None:
    status = PodStatus(
        name="p",
        uid="u",
        namespace="ns",
        containers=[
            k8s.ContainerStatus(
                name="c",
                state=k8s.ContainerState(
                    waiting=k8s.ContainerStateWaiting(reason="Pulling", message="é <&> \ud800")
                ),
            )
        ],
    )
    reply = encode_pod_statuses([status])
    assert reply.isascii()
    [decoded] = go_statuses(reply)
    assert decoded.containers is not None and decoded.containers[0].state.waiting is not None
    assert decoded.containers[0].state.waiting.message == "é <&> \ufffd"


def test_ping_reply_is_the_spec_example() -> None:
    ping = PingResponse(
        status="ok",
        resources=ResourcesResponse(
            cpu="256",
            memory="1Ti",
            pods="500",
            accelerators=[AcceleratorResponse(resource_type="nvidia.com/gpu", available="16")],
        ),
        taints=[TaintResponse(key="example.org/maintenance", value="true", effect="NoSchedule")],
    )
    reply = ping.to_json()
    assert json.loads(reply) == load("ping_response_example.json")
    assert unmarshal(GoPingResponse, reply) == unmarshal(
        GoPingResponse, body("ping_response_example.json")
    )
    assert PingResponse.model_validate_json(body("ping_response_example.json")) == ping


@pytest.mark.parametrize(
    ("ping", "wire"),
    [
        (PingResponse(), {}),
        (PingResponse(status="ok"), {"status": "ok"}),
        (PingResponse(resources=ResourcesResponse(cpu="8")), {"resources": {"cpu": "8"}}),
        (PingResponse(resources=ResourcesResponse()), {"resources": {}}),
        # a list, even empty, replaces the node's taints; None leaves them alone
        (PingResponse(taints=[]), {"taints": []}),
        (
            PingResponse(taints=[TaintResponse(key="k", effect="NoExecute")]),
            {"taints": [{"key": "k", "effect": "NoExecute"}]},
        ),
        (
            PingResponse(
                resources=ResourcesResponse(
                    accelerators=[
                        AcceleratorResponse(
                            resource_type="nunet.gpu.nvidia.v100.40gb", available="0"
                        )
                    ]
                )
            ),
            {
                "resources": {
                    "accelerators": [
                        {"resourceType": "nunet.gpu.nvidia.v100.40gb", "available": "0"}
                    ]
                }
            },
        ),
    ],
)
def test_ping_reply_omits_what_is_unknown(ping: PingResponse, wire: dict[str, Any]) -> None:
    reply = ping.to_json()
    assert json.loads(reply) == wire
    unmarshal(GoPingResponse, reply)


@pytest.mark.parametrize(
    "build",
    [
        lambda: ResourcesResponse(pods="1.5"),
        lambda: ResourcesResponse(pods="-1"),
        lambda: ResourcesResponse(pods="1e19"),  # beyond int64 (Go caps "10Ei" to fit)
        lambda: ResourcesResponse(cpu="-2"),
        lambda: ResourcesResponse(memory="lots"),
        lambda: AcceleratorResponse(resource_type="nvidia.com/gpu", available="2.5"),
        lambda: AcceleratorResponse(resource_type="", available="1"),
        lambda: TaintResponse(key="", effect="NoSchedule"),
        lambda: TaintResponse(key="k", effect="Never"),
    ],
)
def test_ping_values_interlink_would_drop_are_refused(build: Callable[[], object]) -> None:
    with pytest.raises(ValidationError):
        build()


def test_ping_counts_may_use_suffixes() -> None:
    resources = ResourcesResponse(pods="1k", cpu="500m", memory="1.5Gi")
    assert resources.to_wire() == {"cpu": "500m", "memory": "1.5Gi", "pods": "1k"}


# --- fuzzing -------------------------------------------------------------------------------

PARSERS: list[Parse] = [parse_create_body, parse_delete_body, parse_status_body, parse_logs_body]

_interesting_text = st.sampled_from(
    [
        "",
        "0",
        "1Gi",
        "500m",
        "1e999",
        "Gi",
        "2026-07-14T10:00:00Z",
        "0001-01-01T00:00:00+01:00",
        "9999-12-31T23:59:59-23:59",
        "aGVsbG8=",
        "Always",
        "In",
        "\ud800",
    ]
)
_json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
    | _interesting_text,
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(st.text(max_size=8) | _interesting_text, children, max_size=4)
    ),
    max_leaves=16,
)


def only_plugin_errors(parse: Parse, raw: bytes) -> None:
    try:
        parse(raw)
    except PluginRequestError as exc:
        assert str(exc) and "pydantic" not in str(exc) and "\n" not in str(exc)


@given(st.sampled_from(PARSERS), st.binary(max_size=256))
def test_random_bytes_raise_only_plugin_errors(parse: Parse, raw: bytes) -> None:
    only_plugin_errors(parse, raw)


@given(st.sampled_from(PARSERS), _json_values)
def test_random_json_raises_only_plugin_errors(parse: Parse, value: Any) -> None:
    only_plugin_errors(parse, json.dumps(value).encode("utf-8", "surrogatepass"))


_VALID = [
    (parse_create_body, "create_v05_example.json"),
    (parse_create_body, "create_v04_quickstart.json"),
    (parse_status_body, "status_request.json"),
    (parse_delete_body, "delete_request.json"),
    (parse_delete_body, "pod_full.json"),
    (parse_logs_body, "logs_request.json"),
]


@settings(max_examples=300)
@given(st.sampled_from(_VALID), st.data())
def test_mutated_valid_bodies_raise_only_plugin_errors(
    valid: tuple[Parse, str], data: st.DataObject
) -> None:
    parse, name = valid
    document = load(name)
    parent: Any = None
    key: Any = None
    node: Any = document
    for _ in range(data.draw(st.integers(0, 12))):
        if not isinstance(node, (dict, list)) or not node:
            break
        key = data.draw(st.sampled_from(list(node) if isinstance(node, dict) else range(len(node))))
        parent, node = node, node[key]
    if parent is not None and data.draw(st.booleans()):
        del parent[key]
    elif parent is not None:
        parent[key] = data.draw(_json_values)
    else:
        document = data.draw(_json_values)
    only_plugin_errors(parse, json.dumps(document).encode("utf-8", "surrogatepass"))


def test_remembered_status_bodies_are_bounded_by_their_bytes() -> None:
    from dmsgw.interlink.wire.parsing import _BodyMemo

    memo = _BodyMemo(max_entries=100, max_bytes=600)
    for i in range(12):
        pods = ((f"u{i}", "d", f"p{i}", 1, 60),)
        memo.put(bytes([i]), 60, pods)
        assert memo.get(bytes([i])) == pods
    assert memo._bytes <= 600 and len(memo._known) < 12


# --- what /create refuses, and how much one request may cost --------------------------------


@pytest.mark.parametrize(
    "uid",
    ["../..", "x; id > /tmp/x", "$(id)", "not-a-uuid", "0b8c6f6e3d4a4f0e9c1e2f9a7d1b5e11",
     "0b8c6f6e-3d4a-4f0e-9c1e-2f9a7d1b5e11/..", " 0b8c6f6e-3d4a-4f0e-9c1e-2f9a7d1b5e11"],
)  # fmt: skip
def test_a_uid_that_is_not_a_uuid_is_refused_at_create(uid: str) -> None:
    def set_uid(data: dict[str, Any]) -> None:
        data["pod"]["metadata"]["uid"] = uid

    with pytest.raises(PluginRequestError) as info:
        parse_create_body(_create_with(set_uid))
    assert str(info.value) == (
        f"pod.metadata.uid: {json.dumps(uid)} is not a UUID "
        "(Kubernetes writes pod UIDs as 8-4-4-4-12 hexadecimal digits)"
    )


def test_uuids_in_either_case_are_taken_at_create() -> None:
    def upper(data: dict[str, Any]) -> None:
        data["pod"]["metadata"]["uid"] = UID.upper()

    [data] = parse_create_body(_create_with(upper))
    assert data.pod.metadata.uid == UID.upper()


def _minimal_pods(count: int) -> bytes:
    return dumps(
        [
            {"metadata": {"name": f"p{i}", "uid": f"00000000-0000-4000-8000-{i:012d}"}}
            for i in range(count)
        ]
    )


# a pod as /status names it, and a pod to create: items of either list
_POD_OF_EITHER_BODY = b'{"metadata": {"name": "p", "uid": "u"}, "pod": {"metadata": {}}}'


@pytest.mark.parametrize("parse", [parse_create_body, parse_status_body])
def test_a_body_naming_too_many_pods_is_refused_before_reading_them_all(
    parse: Parse, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(parsing, "MAX_PODS_PER_REQUEST", 50)
    decoded = 0
    decode = parsing._decode

    def counting(text: str, at: int) -> tuple[Any, int]:
        nonlocal decoded
        decoded += 1
        return decode(text, at)

    monkeypatch.setattr(parsing, "_decode", counting)
    with pytest.raises(TooManyPodsError) as info:
        parse(b"[" + b",".join([_POD_OF_EITHER_BODY] * 100_000) + b"]")
    assert str(info.value) == "body: names more than 50 pods; one request may name at most 50"
    assert decoded == 50


def test_the_default_limit_takes_a_whole_virtual_node() -> None:
    """interLink's default virtual node holds 10,000 pods: asking about all at once fits."""
    assert MAX_PODS_PER_REQUEST >= 10_000
    assert len(parse_status_body(_minimal_pods(MAX_PODS_PER_REQUEST))) == MAX_PODS_PER_REQUEST


async def test_every_pod_of_a_status_body_is_read_once_whatever_the_backend_asks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The work of a /status request grows with its pods, not with their square (issue 10:
    each unknown pod re-read the whole body; 1,000 unknown pods took 21 s)."""
    pods = 3_000
    raw = _minimal_pods(pods)
    validated = 0
    validate = parsing._status_pod

    def counting(item: Any, index: int) -> k8s.Pod:
        nonlocal validated
        validated += 1
        return validate(item, index)

    monkeypatch.setattr(parsing, "_status_pod", counting)
    refs = await read_status_body(raw)  # first sight: the identities read, no pod whole
    assert validated == 0
    assert [ref.pod().metadata.uid for ref in refs] == [ref.uid for ref in refs]
    assert validated == pods
    again = await read_status_body(raw)  # remembered: a pod is read only when asked for
    assert validated == pods
    assert again[1234].pod() == refs[1234].pod() and again[1234].pod() is again[1234].pod()
    assert validated == pods + 1


async def test_reading_a_big_status_body_gives_the_event_loop_turns() -> None:
    turns = 0

    async def count_turns() -> None:
        nonlocal turns
        while True:
            await asyncio.sleep(0)
            turns += 1

    counter = asyncio.create_task(count_turns())
    await asyncio.sleep(0)
    refs = await read_status_body(_minimal_pods(2_000))
    counter.cancel()
    assert len(refs) == 2_000
    assert turns >= 2_000 // parsing._TURN - 1


def _nested(depth: int, branch: int) -> Any:
    """Objects and arrays ``depth`` deep (``branch`` picks which, level by level), with
    strings, numbers and empty objects and arrays beside them."""
    value: Any = "leaf"
    for level in range(depth):
        if (branch >> level) & 1:
            value = {"deep": value, "n": level, "empty": {}}
        else:
            value = ["s", value, level, []]
    return value


def _depth(value: Any) -> int:
    """How deep objects and arrays nest in ``value`` (a string or number: 0)."""
    if isinstance(value, dict):
        return 1 + max(map(_depth, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(_depth, value), default=0)
    return 0


@pytest.mark.parametrize("branch", [0, 0b1010101, 0b1111111])
def test_the_depth_of_a_body_counts_its_objects_and_arrays(branch: int) -> None:
    """A body nested as deep as the limit is let through, one level more is not, whatever
    strings, numbers and empty objects or arrays lie beside its deepest nest."""
    for depth in range(8):
        value = _nested(depth, branch)
        for limit in range(10):
            assert _deeper_than(value, limit) is (_depth(value) > limit)
