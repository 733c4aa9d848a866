"""The slice of the Kubernetes core/v1 API that the interLink plugin reads and writes.

Mirrors ``k8s.io/api/core/v1/types.go``, for the fields the gateway acts on: interLink hands us
whole ``v1.Pod``, ``v1.ConfigMap`` and ``v1.Secret`` objects as the Go API server marshals them,
and decodes the ``v1.ContainerStatus`` values we send back with Go's strict ``encoding/json``.
These models carry exactly that JSON; every model keeps unknown fields (``extra="allow"``) so
that newer Kubernetes fields survive a round trip and a volume kind we do not model can still be
refused by name. The official ``kubernetes`` package is large and drops unknown fields, hence
our own models. Their scalar types (quantities, times, base64 bytes) and the Go rules of
decoding are :mod:`dmsgw.interlink.wire.apimachinery`'s.
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal, Self

from pydantic import ConfigDict, Field, model_validator

from .apimachinery import (
    INT32_MAX,
    INT32_MIN,
    INT64_MAX,
    Base64Data,
    GoModel,
    IntOrString,
    Quantity,
    Time,
    WireOptions,
)

__all__ = [
    "Affinity",
    "ConfigMap",
    "ConfigMapKeySelector",
    "ConfigMapProjection",
    "ConfigMapVolumeSource",
    "Container",
    "ContainerPort",
    "ContainerState",
    "ContainerStateRunning",
    "ContainerStateTerminated",
    "ContainerStateWaiting",
    "ContainerStatus",
    "DownwardAPIProjection",
    "DownwardAPIVolumeFile",
    "DownwardAPIVolumeSource",
    "EmptyDirVolumeSource",
    "EnvVar",
    "EnvVarSource",
    "ExecAction",
    "HTTPGetAction",
    "HTTPHeader",
    "HostPathVolumeSource",
    "Int32",
    "Int64",
    "K8sModel",
    "KeyToPath",
    "Lifecycle",
    "LifecycleHandler",
    "LocalObjectReference",
    "NodeAffinity",
    "NodeSelector",
    "NodeSelectorRequirement",
    "NodeSelectorTerm",
    "ObjectFieldSelector",
    "ObjectMeta",
    "PersistentVolumeClaimVolumeSource",
    "Pod",
    "PodCondition",
    "PodSpec",
    "PodStatus",
    "Probe",
    "ProjectedVolumeSource",
    "ResourceFieldSelector",
    "ResourceRequirements",
    "Secret",
    "SecretKeySelector",
    "SecretProjection",
    "SecretVolumeSource",
    "ServiceAccountTokenProjection",
    "TCPSocketAction",
    "Toleration",
    "Volume",
    "VolumeMount",
    "VolumeProjection",
]

# --- Go integers and the base model --------------------------------------------------------

Int32 = Annotated[int, Field(ge=INT32_MIN, le=INT32_MAX)]
"""A Go ``int32``: Go refuses to decode a number outside its range."""

Int64 = Annotated[int, Field(ge=-INT64_MAX - 1, le=INT64_MAX)]
"""A Go ``int64`` (and ``int``)."""

_NonNegative32 = Annotated[int, Field(ge=0, le=INT32_MAX)]
_NonNegative64 = Annotated[int, Field(ge=0, le=INT64_MAX)]
_FileMode = Annotated[int, Field(ge=0, le=0o777)]

_ACRONYMS = {"id": "ID", "ip": "IP", "api": "API"}


def _json_key(name: str) -> str:
    """Kubernetes' JSON key for a field: ``image_id`` is ``imageID``, ``http_get`` ``httpGet``."""
    first, *rest = name.split("_")
    return first + "".join(_ACRONYMS.get(part, part.capitalize()) for part in rest)


class K8sModel(GoModel):
    """Base of the Kubernetes models: camelCase keys, and unknown fields kept."""

    model_config = ConfigDict(alias_generator=_json_key, extra="allow")

    WIRE: ClassVar[WireOptions] = {
        "by_alias": True,
        "exclude_unset": True,
        "exclude_none": True,
    }
    """Kubernetes JSON: camelCase, RFC 3339 times, base64 bytes. Only fields that were given
    are written, so a parsed object comes back as it arrived (less its ``null``\\s); Go reads
    a missing field as its zero value."""


