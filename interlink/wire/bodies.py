"""interLink's plugin API on the wire: the request bodies and the replies, as Go types.

The interLink API server (0.6.2, ``pkg/interlink/types.go``) calls its plugin with four JSON
bodies and decodes our answers with Go's ``encoding/json`` into its own structs, so the models
here carry those Go types' JSON keys exactly (``PodUID``, ``JID``, ``projectedvolumemaps``,
``Bytes``…). Reading a raw body into them, with errors that name where it is wrong, is
:mod:`dmsgw.interlink.wire.parsing`'s job.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Annotated, Any, ClassVar, Literal, Self

from pydantic import ConfigDict, Field, PlainValidator, PrivateAttr, field_validator

from . import k8s
from .apimachinery import GoModel, Time, WireOptions, parse_quantity, validate_quantity

__all__ = [
    "AcceleratorResponse",
    "ContainerLogOpts",
    "CreateStruct",
    "LogStruct",
    "PingResponse",
    "PodStatus",
    "ResourcesResponse",
    "RetrievedContainer",
    "RetrievedPodData",
    "TaintResponse",
    "encode_pod_statuses",
    "status_array",
]

_INT64_MAX = (1 << 63) - 1


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
    since_time: Time | None = Field(
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
            self._wire = self.to_json()
        return self._wire

    @classmethod
    def from_wire(cls, wire: bytes) -> Self:
        """The status that :meth:`wire` wrote (a pod's stored snapshot), with that JSON kept:
        reading it back is a fifth of making it again."""
        status = cls.model_validate_json(wire)
        status._wire = wire
        return status

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

    WIRE: ClassVar[WireOptions] = {"by_alias": True, "exclude_defaults": True}
    """As Go's ``omitempty`` writes it: unset fields, empty lists and values left out."""


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
    return status_array(status.wire() for status in statuses)


def status_array(wires: Iterable[bytes]) -> bytes:
    """The ``/status`` reply body from its entries' JSON (:meth:`PodStatus.wire`)."""
    return b"[" + b",".join(wires) + b"]"
