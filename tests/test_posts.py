"""Calls posted onto an event loop from other threads (dmsgw.actors.posts)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from dmsgw.actors.posts import post


def _wake_ups(loop: asyncio.AbstractEventLoop) -> list[Any]:
    """Counts the loop's wake-ups from other threads (``call_soon_threadsafe``)."""
    seen: list[Any] = []
    original = loop.call_soon_threadsafe

    def counting(callback: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append(callback)
        return original(callback, *args, **kwargs)

    loop.call_soon_threadsafe = counting  # type: ignore[method-assign]
    return seen


async def test_calls_posted_before_the_loop_runs_them_share_one_wake_up_and_keep_their_order() -> (
    None
):
    loop = asyncio.get_running_loop()
    wake_ups = _wake_ups(loop)
    ran: list[int] = []
    done = asyncio.Event()

    def from_thread() -> None:
        for i in range(100):
            post(loop, ran.append, i)
        post(loop, done.set)

    thread = threading.Thread(target=from_thread)
    thread.start()  # the loop does not run until the thread has posted everything
    thread.join()
    await done.wait()
    assert ran == list(range(100))
    assert len(wake_ups) == 1


async def test_a_call_posted_after_the_loop_ran_the_queue_wakes_it_again() -> None:
    loop = asyncio.get_running_loop()
    wake_ups = _wake_ups(loop)
    for i in range(3):
        heard = asyncio.Event()
        thread = threading.Thread(target=post, args=(loop, heard.set))
        thread.start()
        thread.join()
        await heard.wait()
        assert len(wake_ups) == i + 1


async def test_a_call_that_raises_is_reported_and_the_others_still_run() -> None:
    loop = asyncio.get_running_loop()
    reported: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _, context: reported.append(context))
    ran: list[str] = []
    done = asyncio.Event()

    def fails() -> None:
        raise ValueError("boom")

    def from_thread() -> None:
        post(loop, ran.append, "before")
        post(loop, fails)
        post(loop, ran.append, "after")
        post(loop, done.set)

    thread = threading.Thread(target=from_thread)
    thread.start()
    thread.join()
    await done.wait()
    assert ran == ["before", "after"]
    assert [type(c["exception"]) for c in reported] == [ValueError]
    assert "fails" in reported[0]["message"]


def test_posting_to_a_closed_loop_raises_every_time() -> None:
    loop = asyncio.new_event_loop()
    loop.close()
    for _ in range(2):  # the failed first post left nothing queued that hides the second
        with pytest.raises(RuntimeError):
            post(loop, print)


def test_calls_posted_from_many_threads_at_once_all_run_once() -> None:
    loop = asyncio.new_event_loop()
    try:
        ran: list[tuple[int, int]] = []

        def posting(t: int) -> None:
            for i in range(200):
                post(loop, ran.append, (t, i))

        threads = [threading.Thread(target=posting, args=(t,)) for t in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        loop.run_until_complete(asyncio.sleep(0))
        assert sorted(ran) == [(t, i) for t in range(8) for i in range(200)]
        for t in range(8):  # each thread's calls in the order it posted them
            assert [i for u, i in ran if u == t] == list(range(200))
    finally:
        loop.close()
