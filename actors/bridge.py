"""Awaiting pykka actors from asyncio without blocking the event loop.

pykka's own ``await future`` yields once and then *blocks* in ``get()``, freezing the loop for
as long as the actor takes. Instead every future our actors create can call back when it is
set; the callback wakes the loop (:func:`~dmsgw.actors.posts.post`). No thread is parked per ask.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from typing import Any

import pykka
from pykka import ActorRef

from .posts import post

DoneCallback = Callable[["CallbackFuture"], None]


class CallbackFuture(pykka.ThreadingFuture[Any]):
    """A ``ThreadingFuture`` that runs callbacks when its result is set."""

    def __init__(self) -> None:
        super().__init__()
        self._callbacks: list[DoneCallback] = []

    def add_done_callback(self, fn: DoneCallback) -> None:
        with self._condition:
            if self._result is None:
                self._callbacks.append(fn)
                return
        fn(self)

    def set(self, value: Any | None = None) -> None:
        super().set(value)
        self._run_callbacks()

    def set_exception(self, exc_info: Any | None = None) -> None:
        super().set_exception(exc_info if exc_info is not None else sys.exc_info())
        self._run_callbacks()

    def _run_callbacks(self) -> None:
        with self._condition:
            callbacks, self._callbacks = self._callbacks, []
        for fn in callbacks:
            fn(self)


def wrap_future(future: pykka.Future[Any]) -> asyncio.Future[Any]:
    """An asyncio future on the running loop that completes with ``future``."""
    if not isinstance(future, CallbackFuture):
        raise TypeError(
            "only futures of dmsgw actors (CallbackFuture) can be awaited without blocking the loop"
        )
    loop = asyncio.get_running_loop()
    result: asyncio.Future[Any] = loop.create_future()

    def _transfer(done: CallbackFuture) -> None:
        if result.cancelled():
            return
        try:
            result.set_result(done.get(timeout=0))
        except BaseException as exc:  # handed to the awaiting task
            result.set_exception(exc)

    def _on_done(done: CallbackFuture) -> None:
        if not loop.is_closed():
            post(loop, _transfer, done)

    future.add_done_callback(_on_done)
    return result


async def ask(ref: ActorRef[Any], message: Any, *, timeout: float | None = None) -> Any:
    """``ref.ask(message)`` awaited without blocking the loop."""
    async with asyncio.timeout(timeout):
        return await wrap_future(ref.ask(message, block=False))


async def call(future: pykka.Future[Any], *, timeout: float | None = None) -> Any:
    """Await a proxy call's future (``await call(proxy.method(x))``) without blocking the loop."""
    async with asyncio.timeout(timeout):
        return await wrap_future(future)
