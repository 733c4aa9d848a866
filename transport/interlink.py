"""interLink's plugin API on the wire: the request bodies we parse and the replies Go decodes.

The interLink API server (0.6.2, ``pkg/interlink/types.go``) calls its plugin with four JSON
bodies and decodes our answers with Go's ``encoding/json`` into its own structs, so the models
here carry those Go types' JSON keys exactly (``PodUID``, ``JID``, ``projectedvolumemaps``,
``Bytes``…). The parse functions are what the HTTP layer calls with a raw body: every way a body
can be wrong ends in one :class:`PluginRequestError` naming the JSON path of the problem, never
in a pydantic dump, so that the error text interLink copies into the pod status is readable.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Annotated, Any, Literal, Self, TypeVar

from pydantic import (
    ConfigDict,
    Field,
    PlainValidator,
    PrivateAttr,
    TypeAdapter,
    ValidationError,
    field_validator,
)
from pydantic_core import ErrorDetails

from dmsgw.errors import DmsgwError
from dmsgw.transport import k8s
from dmsgw.transport.k8s import GoModel, json_kind, parse_quantity, validate_quantity, wire_json

__all__ = [
    "AcceleratorResponse",
    "ContainerLogOpts",
    "CreateStruct",
    "LogStruct",
    "PingResponse",
    "PluginRequestError",
    "PodRef",
    "PodStatus",
    "ResourcesResponse",
    "RetrievedContainer",
    "RetrievedPodData",
    "TaintResponse",
    "encode_pod_statuses",
    "parse_create_body",
    "parse_delete_body",
    "parse_logs_body",
    "parse_status_body",
    "read_status_body",
]

_INT64_MAX = (1 << 63) - 1


class PluginRequestError(DmsgwError):
    """A request body interLink should not have sent; the message names where it is wrong."""


# --- requests ------------------------------------------------------------------------------


class RetrievedContainer(GoModel):
    """The ConfigMaps, projected maps and Secrets interLink fetched for one container's mounts.

    Projected maps (service-account token, ``ca.crt``, ``namespace``) are named after the
    volume and keyed by file path. ``emptyDirs`` is deprecated and no longer filled.
    """

    model_config = ConfigDict(extra="allow")

    name: str = ""
    config_maps: list[k8s.ConfigMap] = Field(
        default_factory=list, validation_alias="configMaps", serialization_alias="configMaps"
    )
    projected_volume_maps: list[k8s.ConfigMap] = Field(
        default_factory=list,
        validation_alias="projectedvolumemaps",
        serialization_alias="projectedvolumemaps",
    )
    secrets: list[k8s.Secret] = Field(default_factory=list)
    empty_dirs: list[str] = Field(
        default_factory=list, validation_alias="emptyDirs", serialization_alias="emptyDirs"
    )


class RetrievedPodData(GoModel):
    """The ``/create`` body: the pod and, per container (init containers first), its data.

    ``jobConfig`` and ``jobScript`` only matter to job-script builders; the configuration is
    kept as plain JSON.
    """

    model_config = ConfigDict(extra="allow")

    pod: k8s.Pod
    containers: list[RetrievedContainer] = Field(
        default_factory=list, validation_alias="container", serialization_alias="container"
    )
    job_config: dict[str, Any] = Field(
        default_factory=dict, validation_alias="jobConfig", serialization_alias="jobConfig"
    )
    job_script: str = Field(
        default="", validation_alias="jobScript", serialization_alias="jobScript"
    )


_GO_ZERO_TIME = datetime(1, 1, 1, tzinfo=UTC)
_NonNegativeInt = Annotated[int, Field(ge=0, le=_INT64_MAX)]


class ContainerLogOpts(GoModel):
    """The virtual kubelet's log options, copied field for field (``LimitBytes`` is ``Bytes``).

    Zero means "not set" for every number; ``SinceTime`` is unset when it is Go's zero time.
    """

    tail: _NonNegativeInt = Field(default=0, validation_alias="Tail", serialization_alias="Tail")
    limit_bytes: _NonNegativeInt = Field(
        default=0, validation_alias="Bytes", serialization_alias="Bytes"
    )
    timestamps: bool = Field(
        default=False, validation_alias="Timestamps", serialization_alias="Timestamps"
    )
    follow: bool = Field(default=False, validation_alias="Follow", serialization_alias="Follow")
    previous: bool = Field(
        default=False, validation_alias="Previous", serialization_alias="Previous"
    )
    since_seconds: _NonNegativeInt = Field(
        default=0, validation_alias="SinceSeconds", serialization_alias="SinceSeconds"
    )
    since_time: k8s.Time | None = Field(
        default=None, validation_alias="SinceTime", serialization_alias="SinceTime"
    )

    @field_validator("since_time")
    @classmethod
    def _zero_is_unset(cls, value: datetime | None) -> datetime | None:
        """Go's ``time.Time`` has no null: an unset time arrives as ``0001-01-01T00:00:00Z``."""
        return None if value == _GO_ZERO_TIME else value


