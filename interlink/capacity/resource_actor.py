"""``ResourceActor``: what the DMS network can run, as interLink's node capacity.

Asks the local DMS for its peers, then every peer (through the DMS, bounded concurrency, a
timeout each) for its free resources, and keeps the result for a while: interLink pings every
30 s, and the readiness probe asks too, so most answers come from the cache. A peer that does
not answer is left out; when the DMS itself does not answer, the node is tainted. The ping
waits for a new gathering at most :data:`PING_WAIT_S`, then answers from the last one
(decision 141): a network of many slow or unreachable peers takes minutes to gather, and a
ping that outlived the route's deadline would make the node NotReady. Each
gathering also teaches the :class:`GpuCatalog` the GPU classes the peers report, which pod
translation reads. :class:`Capacity` turns the answers into interLink's ping.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeGuard

from ...actors.aio import AsyncActor, AsyncActorRef
from ...behaviors.catalog import PEERS_LIST, PEERS_SELF, RESOURCES_FREE, RESOURCES_ONBOARDED
from ...behaviors.node import Invoke
from ...behaviors.resources import GPU, Resources
from ...clock import NS_PER_SECOND, Clock, system_clock
from ...errors import DmsgwError
from ..wire.bodies import PingResponse, TaintResponse
from .node_capacity import GPU_RESOURCE_PREFIX, consolidate_capacity, gpu_catalog
from .node_taints import DMS_UNREACHABLE, NodeState, has_room, node_taints, ping_status

log = logging.getLogger(__name__)

PEER_CONCURRENCY = 32
"""Peers asked for their free resources at once: enough for a cold ping of 1,000 peers within
its target where 16 were not (bench/README.md, "The ping"); it is half of what the DMS client
lets through at once (64), so the pods' own calls keep the other half while a ping gathers."""


PING_WAIT_S = 5.0
"""How long a ping waits for a gathering under way before it answers from the last one: well
within the route's deadline (30 s) and interLink's ping period (30 s)."""

OFFERED_TTL_S = 300.0
"""How long what a peer offers the network (``resources/onboarded``) is taken as known."""


class DMSUnreachableError(DmsgwError):
    """The local DMS did not answer: nothing can be offloaded now."""


@dataclasses.dataclass(frozen=True)
class PeerResources:
    """One reachable peer's free resources, and what it offers the network in all
    (``None``: it did not say), which tells a pod that can never run there from one that
    waits (:mod:`~dmsgw.interlink.capacity.admission`)."""

    peer_id: str
    free: Resources
    onboarded: Resources | None = None


Gathering = tuple[int, list[PeerResources]]
"""The peers' resources and when their gathering began (the clock's ns): anything the DMS
did before then is in them."""


class GpuCatalog:
    """The GPU classes the DMS peers have reported (a class, once seen, stays known while its
    peers come and go), and whether they have been asked at all: before the first answer an
    empty catalog means "not known yet", not "no GPU anywhere"."""

    def __init__(self) -> None:
        self.models: dict[str, GPU] = {}
        self.loaded = False

    def learn(self, peers: Iterable[PeerResources]) -> None:
        self.models.update(gpu_catalog(p.free for p in peers))
        self.loaded = True


