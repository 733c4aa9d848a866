"""``Steps``: work that waits on the loop's timers between its steps, holding no task then."""

from __future__ import annotations

import asyncio
import contextlib
import math
from typing import Any

import pytest

from dmsgw.actors.steps import Steps
from dmsgw.actors.wheel import WheelTimer, wheel_of


def _timers_fire_at_once(monkeypatch: pytest.MonkeyPatch, delays: list[float]) -> None:
    """The running loop's wheel timers noted in ``delays`` and fired in the next turn:
    virtual time, as long as nothing but the steps under test sets them."""
    loop = asyncio.get_running_loop()

    def call_later(delay: float, callback: Any) -> asyncio.Handle:
        delays.append(delay)
        return loop.call_soon(callback)

    monkeypatch.setattr(wheel_of(loop), "call_later", call_later)


class _Script:
    """A step that returns the next of ``waits`` each time, noting how many tasks run."""

    def __init__(self, *waits: float | None) -> None:
        self.waits = list(waits)
        self.tasks_seen: list[int] = []
        self.ended = 0

    async def step(self) -> float | None:
        self.tasks_seen.append(len(asyncio.all_tasks()))
        return self.waits.pop(0)

    def on_end(self) -> None:
        self.ended += 1


async def test_steps_run_with_the_waits_they_return_until_one_returns_none(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    delays: list[float] = []
    _timers_fire_at_once(monkeypatch, delays)
    script = _Script(2.0, 0.5, None)
    steps = Steps(script.step, first_wait_s=1.0, on_end=script.on_end)
    assert await steps is None
    assert (delays, script.waits, script.ended) == ([1.0, 2.0, 0.5], [], 1)
    # Each step ran in a task of its own beside this test's: none lived between two steps.
    assert script.tasks_seen == [2, 2, 2]


async def test_no_first_wait_steps_at_once() -> None:
    script = _Script(None)
    steps = Steps(script.step)
    assert len(asyncio.all_tasks()) == 2  # the first step's task, made at once
    await steps
    assert script.tasks_seen == [2]


async def test_a_step_that_raises_ends_the_steps_with_its_error() -> None:
    ended: list[str] = []

    async def step() -> float | None:
        raise ValueError("the DMS said no")

    steps = Steps(step, on_end=lambda: ended.append("ended"))
    with pytest.raises(ValueError, match="the DMS said no"):
        await steps
    assert ended == ["ended"]


async def test_cancelled_between_two_steps_it_ends_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    wheel = wheel_of(asyncio.get_running_loop())
    handles: list[WheelTimer] = []
    real = wheel.call_later

    def call_later(delay: float, callback: Any) -> WheelTimer:
        handles.append(real(3600.0, callback))  # fires only if nothing cancels it
        return handles[-1]

    monkeypatch.setattr(wheel, "call_later", call_later)
    script = _Script(5.0)
    steps = Steps(script.step, on_end=script.on_end)
    while not handles:  # the first step runs, then its wait begins
        await asyncio.sleep(0)
    assert steps.cancel() is True
    assert (steps.cancelled(), handles[0].cancelled(), script.ended) == (True, True, 1)
    assert steps.cancel() is False  # once only
    assert script.ended == 1


async def test_cancelled_while_a_step_runs_it_ends_once_the_step_has() -> None:
    """As a task: the step hears the cancellation and may clean up; the steps are done only
    after it has (a pod's delete waits until its follower has stopped)."""
    events: list[str] = []
    running = asyncio.Event()

    async def step() -> float | None:
        running.set()
        try:
            await asyncio.Event().wait()
        finally:
            events.append("cleaned up")
        return None

    steps = Steps(step, on_end=lambda: events.append("ended"))
    await running.wait()
    assert steps.cancel() is True
    assert not steps.done()
    with contextlib.suppress(asyncio.CancelledError):
        await steps
    assert (steps.cancelled(), events) == (True, ["cleaned up", "ended"])


async def test_cancelled_before_the_next_step_begins_it_ends_at_once() -> None:
    """A step that reports to an actor ends before the actor hears it: an actor that cancels
    the steps on that news (a pod's service completed: its follow is cancelled) met a
    finished task that refused the cancel, and waited for steps that went on polling (found
    by the suite, in a pod restarted under ``restartPolicy: Always``). The next step's task,
    made and not begun, is the same window: cancelled, it would never run to end the steps."""
    ended: list[str] = []
    stepped: list[int] = []
    steps: Steps

    async def step() -> float | None:
        stepped.append(1)
        if len(stepped) > 1:
            raise AssertionError("stepped again after the cancel")
        asyncio.get_running_loop().call_soon(steps.cancel)  # runs before the step's callback
        return 0.0  # the next step at once, if the cancel was refused

    steps = Steps(step, on_end=lambda: ended.append("ended"))
    with pytest.raises(asyncio.CancelledError):
        await steps
    assert (steps.cancelled(), ended) == (True, ["ended"])


async def test_a_step_parked_on_inf_waits_for_wake_and_sets_no_timer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    delays: list[float] = []
    _timers_fire_at_once(monkeypatch, delays)
    script = _Script(math.inf, 3.0, None)
    steps = Steps(script.step, on_end=script.on_end)
    for _ in range(5):
        await asyncio.sleep(0)
    assert (script.waits, delays, steps.done()) == ([3.0, None], [], False)
    assert len(asyncio.all_tasks()) == 1  # parked: no task, no timer
    steps.wake()
    assert await steps is None
    assert (delays, script.ended) == ([3.0], 1)
    steps.wake()  # over: nothing happens


async def test_wake_cuts_a_timed_wait_short_and_is_ignored_while_a_step_runs() -> None:
    script = _Script(3600.0, None)
    steps = Steps(script.step)
    steps.wake()  # the first step's task runs already: ignored
    await asyncio.sleep(0)
    assert script.waits == [None]
    steps.wake()  # waits an hour: woken now
    assert await steps is None
