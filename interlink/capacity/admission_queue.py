"""The admission queue: the pods waiting for DMS capacity and the deployments under way, on
the gateway's event loop (the rules are :mod:`~dmsgw.interlink.capacity.admission`'s; decisions
073-075).

Pods wait (:meth:`AdmissionQueue.wait`) in the order of their :data:`Order`; the queue looks
at the line whenever something changed (a pod came, a deployment ran or ended) and every
``recheck_s`` while pods wait, gathering the peers' resources again after capacity was freed.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import heapq
import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence

from ...behaviors.resources import Resources
from ...clock import NS_PER_SECOND, Clock, system_clock
from .admission import (
    UNSCHEDULABLE,
    WAITING,
    WAITING_FOR_CAPACITY,
    AdmissionPolicy,
    Demand,
    Order,
    Wait,
    Waiting,
    lacking,
    minus,
    minus_all,
    never_fits,
    placement,
    shortfall,
)
from .resource_actor import Gathering, PeerResources

__all__ = ["AdmissionPolicy", "AdmissionQueue"]

log = logging.getLogger(__name__)


@dataclasses.dataclass
class _Entry:
    """A pod in line: its place, what it asks, since when, and how it hears why it waits."""

    uid: str
    order: Order
    demand: Demand
    since_ns: int
    tell: Callable[[Wait], None]
    admitted: asyncio.Future[None]
    wait: Wait | None = None

    def say(self, wait: Wait) -> None:
        if wait != self.wait:
            self.wait = wait
            with contextlib.suppress(Exception):  # its pod's actor may have just stopped
                self.tell(wait)


@dataclasses.dataclass
class _Hold:
    """What an admitted pod holds of the peers until a gathering began after it ``settled``
    (its deployment ran or ended: the DMS counts it from then on)."""

    demand: Demand
    peers: tuple[str, ...]
    settled_ns: int | None = None


TOLD_PER_TURN = 32
"""Waiting pods told why they wait between two turns of the loop (:meth:`AdmissionQueue.
_blocked`)."""


class AdmissionQueue:
    """The pods waiting for DMS capacity, and the deployments under way (see the module
    docstring). ``gathering(since_ns)`` is the peers' resources
    (:meth:`~dmsgw.interlink.capacity.resource_actor.Capacity.gathering`)."""

    def __init__(
        self,
        gathering: Callable[[int | None], Awaitable[Gathering]],
        policy: AdmissionPolicy | None = None,
        clock: Clock = system_clock,
    ) -> None:
        self._gathering = gathering
        self.policy = policy or AdmissionPolicy()
        self._clock = clock
        self._waiting: dict[str, _Entry] = {}
        self._line: list[tuple[Order, str]] = []  # a heap; entries gone stay until popped
        self._aside: dict[str, _Entry] = {}  # never fit while what the peers offer stays
        self._holds: dict[str, _Hold] = {}
        self._untold: set[str] = set()  # in line, not yet told why it waits (it may not)
        self._head: str | None = None  # the first in line when last blocked
        self._freed_ns: int | None = None  # a gathering must begin after this
        self._last: list[PeerResources] | None = None
        self._wake = asyncio.Event()
        self._pump: asyncio.Task[None] | None = None
        self._closed = False

    # --- what pods ask --------------------------------------------------------------------

    async def wait(
        self, uid: str, order: Order, demand: Demand, tell: Callable[[Wait], None]
    ) -> None:
        """Wait until the pod ``uid`` may deploy (it then holds its share); ``tell`` hears
        each change of why it waits. Cancelling leaves the line."""
        loop = asyncio.get_running_loop()
        entry = _Entry(uid, order, demand, self._clock(), tell, loop.create_future())
        self._leave(uid)
        never = never_fits(demand, _offered(self._last or ()))
        if never:
            self._aside[uid] = entry
            entry.say(Wait(UNSCHEDULABLE, never))
        else:
            self._waiting[uid] = entry
            self._untold.add(uid)
            heapq.heappush(self._line, (order, uid))
        self._kick()
        try:
            await entry.admitted
        finally:
            if not entry.admitted.done() or entry.admitted.cancelled():
                self._leave(uid)

    def hold(self, uid: str, demand: Demand) -> None:
        """Count the deployment of ``uid`` as under way without waiting (a gateway that
        restarted resumes it; on no peer in particular, so the peers' next gathering is
        what tells where it went)."""
        self._holds.setdefault(uid, _Hold(demand, ()))

    def settled(self, uid: str) -> None:
        """The deployment of ``uid`` runs (or ended): it is no longer under way."""
        hold = self._holds.get(uid)
        if hold is not None and hold.settled_ns is None:
            hold.settled_ns = self._clock()
            self._kick()

    def release(self, uid: str) -> None:
        """The pod ``uid`` holds nothing any more (its deployment ended, or it was deleted):
        the next look at the peers gathers their resources again."""
        self._leave(uid)
        self._holds.pop(uid, None)
        self._freed_ns = self._clock()
        self._kick()

    # --- what the operator sees -----------------------------------------------------------

    def waiting(self) -> dict[str, Waiting]:
        """Every waiting pod by UID, with its place in line (those set aside last)."""
        ordered = sorted(self._waiting.values(), key=lambda e: e.order)
        ordered += sorted(self._aside.values(), key=lambda e: e.order)
        none = Wait(WAITING_FOR_CAPACITY, WAITING)
        return {e.uid: Waiting(i + 1, e.since_ns, e.wait or none) for i, e in enumerate(ordered)}

    def __len__(self) -> int:
        return len(self._waiting) + len(self._aside)

    def oldest_wait_s(self) -> float:
        """How long the pod waiting longest has waited (0 with none waiting)."""
        since = [e.since_ns for e in (*self._waiting.values(), *self._aside.values())]
        return max(0.0, (self._clock() - min(since)) / NS_PER_SECOND) if since else 0.0

    def deploying(self) -> int:
        """The deployments under way (admitted, not yet running or ended)."""
        return sum(1 for h in self._holds.values() if h.settled_ns is None)

    # --- the loop side --------------------------------------------------------------------

    def _leave(self, uid: str) -> None:
        self._untold.discard(uid)
        self._waiting.pop(uid, None)
        self._aside.pop(uid, None)

    def _kick(self) -> None:
        self._wake.set()
        if self._closed:
            return
        if self._pump is None or self._pump.done():
            self._pump = asyncio.get_running_loop().create_task(self._run())

    async def close(self) -> None:
        self._closed = True
        pump, self._pump = self._pump, None
        if pump is not None:
            pump.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await pump

    async def _run(self) -> None:
        """Look at the line whenever something changed, and every ``recheck_s`` while pods
        wait (capacity freed by others shows only in a new gathering)."""
        while self._waiting or self._aside or self._wake.is_set():
            if not self._wake.is_set():
                try:
                    async with asyncio.timeout(self.policy.recheck_s):
                        await self._wake.wait()
                except TimeoutError:
                    self._freed_ns = self._clock()
            self._wake.clear()
            try:
                await self._admit()
            except Exception:  # a bug must not stop every pod's admission for good
                log.exception("the admission queue failed a look at the peers")

    async def _admit(self) -> None:
        """Admit from the head of the line what fits, up to the bound on deployments."""
        slots = self.policy.max_deploying - self.deploying()
        if not self._waiting and not self._aside:
            return
        peers = await self._peers() if slots > 0 or self._aside else self._last
        self._reconsider(peers)
        frees = self._frees(peers) if peers is not None else None
        while self._line:
            order, uid = self._line[0]
            entry = self._waiting.get(uid)
            if entry is None or entry.order != order:
                heapq.heappop(self._line)
                continue
            if peers is not None and (never := never_fits(entry.demand, _offered(peers))):
                heapq.heappop(self._line)
                del self._waiting[uid]
                self._untold.discard(uid)
                self._aside[uid] = entry
                entry.say(Wait(UNSCHEDULABLE, never))
                continue
            if slots <= 0:
                under_way = self.deploying()
                limit = self.policy.max_deploying
                why = f"{under_way} deployments under way (at most {limit} at once)"
                await self._blocked(entry, why)
                return
            chosen: list[int] | None = []
            if frees is not None and peers is not None:
                chosen = placement(entry.demand, frees)
                if chosen is None:
                    await self._blocked(
                        entry, shortfall(lacking(entry.demand, frees), frees, "free")
                    )
                    return
                for node, peer in zip(entry.demand, chosen, strict=True):
                    frees[peer] = minus(frees[peer], node)
            heapq.heappop(self._line)
            del self._waiting[uid]
            self._untold.discard(uid)
            ids = tuple(peers[p].peer_id for p in chosen) if peers is not None and chosen else ()
            self._holds[uid] = _Hold(entry.demand, ids)
            slots -= 1
            entry.admitted.set_result(None)

    async def _blocked(self, head: _Entry, why: str) -> None:
        """The first in line waits (``why``), and so does everyone behind it: those not told
        yet hear so once (or, when no peer could ever hold them, are set aside), not at every
        look: a line of 10,000 pods would publish 10,000 statuses a look. They are told
        :data:`TOLD_PER_TURN` a turn of the loop, since each pod publishes its status: a burst
        of thousands told in one callback would hold the loop as long as they all take
        (bench/README.md, "Steps per turn of the loop")."""
        head.say(Wait(WAITING_FOR_CAPACITY, f"{WAITING}: {why}"))
        self._untold.discard(head.uid)
        if self._head not in (None, head.uid):  # overtaken (a higher priority came): told anew
            self._untold.add(self._head)
        self._head = head.uid
        untold, self._untold = self._untold, set()
        for count, uid in enumerate(untold, 1):
            self._tell_waiting(uid)
            if count % TOLD_PER_TURN == 0:
                await asyncio.sleep(0)

    def _tell_waiting(self, uid: str) -> None:
        """Tell a pod behind the first in line why it waits, or set it aside if no peer could
        ever hold it (as far as the last gathering tells)."""
        entry = self._waiting.get(uid)
        if entry is None:  # admitted or gone meanwhile
            return
        offered = _offered(self._last) if self._last is not None else []
        if offered and (never := never_fits(entry.demand, offered)):
            del self._waiting[uid]  # its place in the heap is skipped when reached
            self._aside[uid] = entry
            entry.say(Wait(UNSCHEDULABLE, never))
        else:
            entry.say(Wait(WAITING_FOR_CAPACITY, f"{WAITING}: earlier pods go first"))

    async def _peers(self) -> list[PeerResources] | None:
        """The peers' resources, gathered after the last capacity freed; ``None``: unknown."""
        try:
            taken_ns, peers = await self._gathering(self._freed_ns)
        except Exception as exc:  # the DMS or its stand-in could not say: admit by the bound
            log.info("free resources unknown, admitting by the bound alone: %s", exc)
            return None
        for uid, hold in list(self._holds.items()):
            if hold.settled_ns is not None and hold.settled_ns < taken_ns:
                del self._holds[uid]  # the gathering counts it
        self._last = peers if peers else None
        return self._last

    def _frees(self, peers: Sequence[PeerResources]) -> list[Resources]:
        """The peers' free resources less what the queue admitted and they may not count."""
        index = {p.peer_id: i for i, p in enumerate(peers)}
        held: dict[int, list[Resources]] = collections.defaultdict(list)
        for hold in self._holds.values():
            for node, peer in zip(hold.demand, hold.peers, strict=False):
                if peer in index:
                    held[index[peer]].append(node)
        return [minus_all(p.free, held[i]) if i in held else p.free for i, p in enumerate(peers)]

    def _reconsider(self, peers: Iterable[PeerResources] | None) -> None:
        """Pods set aside go back in line when some peer could now hold them."""
        known = list(peers or ())
        for uid, entry in list(self._aside.items()):
            if known and not never_fits(entry.demand, _offered(known)):
                del self._aside[uid]
                self._waiting[uid] = entry
                heapq.heappush(self._line, (entry.order, uid))


def _offered(peers: Iterable[PeerResources]) -> list[Resources | None]:
    """What each peer offers the network (``None``: it did not say)."""
    return [p.onboarded for p in peers]