# --- metadata, config maps, secrets --------------------------------------------------------


class ObjectMeta(K8sModel):
    name: str = ""
    namespace: str = ""
    uid: str = ""
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    creation_timestamp: Time | None = None
    deletion_timestamp: Time | None = None


class ConfigMap(K8sModel):
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    data: dict[str, str] = Field(default_factory=dict)
    binary_data: dict[str, Base64Data] = Field(default_factory=dict)


class Secret(K8sModel):
    """A secret with ``data`` already decoded from base64."""

    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    data: dict[str, Base64Data] = Field(default_factory=dict)
    string_data: dict[str, str] = Field(default_factory=dict)
    type: str = ""


class LocalObjectReference(K8sModel):
    name: str = ""


# --- containers ----------------------------------------------------------------------------


class ConfigMapKeySelector(K8sModel):
    name: str = ""
    key: str
    optional: bool | None = None


class SecretKeySelector(K8sModel):
    name: str = ""
    key: str
    optional: bool | None = None


class ObjectFieldSelector(K8sModel):
    field_path: str
    api_version: str = ""


class ResourceFieldSelector(K8sModel):
    container_name: str = ""
    resource: str
    divisor: Quantity | None = None


class EnvVarSource(K8sModel):
    secret_key_ref: SecretKeySelector | None = None
    config_map_key_ref: ConfigMapKeySelector | None = None
    field_ref: ObjectFieldSelector | None = None
    resource_field_ref: ResourceFieldSelector | None = None


class EnvVar(K8sModel):
    """An environment variable; a missing ``value`` is the empty string, still to be set."""

    name: str
    value: str = ""
    value_from: EnvVarSource | None = None


class ResourceRequirements(K8sModel):
    requests: dict[str, Quantity] = Field(default_factory=dict)
    limits: dict[str, Quantity] = Field(default_factory=dict)


class ContainerPort(K8sModel):
    container_port: int = Field(ge=1, le=65535)
    name: str = ""
    protocol: Literal["TCP", "UDP", "SCTP"] = "TCP"
    host_port: int | None = Field(default=None, ge=0, le=65535)
    host_ip: str = ""


class VolumeMount(K8sModel):
    name: str
    mount_path: str
    sub_path: str = ""
    read_only: bool = False


class ExecAction(K8sModel):
    command: list[str] = Field(default_factory=list)


class HTTPHeader(K8sModel):
    name: str
    value: str = ""


class HTTPGetAction(K8sModel):
    port: IntOrString
    path: str = ""
    host: str = ""
    scheme: Literal["HTTP", "HTTPS"] = "HTTP"
    http_headers: list[HTTPHeader] = Field(default_factory=list)


class TCPSocketAction(K8sModel):
    port: IntOrString
    host: str = ""


class Probe(K8sModel):
    """A probe; the numbers default as the API server defaults them."""

    exec: ExecAction | None = None
    http_get: HTTPGetAction | None = None
    tcp_socket: TCPSocketAction | None = None
    initial_delay_seconds: _NonNegative32 = 0
    period_seconds: _NonNegative32 = 10
    timeout_seconds: _NonNegative32 = 1
    success_threshold: _NonNegative32 = 1
    failure_threshold: _NonNegative32 = 3


class LifecycleHandler(K8sModel):
    exec: ExecAction | None = None
    http_get: HTTPGetAction | None = None
    tcp_socket: TCPSocketAction | None = None


class Lifecycle(K8sModel):
    post_start: LifecycleHandler | None = None
    pre_stop: LifecycleHandler | None = None