class ResourceActor(AsyncActor):
    """Ask it ``await ref.proxy().free_resources()``."""

    def __init__(
        self,
        invoke: Invoke,
        *,
        ttl_s: float = 20.0,
        peer_timeout_s: float = 5.0,
        concurrency: int = PEER_CONCURRENCY,
        ping_wait_s: float = PING_WAIT_S,
        clock: Clock = system_clock,
        catalog: GpuCatalog | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self._invoke = invoke
        self._catalog = catalog
        self._ttl_ns = int(ttl_s * NS_PER_SECOND)
        self._peer_timeout_s = peer_timeout_s
        self._ping_wait_s = ping_wait_s
        self._slots = asyncio.Semaphore(concurrency)
        self._clock = clock
        self._cached: Gathering | None = None
        self._failed: tuple[int, DMSUnreachableError] | None = None
        """The last gathering, when it failed: when it began, and why."""
        self._under_way: tuple[int, asyncio.Task[Gathering]] | None = None
        self._offered: dict[str, tuple[int, Resources]] = {}  # peer -> (asked at, its offer)

    async def free_resources(self) -> list[PeerResources]:
        """The free resources of the local DMS and its reachable peers (cached)."""
        return (await self.gathering())[1]

    async def gathering(self, since_ns: int | None = None) -> Gathering:
        """The peers' resources as last gathered, gathered again when that is older than the
        actor's time to live or did not begin after ``since_ns`` (the admission queue asks for
        one that knows of a deployment that ended)."""
        cached = self._cached
        if self._fresh(cached) and (since_ns is None or cached[0] > since_ns):
            return cached
        return await asyncio.shield(self._gathering_since(since_ns))

    async def at_hand(self, asked_at: float) -> Gathering | None:
        """For the ping asked at ``asked_at`` (the loop's time): the peers' resources as last
        gathered while fresh; else a new gathering if it ends within :data:`PING_WAIT_S` of
        the ask, and if not, the last one's outcome while the new one goes on (``None``: none
        has ended yet). A gathering that failed raises its :class:`DMSUnreachableError`. The
        actor takes one ask at a time: pings asked together share one wait, not one each."""
        if self._fresh(self._cached):
            return self._cached
        under_way = self._gathering_since(None)
        try:  # a ping that waited in the actor's mailbox waits that much less
            async with asyncio.timeout_at(asked_at + self._ping_wait_s):
                return await asyncio.shield(under_way)
        except TimeoutError:
            failed = self._failed
            if failed is not None and (self._cached is None or failed[0] > self._cached[0]):
                raise failed[1] from None
            return self._cached

    def _fresh(self, gathered: Gathering | None) -> TypeGuard[Gathering]:
        return gathered is not None and self._clock() - gathered[0] < self._ttl_ns

    def _gathering_since(self, since_ns: int | None) -> asyncio.Task[Gathering]:
        """The gathering under way, if it began after ``since_ns``; else a new one. A
        gathering runs on whether its askers wait for it or not (a ping gives up waiting)."""
        under_way = self._under_way
        if (
            under_way is not None
            and not under_way[1].done()
            and (since_ns is None or under_way[0] > since_ns)
        ):
            return under_way[1]
        began = self._clock()
        task = asyncio.get_running_loop().create_task(self._gathered(began))
        task.add_done_callback(_retrieved)
        self._under_way = (began, task)
        return task

    async def _gathered(self, began_ns: int) -> Gathering:
        """A gathering that began at ``began_ns``, its outcome kept (a failure too)."""
        try:
            peers = await self._gather()
        except DMSUnreachableError as exc:
            self._failed = (began_ns, exc)
            raise
        self._failed = None
        self._cached = (began_ns, peers)
        if self._catalog is not None:
            self._catalog.learn(peers)
        return self._cached

    async def _gather(self) -> list[PeerResources]:
        try:
            me = await self._invoke(PEERS_SELF, timeout_s=self._peer_timeout_s)
            listing = await self._invoke(PEERS_LIST, timeout_s=self._peer_timeout_s)
        except DmsgwError as exc:
            raise DMSUnreachableError(f"the DMS does not answer: {exc}") from None
        peer_ids: Sequence[str] = [me.id, *(p for p in listing.peers or () if p != me.id)]
        answers = await asyncio.gather(*(self._free_of(p, p == me.id) for p in peer_ids))
        return [a for a in answers if a is not None]

    async def _free_of(self, peer_id: str, local: bool) -> PeerResources | None:
        to = None if local else peer_id
        async with self._slots:
            try:
                reply, offered = await asyncio.gather(
                    self._invoke(RESOURCES_FREE, to=to, timeout_s=self._peer_timeout_s),
                    self._offered_by(peer_id, to),
                )
            except DmsgwError as exc:
                log.info("free resources of %s unknown: %s", peer_id, exc)
                return None
        return PeerResources(peer_id, reply.resources, offered)

    async def _offered_by(self, peer_id: str, to: str | None) -> Resources | None:
        """What the peer offers the network (``None``: it did not say), asked at most once
        per :data:`OFFERED_TTL_S`: it changes only when its owner onboards again, and asking
        with every gathering would double what a gathering costs the DMS."""
        now = self._clock()
        known = self._offered.get(peer_id)
        if known is not None and now - known[0] < OFFERED_TTL_S * NS_PER_SECOND:
            return known[1]
        try:
            reply = await self._invoke(RESOURCES_ONBOARDED, to=to, timeout_s=self._peer_timeout_s)
        except DmsgwError as exc:
            log.info("onboarded resources of %s unknown: %s", peer_id, exc)
            return None
        self._offered[peer_id] = (now, reply.resources)
        return reply.resources


class Capacity:
    """interLink's ping: the node capacity that the peers of a :class:`ResourceActor` offer,
    and the taints that say why the node should get no new pods now
    (:mod:`~dmsgw.interlink.capacity.node_taints`). An accelerator type, once advertised, stays
    advertised (at zero while no peer has it free), so that interLink does not drop it from
    the node. ``grant_expiry`` tells when the gateway's grant runs out (Unix ns, ``None``:
    never)."""

    def __init__(
        self,
        resources: AsyncActorRef[ResourceActor],
        *,
        pods_capacity: int,
        gpu_prefix: str = GPU_RESOURCE_PREFIX,
        clock: Clock = system_clock,
        grant_expiry: Callable[[], int | None] = lambda: None,
    ) -> None:
        self._resources = resources
        self._pods_capacity = pods_capacity
        self._gpu_prefix = gpu_prefix
        self._clock = clock
        self._grant_expiry = grant_expiry
        self._advertised: set[str] = set()
        self._last: tuple[list[PeerResources], PingResponse, bool] | None = None
        self._answer: tuple[PingResponse, list[TaintResponse], str, PingResponse] | None = None
        """The last answer, and the capacity, taints and status it was made of."""
        self._silent_since_ns: int | None = None

    async def ping(self) -> PingResponse:
        """The capacity to advertise and the node's taints. A DMS that does not answer is
        a taint, not a failure: the reply then leaves the capacity out (interLink keeps the
        last it had) and the pods keep their last known status."""
        now = self._clock()
        try:
            peers = await self._at_hand()
        except DMSUnreachableError as exc:
            if self._silent_since_ns is None:
                self._silent_since_ns = now
                log.warning("the node is tainted %s: %s", DMS_UNREACHABLE, exc)
            silent = NodeState(
                now, None, True, self._grant_expiry(), str(exc), self._silent_since_ns
            )
            return PingResponse(status=ping_status(silent), taints=node_taints(silent))
        if self._silent_since_ns is not None:
            log.warning("the DMS answers again: taint %s cleared", DMS_UNREACHABLE)
            self._silent_since_ns = None
        if peers is None:  # the first gathering is still under way: interLink keeps its own
            state = NodeState(now, None, True, self._grant_expiry(), first_gathering=True)
            return PingResponse(status=ping_status(state), taints=node_taints(state))
        capacity, room = self._capacity(peers)
        state = NodeState(now, len(peers), room, self._grant_expiry())
        said = (capacity, node_taints(state), ping_status(state))
        if self._answer is None or self._answer[:3] != said:
            answer = capacity.model_copy(update={"status": said[2], "taints": said[1]})
            self._answer = (*said, answer)
        return self._answer[3]

    def _capacity(self, peers: list[PeerResources]) -> tuple[PingResponse, bool]:
        """The capacity of ``peers``, and whether one has room (:func:`has_room`).
        Consolidating 1,000 peers is a long step of the loop (bench/README.md, "The ping"), so
        both are kept for as long as the actor serves the same gathering (the same list): they
        change only with it."""
        if self._last is not None and self._last[0] is peers:
            return self._last[1], self._last[2]
        reply = consolidate_capacity(
            (p.free for p in peers),
            max_pods=self._pods_capacity,
            advertised=self._advertised,
            gpu_prefix=self._gpu_prefix,
        )
        if reply.resources is not None:
            self._advertised |= {a.resource_type for a in reply.resources.accelerators or ()}
        room = has_room(p.free for p in peers)
        self._last = (peers, reply, room)
        return reply, room

    def silent_since(self) -> int | None:
        """Since when the DMS has not answered the pings (Unix ns; ``None`` while it does)."""
        return self._silent_since_ns

    async def free_resources(self) -> list[PeerResources]:
        """The peers' free resources (cached by the actor); gathering them also loads the GPU
        catalog."""
        peers: list[PeerResources] = await self._resources.proxy().free_resources()
        return peers

    async def _at_hand(self) -> list[PeerResources] | None:
        """The peers' free resources for the ping (see :meth:`ResourceActor.at_hand`)."""
        asked_at = asyncio.get_running_loop().time()
        gathered: Gathering | None = await self._resources.proxy().at_hand(asked_at)
        return None if gathered is None else gathered[1]

    async def gathering(self, since_ns: int | None = None) -> Gathering:
        """The peers' resources and when they were gathered (see
        :meth:`ResourceActor.gathering`)."""
        gathered: Gathering = await self._resources.proxy().gathering(since_ns)
        return gathered

    async def close(self) -> None:
        if self._resources.stop():
            await self._resources.wait_stopped()


def _retrieved(task: asyncio.Task[Gathering]) -> None:
    """A gathering nobody waited for to its end: its failure is kept by the actor, not an
    unretrieved exception."""
    if not task.cancelled():
        task.exception()
