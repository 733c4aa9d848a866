"""Supervisor decisions against an independent oracle, on random histories (hypothesis)."""

from __future__ import annotations

import random

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from dmsgw.actors.supervision import (
    Backoff,
    Escalate,
    Forget,
    Intensity,
    Restart,
    RestartChildren,
    Strategy,
    SupervisorState,
)
from dmsgw.clock import NS_PER_SECOND, FixedClock

NAMES = ("a", "b", "c", "d")


class SupervisorMachine(RuleBasedStateMachine):
    @initialize(
        strategy=st.sampled_from(list(Strategy)),
        max_restarts=st.integers(1, 4),
        period=st.sampled_from([1.0, 5.0, 30.0]),
        kinds=st.lists(st.sampled_from(list(Restart)), min_size=4, max_size=4),
    )
    def setup(
        self, strategy: Strategy, max_restarts: int, period: float, kinds: list[Restart]
    ) -> None:
        self.clock = FixedClock(10**18)
        self.backoff = Backoff(min_s=0.5, max_s=4.0, jitter=0.25)
        self.state = SupervisorState(
            strategy, Intensity(max_restarts, period), self.backoff, self.clock, random.Random(1)
        )
        self.strategy, self.max_restarts, self.period = strategy, max_restarts, period
        self.kinds = dict(zip(NAMES, kinds, strict=True))
        for name in NAMES:
            self.state.add(name, self.kinds[name])
        self.alive = list(NAMES)
        self.restart_times: list[int] = []
        self.escalated = False

    @rule(dt=st.floats(0, 40))
    def wait(self, dt: float) -> None:
        self.clock.advance(dt)

    @rule(index=st.integers(0, 3), abnormal=st.booleans())
    def child_exits(self, index: int, abnormal: bool) -> None:
        if self.escalated or not self.alive:
            return
        name = self.alive[index % len(self.alive)]
        decision = self.state.child_exited(name, abnormal)
        kind = self.kinds[name]
        if kind is Restart.TEMPORARY or (kind is Restart.TRANSIENT and not abnormal):
            assert decision == Forget(name)
            self.alive.remove(name)
            return
        window_start = self.clock() - int(self.period * NS_PER_SECOND)
        recent = [t for t in self.restart_times if t > window_start]
        if len(recent) >= self.max_restarts:
            assert isinstance(decision, Escalate)
            self.escalated = True
            return
        assert isinstance(decision, RestartChildren)
        self.restart_times.append(self.clock())
        position = self.alive.index(name)
        expected = {
            Strategy.ONE_FOR_ONE: [name],
            Strategy.ONE_FOR_ALL: list(self.alive),
            Strategy.REST_FOR_ONE: self.alive[position:],
        }[self.strategy]
        assert decision.names[0] == name or self.strategy is not Strategy.ONE_FOR_ONE
        assert set(decision.stop_first) == set(expected) - {name}
        kept = [n for n in expected if n == name or self.kinds[n] is not Restart.TEMPORARY]
        assert list(decision.names) == kept
        self.alive = [n for n in self.alive if n in kept or n not in expected]
        low = self.backoff.min_s * (1 - self.backoff.jitter)
        high = self.backoff.max_s * (1 + self.backoff.jitter)
        assert low <= decision.delay_s <= high

    @invariant()
    def never_more_restarts_than_allowed_in_a_window(self) -> None:
        if not hasattr(self, "restart_times"):
            return
        span = int(self.period * NS_PER_SECOND)
        for t in self.restart_times:
            assert sum(1 for u in self.restart_times if t - span < u <= t) <= self.max_restarts


TestSupervisorMachine = SupervisorMachine.TestCase
TestSupervisorMachine.settings = settings(max_examples=150, stateful_step_count=30, deadline=None)
