"""A supervisor actor: starts children, hears how they end, restarts them as
:mod:`~dmsgw.actors.supervision` decides, and keeps the :class:`Registry` pointing at the
current ref of each child. Past its restart intensity it stops its children and fails, so its
own supervisor (or the process) decides what happens next — OTP semantics."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import random
from collections.abc import Callable, Sequence
from typing import Any

import pykka

from ..clock import Clock, system_clock
from ..errors import DmsgwError
from .base import Actor, ActorExit, ExitHook, Ref, SystemMessage
from .registry import Registry
from .scheduler import Scheduler, ThreadScheduler
from .sharded import ShardedDict
from .supervision import (
    Backoff,
    Escalate,
    Forget,
    Intensity,
    Restart,
    RestartChildren,
    Strategy,
    SupervisorState,
)

log = logging.getLogger(__name__)

StartFn = Callable[[ExitHook], Ref]

DEFAULT_INTENSITY = Intensity()
DEFAULT_BACKOFF = Backoff()


class EscalationError(DmsgwError):
    """A supervisor gave up after too many restarts."""


class DuplicateChildError(DmsgwError):
    """A child with that name is already supervised."""


@dataclasses.dataclass(frozen=True)
class ChildSpec:
    """How to (re)start a child: ``start(exit_hook)`` must start an :class:`Actor` passing it
    ``exit_hook``, and return its ref."""

    name: str
    start: StartFn
    restart: Restart = Restart.PERMANENT


@dataclasses.dataclass(frozen=True)
class SupervisorEvent:
    """What a supervisor did, for logs, metrics and tests: ``kind`` is one of ``started``,
    ``exited``, ``restart_scheduled``, ``forgotten``, ``escalated``."""

    kind: str
    name: str
    detail: str = ""


Observer = Callable[[SupervisorEvent], None]


def _ignore(event: SupervisorEvent) -> None:
    pass


@dataclasses.dataclass(frozen=True)
class _ChildExited(SystemMessage):
    """A child ended: never refused by a full mailbox (one per child's life)."""

    name: str
    exit: ActorExit


@dataclasses.dataclass(frozen=True)
class _RestartDue:
    names: tuple[str, ...]
    generation: int


class Supervisor(Actor):
    """Supervise children; ask it ``start_child``/``terminate_child`` through its proxy."""

    def __init__(
        self,
        *,
        strategy: Strategy = Strategy.ONE_FOR_ONE,
        intensity: Intensity = DEFAULT_INTENSITY,
        backoff: Backoff = DEFAULT_BACKOFF,
        registry: Registry | None = None,
        scheduler: Scheduler | None = None,
        clock: Clock = system_clock,
        rng: random.Random | None = None,
        shutdown_timeout_s: float = 5.0,
        observer: Observer = _ignore,
        exit_hook: ExitHook | None = None,
    ) -> None:
        super().__init__(exit_hook=exit_hook)
        self._observe = observer
        self.registry = registry if registry is not None else Registry()
        self._scheduler = scheduler or ThreadScheduler()
        self._state = SupervisorState(strategy, intensity, backoff, clock, rng or random.Random())
        self._specs: ShardedDict[str, ChildSpec] = ShardedDict(ordered=True)
        self._refs: ShardedDict[str, Ref] = ShardedDict(ordered=True)
        self._generation = 0
        self._shutdown_timeout_s = shutdown_timeout_s

    # --- the API (called through the proxy) ----------------------------------------------

    def start_child(self, spec: ChildSpec) -> Ref:
        if spec.name in self._specs:
            raise DuplicateChildError(f"a child named {spec.name!r} is already supervised")
        self._specs[spec.name] = spec
        self._state.add(spec.name, spec.restart)
        ref = self._start(spec.name)
        if ref is None:
            raise DmsgwError(f"child {spec.name!r} failed to start")
        return ref

    def start_children(self, specs: Sequence[ChildSpec]) -> list[Ref]:
        """:meth:`start_child` for each spec in turn, in one message: a caller on another
        thread waits for one round trip, not one per child (a restart resuming its pods one
        round trip each waited for every one: bench/README.md, "Calls from other threads").
        As there, the first that fails raises, and the rest are not started."""
        return [self.start_child(spec) for spec in specs]

    def start_each(self, specs: Sequence[ChildSpec]) -> list[Ref | DmsgwError]:
        """:meth:`start_child` for each spec in turn, in one message, each on its own: the
        ref of each child started, or the error that kept it from starting, while the others
        start all the same (as they would, each in a message of its own). Children asked for
        by callers that do not know of each other (pods created at once) share the round
        trip, and none fails another."""
        started: list[Ref | DmsgwError] = []
        for spec in specs:
            try:
                started.append(self.start_child(spec))
            except DmsgwError as exc:
                started.append(exc)
        return started

    def terminate_child(self, name: str) -> bool:
        """Stop a child for good; ``False`` if there was no such child."""
        if name not in self._specs:
            return False
        del self._specs[name]
        self._state.remove(name)
        self._stop_child(name)
        self.registry.unregister(name)
        return True

    def which_children(self) -> list[tuple[str, bool]]:
        """``(name, alive)`` for every supervised child, in start order."""
        return [(n, n in self._refs and self._refs[n].is_alive()) for n in self._specs]

    # --- what children and timers tell us --------------------------------------------------

    def on_receive(self, message: Any) -> Any:
        if isinstance(message, _ChildExited):
            self._child_exited(message)
        elif isinstance(message, _RestartDue):
            if message.generation == self._generation:
                for name in message.names:
                    if name in self._specs and name not in self._refs:
                        self._start(name)
        else:
            super().on_receive(message)

    def on_stop(self) -> None:
        self._generation += 1  # cancel restarts still waiting
        for name in reversed(list(self._refs)):
            self._stop_child(name)

    def _child_exited(self, event: _ChildExited) -> None:
        if self._refs.get(event.name) is not event.exit.ref:
            return  # an old incarnation we stopped ourselves
        del self._refs[event.name]
        if event.exit.error is not None:
            log.warning("child %s crashed: %r", event.name, event.exit.error)
        self._observe(SupervisorEvent("exited", event.name, repr(event.exit.error or "normal")))
        self._decide(event.name, abnormal=not event.exit.normal)

    def _decide(self, name: str, abnormal: bool) -> None:
        decision = self._state.child_exited(name, abnormal)
        if isinstance(decision, Forget):
            self._specs.pop(name, None)
            self.registry.unregister(name)
            self._observe(SupervisorEvent("forgotten", name))
        elif isinstance(decision, RestartChildren):
            for sibling in decision.stop_first:
                self._stop_child(sibling)
                if sibling not in self._state.children:
                    self._specs.pop(sibling, None)
                    self.registry.unregister(sibling)
            due = _RestartDue(decision.names, self._generation)
            self._scheduler.call_later(decision.delay_s, lambda: self._tell_self(due))
            detail = f"{','.join(decision.names)} in {decision.delay_s:.3f} s"
            self._observe(SupervisorEvent("restart_scheduled", name, detail))
        elif isinstance(decision, Escalate):
            self._observe(SupervisorEvent("escalated", name, decision.reason))
            self._generation += 1
            for child in reversed(list(self._refs)):
                self._stop_child(child)
            raise EscalationError(decision.reason)

    # --- mechanics ----------------------------------------------------------------------

    def _start(self, name: str) -> Ref | None:
        spec = self._specs[name]
        me = self.actor_ref

        def exit_hook(event: ActorExit) -> None:
            with contextlib.suppress(pykka.ActorDeadError):  # we are gone: nobody restarts it
                me.tell(_ChildExited(name, event))

        try:
            ref = spec.start(exit_hook)
        except Exception as exc:  # a child that cannot even start counts as a crash
            log.warning("child %s failed to start: %r", name, exc)
            self._decide(name, abnormal=True)
            return None
        self._refs[name] = ref
        self.registry.register(name, ref)
        self._observe(SupervisorEvent("started", name))
        return ref

    def _stop_child(self, name: str) -> None:
        ref = self._refs.pop(name, None)
        if ref is None:
            return
        try:
            ref.stop(block=True, timeout=self._shutdown_timeout_s)
        except pykka.Timeout:
            log.error("child %s did not stop within %.1f s", name, self._shutdown_timeout_s)

    def _tell_self(self, message: Any) -> None:
        with contextlib.suppress(pykka.ActorDeadError):
            self.actor_ref.tell(message)


__all__ = [
    "Backoff",
    "ChildSpec",
    "DuplicateChildError",
    "EscalationError",
    "Intensity",
    "Restart",
    "Strategy",
    "Supervisor",
    "SupervisorEvent",
]
