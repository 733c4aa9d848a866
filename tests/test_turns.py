"""Steps that become ready together share the loop's turns: a few per turn, in order."""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable

import pykka
import pytest

from dmsgw.actors.aio import AsyncActor
from dmsgw.actors.turns import PER_TURN, Turns, wake_in_turns


async def test_steps_ready_together_pass_a_few_per_turn_in_order(
    turn: Callable[[], int],
) -> None:
    turns = Turns()
    passed: list[tuple[int, int]] = []

    async def step(i: int) -> None:
        await turns.take()
        passed.append((i, turn()))

    await asyncio.gather(*(step(i) for i in range(3 * PER_TURN + 2)))
    assert [i for i, _ in passed] == list(range(3 * PER_TURN + 2))
    per_turn = collections.Counter(t for _, t in passed)
    assert max(per_turn.values()) == PER_TURN
    assert len(per_turn) == 4


async def test_a_step_cancelled_while_waiting_takes_no_room() -> None:
    turns = Turns(per_turn=1)
    passed: list[int] = []

    async def step(i: int) -> None:
        await turns.take()
        passed.append(i)

    tasks = [asyncio.get_running_loop().create_task(step(i)) for i in range(4)]
    await asyncio.sleep(0)  # 0 passed; 1, 2 and 3 wait
    tasks[1].cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    assert passed == [0, 2, 3]


async def test_a_lone_step_passes_at_once_and_the_gate_then_rests() -> None:
    turns = Turns()
    await turns.take()
    for _ in range(3):
        await asyncio.sleep(0)
    assert not turns._turn_end_due  # nothing left scheduled: the loop may sleep


async def test_waiters_are_woken_a_few_per_turn(turn: Callable[[], int]) -> None:
    loop = asyncio.get_running_loop()
    waiters = [loop.create_future() for _ in range(2 * PER_TURN)]
    waiters[0].cancel()  # a caller that went away is skipped

    async def woken(waiter: asyncio.Future[None]) -> int:
        await waiter
        return turn()

    heard = [loop.create_task(woken(w)) for w in waiters[1:]]
    await wake_in_turns(waiters)
    turns_heard = collections.Counter(await asyncio.gather(*heard))
    assert sorted(turns_heard.values()) == [PER_TURN - 1, PER_TURN]


async def test_batches_woken_at_once_share_the_loop_s_turns(turn: Callable[[], int]) -> None:
    """Several batches settled together (supervisor replies that came back in one turn) go
    a few per turn in all, not a few per batch."""
    loop = asyncio.get_running_loop()
    batches = [[loop.create_future() for _ in range(PER_TURN)] for _ in range(4)]
    batches[2][3].cancel()  # a caller that went away takes no room

    async def woken(waiter: asyncio.Future[None]) -> int:
        await waiter
        return turn()

    heard = [loop.create_task(woken(w)) for batch in batches for w in batch if not w.done()]
    await asyncio.gather(*(wake_in_turns(batch) for batch in batches))
    turns_heard = collections.Counter(await asyncio.gather(*heard))
    assert sum(turns_heard.values()) == 4 * PER_TURN - 1
    assert max(turns_heard.values()) == PER_TURN


class _Recorder(AsyncActor):
    def __init__(self, started: list[int], turn: Callable[[], int], **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self._started = started
        self._turn = turn

    async def on_start(self) -> None:
        self._started.append(self._turn())


async def test_actors_sharing_turns_start_a_few_per_turn(turn: Callable[[], int]) -> None:
    turns = Turns()
    started: list[int] = []
    refs = [_Recorder.start(started, turn, turns=turns) for _ in range(3 * PER_TURN)]
    try:
        while len(started) < len(refs):
            await asyncio.sleep(0)
    finally:
        for ref in refs:
            ref.stop()
    assert max(collections.Counter(started).values()) == PER_TURN


class _Echo(AsyncActor):
    async def on_receive(self, message: object) -> object:
        return message


async def test_an_ask_waiting_for_its_turn_hears_if_the_actor_is_cancelled() -> None:
    """The message is off the mailbox while it waits for a turn: the asker still hears that
    the actor is gone, as those whose messages were still in the mailbox do."""
    turns = Turns()
    ref = _Echo.start(turns=turns)
    assert await ref.ask("started") == "started"
    closed = asyncio.Event()

    async def never() -> None:
        await closed.wait()

    turns.take = never  # type: ignore[method-assign]
    asked = ref.ask("waits")
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert ref._task is not None
    ref._task.cancel()
    with pytest.raises(pykka.ActorDeadError):
        await asyncio.wait_for(asked, 1.0)
