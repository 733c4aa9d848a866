"""The timer wheel: the waits of followed pods, out of the event loop's own heap."""

from __future__ import annotations

import asyncio

from dmsgw.actors.wheel import TICK_S, TimerWheel, wheel_of


async def test_a_timer_fires_no_sooner_than_its_delay_and_within_a_tick() -> None:
    loop = asyncio.get_running_loop()
    wheel = TimerWheel(loop)
    fired: asyncio.Future[float] = loop.create_future()
    started = loop.time()
    wheel.call_later(0.03, lambda: fired.set_result(loop.time()))
    assert await fired - started >= 0.03  # the loop's own timers may be later, never earlier
    assert len(wheel) == 0  # its slot is let go once it fired


async def test_timers_of_one_slot_hold_one_loop_timer_and_fire_in_order() -> None:
    loop = asyncio.get_running_loop()
    wheel = TimerWheel(loop, tick_s=3600.0)  # every delay below falls in one slot
    before = len(loop._scheduled)  # type: ignore[attr-defined]
    for i in range(1000):
        wheel.call_later(1.0 + i / 1000, lambda: None)
    assert len(wheel) == 1
    assert len(loop._scheduled) == before + 1  # type: ignore[attr-defined]


async def test_timers_fire_in_the_order_set_and_a_cancelled_one_never() -> None:
    loop = asyncio.get_running_loop()
    wheel = TimerWheel(loop, tick_s=TICK_S)
    fired: list[int] = []
    timers = [wheel.call_later(0.0, lambda i=i: fired.append(i)) for i in range(5)]
    timers[2].cancel()
    assert timers[2].cancelled() and not timers[3].cancelled()
    done = loop.create_future()
    wheel.call_later(TICK_S, lambda: done.set_result(None))  # a later slot
    await done
    assert fired == [0, 1, 3, 4]
    assert all(t.cancelled() for t in timers)  # fired ones cannot fire again


async def test_each_loop_has_one_wheel() -> None:
    loop = asyncio.get_running_loop()
    assert wheel_of(loop) is wheel_of(loop)
