"""Calls from other threads onto an event loop, many for one wake-up.

``loop.call_soon_threadsafe`` writes a byte to the loop's wake-up socket for every call. From
a thread that holds the GIL, the write lets it go and takes it back: a supervisor starting a
batch of pod actors lost time at every pod there (bench/README.md, "Calls from other
threads"), waiting for the loop's thread to hand the GIL back each time, while the loop was
woken for each actor.
:func:`post` queues the call instead; only the first call queued while the loop has not
yet run the queue wakes it, and the loop runs every call queued by then, in the order they
were posted (decision 60).
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import Callable
from typing import Any

__all__ = ["post"]

_Call = tuple[Callable[..., object], tuple[Any, ...]]

_LOCK = threading.Lock()
_POSTED: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, list[_Call]] = (
    weakref.WeakKeyDictionary()
)
"""Per loop, the calls posted since the loop last ran them (none: no wake-up is pending)."""


def post(loop: asyncio.AbstractEventLoop, callback: Callable[..., object], *args: Any) -> None:
    """Run ``callback(*args)`` on ``loop`` soon, from any thread (``call_soon_threadsafe``'s
    contract: ``RuntimeError`` if the loop is closed)."""
    with _LOCK:
        queued = _POSTED.get(loop)
        if queued is not None:
            queued.append((callback, args))
            return
        _POSTED[loop] = [(callback, args)]
        try:
            loop.call_soon_threadsafe(_run_posted, loop)
        except RuntimeError:  # closed: nothing queued here will ever run
            del _POSTED[loop]
            raise


def _run_posted(loop: asyncio.AbstractEventLoop) -> None:
    """(On ``loop``.) Run what was posted to it; one call that raises does not keep the
    others from running (the loop's exception handler hears of it, as of a callback's)."""
    with _LOCK:
        queued = _POSTED.pop(loop, [])
    for callback, args in queued:
        try:
            callback(*args)
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            loop.call_exception_handler(
                {"message": f"Exception in posted callback {callback!r}", "exception": exc}
            )
