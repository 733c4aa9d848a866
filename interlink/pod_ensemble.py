"""A Kubernetes pod, as interLink hands it over, translated into a DMS ensemble.

A pure function: :func:`pod_to_ensemble` reads the ``/create`` body (the pod and the ConfigMaps,
Secrets and projected maps interLink fetched for it) and returns the ensemble to deploy, or
raises :class:`PodTranslationError` naming the first field it cannot honour
(``spec.volumes[2] (nfs): volume kind not supported``). Nothing is dropped silently: a field
either changes what the DMS runs, is recorded in the ensemble for the executor or the PodActor
to apply, has no effect once the Kubernetes scheduler has placed the pod on our virtual node,
or is refused. The same input always gives byte-identical ensemble JSON, and every ensemble
returned passes :func:`~dmsgw.behaviors.ensemble_validation.validate_ensemble`.

How a pod maps (each DMS feature the executor must honour is listed in the module's docs and in
the docstrings below):

* **One node** (``pod``) holds one allocation per container, named after it (container names
  are DNS labels, as allocation names must be). Init containers are ``task`` allocations;
  main containers are ``task``\\s, or ``service``\\s under ``restartPolicy: Always``.
* **Order.** The DMS's ``depends_on`` only orders *starts*, while Kubernetes runs each init
  container to completion first. So each init container depends on the previous one and every
  main container on the last; on top of that a container waits, in its provision script, for a
  completion marker that the previous init container's wrapper writes into a per-pod control
  volume (``/.dmsgw``) when its command exits 0. When an init container's command fails, its
  wrapper writes ``init-failed`` there instead, and every set-up still waiting fails: the DMS
  then fails the deployment, as Kubernetes fails the pod, rather than leaving it provisioning.
* **Command.** ``command`` is the entrypoint and ``args`` the cmd, with ``$(VAR)`` expanded
  from the container's environment as the kubelet does. A container with a ``command`` runs
  ``/bin/sh -c <wrapper> dmsgw-pod <command> <args>``: the wrapper reports the command's start
  and exit status on stderr (:mod:`dmsgw.interlink.run_markers`: the DMS reports neither),
  starts the command, runs the ``postStart`` hook beside it (killing it if the hook fails),
  runs ``preStop`` when it is asked to stop, forwards the signal, writes an init container's
  completion marker and exits with the command's status. The image needs ``/bin/sh`` then; a
  container named in the pod's :data:`UNWRAPPED_ANNOTATION` runs its command as it is. A
  container without a ``command`` runs the image's own entrypoint, which cannot be wrapped: its
  exit code stays unknown, and an init container or one with lifecycle hooks is refused.
* **Environment.** Literal values; leftover ``valueFrom`` is resolved from the ConfigMaps and
  Secrets interLink sent, from the pod (``fieldRef``) and from the container's resources
  (``resourceFieldRef``).
* **Resources.** cpu cores, RAM and disk bytes: the limit when there is one, never below the
  request, else the defaults of :class:`TranslationOptions` (a container that sets neither
  still needs some reservation on a DMS peer). ``ram.size`` is the memory limit the executor
  enforces. GPUs come from ``nvidia.com/gpu`` and from ``nunet.gpu.<class>`` resources, whose
  class is resolved to the exact vendor and model peers report (``options.gpu_models``, built
  by :func:`dmsgw.interlink.capacity.gpu_catalog`).
* **Volumes** are DMS ``local`` volumes with a *named* source that the executor creates on the
  host on first use and shares between the allocations of the node that name it: an emptyDir is
  one such volume for the whole pod; a ConfigMap, Secret, projected or downwardAPI volume is one
  per container, filled by the container's provision script (files, sub-directories and modes),
  and mounted read-only. The names are ``dmsgw.<pod uid>.empty.<volume>``,
  ``dmsgw.<pod uid>.files.<container>.<volume>`` and ``dmsgw.<pod uid>.ctl.<generation>``.
* **Probes** become the allocation's health check (liveness first, else readiness, else
  startup); every probe with its timings is also recorded in the ensemble metadata.
* **Placement.** Annotation :data:`PEER_ANNOTATION` pins the node to a peer and
  :data:`EXCLUDE_PEERS_ANNOTATION` excludes peers; a GPU type required through a node selector
  or required node affinity on :data:`GPU_TYPE_LABELS` fixes the class of the pod's GPUs.
  Other selector and affinity terms only choose the virtual node and were satisfied by the
  Kubernetes scheduler.
* **Identity and policy** go into the metadata: :data:`METADATA_POD_UID` and its siblings,
  ``restartPolicy`` (which the PodActor applies), the termination grace period and active
  deadline.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import shlex
from collections.abc import Mapping, Sequence
from decimal import ROUND_CEILING, Decimal
from pathlib import PurePosixPath
from types import MappingProxyType
from typing import Any

from ..behaviors.ensemble import (
    AllocationConfig,
    AllocationFailureRecovery,
    AllocationType,
    EnsembleConfig,
    EnsembleConfigV1,
    HealthCheckManifest,
    NodeConfig,
    PortConfig,
    SpecConfig,
    VolumeConfig,
)
from ..behaviors.ensemble_validation import validate_ensemble
from ..behaviors.resources import CPU, GPU, RAM, Disk, GPUVendor, Resources
from ..errors import DmsgwError
from ..keys.peer import PeerIDError, parse_peer_id
from . import k8s
from .apimachinery import QuantityError, parse_quantity
from .bodies import RetrievedPodData
from .capacity import NVIDIA_GPU_RESOURCE, parse_gpu_resource_name
from .run_markers import EXIT_CODE_MARKER, STARTED_MARKER

__all__ = [
    "CONTROL_MOUNT",
    "EXCLUDE_PEERS_ANNOTATION",
    "GPU_TYPE_LABELS",
    "METADATA_ACTIVE_DEADLINE",
    "METADATA_GENERATION",
    "METADATA_GRACE_PERIOD",
    "METADATA_POD_NAME",
    "METADATA_POD_NAMESPACE",
    "METADATA_POD_UID",
    "METADATA_PROBES_PREFIX",
    "METADATA_RESTART_POLICY",
    "PEER_ANNOTATION",
    "POD_NODE",
    "PodTranslationError",
    "TranslationOptions",
    "allocation_key",
    "UNWRAPPED_ANNOTATION",
    "is_wrapped",
    "pod_to_ensemble",
]

POD_NODE = "pod"
"""The ensemble's only node; allocations are keyed ``pod.<container>`` in manifests."""


def allocation_key(container: str) -> str:
    """The manifest key of a container's allocation (what ``deployment/logs`` is asked for)."""
    return f"{POD_NODE}.{container}"


UNWRAPPED_ANNOTATION = "dmsgw.io/unwrapped-containers"
"""Pod annotation: comma-separated names of containers to run without the gateway's shell
wrapper (for images without ``/bin/sh``); their exit codes are then unknown to the gateway."""


def is_wrapped(pod: k8s.Pod, container: k8s.Container) -> bool:
    """Whether the container runs under the wrapper that reports its runs on stderr: those
    with a ``command`` (the image's own entrypoint cannot be wrapped) that the pod does not
    name in :data:`UNWRAPPED_ANNOTATION`."""
    return bool(container.command) and container.name not in _unwrapped(pod)


def _unwrapped(pod: k8s.Pod) -> set[str]:
    listed = pod.metadata.annotations.get(UNWRAPPED_ANNOTATION, "")
    return {name.strip() for name in listed.split(",") if name.strip()}


def _check_unwrapped(pod: k8s.Pod) -> None:
    """A name in :data:`UNWRAPPED_ANNOTATION` that is no container is a typo to point at."""
    names = {c.name for c in (*pod.spec.init_containers, *pod.spec.containers)}
    unknown = sorted(_unwrapped(pod) - names)
    if unknown:
        raise PodTranslationError(
            f"metadata.annotations[{json.dumps(UNWRAPPED_ANNOTATION)}]",
            f"no container named {', '.join(map(repr, unknown))} in the pod",
        )


