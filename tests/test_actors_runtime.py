"""The actor runtime: asyncio bridge, bounded mailboxes, exit reports, registry, supervisor.

Synchronisation is by events and queues that the actors fill, never by sleeping.
"""

from __future__ import annotations

import asyncio
import queue
import random
import threading
from typing import Any

import pykka
import pytest

from dmsgw.actors import bridge
from dmsgw.actors.base import Actor, ActorExit, ExitHook, MailboxFullError, SystemMessage
from dmsgw.actors.registry import DeadLetter, Registry
from dmsgw.actors.scheduler import ManualScheduler
from dmsgw.actors.supervision import Backoff, Intensity, Restart, Strategy
from dmsgw.actors.supervisor import ChildSpec, EscalationError, Supervisor, SupervisorEvent
from tests.support.echo_actor import WAIT, Echo


class FailsToStart(Actor):
    def on_start(self) -> None:
        raise RuntimeError("cannot start")


@pytest.fixture(autouse=True)
def _stop_all_actors() -> Any:
    yield
    pykka.ActorRegistry.stop_all(block=True, timeout=WAIT)


# --- bridge -----------------------------------------------------------------------------


async def test_ask_from_asyncio_returns_the_reply() -> None:
    ref = Echo.start()
    assert await bridge.ask(ref, "hi", timeout=WAIT) == ("echo", "hi")


async def test_exceptions_reach_the_awaiting_task_and_the_actor_survives() -> None:
    ref = Echo.start()
    with pytest.raises(RuntimeError, match="boom"):
        await bridge.ask(ref, "crash", timeout=WAIT)
    assert ref.is_alive()  # ask-path errors are replies, not crashes (pykka semantics)


async def test_the_loop_keeps_running_while_an_actor_is_busy() -> None:
    """While the actor is blocked, a thousand other loop iterations complete; only then is
    the actor released. With pykka's own ``await`` the loop would be frozen here."""
    gate = threading.Event()
    ref = Echo.start(gate)
    pending = asyncio.ensure_future(bridge.call(ref.proxy().slow(21), timeout=WAIT))
    ticks = 0
    for _ in range(1000):
        await asyncio.sleep(0)
        ticks += 1
    assert ticks == 1000 and not pending.done()
    gate.set()
    assert await pending == 42


async def test_only_dmsgw_futures_can_be_bridged() -> None:
    with pytest.raises(TypeError, match="CallbackFuture"):
        bridge.wrap_future(pykka.ThreadingFuture())


# --- mailbox ---------------------------------------------------------------------------


class Tiny(Echo):
    mailbox_size = 2


def test_a_full_mailbox_refuses_at_once_but_accepts_a_stop() -> None:
    gate, entered = threading.Event(), threading.Event()
    ref = Tiny.start(gate, entered)
    ref.tell("wait")
    assert entered.wait(WAIT)  # the actor holds "wait"; its mailbox is empty
    done = ref.ask("flush-marker", block=False)  # 1 queued
    ref.tell("x")  # 2 queued
    with pytest.raises(MailboxFullError, match="mailbox of Tiny is full"):
        ref.tell("y")
    stopped = ref.stop(block=False)
    gate.set()
    assert done.get(timeout=WAIT) == ("echo", "flush-marker")
    assert stopped.get(timeout=WAIT) is True


class _Exit(SystemMessage):
    """A message sent once in a life, as a child's exit to its supervisor."""


