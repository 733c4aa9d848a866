"""Actors on the event loop: same contract as thread actors, supervised by the same supervisor."""

from __future__ import annotations

import asyncio
import gc
import queue
import random
import threading
import weakref
from typing import Any

import pykka
import pytest

from dmsgw.actors.aio import AsyncActor
from dmsgw.actors.base import ActorExit, MailboxFullError
from dmsgw.actors.registry import Registry
from dmsgw.actors.scheduler import ManualScheduler
from dmsgw.actors.supervision import Backoff, Intensity
from dmsgw.actors.supervisor import ChildSpec, Supervisor, SupervisorEvent

WAIT = 10.0


class Counter(AsyncActor):
    mailbox_size = 3

    def __init__(self, start: int = 0, gate: asyncio.Event | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.value = start
        self.gate = gate or asyncio.Event()

    async def on_receive(self, message: Any) -> Any:
        if message == "crash":
            raise RuntimeError("boom")
        if message == "hold":
            await self.gate.wait()
        self.value += 1
        return self.value

    def add(self, n: int) -> int:
        self.value += n
        return self.value

    async def slow_double(self) -> int:
        await asyncio.sleep(0)
        return self.value * 2


class BadStart(AsyncActor):
    async def on_start(self) -> None:
        raise RuntimeError("cannot start")


async def test_ask_tell_and_proxy_calls() -> None:
    ref = Counter.start(10)
    assert await ref.ask("x") == 11
    ref.tell("x")
    assert await ref.proxy().add(5) == 17
    assert await ref.proxy().slow_double() == 34
    with pytest.raises(AttributeError, match="no method 'nope'"):
        _ = ref.proxy().nope
    ref.stop()
    await ref.wait_stopped()
    assert not ref.is_alive()
    with pytest.raises(pykka.ActorDeadError):
        ref.tell("x")


async def test_errors_on_ask_go_to_the_caller_and_crashes_on_tell_end_the_actor() -> None:
    exits: list[ActorExit] = []
    ref = Counter.start(exit_hook=exits.append)
    with pytest.raises(RuntimeError, match="boom"):
        await ref.ask("crash")
    assert ref.is_alive()
    ref.tell("crash")
    await ref.wait_stopped()
    assert len(exits) == 1 and str(exits[0].error) == "boom" and exits[0].ref is ref


async def test_a_crashed_actor_leaves_no_reference_cycle() -> None:
    """Reference counting alone frees an actor that crashed, once its exit is handled: its
    error's traceback holds the actor's task frame, which must not hold the error back (a
    frozen heap would keep such a cycle for good)."""
    exits: list[ActorExit] = []
    ref = Counter.start(exit_hook=exits.append)
    assert ref._actor is not None
    actor = weakref.ref(ref._actor)
    gc.disable()
    try:
        ref.tell("crash")
        await ref.wait_stopped()
        exits.clear()
        assert actor() is None
    finally:
        gc.enable()


async def test_failing_on_start_is_reported() -> None:
    exits: list[ActorExit] = []
    ref = BadStart.start(exit_hook=exits.append)
    await ref.wait_stopped()
    assert [str(e.error) for e in exits] == ["cannot start"]


async def test_full_mailbox_refuses_and_pending_asks_fail_when_stopped() -> None:
    gate = asyncio.Event()
    ref = Counter.start(gate=gate)
    holding = ref.ask("hold")
    await asyncio.sleep(0)  # let the actor take "hold" (a scheduling step, not a timing wait)
    pending = [ref.ask("x") for _ in range(3)]
    with pytest.raises(MailboxFullError, match="mailbox of Counter is full"):
        ref.tell("x")
    ref.stop()
    gate.set()
    assert await holding == 1
    assert [await p for p in pending] == [2, 3, 4]
    await ref.wait_stopped()


async def test_tell_and_stop_from_another_thread() -> None:
    loop = asyncio.get_running_loop()
    exits: list[ActorExit] = []
    ref = Counter.start(exit_hook=exits.append)

    def other_thread() -> bool:
        ref.tell("x")
        answer = ref.ask_threadsafe("x").result(WAIT)
        assert answer == 2
        return ref.stop(block=True, timeout=WAIT)

    assert await loop.run_in_executor(None, other_thread) is True
    assert exits and exits[0].normal


async def test_blocking_stop_on_the_loop_is_refused() -> None:
    ref = Counter.start()
    with pytest.raises(RuntimeError, match="deadlock"):
        ref.stop(block=True)
    await ref.wait_stopped()


def _actor_tasks() -> list[asyncio.Task[Any]]:
    return [t for t in asyncio.all_tasks() if t.get_name().startswith("actor:")]


async def test_an_actor_holds_a_task_only_while_it_has_work() -> None:
    """CPython keeps every live task in one set, which doubles in one step: at 157,285 tasks
    (two a pod), inside one create of a gateway of 100,000 pods (decision 58). An actor that
    waits for a message holds none."""
    ref = Counter.start()
    assert len(_actor_tasks()) == 1  # it starts
    assert await ref.ask("x") == 1
    assert _actor_tasks() == []
    ref.tell("x")
    assert len(_actor_tasks()) == 1  # a message starts a task
    assert await ref.ask("x") == 3  # and it handles what came while it ran
    assert _actor_tasks() == []
    ref.stop()
    await ref.wait_stopped()
    assert (_actor_tasks(), ref.is_alive()) == ([], False)


class _Exits(AsyncActor):
    async def on_receive(self, message: Any) -> Any:
        raise SystemExit(3)


async def test_an_actor_that_ends_the_process_still_reports_its_end() -> None:
    """Every way an actor ends is reported once, a ``SystemExit`` from a message too. Its
    task is stepped by hand here: a ``SystemExit`` through the loop would end the test's."""
    exits: list[ActorExit] = []
    ref = _Exits.start(exit_hook=exits.append)
    await asyncio.sleep(0)  # its first task starts it (a scheduling step, not a timing wait)
    assert _actor_tasks() == []
    ref._inbox.append(("end", None))
    step = ref._run(starting=False)
    with pytest.raises(SystemExit):
        step.send(None)
    assert ([e.normal for e in exits], ref.is_alive()) == ([True], False)


class _Starts(AsyncActor):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.seen: list[str] = []

    async def on_start(self) -> None:
        self.seen.append("start")

    async def on_receive(self, message: Any) -> Any:
        self.seen.append(message)
        return list(self.seen)


async def test_a_message_sent_before_the_actor_has_started_waits_for_its_start() -> None:
    """Started from another thread, the actor's ref is usable at once, before its first
    task is made: a message sent then is handled after ``on_start``, not before it."""
    loop = asyncio.get_running_loop()
    made: list[Any] = []
    thread = threading.Thread(target=lambda: made.append(_Starts.start(loop=loop)))
    thread.start()
    thread.join()  # the loop runs this test: the actor's first task is not made yet
    assert await made[0].ask("first") == ["start", "first"]


async def test_a_message_that_lands_after_the_end_is_refused() -> None:
    """A message from another thread checks that the actor runs, then lands on its loop
    later: if the actor ended meanwhile, the asker hears it is dead (no task, no mailbox)."""
    ref = Counter.start()
    ref.stop()
    await ref.wait_stopped()
    late: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    ref._deliver(("x", late))  # what a sender that checked before the stop lands as
    with pytest.raises(pykka.ActorDeadError):
        await late
    assert (ref._inbox, _actor_tasks()) == ([], [])


async def test_the_thread_supervisor_restarts_loop_actors() -> None:
    loop = asyncio.get_running_loop()
    events: queue.Queue[SupervisorEvent] = queue.Queue()
    scheduler = ManualScheduler()
    registry = Registry()
    supervisor = Supervisor.start(
        intensity=Intensity(3, 5.0),
        backoff=Backoff(min_s=1.0, jitter=0.0),
        registry=registry,
        scheduler=scheduler,
        clock=scheduler.clock,
        rng=random.Random(1),
        observer=events.put,
    )

    async def next_event() -> tuple[str, str]:
        event = await loop.run_in_executor(None, lambda: events.get(timeout=WAIT))
        return event.kind, event.name

    spec = ChildSpec("pod/1", lambda hook: Counter.start(100, loop=loop, exit_hook=hook))
    await loop.run_in_executor(None, lambda: supervisor.proxy().start_child(spec).get(timeout=WAIT))
    assert await next_event() == ("started", "pod/1")
    first = registry.require("pod/1")
    assert await first.ask("x") == 101  # type: ignore[attr-defined]
    first.tell("crash")
    assert await next_event() == ("exited", "pod/1")
    assert await next_event() == ("restart_scheduled", "pod/1")
    scheduler.advance(1.0)
    assert await next_event() == ("started", "pod/1")
    second = registry.require("pod/1")
    assert second is not first and await second.ask("x") == 101  # type: ignore[attr-defined]
    await loop.run_in_executor(None, lambda: supervisor.stop(timeout=WAIT))
    assert not second.is_alive()
