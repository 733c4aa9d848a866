"""Restart decisions, as pure state: what an Erlang/OTP supervisor decides when a child exits.

Kept apart from the actor that carries the decisions out so that strategies, restart intensity
and backoff can be tested exhaustively with an injected clock and random source.
"""

from __future__ import annotations

import dataclasses
import enum
import random
from collections import deque
from collections.abc import Sequence

from ..clock import NS_PER_SECOND, Clock
from .sharded import ShardedDict


class Strategy(enum.Enum):
    """Which siblings restart with a failed child."""

    ONE_FOR_ONE = "one_for_one"  # only the child that exited
    ONE_FOR_ALL = "one_for_all"  # every child
    REST_FOR_ONE = "rest_for_one"  # the child and those started after it


class Restart(enum.Enum):
    """When a child is restarted."""

    PERMANENT = "permanent"  # always
    TRANSIENT = "transient"  # only after an abnormal exit
    TEMPORARY = "temporary"  # never


@dataclasses.dataclass(frozen=True)
class Intensity:
    """At most ``max_restarts`` in any ``period_s`` seconds; beyond that the supervisor gives up
    and escalates to its own parent (OTP's default is 1 in 5 s; ours is a little more lenient
    because a DMS hiccup often fails a few children at once)."""

    max_restarts: int = 3
    period_s: float = 5.0


@dataclasses.dataclass(frozen=True)
class Backoff:
    """Exponential restart delay with jitter: ``min_s * 2**(n-1)``, capped, ±``jitter``."""

    min_s: float = 0.2
    max_s: float = 30.0
    jitter: float = 0.2

    def delay(self, attempt: int, rng: random.Random) -> float:
        if attempt <= 0:
            return 0.0
        base = min(self.max_s, self.min_s * 2.0 ** (attempt - 1))
        return base * (1.0 + self.jitter * (2.0 * rng.random() - 1.0))


@dataclasses.dataclass(frozen=True)
class RestartChildren:
    """Restart these children, in this order, after ``delay_s``."""

    names: tuple[str, ...]
    stop_first: tuple[str, ...]
    delay_s: float


@dataclasses.dataclass(frozen=True)
class Escalate:
    """Restart intensity exceeded: stop everything and fail upwards."""

    reason: str


@dataclasses.dataclass(frozen=True)
class Forget:
    """The child is not restarted (temporary, or transient that ended normally)."""

    name: str


Decision = RestartChildren | Escalate | Forget


class SupervisorState:
    """Children in start order with their restart types, and the recent restart history."""

    def __init__(
        self,
        strategy: Strategy,
        intensity: Intensity,
        backoff: Backoff,
        clock: Clock,
        rng: random.Random,
    ) -> None:
        self.strategy = strategy
        self.intensity = intensity
        self.backoff = backoff
        self.clock = clock
        self.rng = rng
        self.children: ShardedDict[str, Restart] = ShardedDict(ordered=True)  # in start order
        self._restarts: deque[int] = deque()
        self._attempts: dict[str, tuple[int, int]] = {}  # name -> (attempt, when)

    def add(self, name: str, restart: Restart) -> None:
        self.children[name] = restart

    def remove(self, name: str) -> None:
        self.children.pop(name, None)
        self._attempts.pop(name, None)

    def child_exited(self, name: str, abnormal: bool) -> Decision:
        restart = self.children.get(name)
        if restart is None:
            return Forget(name)
        if restart is Restart.TEMPORARY or (restart is Restart.TRANSIENT and not abnormal):
            self.remove(name)
            return Forget(name)
        now = self.clock()
        window_start = now - int(self.intensity.period_s * NS_PER_SECOND)
        while self._restarts and self._restarts[0] <= window_start:
            self._restarts.popleft()
        if len(self._restarts) >= self.intensity.max_restarts:
            return Escalate(
                f"{name} exited and {len(self._restarts)} restarts already happened in the "
                f"last {self.intensity.period_s:g} s (limit {self.intensity.max_restarts})"
            )
        self._restarts.append(now)
        previous, when = self._attempts.get(name, (0, 0))
        # A child that fails again within the intensity period climbs the backoff; one that
        # ran longer than that starts again from the shortest delay.
        attempt = previous + 1 if previous and when > window_start else 1
        self._attempts[name] = (attempt, now)
        group = self._group(name)
        siblings = tuple(n for n in group if n != name)
        for sibling in siblings:
            if self.children[sibling] is Restart.TEMPORARY:
                self.remove(sibling)
        return RestartChildren(
            names=tuple(n for n in group if n in self.children),
            stop_first=siblings,
            delay_s=self.backoff.delay(attempt, self.rng),
        )

    def _group(self, name: str) -> tuple[str, ...]:
        if self.strategy is Strategy.ONE_FOR_ONE:
            return (name,)
        order: Sequence[str] = list(self.children)
        if self.strategy is Strategy.ONE_FOR_ALL:
            return tuple(order)
        return tuple(order[order.index(name) :])
