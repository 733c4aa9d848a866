"""The ping waits for a gathering of the peers' free resources only so long (decision 141): a
network of many slow or unreachable peers takes minutes to gather, and a ping that outlived
the route's deadline would make the virtual node NotReady, and its pods evicted. The ping then
answers from the last gathering while the new one goes on; before any has ended, with no
capacity (interLink keeps its own) and no taint.

Over the in-memory DMS of :mod:`tests.support.gateway_fakes`, the peers held back by an event
the test sets; an injected clock for the cache's time to live.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from dmsgw.behaviors.catalog import Behavior
from dmsgw.behaviors.resources import CPU, RAM, Disk, Resources
from dmsgw.clock import NS_PER_SECOND, FixedClock
from dmsgw.interlink.capacity.node_taints import DMS_UNREACHABLE
from dmsgw.interlink.capacity.resource_actor import Capacity, ResourceActor
from dmsgw.transport.rest import TransportError
from tests.support.gateway_fakes import FakeDMS, until

FOUR = Resources(cpu=CPU(cores=4.0), ram=RAM(size=8 << 30), disk=Disk(size=64 << 30))
TWO = Resources(cpu=CPU(cores=2.0), ram=RAM(size=8 << 30), disk=Disk(size=64 << 30))


class SlowPeersDMS(FakeDMS):
    """The fake DMS whose peers answer ``resources/free`` only once ``answer`` is set (a
    network of slow peers), or, with ``down``, whose peer list fails once released."""

    down = False

    def __init__(self, logs: Path) -> None:
        super().__init__(logs, free=FOUR)
        self.answer = asyncio.Event()
        self.refused = 0
        self.lists = 0  # peer lists asked for: one a gathering

    async def __call__(self, behavior: Behavior[Any, Any], payload: Any = None, **kw: Any) -> Any:
        if behavior.name.endswith(("resources/free", "peers/list")):
            self.lists += behavior.name.endswith("peers/list")
            await self.answer.wait()
            if self.down:
                self.refused += 1
                raise TransportError(f"{behavior.name}: connection refused")
        return await super().__call__(behavior, payload, **kw)


@pytest.fixture
async def held(tmp_path: Path) -> Any:
    dms = SlowPeersDMS(tmp_path / "logs")
    clock = FixedClock(1_700_000_000 * NS_PER_SECOND)
    actor = ResourceActor.start(dms, ttl_s=20.0, ping_wait_s=0.05, clock=clock)
    capacity = Capacity(actor, pods_capacity=10, clock=clock)
    try:
        yield dms, clock, capacity
    finally:
        dms.answer.set()
        await capacity.close()


async def test_a_first_ping_before_any_gathering_ended_answers_without_capacity(held: Any) -> None:
    dms, _, capacity = held
    async with asyncio.timeout(10):
        first = await capacity.ping()
    assert first.resources is None and first.taints == []
    assert first.status == (
        "degraded: the peers' free resources are being gathered for the first time"
    )
    assert dms.lists == 1  # the gathering goes on
    dms.answer.set()
    await until(lambda: dms.asked["resources/free"] >= 1, "the gathering to end")
    gathered = await capacity.ping()
    assert gathered.resources is not None and gathered.resources.cpu == "4"
    assert (gathered.status, gathered.taints) == ("ok", [])


async def test_a_slow_gathering_leaves_the_ping_the_last_one_and_is_asked_once(
    held: Any,
) -> None:
    dms, clock, capacity = held
    dms.answer.set()
    assert (await capacity.ping()).resources.cpu == "4"
    dms.answer.clear()
    dms.free = TWO
    clock.advance(30)  # past the cache's 20 s: a new gathering, slow
    async with asyncio.timeout(10):
        pings = await asyncio.gather(*(capacity.ping() for _ in range(3)))
    assert {p.resources.cpu for p in pings} == {"4"}  # the last gathering's, at once
    assert dms.lists == 2  # one gathering under way, shared by the pings
    dms.answer.set()
    await until(lambda: dms.asked["resources/free"] >= 2, "the new gathering to end")
    assert (await capacity.ping()).resources.cpu == "2"


async def test_a_gathering_that_fails_after_the_ping_answered_taints_the_next(
    held: Any,
) -> None:
    dms, clock, capacity = held
    dms.answer.set()
    assert (await capacity.ping()).taints == []
    dms.answer.clear()
    dms.down = True
    clock.advance(30)
    stale = await capacity.ping()  # answered from the last gathering while this one hangs
    assert (stale.resources.cpu, stale.taints) == ("4", [])
    dms.answer.set()  # the DMS's refusal arrives after the ping was answered
    await until(lambda: dms.refused >= 1, "the gathering to fail")
    dms.answer.clear()  # and the next gathering hangs again
    clock.advance(30)
    tainted = await capacity.ping()
    assert [t.key for t in tainted.taints] == [DMS_UNREACHABLE] and tainted.resources is None
    dms.down = False
    dms.answer.set()
    clock.advance(30)
    healed = await capacity.ping()
    assert (healed.taints, healed.resources.cpu) == ([], "4")


async def test_pings_that_queue_behind_a_slow_gathering_wait_no_longer_than_the_first(
    tmp_path: Path,
) -> None:
    """The actor takes pings one at a time: twenty at once while a gathering hangs must not
    wait a second each in turn (twenty seconds, past the route's deadline), but share the
    first's wait; the test's own bound catches them waiting in turn."""
    dms = SlowPeersDMS(tmp_path / "logs")
    clock = FixedClock(1_700_000_000 * NS_PER_SECOND)
    actor = ResourceActor.start(dms, ttl_s=20.0, ping_wait_s=1.0, clock=clock)
    capacity = Capacity(actor, pods_capacity=10, clock=clock)
    try:
        async with asyncio.timeout(10):
            pings = await asyncio.gather(*(capacity.ping() for _ in range(20)))
        assert {p.resources is None for p in pings} == {True} and dms.lists == 1
    finally:
        dms.answer.set()
        await capacity.close()