PEER_ANNOTATION = "nunet.io/peer"
"""Pod annotation: the peer ID (``12D3KooW…``) the pod must run on."""
EXCLUDE_PEERS_ANNOTATION = "nunet.io/exclude-peers"
"""Pod annotation: comma-separated peer IDs the pod must not run on."""
GPU_TYPE_LABELS = ("gpu-type", "nunet.io/gpu-type")
"""Node-selector / node-affinity keys whose value is a GPU class (``nunet.gpu.nvidia.v100.40gb``
as in the seed, ``nunet.io/gpu.…``, or the bare class) that the pod's GPUs must be."""
CONTROL_MOUNT = "/.dmsgw"
"""Where every container of a pod with init containers sees the pod's control volume."""
INIT_FAILED = f"{CONTROL_MOUNT}/init-failed"
"""Written by an init container's wrapper when its command fails: the name of that container."""

METADATA_POD_UID = "dmsgw.io/pod-uid"
METADATA_POD_NAMESPACE = "dmsgw.io/pod-namespace"
METADATA_POD_NAME = "dmsgw.io/pod-name"
METADATA_RESTART_POLICY = "dmsgw.io/restart-policy"
METADATA_GENERATION = "dmsgw.io/generation"
METADATA_GRACE_PERIOD = "dmsgw.io/termination-grace-period-seconds"
METADATA_ACTIVE_DEADLINE = "dmsgw.io/active-deadline-seconds"
METADATA_PROBES_PREFIX = "dmsgw.io/probes."
"""``dmsgw.io/probes.<container>``: the container's probes as compact JSON,
``{"liveness": {"handler": …, "initialDelaySeconds": …, …}, …, "check": "liveness"}``, where
``check`` names the probe that became the DMS health check."""

_MIB = 1 << 20
_GIB = 1 << 30
_INT64_MAX = (1 << 63) - 1
_MAX_CORES = Decimal(1 << 24)
_CENTI = Decimal("0.01")
_ENV_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_FIELD_KEY = re.compile(r"metadata\.(labels|annotations)\['(.*)'\]", re.DOTALL)
_WRAPPER_NAME = "dmsgw-pod"
_FILE_VOLUMES = ("configMap", "secret", "projected", "downwardAPI")
_PLAIN_RESOURCES = ("cpu", "memory", "ephemeral-storage")
_DEFAULT_FILE_MODE = 0o644
_PRINTF_CHUNK = 1024