class Container(K8sModel):
    name: str
    image: str
    command: list[str] = Field(default_factory=list)
    args: list[str] = Field(default_factory=list)
    working_dir: str = ""
    env: list[EnvVar] = Field(default_factory=list)
    resources: ResourceRequirements = Field(default_factory=ResourceRequirements)
    ports: list[ContainerPort] = Field(default_factory=list)
    volume_mounts: list[VolumeMount] = Field(default_factory=list)
    liveness_probe: Probe | None = None
    readiness_probe: Probe | None = None
    startup_probe: Probe | None = None
    lifecycle: Lifecycle | None = None
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] | None = None


# --- volumes -------------------------------------------------------------------------------


class KeyToPath(K8sModel):
    key: str
    path: str
    mode: _FileMode | None = None


class EmptyDirVolumeSource(K8sModel):
    medium: str = ""
    size_limit: Quantity | None = None


class ConfigMapVolumeSource(K8sModel):
    name: str = ""
    items: list[KeyToPath] = Field(default_factory=list)
    default_mode: _FileMode | None = None
    optional: bool | None = None


class SecretVolumeSource(K8sModel):
    secret_name: str = ""
    items: list[KeyToPath] = Field(default_factory=list)
    default_mode: _FileMode | None = None
    optional: bool | None = None


class DownwardAPIVolumeFile(K8sModel):
    path: str
    field_ref: ObjectFieldSelector | None = None
    resource_field_ref: ResourceFieldSelector | None = None
    mode: _FileMode | None = None


class DownwardAPIVolumeSource(K8sModel):
    items: list[DownwardAPIVolumeFile] = Field(default_factory=list)
    default_mode: _FileMode | None = None


class ConfigMapProjection(K8sModel):
    name: str = ""
    items: list[KeyToPath] = Field(default_factory=list)
    optional: bool | None = None


class SecretProjection(K8sModel):
    name: str = ""
    items: list[KeyToPath] = Field(default_factory=list)
    optional: bool | None = None


class ServiceAccountTokenProjection(K8sModel):
    path: str
    audience: str = ""
    expiration_seconds: _NonNegative64 | None = None


class DownwardAPIProjection(K8sModel):
    items: list[DownwardAPIVolumeFile] = Field(default_factory=list)


class VolumeProjection(K8sModel):
    config_map: ConfigMapProjection | None = None
    secret: SecretProjection | None = None
    service_account_token: ServiceAccountTokenProjection | None = None
    downward_api: DownwardAPIProjection | None = None


class ProjectedVolumeSource(K8sModel):
    sources: list[VolumeProjection] = Field(default_factory=list)
    default_mode: _FileMode | None = None


class HostPathVolumeSource(K8sModel):
    path: str
    type: str = ""


class PersistentVolumeClaimVolumeSource(K8sModel):
    claim_name: str
    read_only: bool = False


_VOLUME_SOURCES = (
    "empty_dir",
    "config_map",
    "secret",
    "projected",
    "downward_api",
    "host_path",
    "persistent_volume_claim",
)


class Volume(K8sModel):
    """A pod volume. A kind not modelled here (``nfs``, ``csi``…) stays in the extra fields,
    and :attr:`source_kind` names it so that a translator can refuse it by name."""

    name: str
    empty_dir: EmptyDirVolumeSource | None = None
    config_map: ConfigMapVolumeSource | None = None
    secret: SecretVolumeSource | None = None
    projected: ProjectedVolumeSource | None = None
    downward_api: DownwardAPIVolumeSource | None = None
    host_path: HostPathVolumeSource | None = None
    persistent_volume_claim: PersistentVolumeClaimVolumeSource | None = None

    def _source_kinds(self) -> list[str]:
        typed = [_json_key(field) for field in _VOLUME_SOURCES if getattr(self, field) is not None]
        return typed + list(self.model_extra or {})

    @model_validator(mode="after")
    def _single_source(self) -> Self:
        kinds = self._source_kinds()
        if len(kinds) > 1:
            raise ValueError(f"volume {self.name!r} has more than one source: {', '.join(kinds)}")
        return self

    @property
    def source_kind(self) -> str:
        """The JSON key of the source: ``emptyDir`` when none is given, as the API server
        defaults a source-less volume to an emptyDir."""
        kinds = self._source_kinds()
        return kinds[0] if kinds else "emptyDir"


