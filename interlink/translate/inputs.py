"""What the translation reads besides the pod's fields: its options, and the pod's containers
in the order they run, each with the path that names it in an error."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from types import MappingProxyType

from ...behaviors.resources import GPU
from ..wire import k8s

_MIB = 1 << 20
_GIB = 1 << 30


@dataclasses.dataclass(frozen=True, slots=True)
class TranslationOptions:
    """What the translation needs besides the pod.

    ``gpu_models`` maps a GPU class (``nvidia.rtx.3080.10gb``) to the GPU peers report for it
    (:func:`~dmsgw.interlink.capacity.node_capacity.gpu_catalog`); a pod asking for a class not in
    it is refused. ``pod_ip`` answers ``fieldRef: status.podIP`` (else the pod's own status is
    used). ``generation`` counts earlier deployments of the same pod, so that an init container's
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


@dataclasses.dataclass(frozen=True, slots=True)
class Container:
    """A container of the pod: its path in the pod (``spec.initContainers[0]``) and spec."""

    path: str
    spec: k8s.Container
    init_index: int | None
    """Position among the init containers; ``None`` for a main container."""


def containers(spec: k8s.PodSpec) -> list[Container]:
    """Init containers first, in order, then the main containers."""
    return [
        Container(f"spec.initContainers[{i}]", c, i) for i, c in enumerate(spec.init_containers)
    ] + [Container(f"spec.containers[{i}]", c, None) for i, c in enumerate(spec.containers)]
