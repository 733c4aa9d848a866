"""The one clock: Unix time in nanoseconds, injected wherever time matters.

The DMS compares expiries in Unix nanoseconds (``time.Now().UnixNano()``). Everything that reads
the time takes a :data:`Clock` so tests can pin it without patching modules (freezegun is unsafe
across pykka threads).
"""

import time
from collections.abc import Callable

Clock = Callable[[], int]

system_clock: Clock = time.time_ns

NS_PER_SECOND = 1_000_000_000


class FixedClock:
    """A settable clock for tests and simulations: it moves only when told to."""

    def __init__(self, now_ns: int = 0) -> None:
        self.now_ns = now_ns

    def __call__(self) -> int:
        return self.now_ns

    def advance(self, seconds: float) -> None:
        self.now_ns += int(seconds * NS_PER_SECOND)
