"""Timers for work that waits most of its life, kept out of the event loop's own heap.

asyncio keeps every timer in one heap, and a cancelled timer stays there until its time comes;
once more than half of the heap is cancelled timers, the loop rebuilds it in one pass. Every
request's deadline, and every HTTP client call's timeout, is a timer cancelled a moment later,
while a gateway of 100,000 pods held one timer a pod (its next poll): the rebuild walked them
all in one turn, the longest stall of interLink's first polls (bench/README.md, "The loop's
timer heap"). A :class:`TimerWheel` keeps the waits of followed pods in slots of :data:`TICK_S`
and holds one loop timer per slot that has any, so that the loop's heap holds a few thousand
timers whatever the number of pods, and its rebuilds stay short.
"""

from __future__ import annotations

import asyncio
import math
import weakref
from collections.abc import Callable

__all__ = ["TICK_S", "TimerWheel", "WheelTimer", "wheel_of"]

TICK_S = 0.01
"""The wheel's resolution: a timer fires at the end of the slot its time falls in, at most
this much late (a pod's poll waits far longer: ``PodPolicy.poll_min_s``)."""


class WheelTimer:
    """One wait on a :class:`TimerWheel`: its callback runs once its slot's time has come,
    unless cancelled before."""

    __slots__ = ("_callback",)

    def __init__(self, callback: Callable[[], None]) -> None:
        self._callback: Callable[[], None] | None = callback

    def cancel(self) -> None:
        self._callback = None  # its slot lets it go when the slot's time comes

    def cancelled(self) -> bool:
        return self._callback is None

    def _fire(self) -> None:
        callback, self._callback = self._callback, None
        if callback is not None:
            callback()


class TimerWheel:
    """Timers of one loop, by slot of ``tick_s``: one loop timer per slot that has any."""

    def __init__(self, loop: asyncio.AbstractEventLoop, tick_s: float = TICK_S) -> None:
        self._loop = loop
        self._tick_s = tick_s
        self._slots: dict[int, list[WheelTimer]] = {}

    def call_later(self, delay_s: float, callback: Callable[[], None]) -> WheelTimer:
        """Run ``callback`` no sooner than ``delay_s`` from now, and at most a tick later."""
        slot = math.ceil((self._loop.time() + delay_s) / self._tick_s)
        timers = self._slots.get(slot)
        if timers is None:
            timers = self._slots[slot] = []
            self._loop.call_at(slot * self._tick_s, self._fire, slot)
        timer = WheelTimer(callback)
        timers.append(timer)
        return timer

    def _fire(self, slot: int) -> None:
        """A slot's time has come: its timers run, in the order they were set."""
        for timer in self._slots.pop(slot):
            timer._fire()

    def __len__(self) -> int:
        """The slots that hold timers (the loop timers the wheel holds)."""
        return len(self._slots)


_WHEELS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, TimerWheel] = (
    weakref.WeakKeyDictionary()
)


def wheel_of(loop: asyncio.AbstractEventLoop) -> TimerWheel:
    """``loop``'s wheel, made on first use."""
    wheel = _WHEELS.get(loop)
    if wheel is None:
        wheel = _WHEELS[loop] = TimerWheel(loop)
    return wheel
