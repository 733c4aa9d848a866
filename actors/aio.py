"""Actors that live on the asyncio event loop: a bounded mailbox each, and a task while
there is work in it.

Thread actors (:mod:`~dmsgw.actors.base`) cost a thread each, with its kernel stack, and a
thread hop per message. Actors whose work is mostly waiting on I/O — a DMS connection, a pod
following its ensemble — are better on the loop: a message costs a call, not a hop, and a
hundred thousand of them are cheap (bench/README.md, "An actor's memory and a thread hop").
An actor holds a task only while it starts or handles
messages, not while it waits for the next: CPython keeps every live task in one set, which
doubles in one step (decision 58). They keep the same contract as thread actors (bounded
mailbox, ask/tell, proxy calls, one exit report), so the same :class:`Supervisor` restarts both.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import inspect
import threading
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar, Generic, TypeVar

import pykka

from .base import ActorExit, ExitHook, MailboxFullError
from .posts import post
from .turns import Turns

A = TypeVar("A", bound="AsyncActor")


@dataclasses.dataclass(frozen=True, slots=True)
class _Call:
    name: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]


class _Stop:
    """The stop request: queued behind earlier messages, never refused for a full mailbox."""


_STOP = _Stop()


class AsyncActor:
    """Subclass and override the ``async`` hooks; start with :meth:`start`."""

    mailbox_size: ClassVar[int] = 1000

    def __init__(self, *, exit_hook: ExitHook | None = None, turns: Turns | None = None) -> None:
        self._exit_hook = exit_hook
        self._turns = turns
        """Shared by actors that start or hear together in numbers (a gateway's pods): each
        takes a turn of the loop's before it starts and before each message, so that a few
        of them, not all, run in one turn (:mod:`~dmsgw.actors.turns`)."""
        self.actor_ref: AsyncActorRef[Any]

    async def on_start(self) -> None:
        """Runs before the first message; an exception here ends the actor (reported)."""

    async def on_stop(self) -> None:
        """Runs after a normal stop, not after a crash."""

    async def on_receive(self, message: Any) -> Any:
        """Handle a plain (non-proxy) message; the return value answers an ``ask``."""
        raise TypeError(f"{type(self).__name__} does not handle {message!r}")

    @classmethod
    def start(
        cls: type[A],
        *args: Any,
        loop: asyncio.AbstractEventLoop | None = None,
        exit_hook: ExitHook | None = None,
        **kwargs: Any,
    ) -> AsyncActorRef[A]:
        """Create the actor and schedule its start on ``loop`` (the running loop by default).

        Safe to call from another thread when ``loop`` is given: the ref is usable at once,
        and messages sent before the task runs wait in the mailbox.
        """
        target = loop or asyncio.get_running_loop()
        actor = cls(*args, exit_hook=exit_hook, **kwargs)
        ref: AsyncActorRef[A] = AsyncActorRef(actor, target)
        actor.actor_ref = ref
        if _on_loop(target):
            ref._spawn()
        else:
            post(target, ref._spawn)
        return ref


_DONE_LOCK = threading.Lock()
"""Guards the creation of an actor's ``done`` event, which only a blocking stop needs."""


def _on_loop(loop: asyncio.AbstractEventLoop) -> bool:
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False


class AsyncActorRef(Generic[A]):
    """The handle callers hold. ``tell`` works from any thread; ``ask`` and proxy calls return
    awaitables on the actor's loop (use :meth:`ask_threadsafe` from another thread)."""

    def __init__(self, actor: A, loop: asyncio.AbstractEventLoop) -> None:
        self.actor_class = type(actor)
        self.loop = loop
        self._actor: A | None = actor
        self._inbox: list[tuple[Any, asyncio.Future[Any] | None]] = []
        """The mailbox: a list, the smallest container (an ``asyncio.Queue``, with its three
        deques and an ``Event``, cost every actor far more: bench/README.md, "An actor's memory
        and a thread hop"); a mailbox holds a few messages, a hundred or a thousand at most:
        taking the first of a list costs nothing that matters. Used on the actor's loop only."""
        self._alive = True
        self._stopping = False
        self._done: threading.Event | None = None  # made by the first blocking stop
        self._ended: asyncio.Future[None] | None = None  # made by the first wait_stopped
        self._task: asyncio.Task[None] | None = None
        """Runs while the actor starts or has messages; none while it waits for one."""
        self._spawned = False  # messages that come before the first task wait for it

    def __repr__(self) -> str:
        return f"<AsyncActorRef {self.actor_class.__name__} alive={self._alive}>"

    def is_alive(self) -> bool:
        return self._alive and not self._stopping

    # --- sending ------------------------------------------------------------------------

    def _check_can_send(self) -> None:
        if not self.is_alive():
            raise pykka.ActorDeadError(f"{self!r} is not running")
        if len(self._inbox) >= self.actor_class.mailbox_size:
            raise MailboxFullError(
                f"mailbox of {self.actor_class.__name__} is full "
                f"({self.actor_class.mailbox_size} messages)"
            )

    def tell(self, message: Any) -> None:
        self._check_can_send()
        if _on_loop(self.loop):
            self._deliver((message, None))
        else:
            post(self.loop, self._deliver, (message, None))

    def ask(self, message: Any) -> asyncio.Future[Any]:
        """An awaitable reply; call on the actor's loop."""
        self._check_can_send()
        future: asyncio.Future[Any] = self.loop.create_future()
        self._deliver((message, future))
        return future

    def ask_threadsafe(self, message: Any) -> concurrent.futures.Future[Any]:
        """A reply for code on another thread (``.result(timeout)`` blocks that thread only)."""
        self._check_can_send()

        async def _ask() -> Any:
            return await self.ask(message)

        return asyncio.run_coroutine_threadsafe(_ask(), self.loop)

    def idle(self) -> A | None:
        """The actor itself while it is alive and idle (started, no task, an empty mailbox,
        no turns to take), to a caller on its loop; else ``None``. Such a caller may run one
        of its *synchronous* methods in its own turn instead of asking: nothing else runs in
        the actor until that returns (the loop runs one thing at a time), so its state is
        still touched by one thing at a time, and the ask's task and two turns are saved."""
        actor = self._actor
        if actor is None or self._task is not None or self._inbox or not self._spawned:
            return None
        if self._stopping or actor._turns is not None or not _on_loop(self.loop):
            return None
        return actor

    def proxy(self) -> _Proxy:
        """``await ref.proxy().method(args)`` runs ``method`` inside the actor."""
        return _Proxy(self)

    # --- stopping -----------------------------------------------------------------------

    def stop(self, *, block: bool = False, timeout: float | None = None) -> bool:
        """Stop after the messages already queued. With ``block`` (from another thread only),
        wait until the actor has ended; returns False if it was not running."""
        if not self._alive or self._stopping:
            return False
        self._stopping = True
        if _on_loop(self.loop):
            self._deliver((_STOP, None))
        else:
            post(self.loop, self._deliver, (_STOP, None))
        if block:
            if _on_loop(self.loop):
                raise RuntimeError("stop(block=True) would deadlock on the actor's own loop")
            if not self._done_event().wait(timeout):
                raise pykka.Timeout(f"{timeout} seconds")
        return True

    def _done_event(self) -> threading.Event:
        """Set once the actor has ended. Made on demand (a ``threading.Event`` is larger than
        the rest of an idle actor's mailbox, and only a blocking stop, from another thread,
        waits on one)."""
        with _DONE_LOCK:
            if self._done is None:
                self._done = threading.Event()
                if not self._alive:
                    self._done.set()
            return self._done

    async def wait_stopped(self) -> None:
        """Await the end of the actor (on its loop)."""
        if not self._alive:
            return
        if self._ended is None:
            self._ended = self.loop.create_future()
        await asyncio.shield(self._ended)

    # --- the actor's task ---------------------------------------------------------------

    def _spawn(self) -> None:
        """The first task: the actor starts, then handles what its mailbox holds."""
        self._spawned = True
        self._task = self.loop.create_task(self._run(starting=True), name=self._task_name())

    def _task_name(self) -> str:
        return f"actor:{self.actor_class.__name__}"

    def _deliver(self, item: tuple[Any, asyncio.Future[Any] | None]) -> None:
        """Put ``item`` in the mailbox, and start a task to handle it if none runs. Sent from
        another thread, it may arrive after the actor has ended: its asker hears so."""
        if not self._alive:
            reply = item[1]
            if reply is not None and not reply.done():
                reply.set_exception(_dead(self))
            return
        self._inbox.append(item)
        if self._task is None and self._spawned:
            self._task = self.loop.create_task(self._run(starting=False), name=self._task_name())

    async def _run(self, *, starting: bool) -> None:
        """Start the actor (the first task), then handle the messages until the mailbox is
        empty: the task ends there, and the next message starts another."""
        actor = self._actor
        assert actor is not None
        error: BaseException | None = None
        turns = actor._turns
        try:
            if starting:
                if turns is not None:
                    await turns.take()
                await actor.on_start()
            while self._inbox:
                message, reply = self._inbox.pop(0)
                if message is _STOP:
                    await actor.on_stop()
                    break
                await self._handle(actor, message, reply)
            else:
                self._task = None  # nothing more to do: the next message starts a task
                return
        except Exception as exc:
            error = exc
        except asyncio.CancelledError:
            error = asyncio.CancelledError("actor task cancelled")
        except BaseException:  # SystemExit, KeyboardInterrupt: the process ends, reported
            self._finish(None)
            raise
        self._finish(error)
        # The error's traceback holds this frame: holding the error here too would be a
        # reference cycle, kept by a frozen heap for good (decision 50).
        del error

    async def _handle(self, actor: A, message: Any, reply: asyncio.Future[Any] | None) -> None:
        """Handle one message, and answer its asker; a failure nobody waits for crashes the
        actor (raised)."""
        turns = actor._turns
        try:
            if turns is not None:
                await turns.take()
            result = await self._dispatch(actor, message)
        except Exception as exc:
            if reply is None:
                raise
            if not reply.done():
                reply.set_exception(exc)
        except asyncio.CancelledError:
            # Taken off the mailbox already: the asker hears it, as those still in the
            # mailbox do (_finish).
            if reply is not None and not reply.done():
                reply.set_exception(_dead(self))
            raise
        else:
            if reply is not None and not reply.done():
                reply.set_result(result)

    async def _dispatch(self, actor: A, message: Any) -> Any:
        if isinstance(message, _Call):
            result = getattr(actor, message.name)(*message.args, **message.kwargs)
        else:
            result = actor.on_receive(message)
        if inspect.isawaitable(result):
            result = await result
        return result

    def _finish(self, error: BaseException | None) -> None:
        self._alive = False
        self._task = None
        inbox, self._inbox = self._inbox, []
        for _, reply in inbox:
            if reply is not None and not reply.done():
                reply.set_exception(_dead(self))
        actor, self._actor = self._actor, None
        with _DONE_LOCK:
            if self._done is not None:
                self._done.set()
        if self._ended is not None and not self._ended.done():
            self._ended.set_result(None)
        hook = actor._exit_hook if actor is not None else None
        if hook is not None:
            hook(ActorExit(self, error))


class _Proxy:
    __slots__ = ("_ref",)

    def __init__(self, ref: AsyncActorRef[Any]) -> None:
        self._ref = ref

    def __getattr__(self, name: str) -> Callable[..., Awaitable[Any]]:
        if name.startswith("_") or not callable(getattr(self._ref.actor_class, name, None)):
            raise AttributeError(f"{self._ref.actor_class.__name__} has no method {name!r}")

        def call(*args: Any, **kwargs: Any) -> Awaitable[Any]:
            return self._ref.ask(_Call(name, args, kwargs))

        return call


def _dead(ref: AsyncActorRef[Any]) -> pykka.ActorDeadError:
    return pykka.ActorDeadError(f"{ref!r} stopped before replying")
