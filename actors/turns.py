"""Sharing the event loop's turns between steps that become ready together.

A turn of the loop runs every callback that was ready when it began, and only then looks at
its timers and sockets. Work that many actors begin together (50 pods whose records shared one
commit start at once) then goes on in lockstep: each of the following turns carries one heavy
step of every actor, and every timer and request waits for all of them (creating pods 50 at a
time, such turns were the longest stalls: bench/README.md, "Steps per turn of the loop").
:class:`Turns` lets a few steps through per turn and the others
in the turns after, in the order they asked; :func:`wake_in_turns` settles waiters a few per
turn.
"""

from __future__ import annotations

import asyncio
import collections
import weakref
from collections.abc import Sequence

__all__ = ["PER_TURN", "Turns", "take_turn", "wake_in_turns"]

PER_TURN = 6
"""Steps let through per turn of the loop: a pod's heavy step is a fraction of a millisecond,
longer with a larger heap, so a turn holds a few milliseconds of them, not tens. 6 made the
creates' longest stall at 100,000 pods shorter than 8 did, at the same rate (decision 61;
bench/README.md, "Steps per turn of the loop")."""


class Turns:
    """A gate that steps pass, at most ``per_turn`` per turn of the loop. Used on one loop."""

    def __init__(self, per_turn: int = PER_TURN) -> None:
        self._per_turn = per_turn
        self._passed = 0  # steps let through since the turn began
        self._waiting: collections.deque[asyncio.Future[None]] = collections.deque()
        self._turn_end_due = False

    async def take(self) -> None:
        """Return in this turn if it has room and nobody waits, else in a later turn."""
        self._end_turn_soon()
        if self._passed < self._per_turn and not self._waiting:
            self._passed += 1
            return
        waiter = asyncio.get_running_loop().create_future()
        self._waiting.append(waiter)
        await waiter  # a cancelled waiter is skipped when its turn comes

    def _end_turn_soon(self) -> None:
        """Have :meth:`_turn_ended` run once the callbacks of this turn have: a callback
        scheduled now runs in the next turn, before those scheduled after it."""
        if not self._turn_end_due:
            self._turn_end_due = True
            asyncio.get_running_loop().call_soon(self._turn_ended)

    def _turn_ended(self) -> None:
        """A new turn: the next waiters go (they run in the turn after this callback's)."""
        self._turn_end_due = False
        self._passed = 0
        while self._waiting and self._passed < self._per_turn:
            waiter = self._waiting.popleft()
            if not waiter.done():
                waiter.set_result(None)
                self._passed += 1
        if self._waiting or self._passed:
            self._end_turn_soon()


_WAKING: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Turns] = weakref.WeakKeyDictionary()
"""Per loop, the one gate that every :func:`wake_in_turns` and :func:`take_turn` passes."""


def _loop_gate() -> Turns:
    """The running loop's one gate, made on first use."""
    loop = asyncio.get_running_loop()
    gate = _WAKING.get(loop)
    if gate is None:
        gate = _WAKING[loop] = Turns()
    return gate


async def take_turn() -> None:
    """Pass the loop's one gate, the one :func:`wake_in_turns` passes: for a heavy step that
    many callers may begin in the same turn, such as the requests of interLink's connections
    each reading a body never seen before (64 connections at once held the loop as long as
    the longest stall allowed: bench/README.md, "Steps per turn of the loop")."""
    await _loop_gate().take()


async def wake_in_turns(waiters: Sequence[asyncio.Future[None]]) -> None:
    """Settle ``waiters`` (those not settled already), a few per turn of the loop: what each
    does next runs before the next ones wake, not all in one turn. Every wake-up on a loop
    passes one gate: batches woken at once (the creates of several supervisor replies that
    came back together, a commit's writers) go a few per turn in all, where each batch let
    a few through and seven batches ran in one long turn (decision 61; bench/README.md,
    "Steps per turn of the loop")."""
    gate = _loop_gate()
    for done in waiters:
        if not done.done():
            await gate.take()
            if not done.done():  # cancelled while it waited for its turn
                done.set_result(None)