# --- scheduling ----------------------------------------------------------------------------


class NodeSelectorRequirement(K8sModel):
    key: str
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]
    values: list[str] = Field(default_factory=list)


class NodeSelectorTerm(K8sModel):
    """Requirements that must all hold (the terms of a NodeSelector are alternatives)."""

    match_expressions: list[NodeSelectorRequirement] = Field(default_factory=list)
    match_fields: list[NodeSelectorRequirement] = Field(default_factory=list)


class NodeSelector(K8sModel):
    node_selector_terms: list[NodeSelectorTerm]


class NodeAffinity(K8sModel):
    """Only the hard requirement is typed: it is what picks NuNet hardware (the seed matches
    ``nunet.gpu.<vendor>.<model>.<vram>gb``); preferences stay in the extra fields."""

    required_during_scheduling_ignored_during_execution: NodeSelector | None = None


class Affinity(K8sModel):
    node_affinity: NodeAffinity | None = None


class Toleration(K8sModel):
    key: str = ""
    operator: Literal["Exists", "Equal"] = "Equal"
    value: str = ""
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    toleration_seconds: Int64 | None = None


# --- pods ----------------------------------------------------------------------------------


class PodSpec(K8sModel):
    containers: list[Container] = Field(default_factory=list)
    init_containers: list[Container] = Field(default_factory=list)
    volumes: list[Volume] = Field(default_factory=list)
    restart_policy: Literal["Always", "OnFailure", "Never"] = "Always"
    node_selector: dict[str, str] = Field(default_factory=dict)
    node_name: str = ""
    affinity: Affinity | None = None
    tolerations: list[Toleration] = Field(default_factory=list)
    termination_grace_period_seconds: _NonNegative64 | None = None
    active_deadline_seconds: Annotated[int, Field(ge=1, le=INT64_MAX)] | None = None
    service_account_name: str = ""
    automount_service_account_token: bool | None = None
    image_pull_secrets: list[LocalObjectReference] = Field(default_factory=list)
    priority: Int32 | None = None
    """Set by Kubernetes from the pod's ``priorityClassName``: higher waits for DMS capacity
    ahead of lower (:mod:`~dmsgw.interlink.capacity.admission`)."""


class ContainerStateWaiting(K8sModel):
    reason: str = ""
    message: str = ""


class ContainerStateRunning(K8sModel):
    started_at: Time | None = None


class ContainerStateTerminated(K8sModel):
    exit_code: Int32
    signal: Int32 = 0
    reason: str = ""
    message: str = ""
    started_at: Time | None = None
    finished_at: Time | None = None
    container_id: str = ""


class ContainerState(K8sModel):
    """At most one of the three is set; none at all means "unknown" to the virtual kubelet."""

    waiting: ContainerStateWaiting | None = None
    running: ContainerStateRunning | None = None
    terminated: ContainerStateTerminated | None = None


class ContainerStatus(K8sModel):
    name: str
    state: ContainerState = Field(default_factory=ContainerState)
    last_state: ContainerState = Field(default_factory=ContainerState)
    ready: bool = False
    restart_count: Int32 = 0
    image: str = ""
    image_id: str = ""
    container_id: str = ""
    started: bool | None = None


class PodCondition(K8sModel):
    type: str
    status: str
    reason: str = ""
    message: str = ""
    last_probe_time: Time | None = None
    last_transition_time: Time | None = None


class PodStatus(K8sModel):
    phase: Literal["Pending", "Running", "Succeeded", "Failed", "Unknown"] | None = None
    conditions: list[PodCondition] = Field(default_factory=list)
    reason: str = ""
    message: str = ""
    host_ip: str = ""
    pod_ip: str = ""
    start_time: Time | None = None
    init_container_statuses: list[ContainerStatus] = Field(default_factory=list)
    container_statuses: list[ContainerStatus] = Field(default_factory=list)


class Pod(K8sModel):
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: PodSpec = Field(default_factory=PodSpec)
    status: PodStatus = Field(default_factory=PodStatus)
