"""Every pod's ``/status`` entry, kept as the JSON that answers interLink's polls.

A pod's entry changes a few times in its life and is read at every poll of that pod, every few
seconds, where all that is needed is its JSON. So the entry is kept as those bytes
(:class:`Shown`), not as the :class:`~dmsgw.interlink.wire.bodies.PodStatus` model it was
made as (many times larger, a large part of a pod's memory: bench/README.md, "Memory per pod"):
``/status`` joins the kept bytes of the pods it is asked for (:meth:`Snapshots.joined`), and
whoever needs the model (a restart decision, the operator's view of one pod, ``/getLogs``)
reads it back from them, far cheaper than making it. The two facts
that reads over every pod need (the pod phase its containers show, and the containers' names)
are kept beside the bytes, so that an operator's scrape of 100,000 pods reads no model.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from ...actors.sharded import ShardedDict
from ..wire.bodies import PodStatus, status_array

__all__ = ["Shown", "Snapshots", "containers_phase"]


def containers_phase(snapshot: PodStatus | None) -> str:
    """The pod phase the kubelet gives the main containers' states (its ``getPhase``, decision
    68): ``""`` (Pending) while one has not started yet; ``Running`` while one runs, or when
    none runs and one that ended is waiting to run again (a crash loop is Running, not
    Pending); ``Succeeded`` or ``Failed`` once every one has terminated for good (all with 0,
    or not); ``""`` before the first snapshot."""
    statuses = snapshot.containers if snapshot is not None else []
    if not statuses:
        return ""
    running = restarting = False
    for s in statuses:
        if s.state.running is not None:
            running = True
        elif s.state.terminated is None:  # waiting: to run again after a run, or to start
            if s.last_state.terminated is None:
                return ""
            restarting = True
    if running or restarting:
        return "Running"
    ended = [s.state.terminated for s in statuses]
    return "Succeeded" if all(t is not None and t.exit_code == 0 for t in ended) else "Failed"


class Shown:
    """One pod's ``/status`` entry: its JSON, and what reads over every pod need of it."""

    __slots__ = ("containers", "phase", "wire")

    def __init__(self, wire: bytes, phase: str, containers: tuple[str, ...]) -> None:
        self.wire = wire
        self.phase = phase
        """:func:`containers_phase` of the entry."""
        self.containers = containers
        """The main containers' names, in the pod's order."""

    @classmethod
    def of(cls, status: PodStatus) -> Shown:
        """The entry ``status`` is sent as (written, not kept on the model: the entry is
        kept instead)."""
        names = tuple(sys.intern(c.name) for c in status.containers)
        return cls(status.to_json(), containers_phase(status), names)

    def status(self) -> PodStatus:
        """The model the entry was written from, read back from its JSON (its times at the
        second, as ``/status`` sends them)."""
        return PodStatus.from_wire(self.wire)

    def to_stored(self) -> list[Any]:
        """How the entry is stored beside its pod's record (:meth:`from_stored` reads it)."""
        return [self.wire, self.phase, list(self.containers)]

    @classmethod
    def from_stored(cls, value: object) -> Shown | None:
        """The entry :meth:`to_stored` wrote, ``None`` for anything else (a garbled one)."""
        if not (isinstance(value, list) and len(value) == 3):
            return None
        wire, phase, names = value
        if type(wire) is not bytes or type(phase) is not str or not isinstance(names, list):
            return None
        if not all(type(name) is str for name in names):
            return None
        return cls(wire, sys.intern(phase), tuple(sys.intern(name) for name in names))


class Snapshots(Mapping[str, PodStatus]):
    """Pod UID -> its published entry. Read as a mapping, an entry is its model (read back
    from its JSON at each lookup); :meth:`shown` and :meth:`joined` read the JSON as kept."""

    def __init__(self) -> None:
        self._shown: ShardedDict[str, Shown] = ShardedDict()

    def publish(self, uid: str, shown: Shown) -> None:
        self._shown[uid] = shown

    def forget(self, uid: str) -> None:
        self._shown.pop(uid, None)

    def shown(self, uid: str) -> Shown | None:
        return self._shown.get(uid)

    def joined(self, uids: Iterable[str]) -> bytes | None:
        """The ``/status`` reply for ``uids``, every one published (``None`` as soon as one
        is not: the caller then answers pod by pod)."""
        wires = []
        for uid in uids:
            shown = self._shown.get(uid)
            if shown is None:
                return None
            wires.append(shown.wire)
        return status_array(wires)

    def __getitem__(self, uid: str) -> PodStatus:
        return self._shown[uid].status()

    def __contains__(self, uid: object) -> bool:
        return uid in self._shown

    def __iter__(self) -> Iterator[str]:
        return iter(self._shown)

    def __len__(self) -> int:
        return len(self._shown)
