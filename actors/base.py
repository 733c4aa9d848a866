"""The base of every dms-gateway actor: pykka threads with a bounded mailbox, futures that
asyncio can await, and an exit report that lets a supervisor restart it.

Two pykka internals are overridden, both covered by tests (pykka is pinned below 5):
``_create_actor_inbox``/``_create_future`` are pykka's documented hooks for implementors, and
``_actor_loop``/``_handle_failure`` are wrapped so that *every* way an actor ends (normal stop,
an exception on the tell path, a failing ``on_start``) is reported once, after its thread is done.
"""

from __future__ import annotations

import dataclasses
import queue
from collections.abc import Callable
from types import TracebackType
from typing import Any, ClassVar, Protocol

import pykka
from pykka.messages import _ActorStop

from ..errors import DmsgwError
from .bridge import CallbackFuture


class MailboxFullError(DmsgwError, queue.Full):
    """The actor is behind: its mailbox holds ``maxsize`` messages already."""


class SystemMessage:
    """A message that a full mailbox takes all the same, as it takes a stop request: one that
    comes once in a life (a child's exit, to its supervisor), so that their number is bounded
    by the senders', and whose loss would leave the receiver wrong for good (a supervisor
    that never heard a child end). 100,000 pod actors stopped at once overflowed their
    supervisor's 10,000 messages, and the exits that were refused were lost."""


class BoundedInbox(queue.Queue[Any]):
    """A mailbox that refuses at once when full instead of blocking the sender (and with it,
    possibly, the event loop). A stop request and a :class:`SystemMessage` are never
    refused."""

    def __init__(self, maxsize: int, owner: str) -> None:
        super().__init__(maxsize=0)  # capacity is enforced here, so stops can always go in
        self.capacity = maxsize
        self.owner = owner

    def put(self, item: Any, block: bool = True, timeout: float | None = None) -> None:
        if (
            not isinstance(getattr(item, "message", None), (_ActorStop, SystemMessage))
            and self.qsize() >= self.capacity
        ):
            raise MailboxFullError(f"mailbox of {self.owner} is full ({self.capacity} messages)")
        super().put(item, block=False)


class Ref(Protocol):
    """What supervisors and registries need of an actor ref: a pykka ``ActorRef`` (thread
    actors) or an :class:`~dmsgw.actors.aio.AsyncActorRef` (actors on the event loop)."""

    def tell(self, message: Any) -> None: ...

    def is_alive(self) -> bool: ...

    def stop(self, *, block: bool = ..., timeout: float | None = ...) -> Any: ...


@dataclasses.dataclass(frozen=True)
class ActorExit:
    """How an actor ended: ``error`` is ``None`` for a normal stop."""

    ref: Ref
    error: BaseException | None

    @property
    def normal(self) -> bool:
        return self.error is None


ExitHook = Callable[[ActorExit], None]


class Actor(pykka.ThreadingActor):
    """Subclass this; pass ``exit_hook`` to hear (once) how the actor ended."""

    mailbox_size: ClassVar[int] = 10_000
    use_daemon_thread: ClassVar[bool] = True  # a stuck actor never keeps the process alive

    def __init__(self, *, exit_hook: ExitHook | None = None) -> None:
        self._exit_hook = exit_hook
        self._exit_error: BaseException | None = None
        super().__init__()

    def _create_actor_inbox(self) -> BoundedInbox:  # type: ignore[override]
        return BoundedInbox(self.mailbox_size, type(self).__name__)

    @staticmethod
    def _create_future() -> CallbackFuture:
        return CallbackFuture()

    def _handle_failure(
        self,
        exception_type: type[BaseException] | None,
        exception_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._exit_error is None:
            self._exit_error = exception_value or RuntimeError("actor failed")
        super()._handle_failure(exception_type, exception_value, traceback)

    def _actor_loop(self) -> None:
        try:
            super()._actor_loop()
        finally:
            if self._exit_hook is not None:
                self._exit_hook(ActorExit(self.actor_ref, self._exit_error))
