"""Pods wait for DMS capacity, in order: the gateway's admission queue (decisions 073-075).

Every deployment attempt of a pod waits here before ``deployment/new``, as a job waits in a
Slurm queue: in order of the pod's ``priority`` (higher first), then of its creation, then of
its UID. The pod first in line is admitted when the DMS peers' free resources hold what it asks
(each ensemble node on a peer of its own) and fewer than ``max_deploying`` deployments are under
way; nobody overtakes it (no backfill: a wide pod is never starved by narrow ones behind it).
A pod that no peer could hold even empty (more than any peer offers the network) is set aside
at once, ``Unschedulable``, and does not block the line; it is looked at again when what the
peers offer changes.

What the gateway knows of the peers comes from the ``ResourceActor``'s gathering (cached for a
while); the queue subtracts from it what it admitted itself and the DMS may not count yet (a
hold), until a gathering that began after the deployment ran or ended. A pod's deployment that
ended frees capacity: the next look gathers again. When the peers' resources cannot be learned
at all, pods are admitted by the bound on deployments under way alone (the DMS then judges).

This module is the pure arithmetic of it (the order, :func:`placement`, :func:`shortfall`,
:func:`never_fits`, :func:`refused_for_capacity`);
:class:`~dmsgw.interlink.capacity.admission_queue.AdmissionQueue` is its loop-side keeper.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import NamedTuple

from ...behaviors.ensemble import EnsembleConfig
from ...behaviors.resources import CPU, RAM, Disk, Resources
from ...behaviors.status import AllocationStatus, EnsembleManifest
from ...behaviors.units import format_bytes
from ...gojson import format_float32

WAITING = "waiting for DMS capacity"
"""How the message of a pod waiting for DMS capacity begins."""
WAITING_FOR_CAPACITY = "WaitingForCapacity"
"""The waiting reason of the containers of a pod waiting for DMS capacity."""
UNSCHEDULABLE = "Unschedulable"
"""The waiting reason of the containers of a pod that no DMS peer could ever hold."""

Demand = tuple[Resources, ...]
"""What a pod's ensemble asks of the peers: one entry per ensemble node (a peer each)."""
Order = tuple[int, int, str]
"""A pod's place in line: ``(-priority, created_ns, uid)``, smallest first."""


DEFAULT_MAX_DEPLOYING = 32
"""Deployments under way at once by default (``dmsgw serve --max-deploying``)."""


@dataclasses.dataclass(frozen=True)
class AdmissionPolicy:
    """How many deployments may be under way at once (admitted, not yet seen running or
    ended), and how often waiting pods look at the peers again when nothing the gateway did
    freed capacity (others may have)."""

    max_deploying: int = DEFAULT_MAX_DEPLOYING
    recheck_s: float = 5.0


class Wait(NamedTuple):
    """Why a pod waits: its containers' waiting reason and message."""

    reason: str
    message: str


_REFUSALS = (
    "failed to commit resources",
    "insufficient resources",
    "failed to bid",
    "not enough time for deployment",
)
_UNSTARTED = ("", AllocationStatus.PENDING.value)
_NOT_PLACED = ("failed to create deployment", "deploying ensemble: failed to create deployment")


def refused_for_capacity(error: str, manifest: EnsembleManifest | None = None) -> bool:
    """Whether a deployment that failed before it ran found no room on the DMS peers: its
    ``error`` says so (no bid came and the DMS gave up at its deadline, ``ErrDeploymentFailed``
    alone; a commit found the resources taken), or, where the DMS gives no reason (its
    ``deployment/status`` has none for a failed deployment), its ``manifest`` shows that no
    allocation ever started. A failure to start an allocation is the pod's own."""
    text = error.strip().lower()
    if "provisioning" in text or "error starting allocation" in text:
        return False
    if text:
        return text in _NOT_PLACED or any(words in text for words in _REFUSALS)
    allocations = (manifest.allocations or {}).values() if manifest is not None else None
    return allocations is not None and all(a.status in _UNSTARTED for a in allocations)


def order_of(priority: int | None, created_ns: int, uid: str) -> Order:
    return (-(priority or 0), created_ns, uid)


def demand_of(ensemble: EnsembleConfig) -> Demand:
    """The resources of each ensemble node: the sum of its allocations'."""
    v1 = ensemble.v1
    if v1 is None:
        return ()
    allocations = v1.allocations or {}
    demand = []
    for _, node in sorted((v1.nodes or {}).items()):
        total = Resources()
        for name in node.allocations or ():
            if name in allocations:
                total = total.add(allocations[name].resources)
        demand.append(total)
    return tuple(demand)