class _TinyRecorder(Tiny):
    def __init__(self, got: list[Any], *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.got = got

    def on_receive(self, message: Any) -> Any:
        self.got.append(message)
        return super().on_receive(message)


def test_a_full_mailbox_takes_a_system_message() -> None:
    """100,000 pod actors stopped at once overflowed their supervisor's mailbox, and the
    exits it refused were lost (each pod actor's task failed with the refusal, unheard)."""
    gate, entered = threading.Event(), threading.Event()
    got: list[Any] = []
    ref = _TinyRecorder.start(got, gate, entered)
    ref.tell("wait")
    assert entered.wait(WAIT)  # the actor holds "wait"; its mailbox is empty
    ref.tell("x")
    ref.tell("y")  # full
    with pytest.raises(MailboxFullError, match="mailbox of _TinyRecorder is full"):
        ref.tell("z")
    exit_report = _Exit()
    ref.tell(exit_report)  # taken all the same
    gate.set()
    ref.stop(block=True, timeout=WAIT)
    assert got == ["wait", "x", "y", exit_report]


# --- exit reports ---------------------------------------------------------------------


def _collector() -> tuple[ExitHook, queue.Queue[ActorExit]]:
    exits: queue.Queue[ActorExit] = queue.Queue()
    return exits.put, exits


def test_exit_is_reported_once_for_a_normal_stop() -> None:
    hook, exits = _collector()
    ref = Echo.start(exit_hook=hook)
    ref.stop()
    event = exits.get(timeout=WAIT)
    assert event.normal and event.ref is ref
    assert exits.empty()


def test_exit_is_reported_for_a_crash_on_the_tell_path() -> None:
    hook, exits = _collector()
    Echo.start(exit_hook=hook).tell("crash")
    event = exits.get(timeout=WAIT)
    assert isinstance(event.error, RuntimeError) and str(event.error) == "boom"


def test_exit_is_reported_when_on_start_fails() -> None:
    hook, exits = _collector()
    FailsToStart.start(exit_hook=hook)
    assert str(exits.get(timeout=WAIT).error) == "cannot start"


# --- registry -------------------------------------------------------------------------


def test_registry_reports_dead_letters() -> None:
    letters: list[DeadLetter] = []
    registry = Registry(on_dead_letter=letters.append)
    assert not registry.tell("nobody", 1)
    ref = Echo.start()
    registry.register("echo", ref)
    assert registry.tell("echo", 2)
    ref.stop()
    assert not registry.tell("echo", 3)
    assert [(d.recipient, d.message, d.reason) for d in letters] == [
        ("nobody", 1, "no such actor"),
        ("echo", 3, "actor is not running"),
    ]
    registry.unregister("echo", Echo.start())  # a different ref: left alone
    assert registry.get("echo") is ref


# --- supervisor ------------------------------------------------------------------------


class Harness:
    """A supervisor on virtual time whose every action lands in a queue."""

    def __init__(self, strategy: Strategy, *, max_restarts: int = 3) -> None:
        self.events: queue.Queue[SupervisorEvent] = queue.Queue()
        self.scheduler = ManualScheduler()
        self.registry = Registry(on_dead_letter=lambda d: None)
        self.parent_hook, self.parent_exits = _collector()
        self.ref = Supervisor.start(
            strategy=strategy,
            intensity=Intensity(max_restarts, 5.0),
            backoff=Backoff(min_s=1.0, max_s=8.0, jitter=0.0),
            registry=self.registry,
            scheduler=self.scheduler,
            clock=self.scheduler.clock,
            rng=random.Random(7),
            observer=self.events.put,
            exit_hook=self.parent_hook,
        )
        self.sup = self.ref.proxy()

    def add(self, name: str, restart: Restart = Restart.PERMANENT) -> pykka.ActorRef[Any]:
        spec = ChildSpec(name, lambda hook: Echo.start(exit_hook=hook), restart)
        ref = self.sup.start_child(spec).get(timeout=WAIT)
        assert self.next() == ("started", name)
        return ref

    def next(self) -> tuple[str, str]:
        event = self.events.get(timeout=WAIT)
        return event.kind, event.name

    def next_detail(self) -> str:
        return self.events.get(timeout=WAIT).detail

    def crash(self, name: str) -> None:
        self.registry.require(name).tell("crash")


def test_one_for_one_restarts_only_the_crashed_child_after_the_backoff() -> None:
    h = Harness(Strategy.ONE_FOR_ONE)
    a, b = h.add("a"), h.add("b")
    h.crash("a")
    assert h.next() == ("exited", "a")
    assert h.next_detail() == "a in 1.000 s"
    assert h.scheduler.advance(0.5) == 0  # not yet
    h.scheduler.advance(0.5)
    assert h.next() == ("started", "a")
    new_a = h.registry.require("a")
    assert new_a is not a and new_a.ask("ping", timeout=WAIT) == ("echo", "ping")
    assert h.registry.require("b") is b and b.is_alive()


def test_backoff_doubles_for_a_child_that_keeps_failing_and_resets_later() -> None:
    h = Harness(Strategy.ONE_FOR_ONE, max_restarts=10)
    h.add("a")
    delays = []
    for _ in range(3):
        h.crash("a")
        assert h.next() == ("exited", "a")
        delays.append(h.next_detail())
        h.scheduler.advance(10 if len(delays) == 3 else 4)
        assert h.next() == ("started", "a")
    assert delays == ["a in 1.000 s", "a in 2.000 s", "a in 4.000 s"]
    h.scheduler.advance(60)  # a long stable run
    h.crash("a")
    h.next()
    assert h.next_detail() == "a in 1.000 s"


def test_one_for_all_restarts_every_child_in_start_order() -> None:
    h = Harness(Strategy.ONE_FOR_ALL)
    a, _b, c = h.add("a"), h.add("b"), h.add("c")
    h.crash("b")
    assert h.next() == ("exited", "b")
    assert h.next_detail() == "a,b,c in 1.000 s"
    assert not a.is_alive() and not c.is_alive()
    h.scheduler.advance(1)
    assert [h.next() for _ in range(3)] == [("started", "a"), ("started", "b"), ("started", "c")]


def test_rest_for_one_restarts_the_child_and_those_started_after_it() -> None:
    h = Harness(Strategy.REST_FOR_ONE)
    a, _b, c = h.add("a"), h.add("b"), h.add("c")
    h.crash("b")
    h.next()
    assert h.next_detail() == "b,c in 1.000 s"
    assert a.is_alive() and not c.is_alive()


def test_temporary_and_transient_children() -> None:
    h = Harness(Strategy.ONE_FOR_ONE)
    h.add("temp", Restart.TEMPORARY)
    h.add("trans", Restart.TRANSIENT)
    h.crash("temp")
    assert [h.next(), h.next()] == [("exited", "temp"), ("forgotten", "temp")]
    h.registry.require("trans").stop()
    assert [h.next(), h.next()] == [("exited", "trans"), ("forgotten", "trans")]
    assert h.sup.which_children().get(timeout=WAIT) == []


def test_past_its_intensity_the_supervisor_escalates_to_its_parent() -> None:
    h = Harness(Strategy.ONE_FOR_ONE, max_restarts=2)
    h.add("a")
    survivor = h.add("b")
    for _ in range(2):
        h.crash("a")
        h.next(), h.next()
        h.scheduler.advance(2)
        assert h.next() == ("started", "a")
    h.crash("a")
    assert h.next() == ("exited", "a")
    assert h.next()[0] == "escalated"
    exit_event = h.parent_exits.get(timeout=WAIT)
    assert isinstance(exit_event.error, EscalationError)
    assert "2 restarts already happened in the last 5 s" in str(exit_event.error)
    assert not survivor.is_alive()


def test_terminate_child_stops_it_for_good() -> None:
    h = Harness(Strategy.ONE_FOR_ONE)
    a = h.add("a")
    assert h.sup.terminate_child("a").get(timeout=WAIT) is True
    assert not a.is_alive() and h.registry.get("a") is None
    assert h.sup.terminate_child("a").get(timeout=WAIT) is False
    assert h.scheduler.pending() == []


def test_stopping_the_supervisor_stops_its_children() -> None:
    h = Harness(Strategy.ONE_FOR_ONE)
    a, b = h.add("a"), h.add("b")
    h.ref.stop()
    assert not a.is_alive() and not b.is_alive()
    assert h.parent_exits.get(timeout=WAIT).normal
