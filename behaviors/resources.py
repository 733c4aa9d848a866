"""``types.Resources``: CPU, GPUs, RAM and disk, in Hz and bytes.

The JSON is that of the newest ``types/resources.go`` and ``types/hardware.go`` (tagged,
snake-case keys; ``cpu.cores`` a ``float32``). The v0.5 DMS had untagged fields
(``CPU``/``Cores``/``Size``); its lower-case keys still decode here as in Go, its
``ClockSpeed``-style keys do not (Go's case folding does not bridge ``clock_speed``).

Besides the wire shape this module holds the arithmetic a simulated DMS needs (free =
onboarded - allocated, does a request fit) and a one-line human description.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import struct
from collections import Counter
from collections.abc import Iterable

from ..errors import DmsgwError
from ..gojson import (
    FLOAT32,
    FLOAT64,
    INT64,
    STRING,
    UINT64,
    GoStruct,
    SliceOf,
    StructOf,
    format_float32,
    go_field,
)
from .units import format_bytes, format_hz

__all__ = [
    "CPU",
    "GPU",
    "RAM",
    "Disk",
    "GPUVendor",
    "ResourceError",
    "Resources",
]


class ResourceError(DmsgwError):
    """Resource arithmetic that has no answer, e.g. taking away more than there is."""


class GPUVendor(enum.StrEnum):
    """``types.GPUVendor``: the vendor names the DMS reports."""

    NVIDIA = "NVIDIA"
    AMD_ATI = "AMD/ATI"
    INTEL = "Intel"
    UNKNOWN = "Unknown"
    NONE = "None"

    @classmethod
    def parse(cls, vendor: str) -> GPUVendor:
        """``types.ParseGPUVendor``: substring match on the upper-cased name."""
        upper = vendor.upper()
        if "NVIDIA" in upper:
            return cls.NVIDIA
        if "AMD" in upper or "ATI" in upper:
            return cls.AMD_ATI
        if "INTEL" in upper:
            return cls.INTEL
        return cls.UNKNOWN


_F32 = struct.Struct("<f")


def _float32(value: float) -> float:
    return float(_F32.unpack(_F32.pack(value))[0])


def _round_cores(value: float) -> float:
    """The DMS's ``round(cores, 2)``: ``math.Round`` (halves away from zero) in float32."""
    scaled = value * 100
    whole = math.trunc(scaled)
    if abs(scaled - whole) >= 0.5:
        whole += 1 if scaled > 0 else -1
    return _float32(whole / 100)


@dataclasses.dataclass(frozen=True, slots=True)
class CPU(GoStruct):
    """Cores (fractional, ``float32``) and clock speed in Hz; the rest is descriptive."""

    GO_NAME = "CPU"
    clock_speed: float = go_field("clock_speed", FLOAT64, omitempty=True, default=0.0)
    cores: float = go_field("cores", FLOAT32, default=0.0)
    model: str = go_field("model", STRING, omitempty=True, default="")
    vendor: str = go_field("vendor", STRING, omitempty=True, default="")
    threads: int = go_field("threads", INT64, omitempty=True, default=0)
    architecture: str = go_field("architecture", STRING, omitempty=True, default="")
    cache_size: int = go_field("cache_size", UINT64, omitempty=True, default=0)


@dataclasses.dataclass(frozen=True, slots=True)
class GPU(GoStruct):
    """One GPU; ``vram`` in bytes. No field is ``omitempty`` in Go."""

    GO_NAME = "GPU"
    index: int = go_field("index", INT64, default=0)
    vendor: str = go_field("vendor", STRING, default="")
    pci_address: str = go_field("pci_address", STRING, default="")
    model: str = go_field("model", STRING, default="")
    vram: int = go_field("vram", UINT64, default=0)
    uuid: str = go_field("uuid", STRING, default="")

    def label(self) -> str:
        """``"NVIDIA RTX 3090"``; the vendor is left out when the model already names it."""
        if not self.vendor or self.model.upper().startswith(self.vendor.upper()):
            return self.model or self.vendor or "GPU"
        return f"{self.vendor} {self.model}".strip()