class LogStruct(GoModel):
    """The ``/getLogs`` body. An empty container name is allowed by interLink (its meaning,
    e.g. "the only container", is the plugin's choice)."""

    namespace: str = Field(
        default="", validation_alias="Namespace", serialization_alias="Namespace"
    )
    pod_uid: str = Field(min_length=1, validation_alias="PodUID", serialization_alias="PodUID")
    pod_name: str = Field(default="", validation_alias="PodName", serialization_alias="PodName")
    container_name: str = Field(
        default="", validation_alias="ContainerName", serialization_alias="ContainerName"
    )
    opts: ContainerLogOpts = Field(
        default_factory=ContainerLogOpts, validation_alias="Opts", serialization_alias="Opts"
    )


# --- replies -------------------------------------------------------------------------------


class CreateStruct(GoModel):
    """The ``/create`` reply. The virtual kubelet stores ``PodJID`` in the pod's ``JobID``
    annotation only when ``PodUID`` equals the pod's uid, and that annotation is what lets a
    restarted virtual kubelet adopt the pod again."""

    model_config = ConfigDict(extra="forbid")

    pod_uid: str = Field(validation_alias="PodUID", serialization_alias="PodUID")
    pod_jid: str = Field(validation_alias="PodJID", serialization_alias="PodJID")


class PodStatus(GoModel):
    """One pod of the ``/status`` reply; ``UID`` must echo ``metadata.uid`` exactly.

    Report every container: fewer containers than the pod has can crash the virtual kubelet,
    and none at all reads as "all terminated", so the pod would turn Succeeded; hence at least
    one is required (report ``waiting`` ones while nothing is known).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    uid: str = Field(validation_alias="UID", serialization_alias="UID")
    namespace: str
    jid: str = Field(default="", validation_alias="JID", serialization_alias="JID")
    containers: list[k8s.ContainerStatus] = Field(min_length=1)
    init_containers: list[k8s.ContainerStatus] = Field(
        default_factory=list,
        validation_alias="initContainers",
        serialization_alias="initContainers",
    )
    _wire: bytes | None = PrivateAttr(default=None)

    def wire(self) -> bytes:
        """The Go JSON of this status, written once: a pod's published snapshot answers every
        poll of that pod until it changes (a published status is never changed, nested
        containers included; a new status is made for every change)."""
        if self._wire is None:
            self._wire = wire_json(self.to_wire())
        return self._wire

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        """A copy writes its own JSON (pydantic would copy the cached one along)."""
        copy = super().model_copy(update=update, deep=deep)
        copy._wire = None
        return copy


def _count(value: object) -> str:
    """A quantity that must be a whole number Go's ``AsInt64`` takes, or interLink drops it."""
    text = validate_quantity(value)
    number = parse_quantity(text)
    if number < 0 or number > _INT64_MAX or number != number.to_integral_value():
        raise ValueError(f"{text!r} is not a whole, non-negative count")
    return text


def _capacity(value: object) -> str:
    """A quantity interLink would take as node capacity."""
    text = validate_quantity(value)
    if parse_quantity(text) < 0:
        raise ValueError(f"{text!r}: a capacity cannot be negative")
    return text


_Count = Annotated[str, PlainValidator(_count)]
_Capacity = Annotated[str, PlainValidator(_capacity)]


class _OmitEmpty(GoModel):
    """The ping reply types, whose Go fields are nearly all ``omitempty``."""

    model_config = ConfigDict(extra="forbid")

    def to_wire(self) -> dict[str, Any]:
        """As Go's ``omitempty`` writes it: unset fields, empty lists and values left out."""
        return self.model_dump(mode="json", by_alias=True, exclude_defaults=True)


class AcceleratorResponse(_OmitEmpty):
    resource_type: str = Field(
        min_length=1, validation_alias="resourceType", serialization_alias="resourceType"
    )
    available: _Count


class TaintResponse(_OmitEmpty):
    key: str = Field(min_length=1)
    value: str = ""
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]


class ResourcesResponse(_OmitEmpty):
    """Node capacity. Leave unknown fields ``None``: interLink applies ``"0"`` as it is and
    drains the node (interLink#558), while a missing field leaves the capacity unchanged."""

    cpu: _Capacity | None = None
    memory: _Capacity | None = None
    pods: _Count | None = None
    accelerators: list[AcceleratorResponse] = Field(default_factory=list)