def minus_all(free: Resources, wants: Sequence[Resources]) -> Resources:
    """What is left of ``free`` once each of ``wants`` holds its share, as :func:`minus` one
    after another leaves it, but made once: the plain amounts are summed first (a line of
    thousands of admitted pods made as many intermediate objects at each look). Wants with
    GPUs take their cards one by one, as :func:`minus` does."""
    if any(want.gpus for want in wants):
        for want in wants:
            free = minus(free, want)
        return free
    total = Resources(
        cpu=CPU(cores=sum(want.cpu.cores for want in wants)),
        ram=RAM(size=sum(want.ram.size for want in wants)),
        disk=Disk(size=sum(want.disk.size for want in wants)),
    )
    return minus(free, total)


def minus(free: Resources, want: Resources) -> Resources:
    """What is left of ``free`` once ``want`` holds its share (never below zero; each wanted
    GPU takes the smallest free card that satisfies it)."""
    cards = sorted(free.gpus or (), key=lambda g: (g.vram, g.index))
    for card in sorted(want.gpus or (), key=lambda g: g.vram, reverse=True):
        match = next((c for c in cards if Resources(gpus=(c,)).fits(Resources(gpus=(card,)))), None)
        if match is not None:
            cards.remove(match)
    return Resources(
        cpu=dataclasses.replace(free.cpu, cores=max(0.0, free.cpu.cores - want.cpu.cores)),
        ram=RAM(size=max(0, free.ram.size - want.ram.size)),
        disk=Disk(size=max(0, free.disk.size - want.disk.size)),
        gpus=tuple(cards) or None,
    )


def placement(demand: Demand, frees: Sequence[Resources]) -> list[int] | None:
    """A peer (index into ``frees``) for each ensemble node, each node on a peer of its own,
    the largest node first on the first peer it fits; ``None`` when some node fits nowhere."""
    chosen: dict[int, int] = {}
    for node in sorted(range(len(demand)), key=lambda i: -demand[i].cpu.cores):
        peer = next(
            (
                p
                for p, free in enumerate(frees)
                if p not in chosen.values() and free.fits(demand[node])
            ),
            None,
        )
        if peer is None:
            return None
        chosen[node] = peer
    return [chosen[node] for node in range(len(demand))]


def _cores(value: float) -> str:
    text = format_float32(value)
    return f"{text} core" if text == "1" else f"{text} cores"


def shortfall(want: Resources, have: Sequence[Resources], what: str) -> str:
    """Why no single one of ``have`` holds ``want``: each lacking resource with the most any
    one peer has (``what``: ``free`` or ``offered``)."""
    peers = f"{len(have)} peer" + ("" if len(have) == 1 else "s")
    if not have:
        return "no DMS peer reports its resources"
    parts = []
    best_cores = max(h.cpu.cores for h in have)
    if want.cpu.cores > best_cores:
        parts.append(f"{_cores(want.cpu.cores)} requested, {format_float32(best_cores)} {what}")
    for name, wanted, best in (
        ("memory", want.ram.size, max(h.ram.size for h in have)),
        ("disk", want.disk.size, max(h.disk.size for h in have)),
    ):
        if wanted > best:
            parts.append(f"{format_bytes(wanted)} {name} requested, {format_bytes(best)} {what}")
    if want.gpus and not any(Resources(gpus=h.gpus).fits(Resources(gpus=want.gpus)) for h in have):
        most = max(len(h.gpus or ()) for h in have)
        parts.append(f"{len(want.gpus)} matching GPUs requested, {most} GPUs {what}")
    if not parts:
        return f"no single one of {peers} has {want.describe()} {what}"
    return "; ".join(parts) + f" on the best of {peers}"


def never_fits(demand: Demand, offered: Sequence[Resources | None]) -> str:
    """Why no peer could hold ``demand`` even with nothing else running, given what each
    offers the network (``""``: one could, or some peer does not say what it offers)."""
    if not offered or any(o is None for o in offered):
        return ""
    known = [o for o in offered if o is not None]
    if placement(demand, known) is not None:
        return ""
    return f"no DMS peer can ever run it: {shortfall(lacking(demand, known), known, 'offered')}"


def lacking(demand: Demand, have: Sequence[Resources]) -> Resources:
    """The ensemble node of ``demand`` to name when it does not fit: the first that fits none
    of ``have`` by itself, else the largest."""
    alone = [n for n in demand if not any(h.fits(n) for h in have)]
    return alone[0] if alone else max(demand, key=lambda n: n.cpu.cores)


class Waiting(NamedTuple):
    """A waiting pod as the operator sees it: its place in line (1: next), since when, why."""

    position: int
    since_ns: int
    wait: Wait
