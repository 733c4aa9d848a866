"""What a simulated DMS node has and hands out: its machine, onboarded share and allocations.

A :class:`NodeProfile` describes a node's machine (hardware spec), what it offers to the network
(onboarded resources, or none when not onboarded), where it is and which executors it has. The
default devnet is heterogeneous like the seed's peer list: a CPU-only machine, one with
NVIDIA GeForce RTX 3090/3080 cards, one with Tesla P100s.

A :class:`ResourceLedger` keeps the DMS's resource arithmetic: free = onboarded - held, where
an allocation holds its resources from commit until it is released, and holds whole GPUs
(each requested GPU is matched to one free card of the requested vendor, model and VRAM).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence

from ..behaviors.ensemble import Location
from ..behaviors.resources import CPU, GPU, RAM, Disk, ResourceError, Resources

GIB = 1024**3
GHZ = 1_000_000_000.0


@dataclasses.dataclass(frozen=True)
class NodeProfile:
    """A node's machine and offer; ``onboarded`` ``None`` means a node not (yet) onboarded."""

    label: str
    hardware: Resources
    onboarded: Resources | None
    location: Location = dataclasses.field(default_factory=Location)
    executors: tuple[str, ...] = ("docker",)


def _gpus(*cards: tuple[str, int], start: int = 0) -> tuple[GPU, ...]:
    return tuple(
        GPU(
            index=start + i,
            vendor="NVIDIA",
            pci_address=f"0000:{0x17 + i:02x}:00.0",
            model=model,
            vram=vram_gib * GIB,
            uuid=f"GPU-{model.split()[-1].lower()}-{start + i:04d}",
        )
        for i, (model, vram_gib) in enumerate(cards)
    )


def _machine(
    cores: float, ghz: float, ram_gib: int, disk_gib: int, gpus: tuple[GPU, ...] = ()
) -> Resources:
    return Resources(
        cpu=CPU(clock_speed=ghz * GHZ, cores=cores, architecture="x86_64", vendor="GenuineIntel"),
        gpus=gpus or None,
        ram=RAM(size=ram_gib * GIB),
        disk=Disk(size=disk_gib * GIB),
    )


_RTX = _gpus(
    ("NVIDIA GeForce RTX 3090", 24),
    ("NVIDIA GeForce RTX 3090", 24),
    ("NVIDIA GeForce RTX 3080", 10),
    ("NVIDIA GeForce RTX 3080", 10),
    ("NVIDIA GeForce RTX 3080", 10),
    ("NVIDIA GeForce RTX 3080", 10),
)
_P100 = _gpus(
    ("Tesla P100-PCIE-16GB", 16), ("Tesla P100-PCIE-16GB", 16), ("Tesla P100-PCIE-16GB", 16)
)

DEFAULT_PROFILES: tuple[NodeProfile, ...] = (
    NodeProfile(
        "cpu-only",
        _machine(8, 3.2, 32, 500),
        _machine(6, 3.2, 24, 400),
        Location(continent="EU", country="DE", city="Berlin"),
    ),
    NodeProfile(
        "rtx-3090/3080",
        _machine(32, 3.5, 128, 2000, _RTX),
        _machine(24, 3.5, 96, 1500, _RTX),
        Location(continent="NA", country="US", city="Austin"),
    ),
    NodeProfile(
        "tesla-p100",
        _machine(16, 2.6, 64, 1000, _P100),
        _machine(12, 2.6, 48, 800, _P100),
        Location(continent="AS", country="SG", city="Singapore"),
    ),
)
"""node0 CPU-only, node1 six RTX cards (2x 3090 24 GiB, 4x 3080 10 GiB), node2 three Tesla
P100 16 GiB; further nodes repeat the cycle."""


def default_profiles(count: int) -> tuple[NodeProfile, ...]:
    return tuple(DEFAULT_PROFILES[i % len(DEFAULT_PROFILES)] for i in range(count))


def _without_gpus(r: Resources) -> Resources:
    return dataclasses.replace(r, gpus=None)


def total(resources: Iterable[Resources]) -> Resources:
    """The sum of ``resources`` (GPUs: all the cards, by index)."""
    total = Resources()
    cards: list[GPU] = []
    for r in resources:
        total = total.add(_without_gpus(r))
        cards.extend(r.gpus or ())
    return dataclasses.replace(total, gpus=tuple(sorted(cards, key=lambda g: g.index)) or None)


