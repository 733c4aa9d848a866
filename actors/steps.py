"""Work that waits most of its life, held by the loop's timers instead of by a task.

CPython (3.11-3.13) keeps every live task in one ``WeakSet``, and a set grows by doubling: the
insert that crosses its threshold copies every entry in one step. A gateway of 100,000 pods
kept two tasks a pod, and the set's doubling inside ``create_task`` held the loop for tens of
milliseconds in one callback (decision 58; bench/README.md, "Maps and sets that double"). A
followed pod waits between two polls nearly all
its life; :class:`Steps` runs each poll in a task of its own and waits between them on a
timer of the loop's wheel (:mod:`dmsgw.actors.wheel`), so that the pod holds a task only while
it polls, and no timer of the loop's own.
"""

from __future__ import annotations

import asyncio
import inspect
import math
from collections.abc import Callable, Coroutine
from typing import Any

from .wheel import WheelTimer, wheel_of

Step = Callable[[], Coroutine[Any, Any, "float | None"]]
"""One step of the work: the seconds to wait before the next (``math.inf``: until
:meth:`Steps.wake`), or ``None`` once it is over."""


class Steps(asyncio.Future[None]):
    """Runs ``step`` after ``first_wait_s``, and again after each wait it returns, until it
    returns ``None`` (this future's result), raises (its exception) or is cancelled.

    A future like a task: cancelling it cancels the step that runs, if one does, and it is
    done once that step has ended, as a task is done once its coroutine has. ``on_end`` runs
    when it is done, however it ended.
    """

    __slots__ = ("_on_end", "_step", "_task", "_timer")
    _task: asyncio.Task[None] | None

    def __init__(
        self,
        step: Step,
        *,
        first_wait_s: float = 0.0,
        on_end: Callable[[], None] | None = None,
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(loop=loop or asyncio.get_running_loop())
        self._step = step
        self._on_end = on_end
        self._task = None  # the step that runs, if one does
        self._timer: WheelTimer | None = None
        self._wait(first_wait_s)

    def _wait(self, seconds: float) -> None:
        """The next step, after ``seconds`` on the loop's wheel (at once, for none; never by
        itself, for ``math.inf``): not on a timer of the loop's own, of which a gateway would
        hold one a pod (see :mod:`dmsgw.actors.wheel`)."""
        if seconds == math.inf:
            return  # parked: only wake() moves it on
        if seconds > 0:
            self._timer = wheel_of(self.get_loop()).call_later(seconds, self._next)
        else:
            self._next()

    def wake(self) -> None:
        """Run the next step now, whatever wait the last one asked for; nothing while a step
        runs or once the steps are over. What a step parked on ``math.inf`` waits for."""
        if self.done() or self._task is not None:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._next()

    def _next(self) -> None:
        self._timer = None
        self._task = self.get_loop().create_task(self._run_step())

    async def _run_step(self) -> None:
        """Run a step, then wait for the next or end as it did: in the step's own task, so
        that the steps have moved on by the time the task is done (a callback on its end was
        one more turn of the loop a poll, and a window in which the finished task refused a
        cancel)."""
        try:
            seconds = await self._step()
        except asyncio.CancelledError:
            self._task = None
            self._end(cancelled=True)
            raise
        except Exception as error:
            self._task = None
            self._end(error=error)
            return
        self._task = None
        if seconds is None:
            self._end()
        elif not self.done():
            self._wait(seconds)

    def cancel(self, msg: Any | None = None) -> bool:
        """Stop: at once between two steps, once the step has ended while one runs."""
        if self.done():
            return False
        task = self._task
        if task is not None:
            task.cancel(msg)
            step = task.get_coro()
            if not inspect.iscoroutine(step) or inspect.getcoroutinestate(step) != "CORO_CREATED":
                return True  # the step hears it, and ends the steps (_run_step)
            self._task = None  # cancelled before it began: it never will
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._end(cancelled=True)
        return True

    def _end(self, *, error: BaseException | None = None, cancelled: bool = False) -> None:
        if self.done():
            return
        if cancelled:
            super().cancel()
        elif error is not None:
            self.set_exception(error)
        else:
            self.set_result(None)
        on_end, self._on_end = self._on_end, None
        if on_end is not None:
            on_end()
