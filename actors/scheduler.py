"""Timers for delayed work (restart backoff, polling), injectable so tests control time."""

from __future__ import annotations

import heapq
import itertools
import threading
from collections.abc import Callable
from typing import Protocol

from ..clock import NS_PER_SECOND, FixedClock


class Cancellable(Protocol):
    def cancel(self) -> None: ...


class Scheduler(Protocol):
    def call_later(self, delay_s: float, fn: Callable[[], None]) -> Cancellable: ...


class ThreadScheduler:
    """Real time: each call runs on a daemon timer thread (actors are told, never called)."""

    def call_later(self, delay_s: float, fn: Callable[[], None]) -> Cancellable:
        timer = threading.Timer(max(delay_s, 0.0), fn)
        timer.daemon = True
        timer.start()
        return timer


class _ManualHandle:
    def __init__(self) -> None:
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class ManualScheduler:
    """Virtual time for tests: nothing runs until :meth:`advance` moves the clock past it."""

    def __init__(self, clock: FixedClock | None = None) -> None:
        self.clock = clock or FixedClock()
        self._queue: list[tuple[int, int, Callable[[], None], _ManualHandle]] = []
        self._seq = itertools.count()
        self._lock = threading.Lock()

    def call_later(self, delay_s: float, fn: Callable[[], None]) -> Cancellable:
        handle = _ManualHandle()
        due = self.clock() + int(max(delay_s, 0.0) * NS_PER_SECOND)
        with self._lock:
            heapq.heappush(self._queue, (due, next(self._seq), fn, handle))
        return handle

    def pending(self) -> list[float]:
        """Delays (s from now) of the calls still waiting, soonest first."""
        now = self.clock()
        with self._lock:
            return sorted(
                (due - now) / NS_PER_SECOND for due, _, _, h in self._queue if not h.cancelled
            )

    def advance(self, seconds: float) -> int:
        """Move time forward, running every call that falls due in order; return how many ran."""
        target = self.clock() + int(seconds * NS_PER_SECOND)
        ran = 0
        while True:
            with self._lock:
                if not self._queue or self._queue[0][0] > target:
                    break
                due, _, fn, handle = heapq.heappop(self._queue)
            self.clock.now_ns = max(self.clock.now_ns, due)
            if not handle.cancelled:
                fn()
                ran += 1
        self.clock.now_ns = target
        return ran