def _card_fits(card: GPU, want: GPU) -> bool:
    return Resources(gpus=(card,)).fits(Resources(gpus=(want,)))


def assign_gpus(free: Sequence[GPU], wanted: Sequence[GPU]) -> tuple[GPU, ...] | None:
    """One free card per requested GPU (largest request first, smallest card that fits), or
    ``None`` when some request finds none."""
    pool = sorted(free, key=lambda g: (g.vram, g.index))
    chosen: list[GPU] = []
    for want in sorted(wanted, key=lambda g: g.vram, reverse=True):
        card = next((g for g in pool if _card_fits(g, want)), None)
        if card is None:
            return None
        pool.remove(card)
        chosen.append(card)
    return tuple(sorted(chosen, key=lambda g: g.index))


class ResourceLedger:
    """One node's resources: machine, onboarded share, and what each allocation holds."""

    def __init__(self, hardware: Resources, onboarded: Resources | None) -> None:
        self.hardware = hardware
        self.onboarded: Resources | None = None
        self._held: dict[str, Resources] = {}
        if onboarded is not None:
            self.onboard(onboarded)

    @property
    def is_onboarded(self) -> bool:
        return self.onboarded is not None

    def onboard(self, offer: Resources) -> Resources:
        """Offer ``offer`` (within the machine, not below what is held; GPUs named by index
        stand for the machine's cards); returns what is now onboarded."""
        cards = {g.index: g for g in self.hardware.gpus or ()}
        missing = _without_gpus(self.hardware).shortfall(_without_gpus(offer))
        unknown = [g.index for g in offer.gpus or () if g.index not in cards]
        if missing or unknown:
            reasons = [*missing, *(f"gpus: the machine has no GPU {i}" for i in unknown)]
            raise ResourceError("onboarded resources exceed the machine: " + "; ".join(reasons))
        offered = {g.index for g in offer.gpus or ()}
        held = self.allocated()
        below = _without_gpus(offer).shortfall(_without_gpus(held))
        taken = [g.index for g in held.gpus or () if g.index not in offered]
        if below or taken:
            reasons = [*below, *(f"gpus: GPU {i} is allocated" for i in taken)]
            raise ResourceError("cannot onboard less than is allocated: " + "; ".join(reasons))
        chosen = tuple(cards[i] for i in sorted(offered))
        self.onboarded = dataclasses.replace(offer, gpus=chosen or None)
        return self.onboarded

    def offboard(self) -> None:
        if self.onboarded is None:
            raise ResourceError("machine is not onboarded")
        if self._held:
            raise ResourceError(f"cannot offboard: {len(self._held)} allocation(s) hold resources")
        self.onboarded = None

    def allocated(self) -> Resources:
        """Everything held, committed or running (GPUs as the cards assigned)."""
        return total(self._held.values())

    def free(self) -> Resources:
        if self.onboarded is None:
            return Resources()
        held = self.allocated()
        rest = _without_gpus(self.onboarded).subtract(_without_gpus(held))
        taken = {g.index for g in held.gpus or ()}
        cards = tuple(g for g in self.onboarded.gpus or () if g.index not in taken)
        return dataclasses.replace(rest, gpus=cards or None)

    def shortfall(self, request: Resources) -> tuple[str, ...]:
        """Why ``request`` cannot be held now; empty when it can."""
        if self.onboarded is None:
            return ("the machine is not onboarded",)
        free = self.free()
        missing = _without_gpus(free).shortfall(_without_gpus(request))
        if request.gpus and assign_gpus(free.gpus or (), request.gpus) is None:
            wanted = len(request.gpus)
            missing += (f"gpus: {wanted} requested, no {wanted} free GPUs match",)
        return missing

    def hold(self, allocation_id: str, request: Resources) -> Resources:
        """Reserve ``request`` for ``allocation_id`` (idempotent); what is held, GPUs assigned."""
        held = self._held.get(allocation_id)
        if held is not None:
            return held
        missing = self.shortfall(request)
        if missing:
            raise ResourceError("insufficient resources: " + "; ".join(missing))
        cards = assign_gpus(self.free().gpus or (), request.gpus or ()) or ()
        held = dataclasses.replace(request, gpus=cards or None)
        self._held[allocation_id] = held
        return held

    def release(self, allocation_id: str) -> bool:
        return self._held.pop(allocation_id, None) is not None

    def holders(self) -> list[str]:
        return sorted(self._held)
