"""A container's reservation on a DMS peer: cpu cores, RAM, disk and GPUs.

The limit when there is one, never below the request, else the defaults of
:class:`~.inputs.TranslationOptions` (a container that sets neither still needs some
reservation on a DMS peer). ``ram.size`` is the memory limit the executor enforces. GPUs come
from ``nvidia.com/gpu`` and from ``nunet.gpu.<class>`` resources, whose class is resolved to the
exact vendor and model peers report (``options.gpu_models``).
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping, Sequence
from decimal import ROUND_CEILING, Decimal

from ...behaviors.resources import CPU, GPU, RAM, Disk, GPUVendor, Resources
from ..capacity.node_capacity import NVIDIA_GPU_RESOURCE, parse_gpu_resource_name
from ..wire import k8s
from ..wire.apimachinery import QuantityError, parse_quantity
from .checks import PodTranslationError, check_extras
from .inputs import Container, TranslationOptions

_INT64_MAX = (1 << 63) - 1
_MAX_CORES = Decimal(1 << 24)
MAX_MEMORY_BYTES = 1 << 52
"""4 PiB: the most memory a machine can have today (x86-64 and arm64 address at most 52 bits
of physical memory), so an allocation asking for more can never be placed on any peer."""
_CENTI = Decimal("0.01")

PLAIN_RESOURCES = ("cpu", "memory", "ephemeral-storage")


@dataclasses.dataclass(frozen=True, slots=True)
class Amounts:
    """A container's reservation: what the allocation gets, and what ``resourceFieldRef``
    reports as its limits."""

    cpu: Decimal
    memory: int
    disk: int
    gpus: tuple[GPU, ...]


def quantity(text: str, path: str) -> Decimal:
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
            value = quantity(table[name], f"{path}.resources.{section}[{json.dumps(name)}]")
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


def _memory(c: Container, default: int) -> int:
    size = _bytes(c.spec, "memory", c.path, default)
    if size > MAX_MEMORY_BYTES:
        raise PodTranslationError(
            f"{c.path}.resources",
            f"memory {size} bytes is more than any machine has (at most 4 PiB, 2^52 bytes)",
        )
    return size


def _count(spec: k8s.Container, name: str, path: str) -> int:
    value = _largest(spec, name, path) or Decimal(0)
    if value != value.to_integral_value():
        raise PodTranslationError(f"{path}.resources", f"{name} must be a whole number")
    if value > 1024:
        raise PodTranslationError(f"{path}.resources", f"{name}: more GPUs than any peer has")
    return int(value)


def reservation(
    c: Container, options: TranslationOptions, gpu_type: tuple[str, str] | None, disk_extra: int
) -> Amounts:
    """What container ``c`` gets; ``gpu_type`` is the class the pod requires (with the path
    requiring it), ``disk_extra`` the emptyDir size limits it reserves."""
    resources = c.spec.resources
    check_extras(resources, f"{c.path}.resources")
    for section, table in (("limits", resources.limits), ("requests", resources.requests)):
        for name in table:
            if name in (*PLAIN_RESOURCES, NVIDIA_GPU_RESOURCE) or parse_gpu_resource_name(name):
                continue
            raise PodTranslationError(
                f"{c.path}.resources.{section}[{json.dumps(name)}]", "resource not supported"
            )
    cpu = _largest(c.spec, "cpu", c.path) or Decimal(str(options.default_cpu_cores))
    if cpu > _MAX_CORES:
        raise PodTranslationError(f"{c.path}.resources", "cpu is out of range")
    return Amounts(
        cpu=cpu.quantize(_CENTI, rounding=ROUND_CEILING),
        memory=_memory(c, options.default_memory_bytes),
        disk=_bytes(c.spec, "ephemeral-storage", c.path, options.default_disk_bytes) + disk_extra,
        gpus=_gpus(c, options.gpu_models, gpu_type),
    )


def _gpus(
    c: Container, gpu_models: Mapping[str, GPU], gpu_type: tuple[str, str] | None
) -> tuple[GPU, ...]:
    """The GPUs a container asks for, each as the DMS should match it: ``nvidia.com/gpu`` is any
    NVIDIA GPU (or the pod's required GPU type), ``nunet.gpu.<class>`` the class's GPU."""
    wanted: list[GPU] = []
    names = sorted({*c.spec.resources.limits, *c.spec.resources.requests})
    count = _count(c.spec, NVIDIA_GPU_RESOURCE, c.path)
    if count:
        card = GPU(vendor=GPUVendor.NVIDIA.value)
        if gpu_type is not None:
            if not gpu_type[0].startswith("nvidia."):
                raise PodTranslationError(
                    f"{c.path}.resources",
                    f"{NVIDIA_GPU_RESOURCE} conflicts with the GPU type of {gpu_type[1]}",
                )
            card = _catalog_gpu(gpu_models, gpu_type[0], gpu_type[1])
        wanted += [card] * count
    for name in names:
        cls = parse_gpu_resource_name(name)
        if cls is None:
            continue
        path = f"{c.path}.resources.limits[{json.dumps(name)}]"
        if gpu_type is not None and cls != gpu_type[0]:
            raise PodTranslationError(path, f"conflicts with the GPU type of {gpu_type[1]}")
        wanted += [_catalog_gpu(gpu_models, cls, path)] * _count(c.spec, name, c.path)
    return tuple(dataclasses.replace(card, index=i) for i, card in enumerate(wanted))


def _catalog_gpu(gpu_models: Mapping[str, GPU], cls: str, path: str) -> GPU:
    card = gpu_models.get(cls)
    if card is None:
        known = ", ".join(sorted(gpu_models)) or "none"
        raise PodTranslationError(
            path, f"no reachable DMS peer reports a GPU of type {cls} (known: {known})"
        )
    return GPU(vendor=card.vendor, model=card.model, vram=card.vram)


def dms_resources(amounts: Amounts) -> Resources:
    return Resources(
        cpu=CPU(cores=float(amounts.cpu)),
        gpus=amounts.gpus or None,
        ram=RAM(size=amounts.memory),
        disk=Disk(size=amounts.disk),
    )


def empty_dir_disk(
    containers: Sequence[Container], volumes: Mapping[str, tuple[int, k8s.Volume]]
) -> dict[str, int]:
    """emptyDir size limits, reserved as disk by the first container mounting each volume
    (a DMS volume has no size of its own; the limit is reserved, not enforced)."""
    extra: dict[str, int] = {}
    counted: set[str] = set()
    for c in containers:
        for mount in c.spec.volume_mounts:
            entry = volumes.get(mount.name)
            if entry is None or mount.name in counted or entry[1].empty_dir is None:
                continue
            counted.add(mount.name)
            limit = entry[1].empty_dir.size_limit
            if limit:
                size = quantity(limit, f"spec.volumes[{entry[0]}].emptyDir.sizeLimit")
                extra[c.spec.name] = extra.get(c.spec.name, 0) + math.ceil(max(size, Decimal(0)))
    return extra