@dataclasses.dataclass(frozen=True, slots=True)
class RAM(GoStruct):
    """Size in bytes; clock speed in Hz."""

    GO_NAME = "RAM"
    size: int = go_field("size", UINT64, default=0)
    clock_speed: int = go_field("clock_speed", UINT64, omitempty=True, default=0)
    type: str = go_field("type", STRING, omitempty=True, default="")


@dataclasses.dataclass(frozen=True, slots=True)
class Disk(GoStruct):
    """Size in bytes; speeds in bytes per second."""

    GO_NAME = "Disk"
    size: int = go_field("size", UINT64, default=0)
    model: str = go_field("model", STRING, omitempty=True, default="")
    vendor: str = go_field("vendor", STRING, omitempty=True, default="")
    type: str = go_field("type", STRING, omitempty=True, default="")
    interface: str = go_field("interface", STRING, omitempty=True, default="")
    read_speed: int = go_field("read_speed", UINT64, omitempty=True, default=0)
    write_speed: int = go_field("write_speed", UINT64, omitempty=True, default=0)


@dataclasses.dataclass(frozen=True, slots=True)
class Resources(GoStruct):
    """A machine's, an allocation's or a request's resources.

    :meth:`add` and :meth:`subtract` follow the DMS (cores rounded to 1/100 in float32; RAM,
    disk and GPU VRAM in whole bytes, GPUs matched by ``index``) except where the DMS is
    knowingly incomplete: a GPU present only in the right-hand side is appended by
    :meth:`add` (the DMS's own TODO) and is an error for :meth:`subtract` (the DMS ignores it).
    """

    GO_NAME = "Resources"
    cpu: CPU = go_field("cpu", StructOf(CPU), default=CPU())
    gpus: tuple[GPU, ...] | None = go_field(
        "gpus", SliceOf(StructOf(GPU)), omitempty=True, default=None
    )
    ram: RAM = go_field("ram", StructOf(RAM), default=RAM())
    disk: Disk = go_field("disk", StructOf(Disk), default=Disk())

    def add(self, other: Resources) -> Resources:
        """The sum, e.g. the total allocated to several allocations."""
        gpus = {g.index: g for g in self.gpus or ()}
        for g in other.gpus or ():
            mine = gpus.get(g.index)
            gpus[g.index] = (
                g if mine is None else dataclasses.replace(mine, vram=mine.vram + g.vram)
            )
        return dataclasses.replace(
            self,
            cpu=dataclasses.replace(self.cpu, cores=_round_cores(self.cpu.cores + other.cpu.cores)),
            ram=dataclasses.replace(self.ram, size=self.ram.size + other.ram.size),
            disk=dataclasses.replace(self.disk, size=self.disk.size + other.disk.size),
            gpus=tuple(gpus.values()) or self.gpus,
        )

    def subtract(self, other: Resources) -> Resources:
        """What is left, e.g. free = onboarded - allocated; :class:`ResourceError` on underflow."""
        if self.cpu.cores < other.cpu.cores:
            raise ResourceError(
                f"cpu.cores: cannot take {_cores(other.cpu.cores)} from {_cores(self.cpu.cores)}"
            )
        for field, mine, theirs in (
            ("ram.size", self.ram.size, other.ram.size),
            ("disk.size", self.disk.size, other.disk.size),
        ):
            if mine < theirs:
                raise ResourceError(
                    f"{field}: cannot take {format_bytes(theirs)} from {format_bytes(mine)}"
                )
        gpus = {g.index: g for g in self.gpus or ()}
        for g in other.gpus or ():
            mine_gpu = gpus.get(g.index)
            if mine_gpu is None:
                raise ResourceError(f"gpus: there is no GPU with index {g.index} to take from")
            if mine_gpu.vram < g.vram:
                raise ResourceError(
                    f"gpus[index={g.index}].vram: cannot take {format_bytes(g.vram)} "
                    f"from {format_bytes(mine_gpu.vram)}"
                )
            gpus[g.index] = dataclasses.replace(mine_gpu, vram=mine_gpu.vram - g.vram)
        return dataclasses.replace(
            self,
            cpu=dataclasses.replace(self.cpu, cores=_round_cores(self.cpu.cores - other.cpu.cores)),
            ram=dataclasses.replace(self.ram, size=self.ram.size - other.ram.size),
            disk=dataclasses.replace(self.disk, size=self.disk.size - other.disk.size),
            gpus=tuple(gpus.values()) if self.gpus is not None else None,
        )

    def shortfall(self, request: Resources) -> tuple[str, ...]:
        """Why ``request`` does not fit in these (available) resources; empty when it fits.

        Cores, RAM and disk must each suffice; a requested clock speed or architecture must be
        met when both sides state one; each requested GPU needs its own available GPU of the
        requested vendor and model (when given) with at least the requested VRAM. This is
        stricter and more explicit than the DMS's ``Compare`` (which weighs cores times clock).
        """
        missing: list[str] = []
        if request.cpu.cores > self.cpu.cores:
            missing.append(
                f"cpu.cores: {_cores(request.cpu.cores)} requested, "
                f"{_cores(self.cpu.cores)} available"
            )
        if request.cpu.clock_speed and self.cpu.clock_speed < request.cpu.clock_speed:
            missing.append(
                f"cpu.clock_speed: {format_hz(request.cpu.clock_speed)} requested, "
                f"{format_hz(self.cpu.clock_speed)} available"
            )
        if (
            request.cpu.architecture
            and self.cpu.architecture
            and request.cpu.architecture != self.cpu.architecture
        ):
            missing.append(
                f"cpu.architecture: {request.cpu.architecture} requested, "
                f"{self.cpu.architecture} available"
            )
        for field, wanted, have in (
            ("ram.size", request.ram.size, self.ram.size),
            ("disk.size", request.disk.size, self.disk.size),
        ):
            if wanted > have:
                missing.append(
                    f"{field}: {format_bytes(wanted)} requested, {format_bytes(have)} available"
                )
        missing.extend(_gpu_shortfall(request.gpus or (), self.gpus or ()))
        return tuple(missing)

    def fits(self, request: Resources) -> bool:
        """Whether ``request`` fits in these (available) resources; see :meth:`shortfall`."""
        return not self.shortfall(request)

    def describe(self) -> str:
        """``"4 cores @ 3.2 GHz, 16 GiB RAM, 100 GiB disk, 2\u00d7 NVIDIA RTX 3090 24 GiB"``."""
        parts: list[str] = []
        if self.cpu.cores:
            cpu = _cores(self.cpu.cores)
            parts.append(
                f"{cpu} @ {format_hz(self.cpu.clock_speed)}" if self.cpu.clock_speed else cpu
            )
        if self.ram.size:
            parts.append(f"{format_bytes(self.ram.size)} RAM")
        if self.disk.size:
            parts.append(f"{format_bytes(self.disk.size)} disk")
        groups = Counter((g.label(), g.vram) for g in self.gpus or ())
        for (label, vram), count in groups.items():
            size = f" {format_bytes(vram)}" if vram else ""
            parts.append(f"{count}\u00d7 {label}{size}" if count > 1 else f"{label}{size}")
        return ", ".join(parts) or "no resources"

    def __str__(self) -> str:
        return self.describe()


def _cores(cores: float) -> str:
    text = format_float32(cores)
    return f"{text} core" if text == "1" else f"{text} cores"


def _gpu_shortfall(wanted: Iterable[GPU], available: Iterable[GPU]) -> list[str]:
    """Give each requested GPU (largest VRAM first) the smallest free GPU that satisfies it."""
    free = sorted(available, key=lambda g: g.vram)
    missing: list[str] = []
    for want in sorted(wanted, key=lambda g: g.vram, reverse=True):
        match = next((g for g in free if _gpu_satisfies(g, want)), None)
        if match is None:
            missing.append(f"gpus: no free GPU for {want.label()} with {format_bytes(want.vram)}")
        else:
            free.remove(match)
    return missing


def _gpu_satisfies(have: GPU, want: GPU) -> bool:
    if want.vendor and GPUVendor.parse(want.vendor) != GPUVendor.parse(have.vendor):
        return False
    if want.model and want.model.casefold() != have.model.casefold():
        return False
    return have.vram >= want.vram