class PodTranslationError(DmsgwError):
    """A pod the DMS cannot run as asked; ``path`` is the pod field, ``reason`` why."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"{path}: {reason}")


@dataclasses.dataclass(frozen=True, slots=True)
class TranslationOptions:
    """What the translation needs besides the pod.

    ``gpu_models`` maps a GPU class (``nvidia.rtx.3080.10gb``) to the GPU peers report for it
    (:func:`~dmsgw.interlink.capacity.gpu_catalog`); a pod asking for a class not in it is
    refused. ``pod_ip`` answers ``fieldRef: status.podIP`` (else the pod's own status is used).
    ``generation`` counts earlier deployments of the same pod, so that an init container's
    completion marker from one of them cannot let this one's main containers start early.
    ``memory_emptydir_on_disk`` accepts ``emptyDir.medium: Memory`` as an ordinary (disk)
    volume instead of refusing it.
    """

    default_cpu_cores: float = 0.5
    default_memory_bytes: int = 512 * _MIB
    default_disk_bytes: int = 1 * _GIB
    executor: str = "docker"
    gpu_models: Mapping[str, GPU] = dataclasses.field(default_factory=lambda: MappingProxyType({}))
    pod_ip: str = ""
    generation: int = 0
    memory_emptydir_on_disk: bool = False


# --- extra (unmodelled) fields ---------------------------------------------------------------

_ANY = object()
"""In a table of ignorable fields: any value has no effect once the pod is offloaded."""

_POD_SPEC_IGNORED: Mapping[str, object] = {
    # Scheduling, admission and cluster networking: done by Kubernetes before the pod reaches
    # us, or (services, cluster DNS) never available to an offloaded pod.
    "schedulerName": _ANY,
    "priority": _ANY,
    "priorityClassName": _ANY,
    "preemptionPolicy": _ANY,
    "topologySpreadConstraints": _ANY,
    "schedulingGates": _ANY,
    "overhead": _ANY,
    "readinessGates": _ANY,
    "serviceAccount": _ANY,
    "enableServiceLinks": _ANY,
    "dnsPolicy": _ANY,
    "os": {"name": "linux"},
    "securityContext": _ANY,  # checked by _check_security_context
}
_CONTAINER_IGNORED: Mapping[str, object] = {
    "terminationMessagePath": _ANY,
    "terminationMessagePolicy": _ANY,
    "resizePolicy": _ANY,
    "securityContext": _ANY,  # checked by _check_security_context
}
_MOUNT_IGNORED: Mapping[str, object] = {"mountPropagation": "None", "recursiveReadOnly": "Disabled"}
_NO_IGNORED: Mapping[str, object] = MappingProxyType({})
# Security settings whose value is what a container gets anyway.
_HARMLESS_SECURITY: Mapping[str, object] = {
    "privileged": False,
    "allowPrivilegeEscalation": True,
    "readOnlyRootFilesystem": False,
    "runAsNonRoot": False,
}


def _check_extras(
    model: k8s.K8sModel, path: str, ignored: Mapping[str, object] = _NO_IGNORED
) -> None:
    """Refuse a field the models do not type, unless it is empty or has no effect offloaded.

    Newer Kubernetes fields land here too, so an unknown field with a value is refused rather
    than assumed harmless.
    """
    for key, value in (model.model_extra or {}).items():
        if not value:
            continue
        accepted = ignored.get(key)
        if accepted is _ANY or (key in ignored and value == accepted):
            continue
        raise PodTranslationError(f"{path}.{key}", "not supported")


def _check_security_context(model: k8s.K8sModel, path: str) -> None:
    """A security context can only be accepted when it asks for nothing: the DMS runs each
    container with its own user, capabilities and profiles."""
    context = (model.model_extra or {}).get("securityContext")
    if not context:
        return
    if not isinstance(context, dict):
        raise PodTranslationError(f"{path}.securityContext", "not supported")
    for key, value in context.items():
        if value in (None, {}, []):
            continue
        if key in _HARMLESS_SECURITY and value == _HARMLESS_SECURITY[key]:
            continue
        raise PodTranslationError(
            f"{path}.securityContext.{key}",
            "not supported: the DMS runs containers with its own user and privileges",
        )


# --- the pod as a whole ----------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class _File:
    path: str
    data: bytes
    mode: int


@dataclasses.dataclass(frozen=True, slots=True)
class _Amounts:
    """A container's reservation: what the allocation gets, and what ``resourceFieldRef``
    reports as its limits."""

    cpu: Decimal
    memory: int
    disk: int
    gpus: tuple[GPU, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class _Container:
    path: str
    spec: k8s.Container
    init_index: int | None
    """Position among the init containers; ``None`` for a main container."""


class _Pod:
    """The pod and what was sent with it, indexed for the translation of each container."""

    def __init__(self, data: RetrievedPodData, options: TranslationOptions) -> None:
        self.pod = data.pod
        self.options = options
        self.uid = self.pod.metadata.uid
        self.config_maps: dict[str, k8s.ConfigMap] = {}
        self.secrets: dict[str, k8s.Secret] = {}
        self.projected: dict[str, k8s.ConfigMap] = {}
        for sent in data.containers:
            for cm in sent.config_maps:
                self.config_maps.setdefault(cm.metadata.name, cm)
            for secret in sent.secrets:
                self.secrets.setdefault(secret.metadata.name, secret)
            for pm in sent.projected_volume_maps:
                self.projected.setdefault(pm.metadata.name, pm)
        spec = self.pod.spec
        self.containers = _containers(spec)
        self.by_name = {c.spec.name: c for c in self.containers}
        self.init_names = [c.name for c in spec.init_containers]
        self.volumes = _index_volumes(spec, options)
        self.gpu_type = _gpu_type(spec)
        self._files: dict[str, tuple[_File, ...]] = {}
        disk = _empty_dir_disk(self)
        self.amounts = {
            c.spec.name: _amounts(self, c, disk.get(c.spec.name, 0)) for c in self.containers
        }

    def files(self, name: str) -> tuple[_File, ...]:
        """The files of file volume ``name`` (resolved once, shared by its mounts)."""
        if name not in self._files:
            index, volume = self.volumes[name]
            self._files[name] = _volume_files(self, f"spec.volumes[{index}]", volume)
        return self._files[name]


def _containers(spec: k8s.PodSpec) -> list[_Container]:
    """Init containers first, in order, then the main containers."""
    return [
        _Container(f"spec.initContainers[{i}]", c, i) for i, c in enumerate(spec.init_containers)
    ] + [_Container(f"spec.containers[{i}]", c, None) for i, c in enumerate(spec.containers)]


def _check_pod(pod: k8s.Pod) -> None:
    if not pod.metadata.uid:
        raise PodTranslationError("metadata.uid", "required: the pod's volumes are named by it")
    spec = pod.spec
    if not spec.containers:
        raise PodTranslationError("spec.containers", "a pod needs at least one container")
    _check_extras(spec, "spec", _POD_SPEC_IGNORED)
    _check_security_context(spec, "spec")
    if spec.image_pull_secrets:
        raise PodTranslationError(
            "spec.imagePullSecrets", "not supported: registry credentials cannot reach the DMS"
        )
    seen: dict[str, str] = {}
    for c in _containers(spec):
        first = seen.setdefault(c.spec.name, c.path)
        if first != c.path:
            raise PodTranslationError(f"{c.path}.name", f"{c.spec.name!r} is also {first}")


def _index_volumes(
    spec: k8s.PodSpec, options: TranslationOptions
) -> dict[str, tuple[int, k8s.Volume]]:
    volumes: dict[str, tuple[int, k8s.Volume]] = {}
    for i, volume in enumerate(spec.volumes):
        path = f"spec.volumes[{i}]"
        if volume.name in volumes:
            raise PodTranslationError(f"{path}.name", f"{volume.name!r} is declared twice")
        kind = volume.source_kind
        if kind not in ("emptyDir", *_FILE_VOLUMES):
            raise PodTranslationError(f"{path} ({kind})", "volume kind not supported")
        medium = volume.empty_dir.medium if volume.empty_dir else ""
        if medium == "Memory" and not options.memory_emptydir_on_disk:
            raise PodTranslationError(
                f"{path}.emptyDir.medium", "Memory (tmpfs) is not supported by DMS volumes"
            )
        if medium not in ("", "Memory"):
            raise PodTranslationError(f"{path}.emptyDir.medium", f"{medium!r} is not supported")
        volumes[volume.name] = (i, volume)
    return volumes


# --- placement -------------------------------------------------------------------------------


def _gpu_type(spec: k8s.PodSpec) -> tuple[str, str] | None:
    """The GPU class required by selector or affinity, with the path that requires it."""
    found: list[tuple[str, str]] = []
    for key in GPU_TYPE_LABELS:
        if key in spec.node_selector:
            path = f"spec.nodeSelector[{json.dumps(key)}]"
            found.append((_gpu_class_label(spec.node_selector[key], path), path))
    affinity = spec.affinity.node_affinity if spec.affinity else None
    required = affinity.required_during_scheduling_ignored_during_execution if affinity else None
    terms = required.node_selector_terms if required else []
    base = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
    typed = [
        i for i, t in enumerate(terms) if any(e.key in GPU_TYPE_LABELS for e in t.match_expressions)
    ]
    if len(typed) > 1 or (typed and len(terms) > 1):
        raise PodTranslationError(
            f"{base}.nodeSelectorTerms",
            "alternative terms on the GPU type are not supported: require one GPU type",
        )
    for i in typed:
        for j, expression in enumerate(terms[i].match_expressions):
            if expression.key not in GPU_TYPE_LABELS:
                continue
            path = f"{base}.nodeSelectorTerms[{i}].matchExpressions[{j}]"
            if expression.operator != "In" or len(expression.values) != 1:
                raise PodTranslationError(
                    path, "a GPU type must be required as `In` with exactly one value"
                )
            found.append((_gpu_class_label(expression.values[0], f"{path}.values[0]"), path))
    classes = {cls for cls, _ in found}
    if len(classes) > 1:
        raise PodTranslationError(found[1][1], f"conflicts with the GPU type of {found[0][1]}")
    return found[0] if found else None


def _gpu_class_label(value: str, path: str) -> str:
    cls = parse_gpu_resource_name(value) or parse_gpu_resource_name("nunet.gpu." + value)
    if cls is None:
        raise PodTranslationError(
            path, f"{value!r} is not a GPU type such as nunet.gpu.nvidia.rtx.3080.10gb"
        )
    return cls


def _peer_ids(value: str, path: str) -> tuple[str, ...]:
    peers: list[str] = []
    for item in value.split(","):
        peer = item.strip()
        if not peer or peer in peers:
            continue
        try:
            parse_peer_id(peer)
        except PeerIDError as exc:
            raise PodTranslationError(path, str(exc)) from None
        peers.append(peer)
    return tuple(peers)


def _placement(pod: k8s.Pod) -> tuple[str, tuple[str, ...]]:
    annotations = pod.metadata.annotations
    peer_path = f"metadata.annotations[{json.dumps(PEER_ANNOTATION)}]"
    exclude_path = f"metadata.annotations[{json.dumps(EXCLUDE_PEERS_ANNOTATION)}]"
    pinned = _peer_ids(annotations.get(PEER_ANNOTATION, ""), peer_path)
    if len(pinned) > 1:
        raise PodTranslationError(
            peer_path, "name one peer (use nunet.io/exclude-peers to avoid others)"
        )
    excluded = _peer_ids(annotations.get(EXCLUDE_PEERS_ANNOTATION, ""), exclude_path)
    if pinned and pinned[0] in excluded:
        raise PodTranslationError(exclude_path, f"excludes the pinned peer {pinned[0]}")
    return (pinned[0] if pinned else ""), excluded


# --- values from the pod: fieldRef and resourceFieldRef --------------------------------------


def _go_quote(text: str) -> str:
    """Go's ``%q``, as the kubelet writes label and annotation values into downward API files."""
    escapes = {'"': '\\"', "\\": "\\\\", "\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n"}
    escapes |= {"\r": "\\r", "\t": "\\t", "\v": "\\v"}
    out = []
    for char in text:
        if char in escapes:
            out.append(escapes[char])
        elif char.isprintable():
            out.append(char)
        elif ord(char) < 0x80:
            out.append(f"\\x{ord(char):02x}")
        elif ord(char) < 0x10000:
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(f"\\U{ord(char):08x}")
    return '"' + "".join(out) + '"'


def _format_map(values: Mapping[str, str]) -> str:
    """``fieldpath.FormatMap``: ``key="value"`` lines in key order."""
    return "\n".join(f"{key}={_go_quote(values[key])}" for key in sorted(values))


def _field_value(
    ctx: _Pod, selector: k8s.ObjectFieldSelector, path: str, *, whole_maps: bool
) -> str:
    """A ``fieldRef``: what the kubelet's downward API gives for the field."""
    meta = ctx.pod.metadata
    field = selector.field_path
    simple = {
        "metadata.name": meta.name,
        "metadata.namespace": meta.namespace,
        "metadata.uid": meta.uid,
        "spec.nodeName": ctx.pod.spec.node_name,
        "spec.serviceAccountName": ctx.pod.spec.service_account_name,
    }
    if field in simple:
        return simple[field]
    if field == "status.podIP":
        ip = ctx.options.pod_ip or ctx.pod.status.pod_ip
        if not ip:
            raise PodTranslationError(path, "status.podIP is not known before the pod is deployed")
        return ip
    keyed = _FIELD_KEY.fullmatch(field)
    if keyed:
        values = meta.labels if keyed[1] == "labels" else meta.annotations
        return values.get(keyed[2], "")
    if whole_maps and field in ("metadata.labels", "metadata.annotations"):
        return _format_map(meta.labels if field == "metadata.labels" else meta.annotations)
    raise PodTranslationError(path, f"field {field!r} is not supported")


def _resource_value(
    ctx: _Pod, selector: k8s.ResourceFieldSelector, path: str, default_container: str
) -> str:
    """A ``resourceFieldRef``: limits are what the container was given (its reservation, as the
    kubelet reports node allocatable for an unset limit), requests as written (or the limit, as
    the API server defaults them)."""
    name = selector.container_name or default_container
    target = ctx.by_name.get(name)
    if not name or target is None:
        raise PodTranslationError(path, f"no container {name!r} in the pod")
    kind, _, resource = selector.resource.partition(".")
    if kind not in ("limits", "requests") or resource not in _PLAIN_RESOURCES:
        raise PodTranslationError(path, f"resource {selector.resource!r} is not supported")
    divisor = _quantity(selector.divisor or "1", f"{path}.divisor")
    if divisor <= 0:
        raise PodTranslationError(f"{path}.divisor", "must be positive")
    amounts = ctx.amounts[name]
    limit = {
        "cpu": amounts.cpu,
        "memory": Decimal(amounts.memory),
        "ephemeral-storage": Decimal(amounts.disk),
    }
    if kind == "limits":
        value = limit[resource]
    else:
        res = target.spec.resources
        text = res.requests.get(resource) or res.limits.get(resource)
        value = _quantity(text, path) if text else Decimal(0)
    return str(math.ceil(value / divisor))


# --- resources -------------------------------------------------------------------------------


def _quantity(text: str, path: str) -> Decimal:
    try:
        return parse_quantity(text)
    except QuantityError as exc:
        raise PodTranslationError(path, str(exc)) from None


def _largest(spec: k8s.Container, name: str, path: str) -> Decimal | None:
    """The limit, never below the request; ``None`` when neither is set (or both are 0)."""
    values = []
    for section, table in (
        ("limits", spec.resources.limits),
        ("requests", spec.resources.requests),
    ):
        if name in table:
            value = _quantity(table[name], f"{path}.resources.{section}[{json.dumps(name)}]")
            if value < 0:
                raise PodTranslationError(
                    f"{path}.resources.{section}[{json.dumps(name)}]", "must not be negative"
                )
            values.append(value)
    best = max(values, default=Decimal(0))
    return best or None


def _bytes(spec: k8s.Container, name: str, path: str, default: int) -> int:
    value = _largest(spec, name, path)
    if value is None:
        return default
    size = math.ceil(value)
    if size > _INT64_MAX:
        raise PodTranslationError(f"{path}.resources", f"{name} is out of range")
    return size


def _count(spec: k8s.Container, name: str, path: str) -> int:
    value = _largest(spec, name, path) or Decimal(0)
    if value != value.to_integral_value():
        raise PodTranslationError(f"{path}.resources", f"{name} must be a whole number")
    if value > 1024:
        raise PodTranslationError(f"{path}.resources", f"{name}: more GPUs than any peer has")
    return int(value)


def _amounts(ctx: _Pod, c: _Container, disk_extra: int) -> _Amounts:
    resources = c.spec.resources
    _check_extras(resources, f"{c.path}.resources")
    for section, table in (("limits", resources.limits), ("requests", resources.requests)):
        for name in table:
            if name in (*_PLAIN_RESOURCES, NVIDIA_GPU_RESOURCE) or parse_gpu_resource_name(name):
                continue
            raise PodTranslationError(
                f"{c.path}.resources.{section}[{json.dumps(name)}]", "resource not supported"
            )
    options = ctx.options
    cpu = _largest(c.spec, "cpu", c.path) or Decimal(str(options.default_cpu_cores))
    if cpu > _MAX_CORES:
        raise PodTranslationError(f"{c.path}.resources", "cpu is out of range")
    return _Amounts(
        cpu=cpu.quantize(_CENTI, rounding=ROUND_CEILING),
        memory=_bytes(c.spec, "memory", c.path, options.default_memory_bytes),
        disk=_bytes(c.spec, "ephemeral-storage", c.path, options.default_disk_bytes) + disk_extra,
        gpus=_gpus(ctx, c),
    )


def _gpus(ctx: _Pod, c: _Container) -> tuple[GPU, ...]:
    """The GPUs a container asks for, each as the DMS should match it: ``nvidia.com/gpu`` is any
    NVIDIA GPU (or the pod's required GPU type), ``nunet.gpu.<class>`` the class's GPU."""
    wanted: list[GPU] = []
    names = sorted({*c.spec.resources.limits, *c.spec.resources.requests})
    count = _count(c.spec, NVIDIA_GPU_RESOURCE, c.path)
    if count:
        card = GPU(vendor=GPUVendor.NVIDIA.value)
        if ctx.gpu_type is not None:
            if not ctx.gpu_type[0].startswith("nvidia."):
                raise PodTranslationError(
                    f"{c.path}.resources",
                    f"{NVIDIA_GPU_RESOURCE} conflicts with the GPU type of {ctx.gpu_type[1]}",
                )
            card = _catalog_gpu(ctx, ctx.gpu_type[0], ctx.gpu_type[1])
        wanted += [card] * count
    for name in names:
        cls = parse_gpu_resource_name(name)
        if cls is None:
            continue
        path = f"{c.path}.resources.limits[{json.dumps(name)}]"
        if ctx.gpu_type is not None and cls != ctx.gpu_type[0]:
            raise PodTranslationError(path, f"conflicts with the GPU type of {ctx.gpu_type[1]}")
        wanted += [_catalog_gpu(ctx, cls, path)] * _count(c.spec, name, c.path)
    return tuple(dataclasses.replace(card, index=i) for i, card in enumerate(wanted))


def _catalog_gpu(ctx: _Pod, cls: str, path: str) -> GPU:
    card = ctx.options.gpu_models.get(cls)
    if card is None:
        known = ", ".join(sorted(ctx.options.gpu_models)) or "none"
        raise PodTranslationError(
            path, f"no reachable DMS peer reports a GPU of type {cls} (known: {known})"
        )
    return GPU(vendor=card.vendor, model=card.model, vram=card.vram)


def _resources(amounts: _Amounts) -> Resources:
    return Resources(
        cpu=CPU(cores=float(amounts.cpu)),
        gpus=amounts.gpus or None,
        ram=RAM(size=amounts.memory),
        disk=Disk(size=amounts.disk),
    )


def _empty_dir_disk(ctx: _Pod) -> dict[str, int]:
    """emptyDir size limits, reserved as disk by the first container mounting each volume
    (a DMS volume has no size of its own; the limit is reserved, not enforced)."""
    extra: dict[str, int] = {}
    counted: set[str] = set()
    for c in ctx.containers:
        for mount in c.spec.volume_mounts:
            entry = ctx.volumes.get(mount.name)
            if entry is None or mount.name in counted or entry[1].empty_dir is None:
                continue
            counted.add(mount.name)
            limit = entry[1].empty_dir.size_limit
            if limit:
                size = _quantity(limit, f"spec.volumes[{entry[0]}].emptyDir.sizeLimit")
                extra[c.spec.name] = extra.get(c.spec.name, 0) + math.ceil(max(size, Decimal(0)))
    return extra


# --- environment and command -----------------------------------------------------------------


def _environment(ctx: _Pod, c: _Container) -> dict[str, str]:
    """The container's variables in order (a later duplicate wins, keeping the first place)."""
    env: dict[str, str] = {}
    for i, var in enumerate(c.spec.env):
        path = f"{c.path}.env[{i}]"
        _check_extras(var, path)
        if not _ENV_NAME.fullmatch(var.name):
            raise PodTranslationError(
                f"{path} ({var.name})",
                "the DMS accepts only letters, digits and _ in variable names",
            )
        value = (
            var.value
            if var.value_from is None
            else _env_source(ctx, c, var.value_from, f"{path}.valueFrom")
        )
        if value is None:
            continue
        if "\x00" in value:
            raise PodTranslationError(path, "a variable cannot hold a NUL character")
        env[var.name] = value
    return env


def _env_source(ctx: _Pod, c: _Container, source: k8s.EnvVarSource, path: str) -> str | None:
    """A leftover ``valueFrom``; ``None`` for an optional reference to something missing (the
    kubelet leaves such a variable unset)."""
    _check_extras(source, path)
    given = [
        name
        for name in ("secret_key_ref", "config_map_key_ref", "field_ref", "resource_field_ref")
        if getattr(source, name) is not None
    ]
    if len(given) != 1:
        raise PodTranslationError(path, "exactly one source must be given")
    if source.secret_key_ref is not None:
        ref = source.secret_key_ref
        secret = ctx.secrets.get(ref.name)
        data = _secret_data(secret) if secret else None
        return _keyed_text(
            data, ref.name, ref.key, bool(ref.optional), f"{path}.secretKeyRef", "Secret"
        )
    if source.config_map_key_ref is not None:
        cref = source.config_map_key_ref
        cm = ctx.config_maps.get(cref.name)
        text = {k: _utf8(v) for k, v in cm.data.items()} if cm else None
        return _keyed_text(
            text, cref.name, cref.key, bool(cref.optional), f"{path}.configMapKeyRef", "ConfigMap"
        )
    if source.field_ref is not None:
        return _field_value(ctx, source.field_ref, f"{path}.fieldRef", whole_maps=False)
    assert source.resource_field_ref is not None
    return _resource_value(ctx, source.resource_field_ref, f"{path}.resourceFieldRef", c.spec.name)


def _keyed_text(
    data: Mapping[str, bytes] | None, name: str, key: str, optional: bool, path: str, kind: str
) -> str | None:
    if data is None:
        if optional:
            return None
        raise PodTranslationError(path, f"{kind} {name!r} was not sent by interLink")
    if key not in data:
        if optional:
            return None
        raise PodTranslationError(path, f"{kind} {name!r} has no key {key!r}")
    try:
        return data[key].decode("utf-8")
    except UnicodeDecodeError:
        raise PodTranslationError(path, f"{kind} {name!r} key {key!r} is not UTF-8 text") from None


def _utf8(text: str) -> bytes:
    """``text`` as UTF-8, a lone surrogate (a ``\\ud800`` escape in the JSON) as U+FFFD, which
    is what Go made of it."""
    try:
        return text.encode()
    except UnicodeEncodeError:
        return "".join("\ufffd" if 0xD800 <= ord(c) < 0xE000 else c for c in text).encode()


def _secret_data(secret: k8s.Secret) -> dict[str, bytes]:
    """``data`` with ``stringData`` over it, as the API server merges them."""
    return {**secret.data, **{k: _utf8(v) for k, v in secret.string_data.items()}}


def _expand(text: str, env: Mapping[str, str]) -> str:
    """The kubelet's ``$(VAR)`` expansion of command and args: ``$$`` is a literal ``$``, an
    unknown or unterminated reference stays as written."""
    out: list[str] = []
    i = 0
    while i < len(text):
        if text[i] != "$" or i + 1 == len(text):
            out.append(text[i])
            i += 1
            continue
        following = text[i + 1]
        if following == "$":
            out.append("$")
            i += 2
        elif following == "(":
            end = text.find(")", i + 2)
            if end < 0:
                out.append("$(")
                i += 2
            else:
                name = text[i + 2 : end]
                out.append(env.get(name, f"$({name})"))
                i = end + 1
        else:
            out.append("$" + following)
            i += 2
    return "".join(out)


# --- lifecycle hooks and the wrapper ---------------------------------------------------------


def _hook(handler: k8s.LifecycleHandler | None, path: str) -> str:
    """An ``exec`` hook as a shell command line (``""`` when there is none)."""
    if handler is None:
        return ""
    _check_extras(handler, path)
    if handler.http_get is not None or handler.tcp_socket is not None:
        kind = "httpGet" if handler.http_get is not None else "tcpSocket"
        raise PodTranslationError(f"{path}.{kind}", "not supported: only exec hooks can be run")
    if handler.exec is None or not handler.exec.command:
        raise PodTranslationError(path, "an exec hook needs a command")
    return shlex.join(handler.exec.command)


@dataclasses.dataclass(frozen=True, slots=True)
class _Hooks:
    post_start: str = ""
    pre_stop: str = ""


def _hooks(c: _Container) -> _Hooks:
    lifecycle = c.spec.lifecycle
    if lifecycle is None:
        return _Hooks()
    path = f"{c.path}.lifecycle"
    _check_extras(lifecycle, path)
    return _Hooks(
        post_start=_hook(lifecycle.post_start, f"{path}.postStart"),
        pre_stop=_hook(lifecycle.pre_stop, f"{path}.preStop"),
    )


def _wrapper(c: _Container, hooks: _Hooks, marker: str) -> str:
    """The shell that runs the container's command (``"$@"``) in the background so that it can
    run the ``postStart`` hook beside it, run ``preStop`` and forward the signal when it is
    asked to stop, and, for an init container, write the completion ``marker`` when the
    command exits 0. It reports the command's start and exit status on stderr (the DMS reports
    neither) and exits with the command's status."""
    on_stop = f"{hooks.pre_stop} || :; " if hooks.pre_stop else ""
    on_stop += '[ -z "$pid" ] || kill -TERM "$pid" 2>/dev/null'
    lines = [
        f"# dmsgw: runs container {c.spec.name!r}, reporting its start and exit on stderr",
        "pid=",
        f"trap {shlex.quote(on_stop)} TERM INT",
        f"echo {shlex.quote(STARTED_MARKER)} >&2",
        '"$@" &',
        "pid=$!",
    ]
    if hooks.post_start:
        lines += [
            f"if ! {hooks.post_start}; then",
            "  echo 'dmsgw: the postStart hook failed; stopping the container' >&2",
            '  kill -TERM "$pid" 2>/dev/null',
            # A TERM that reaches the child before it has exec'd the command hits the trap it
            # inherited and is lost: ask again once the command runs.
            "  sleep 1",
            '  kill -TERM "$pid" 2>/dev/null',
            "fi",
        ]
    lines += [
        "while :; do",
        '  wait "$pid"',
        "  code=$?",
        '  kill -0 "$pid" 2>/dev/null || break',
        "done",
    ]
    if marker:
        failed = f"printf '%s\\n' {shlex.quote(c.spec.name)} > {shlex.quote(INIT_FAILED)}"
        done = f"rm -f {shlex.quote(INIT_FAILED)}; : > {shlex.quote(marker)}"
        # A success clears an earlier failure: the DMS retries provisioning in the same volume.
        lines.append(f'if [ "$code" -eq 0 ]; then {done}; else {failed}; fi')
    lines += [f'echo "{EXIT_CODE_MARKER}$code" >&2', 'exit "$code"']
    return "\n".join(lines) + "\n"


# --- volumes and their files -----------------------------------------------------------------


def _file_path(value: str, path: str) -> str:
    """A relative file path inside a volume, as the API server allows it."""
    parts = PurePosixPath(value).parts
    if not value or value.startswith("/") or ".." in parts or "\x00" in value:
        raise PodTranslationError(path, f"{value!r} must be a relative path without '..'")
    return str(PurePosixPath(*parts))


def _mode(value: int | None, default: int | None) -> int:
    if value is not None:
        return value
    return default if default is not None else _DEFAULT_FILE_MODE


def _keyed_files(
    data: Mapping[str, bytes] | None,
    items: Sequence[k8s.KeyToPath],
    optional: bool,
    mode: int,
    path: str,
    what: str,
) -> list[_File]:
    """The files of a ConfigMap or Secret source: its ``items``, or every key."""
    if data is None:
        if optional:
            return []
        raise PodTranslationError(path, f"{what} was not sent by interLink")
    if not items:
        return [_File(_file_path(key, path), data[key], mode) for key in sorted(data)]
    files = []
    for i, item in enumerate(items):
        if item.key not in data:
            if optional:
                continue
            raise PodTranslationError(f"{path}.items[{i}]", f"{what} has no key {item.key!r}")
        files.append(
            _File(
                _file_path(item.path, f"{path}.items[{i}].path"),
                data[item.key],
                _mode(item.mode, mode),
            )
        )
    return files


def _config_map_data(cm: k8s.ConfigMap | None) -> dict[str, bytes] | None:
    if cm is None:
        return None
    return {**{k: _utf8(v) for k, v in cm.data.items()}, **cm.binary_data}


def _downward_files(
    ctx: _Pod,
    items: Sequence[k8s.DownwardAPIVolumeFile],
    mode: int,
    path: str,
    sent: Mapping[str, bytes],
) -> list[_File]:
    files = []
    for i, item in enumerate(items):
        item_path = f"{path}.items[{i}]"
        name = _file_path(item.path, f"{item_path}.path")
        if name in sent:
            data = sent[name]
        elif item.field_ref is not None:
            field = _field_value(ctx, item.field_ref, f"{item_path}.fieldRef", whole_maps=True)
            data = _utf8(field)
        elif item.resource_field_ref is not None:
            ref = item.resource_field_ref
            if not ref.container_name:
                raise PodTranslationError(f"{item_path}.resourceFieldRef.containerName", "required")
            data = _utf8(_resource_value(ctx, ref, f"{item_path}.resourceFieldRef", ""))
        else:
            raise PodTranslationError(item_path, "needs a fieldRef or a resourceFieldRef")
        files.append(_File(name, data, _mode(item.mode, mode)))
    return files


def _projected_files(
    ctx: _Pod, path: str, volume: k8s.Volume, sent: Mapping[str, bytes]
) -> list[_File]:
    """A projected volume: each source resolved from what interLink sent, the downward API
    and service-account tokens from the volume's projected map first (tokens only exist
    there); files of the map that no source produced are added as interLink resolved them."""
    assert volume.projected is not None
    mode = _mode(volume.projected.default_mode, None)
    files: list[_File] = []
    for i, source in enumerate(volume.projected.sources):
        spath = f"{path}.projected.sources[{i}]"
        _check_extras(source, spath)
        if source.config_map is not None:
            ref = source.config_map
            data = _with_sent(_config_map_data(ctx.config_maps.get(ref.name)), ref.items, sent)
            files += _keyed_files(
                data,
                ref.items,
                bool(ref.optional),
                mode,
                f"{spath}.configMap",
                f"ConfigMap {ref.name!r}",
            )
        elif source.secret is not None:
            sref = source.secret
            secret = ctx.secrets.get(sref.name)
            data = _with_sent(_secret_data(secret) if secret else None, sref.items, sent)
            files += _keyed_files(
                data,
                sref.items,
                bool(sref.optional),
                mode,
                f"{spath}.secret",
                f"Secret {sref.name!r}",
            )
        elif source.downward_api is not None:
            files += _downward_files(
                ctx, source.downward_api.items, mode, f"{spath}.downwardAPI", sent
            )
        elif source.service_account_token is not None:
            token = _file_path(
                source.service_account_token.path, f"{spath}.serviceAccountToken.path"
            )
            if token not in sent:
                raise PodTranslationError(
                    f"{spath}.serviceAccountToken", "interLink sent no token for this volume"
                )
            files.append(_File(token, sent[token], mode))
        else:
            raise PodTranslationError(spath, "no source given")
    produced = {f.path for f in files}
    files += [_File(name, sent[name], mode) for name in sorted(sent) if name not in produced]
    return files


def _with_sent(
    data: dict[str, bytes] | None, items: Sequence[k8s.KeyToPath], sent: Mapping[str, bytes]
) -> dict[str, bytes] | None:
    """A projected ConfigMap/Secret source's data; when the object itself was not sent but
    interLink resolved the volume, the source's files are taken from the volume's map (with
    no ``items``, the map's remaining files are added by :func:`_projected_files`)."""
    if data is not None or not sent:
        return data
    return {item.key: sent[item.path] for item in items if item.path in sent}


_VOLUME_FIELDS = {
    "emptyDir": "empty_dir",
    "configMap": "config_map",
    "secret": "secret",
    "projected": "projected",
    "downwardAPI": "downward_api",
}


def _volume_files(ctx: _Pod, path: str, volume: k8s.Volume) -> tuple[_File, ...]:
    _check_extras(
        getattr(volume, _VOLUME_FIELDS[volume.source_kind]), f"{path}.{volume.source_kind}"
    )
    sent_map = ctx.projected.get(volume.name)
    sent = _config_map_data(sent_map) or {}
    files: list[_File]
    if volume.config_map is not None:
        ref = volume.config_map
        files = _keyed_files(
            _config_map_data(ctx.config_maps.get(ref.name)),
            ref.items,
            bool(ref.optional),
            _mode(ref.default_mode, None),
            f"{path}.configMap",
            f"ConfigMap {ref.name!r}",
        )
    elif volume.secret is not None:
        sref = volume.secret
        secret = ctx.secrets.get(sref.secret_name)
        files = _keyed_files(
            _secret_data(secret) if secret else None,
            sref.items,
            bool(sref.optional),
            _mode(sref.default_mode, None),
            f"{path}.secret",
            f"Secret {sref.secret_name!r}",
        )
    elif volume.downward_api is not None:
        files = _downward_files(
            ctx,
            volume.downward_api.items,
            _mode(volume.downward_api.default_mode, None),
            f"{path}.downwardAPI",
            sent,
        )
    else:
        files = _projected_files(ctx, path, volume, sent)
    seen: set[str] = set()
    for f in files:
        if f.path in seen:
            raise PodTranslationError(path, f"two files at the same path {f.path!r}")
        seen.add(f.path)
    return tuple(files)


def _printf_format(data: bytes) -> str:
    """``data`` as a single-quoted ``printf`` format that writes exactly these bytes: printable
    ASCII as itself, ``%`` and ``\\`` escaped, everything else (quotes, newlines, binary, a
    leading ``-``) as a three-digit octal escape, which every POSIX ``printf`` understands."""
    out = []
    for n, byte in enumerate(data):
        if n == 0 and byte == 0x2D:  # a leading "-" would read as an option
            out.append("\\055")
        elif byte == 0x25:
            out.append("%%")
        elif byte == 0x5C:
            out.append("\\\\")
        elif 0x20 <= byte < 0x7F and byte != 0x27:
            out.append(chr(byte))
        else:
            out.append(f"\\{byte:03o}")
    return "'" + "".join(out) + "'"


class _Script:
    """A container's provision script: it writes the files of its file volumes and waits for
    the init container before it to complete. Runs before the container's command."""

    def __init__(self, container: str, pod: k8s.Pod) -> None:
        meta = pod.metadata
        where = f"{meta.namespace}/{meta.name}"  # quoted below: a name must not end the comment
        self.lines = [
            f"# dmsgw: set-up of container {container!r} of pod {where!r}",
            "set -e",
            "umask 022",
        ]
        self.empty = True

    def write_files(self, mount: str, files: Sequence[_File]) -> None:
        directories = sorted({str(PurePosixPath(mount, f.path).parent) for f in files} | {mount})
        self.lines += [f"mkdir -p {shlex.quote(d)}" for d in directories]
        for f in files:
            target = shlex.quote(str(PurePosixPath(mount, f.path)))
            chunks = [f.data[i : i + _PRINTF_CHUNK] for i in range(0, len(f.data), _PRINTF_CHUNK)]
            for n, chunk in enumerate(chunks or [b""]):
                self.lines.append(
                    f"printf {_printf_format(chunk)} {'>' if n == 0 else '>>'} {target}"
                )
            self.lines.append(f"chmod {f.mode:o} {target}")
        self.empty = False

    def wait_for(self, marker: str, container: str) -> None:
        """Until ``container`` has completed; an init container that failed (this one or an
        earlier one) fails this set-up, so that the deployment fails instead of waiting."""
        failed = shlex.quote(INIT_FAILED)
        self.lines += [
            f"# wait for init container {container!r} to complete",
            f"while [ ! -e {shlex.quote(marker)} ]; do",
            f"  if [ -e {failed} ]; then",
            f'    echo "dmsgw: init container $(cat {failed}) failed" >&2',
            "    exit 1",
            "  fi",
            "  sleep 1",
            "done",
        ]
        self.empty = False

    def render(self) -> bytes:
        return _utf8("\n".join(self.lines) + "\n")


def _marker(name: str) -> str:
    return f"{CONTROL_MOUNT}/{name}.done"


def _overlaps(a: str, b: str) -> bool:
    """Whether one of two absolute paths is the other or inside it."""
    return a == b or a.startswith(b.rstrip("/") + "/") or b.startswith(a.rstrip("/") + "/")


def _volumes(ctx: _Pod, c: _Container, script: _Script) -> tuple[VolumeConfig, ...]:
    """The container's mounts as DMS volumes (files written by ``script``)."""
    configs: list[VolumeConfig] = []
    destinations: dict[str, str] = {}
    if ctx.init_names:
        configs.append(
            VolumeConfig(
                type="local",
                name="dmsgw-control",
                src=f"dmsgw.{ctx.uid}.ctl.{ctx.options.generation}",
                mount_destination=CONTROL_MOUNT,
            )
        )
    for j, mount in enumerate(c.spec.volume_mounts):
        path = f"{c.path}.volumeMounts[{j}]"
        _check_extras(mount, path, _MOUNT_IGNORED)
        if mount.sub_path:
            raise PodTranslationError(f"{path}.subPath", "not supported: mount the whole volume")
        entry = ctx.volumes.get(mount.name)
        if entry is None:
            raise PodTranslationError(f"{path}.name", f"no volume {mount.name!r} in spec.volumes")
        target = str(PurePosixPath(mount.mount_path))
        if not mount.mount_path.startswith("/") or ".." in PurePosixPath(target).parts:
            raise PodTranslationError(f"{path}.mountPath", "must be an absolute path without '..'")
        if target in destinations:
            raise PodTranslationError(
                f"{path}.mountPath", f"{target!r} is also {destinations[target]}"
            )
        if ctx.init_names and _overlaps(target, CONTROL_MOUNT):
            raise PodTranslationError(
                f"{path}.mountPath",
                f"{target!r} overlaps the pod's control volume at {CONTROL_MOUNT}",
            )
        destinations[target] = f"volumeMounts[{j}]"
        volume = entry[1]
        if volume.source_kind == "emptyDir":
            configs.append(
                VolumeConfig(
                    type="local",
                    name=volume.name,
                    src=f"dmsgw.{ctx.uid}.empty.{volume.name}",
                    mount_destination=target,
                    read_only=mount.read_only,
                )
            )
            continue
        script.write_files(target, ctx.files(volume.name))
        configs.append(
            VolumeConfig(
                type="local",
                name=volume.name,
                src=f"dmsgw.{ctx.uid}.files.{c.spec.name}.{volume.name}",
                mount_destination=target,
                read_only=True,
            )
        )
    return tuple(configs)


# --- probes ----------------------------------------------------------------------------------

_PROBE_KINDS = (
    ("liveness", "liveness_probe"),
    ("readiness", "readiness_probe"),
    ("startup", "startup_probe"),
)


def _port(c: _Container, port: int | str, path: str) -> int:
    if isinstance(port, int):
        if not 0 < port <= 65535:
            raise PodTranslationError(path, f"{port} is not a port number")
        return port
    for p in c.spec.ports:
        if p.name == port:
            return p.container_port
    raise PodTranslationError(path, f"the container has no port named {port!r}")


def _probe_check(c: _Container, probe: k8s.Probe, path: str) -> tuple[HealthCheckManifest, str]:
    """The DMS health check running the probe's handler, and a short description of it."""
    _check_extras(probe, path)
    handlers = [h for h in (probe.exec, probe.http_get, probe.tcp_socket) if h is not None]
    if len(handlers) != 1:
        raise PodTranslationError(path, "a probe needs exactly one of exec, httpGet, tcpSocket")
    interval = probe.period_seconds * 1_000_000_000
    if probe.exec is not None:
        if not probe.exec.command:
            raise PodTranslationError(f"{path}.exec.command", "required")
        return HealthCheckManifest(
            type="command", exec=tuple(probe.exec.command), interval=interval
        ), "exec"
    if probe.http_get is not None:
        get = probe.http_get
        _check_extras(get, f"{path}.httpGet")
        if get.http_headers:
            raise PodTranslationError(
                f"{path}.httpGet.httpHeaders", "not supported by DMS health checks"
            )
        port = _port(c, get.port, f"{path}.httpGet.port")
        target = get.path if get.path.startswith("/") else "/" + get.path
        endpoint = f"{get.scheme.lower()}://{get.host or '127.0.0.1'}:{port}{target}"
        return HealthCheckManifest(type="http", endpoint=endpoint, interval=interval), "httpGet"
    assert probe.tcp_socket is not None
    tcp = probe.tcp_socket
    _check_extras(tcp, f"{path}.tcpSocket")
    port = _port(c, tcp.port, f"{path}.tcpSocket.port")
    argv = ("nc", "-z", tcp.host or "127.0.0.1", str(port))
    return HealthCheckManifest(type="command", exec=argv, interval=interval), "tcpSocket"


def _probes(c: _Container) -> tuple[HealthCheckManifest, str]:
    """The DMS health check (liveness first: the DMS restarts an allocation whose check keeps
    failing, which is what Kubernetes does for liveness) and the metadata record of every probe
    (``""`` when there is none)."""
    checks: list[tuple[str, HealthCheckManifest]] = []
    record: dict[str, Any] = {}
    for kind, attr in _PROBE_KINDS:
        probe = getattr(c.spec, attr)
        if probe is None:
            continue
        check, handler = _probe_check(c, probe, f"{c.path}.{kind}Probe")
        checks.append((kind, check))
        record[kind] = {
            "handler": handler,
            "initialDelaySeconds": probe.initial_delay_seconds,
            "periodSeconds": probe.period_seconds,
            "timeoutSeconds": probe.timeout_seconds,
            "successThreshold": probe.success_threshold,
            "failureThreshold": probe.failure_threshold,
        }
    if not checks:
        return HealthCheckManifest(), ""
    record["check"] = checks[0][0]
    return checks[0][1], json.dumps(record, sort_keys=True, separators=(",", ":"))


# --- ports -----------------------------------------------------------------------------------


def _ports(c: _Container, used: dict[int, str]) -> list[PortConfig]:
    """Ports with a ``hostPort`` are published on the peer; the others are informational in
    Kubernetes too (reachable on the ensemble's private network)."""
    published = []
    for i, port in enumerate(c.spec.ports):
        path = f"{c.path}.ports[{i}]"
        _check_extras(port, path)
        if not port.host_port:
            continue
        if port.protocol != "TCP":
            raise PodTranslationError(
                f"{path}.protocol", f"{port.protocol} ports cannot be published"
            )
        if port.host_ip:
            raise PodTranslationError(f"{path}.hostIP", "not supported: the DMS picks the address")
        if port.host_port < 1025:
            raise PodTranslationError(f"{path}.hostPort", "must be within 1025-65535 on a DMS peer")
        if port.host_port in used:
            raise PodTranslationError(
                f"{path}.hostPort", f"{port.host_port} is also {used[port.host_port]}"
            )
        used[port.host_port] = f"{path}.hostPort"
        published.append(
            PortConfig(public=port.host_port, private=port.container_port, allocation=c.spec.name)
        )
    return published


# --- allocations -----------------------------------------------------------------------------


def _policy(ctx: _Pod, c: _Container) -> tuple[str, str]:
    """Allocation type and failure recovery for the pod's ``restartPolicy``: the DMS restarts a
    failed allocation in place (``one_for_one``) unless the policy is ``Never``; only main
    containers under ``Always`` are services (init containers always run to completion)."""
    policy = ctx.pod.spec.restart_policy
    recovery = (
        AllocationFailureRecovery.STAY_DOWN
        if policy == "Never"
        else AllocationFailureRecovery.ONE_FOR_ONE
    )
    kind = (
        AllocationType.SERVICE
        if policy == "Always" and c.init_index is None
        else AllocationType.TASK
    )
    return kind.value, recovery.value


def _execution(ctx: _Pod, c: _Container, env: Mapping[str, str], hooks: _Hooks) -> SpecConfig:
    spec = c.spec
    command = [_expand(part, env) for part in spec.command]
    args = [_expand(part, env) for part in spec.args]
    params: dict[str, Any] = {"image": spec.image}
    needs_wrapper = c.init_index is not None or hooks != _Hooks()
    if needs_wrapper and not spec.command:
        raise PodTranslationError(
            f"{c.path}.command",
            "required: the gateway wraps the command of an init container or of a container "
            "with lifecycle hooks, and cannot wrap the image's own entrypoint",
        )
    if needs_wrapper and spec.name in _unwrapped(ctx.pod):
        raise PodTranslationError(
            f"metadata.annotations[{json.dumps(UNWRAPPED_ANNOTATION)}]",
            f"{spec.name!r} cannot run unwrapped: the gateway runs an init container's or a "
            "lifecycle hook's ordering through its wrapper",
        )
    if is_wrapped(ctx.pod, spec):
        marker = _marker(spec.name) if c.init_index is not None else ""
        params["entrypoint"] = ["/bin/sh", "-c", _wrapper(c, hooks, marker), _WRAPPER_NAME]
        params["cmd"] = command + args
    else:
        if command:
            params["entrypoint"] = command
        if args:
            params["cmd"] = args
    if env:
        params["environment"] = [f"{name}={value}" for name, value in env.items()]
    if spec.working_dir:
        if not spec.working_dir.startswith("/"):
            raise PodTranslationError(f"{c.path}.workingDir", "must be an absolute path")
        params["working_directory"] = spec.working_dir
    return SpecConfig(type=ctx.options.executor, params=params)


def _previous_init(ctx: _Pod, c: _Container) -> str:
    """The init container that must complete before ``c`` starts (``""``: none)."""
    if c.init_index is None:
        return ctx.init_names[-1] if ctx.init_names else ""
    return ctx.init_names[c.init_index - 1] if c.init_index > 0 else ""


def _allocation(
    ctx: _Pod, c: _Container, scripts: dict[str, bytes]
) -> tuple[AllocationConfig, str]:
    """The allocation running container ``c``, and its probe record for the metadata."""
    _check_extras(c.spec, c.path, _CONTAINER_IGNORED)
    _check_security_context(c.spec, c.path)
    env = _environment(ctx, c)
    execution = _execution(ctx, c, env, _hooks(c))
    script = _Script(c.spec.name, ctx.pod)
    volumes = _volumes(ctx, c, script)
    previous = _previous_init(ctx, c)
    if previous:
        script.wait_for(_marker(previous), previous)
    provision: tuple[str, ...] | None = None
    if not script.empty:
        name = f"setup-{c.spec.name}"
        scripts[name] = script.render()
        provision = (name,)
    kind, recovery = _policy(ctx, c)
    check, record = _probes(c)
    allocation = AllocationConfig(
        executor=ctx.options.executor,
        type=kind,
        resources=_resources(ctx.amounts[c.spec.name]),
        execution=execution,
        dns_name=c.spec.name,
        provision=provision,
        healthcheck=check,
        volume=volumes or None,
        failure_recovery=recovery,
        depends_on=(previous,) if previous else None,
    )
    return allocation, record


def _metadata(
    pod: k8s.Pod, options: TranslationOptions, probes: Mapping[str, str]
) -> dict[str, str]:
    meta = pod.metadata
    spec = pod.spec
    metadata = {
        METADATA_POD_UID: meta.uid,
        METADATA_POD_NAMESPACE: meta.namespace,
        METADATA_POD_NAME: meta.name,
        METADATA_RESTART_POLICY: spec.restart_policy,
        METADATA_GENERATION: str(options.generation),
    }
    if spec.termination_grace_period_seconds is not None:
        metadata[METADATA_GRACE_PERIOD] = str(spec.termination_grace_period_seconds)
    if spec.active_deadline_seconds is not None:
        metadata[METADATA_ACTIVE_DEADLINE] = str(spec.active_deadline_seconds)
    for name, record in probes.items():
        if record:
            metadata[METADATA_PROBES_PREFIX + name] = record
    return metadata


def _check_valid(config: EnsembleConfig, paths: Mapping[str, str]) -> None:
    """Whatever the DMS would still object to, named at the container it comes from."""
    for problem in validate_ensemble(config):
        name, _, rest = problem.path.removeprefix("allocations.").partition(".")
        if problem.path.startswith("allocations.") and name in paths:
            where = {
                "execution.params.image": "image",
                "execution.params.working_directory": "workingDir",
            }
            field = where.get(rest)
            if field:
                raise PodTranslationError(f"{paths[name]}.{field}", problem.message)
            raise PodTranslationError(paths[name], f"the DMS refuses it: {problem}")
        raise PodTranslationError("spec", f"the DMS refuses the ensemble: {problem}")


def pod_to_ensemble(
    data: RetrievedPodData, *, options: TranslationOptions | None = None
) -> EnsembleConfig:
    """The ensemble running ``data.pod``; :class:`PodTranslationError` names what cannot run."""
    options = options or TranslationOptions()
    _check_pod(data.pod)
    _check_unwrapped(data.pod)
    ctx = _Pod(data, options)
    peer, excluded = _placement(ctx.pod)
    if ctx.gpu_type is not None and not any(a.gpus for a in ctx.amounts.values()):
        raise PodTranslationError(ctx.gpu_type[1], "the pod requests no GPU of this type")
    scripts: dict[str, bytes] = {}
    allocations: dict[str, AllocationConfig] = {}
    probes: dict[str, str] = {}
    ports: list[PortConfig] = []
    used: dict[int, str] = {}
    for c in ctx.containers:
        allocations[c.spec.name], probes[c.spec.name] = _allocation(ctx, c, scripts)
        ports += _ports(c, used)
    node = NodeConfig(allocations=tuple(allocations), ports=tuple(ports) or None, peer=peer)
    config = EnsembleConfig(
        v1=EnsembleConfigV1(
            allocations=allocations,
            nodes={POD_NODE: node},
            scripts=scripts or None,
            exclude_peers=excluded or None,
            metadata=_metadata(ctx.pod, options, probes),
        )
    )
    _check_valid(config, {c.spec.name: c.path for c in ctx.containers})
    return config