class PingResponse(_OmitEmpty):
    """The reply to the ping (``GET /status`` with ``[]``).

    ``taints=None`` leaves the node's taints alone; a list, even empty, replaces every taint
    except interLink's own ``virtual-node.interlink/no-schedule``.
    """

    status: str | None = None
    resources: ResourcesResponse | None = None
    taints: list[TaintResponse] | None = None


def encode_pod_statuses(statuses: Iterable[PodStatus]) -> bytes:
    """The ``/status`` reply body: a JSON array of :class:`PodStatus`."""
    return b"[" + b",".join(status.wire() for status in statuses) + b"]"


# --- parsing -------------------------------------------------------------------------------

T = TypeVar("T")

_CREATE_ONE = TypeAdapter(RetrievedPodData)
_CREATE_MANY = TypeAdapter(list[RetrievedPodData])
_POD = TypeAdapter(k8s.Pod)
_PODS = TypeAdapter(list[k8s.Pod])
_LOGS = TypeAdapter(LogStruct)


def parse_create_body(raw: bytes) -> list[RetrievedPodData]:
    """The pods of a ``/create`` body: one object since interLink 0.5, a list before.

    The 0.4 API always sent a one-element list; a longer list is accepted and every pod
    returned, an empty one refused (there would be nothing to answer a ``CreateStruct`` for).
    """
    body = _load(raw)
    if isinstance(body, dict):
        items = [_validate(_CREATE_ONE, body)]
        roots = ["pod"]
    elif isinstance(body, list) and body:
        items = _validate(_CREATE_MANY, body)
        roots = [f"[{i}].pod" for i in range(len(items))]
    elif isinstance(body, list):
        raise PluginRequestError("body: the list of pods to create is empty")
    else:
        raise PluginRequestError(
            "body: expected a JSON object (RetrievedPodData) or a list of them, "
            f"got {json_kind(body)}"
        )
    for item, root in zip(items, roots, strict=True):
        _check_identity(item.pod, root)
    return items


def parse_delete_body(raw: bytes) -> k8s.Pod:
    """The pod of a ``/delete`` body: the cluster's copy (``deletionTimestamp``, ``JobID``
    annotation, env not resolved), not the one ``/create`` received; match it by uid."""
    body = _load(raw)
    if not isinstance(body, dict):
        raise PluginRequestError(f"body: expected a JSON object (a Pod), got {json_kind(body)}")
    pod = _validate(_POD, body)
    _check_identity(pod, "")
    return pod


def parse_status_body(raw: bytes) -> list[k8s.Pod]:
    """The pods of a ``/status`` body; an empty list is interLink's ping."""
    body = _load(raw)
    if not isinstance(body, list):
        raise PluginRequestError(f"body: expected a JSON array of pods, got {json_kind(body)}")
    pods = _validate(_PODS, body)
    for i, pod in enumerate(pods):
        _check_identity(pod, f"[{i}]")
    return pods


@dataclasses.dataclass(frozen=True, slots=True)
class PodRef:
    """A pod of a ``/status`` body, as the gateway looks it up: by UID. The whole pod is
    read again from the body only for a pod the gateway does not know (:meth:`pod`)."""

    uid: str
    namespace: str
    name: str
    body: bytes = dataclasses.field(repr=False)
    index: int = 0

    def pod(self) -> k8s.Pod:
        return parse_status_body(self.body)[self.index]


def read_status_body(raw: bytes) -> list[PodRef]:
    """:func:`parse_status_body`, remembered by the body's digest.

    interLink polls every pod every few seconds with the same JSON until the pod changes, and
    validating a whole pod costs more than answering from its snapshot. Each distinct body is
    still validated in full once (a bad one is refused every time: only good ones are kept);
    what is remembered is the identities it names, never more than the body's own size.
    """
    identities = _VALID_STATUS_BODIES.get(raw)
    return [PodRef(uid, ns, name, raw, i) for i, (uid, ns, name) in enumerate(identities)]


_Identities = tuple[tuple[str, str, str], ...]


class _BodyMemo:
    """Validated bodies' identities by digest, bounded in entries and in the bytes of the
    bodies they came from (which bound what the identities hold)."""

    def __init__(self, max_entries: int, max_bytes: int) -> None:
        self._known: dict[bytes, _Identities] = {}
        self._bytes = 0
        self._max_entries = max_entries
        self._max_bytes = max_bytes

    def get(self, raw: bytes) -> _Identities:
        digest = hashlib.blake2b(raw, digest_size=16).digest()
        identities = self._known.get(digest)
        if identities is None:
            pods = parse_status_body(raw)
            identities = tuple(
                (p.metadata.uid, p.metadata.namespace, p.metadata.name) for p in pods
            )
            if len(self._known) >= self._max_entries or self._bytes + len(raw) > self._max_bytes:
                self._known.clear()
                self._bytes = 0
            self._known[digest] = identities
            self._bytes += len(raw)
        return identities


_VALID_STATUS_BODIES = _BodyMemo(max_entries=32768, max_bytes=64 << 20)


def parse_logs_body(raw: bytes) -> LogStruct:
    """The ``/getLogs`` request."""
    body = _load(raw)
    if not isinstance(body, dict):
        raise PluginRequestError(f"body: expected a JSON object (LogStruct), got {json_kind(body)}")
    return _validate(_LOGS, body)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


# Kubernetes objects nest a few dozen levels at most; far deeper JSON could be read but not
# written back (pydantic stops serialising at about 250 levels).
_MAX_DEPTH = 100
_TOO_DEEP = f"body: JSON nested deeper than {_MAX_DEPTH} levels"


def _load(raw: bytes) -> Any:
    """Decodes a body as Go would accept it: UTF-8 JSON, no NaN/Infinity."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PluginRequestError(f"body: not UTF-8 (byte {exc.start})") from None
    if not text.strip(" \t\r\n"):
        raise PluginRequestError("body: empty, expected JSON")
    try:
        value = json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise PluginRequestError(
            f"body: not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from None
    except RecursionError:
        raise PluginRequestError(_TOO_DEEP) from None
    except ValueError as exc:  # NaN/Infinity, or an integer too long to convert
        raise PluginRequestError(f"body: not JSON: {exc}") from None
    if _deeper_than(value, _MAX_DEPTH):
        raise PluginRequestError(_TOO_DEEP)
    return value


def _deeper_than(value: Any, limit: int) -> bool:
    pending = [(value, 1)]
    while pending:
        node, depth = pending.pop()
        if isinstance(node, dict | list):
            if depth > limit:
                return True
            children = node.values() if isinstance(node, dict) else node
            pending.extend((child, depth + 1) for child in children)
    return False


def _validate(adapter: TypeAdapter[T], body: Any) -> T:
    try:
        return adapter.validate_python(body)
    except ValidationError as exc:
        raise PluginRequestError(_describe(exc)) from None


def _check_identity(pod: k8s.Pod, root: str) -> None:
    """interLink and the virtual kubelet track a pod by uid and drop a status without a name."""
    for field, value in (("name", pod.metadata.name), ("uid", pod.metadata.uid)):
        if not value:
            where = f"{root}.metadata.{field}" if root else f"metadata.{field}"
            raise PluginRequestError(f"{where}: field required")


# --- readable validation errors ------------------------------------------------------------

_MAX_PROBLEMS = 5
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_EXPECTED = {
    "model_type": "an object",
    "model_attributes_type": "an object",
    "dict_type": "an object",
    "list_type": "an array",
    "string_type": "a string",
    "int_type": "an integer",
    "bool_type": "true or false",
}


def _describe(exc: ValidationError) -> str:
    """``pod.spec.containers[0].image: field required; …``, at most a few problems."""
    problems = [f"{_path(e['loc'])}: {_message(e)}" for e in exc.errors(include_url=False)]
    shown = problems[:_MAX_PROBLEMS]
    if len(problems) > _MAX_PROBLEMS:
        more = len(problems) - _MAX_PROBLEMS
        shown.append(f"and {more} more problem{'s' if more > 1 else ''}")
    return "; ".join(shown)


def _path(loc: tuple[int | str, ...]) -> str:
    parts: list[str] = []
    for item in loc:
        if isinstance(item, int):
            parts.append(f"[{item}]")
        elif _IDENTIFIER.fullmatch(item):
            parts.append(f".{item}" if parts else item)
        else:  # a map key such as "kubernetes.io/hostname"
            parts.append(f"[{json.dumps(item)}]")
    return "".join(parts) or "body"


def _message(error: ErrorDetails) -> str:
    kind = error["type"]
    if kind == "missing":
        return "field required"
    if kind == "value_error":
        return str(error.get("ctx", {}).get("error", error["msg"]))
    if kind in _EXPECTED:
        return f"expected {_EXPECTED[kind]}, got {json_kind(error['input'])}"
    message = error["msg"]
    return f"{message[:1].lower()}{message[1:]} (got {_show(error['input'])})"


def _show(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 60 else text[:57] + "..."
