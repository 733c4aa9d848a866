"""A devnet's stop ends, whatever its tasks were doing when it came (issue 26, item 6).

``make test`` once hung for good in a devnet's stop: a health check's task lost its cancel.
On Python 3.11, ``asyncio.wait_for`` returns the awaited result when a cancel arrives in the
same turn as that result, and the cancelled loop goes on. These tests put a cancel exactly there,
and give a stopping node a task that ignores its first cancel.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from dmsgw.devnet.devnet import Devnet
from dmsgw.devnet.protocol import HEALTHCHECK, INTERNAL_SPECS, OkResponse
from dmsgw.transport.envelope import Envelope

pytestmark = pytest.mark.timeout(30)


async def test_an_invoke_cancelled_as_its_reply_arrives_ends_cancelled() -> None:
    devnet = Devnet(2, seed="cancel-at-reply")
    asking = devnet.nodes[0].node.spawn_actor("asking")
    answering = devnet.nodes[1].node.spawn_actor("answering")

    async def healthy(msg: Envelope, request: Any) -> OkResponse:
        return OkResponse(ok=True)

    answering.add_behavior(INTERNAL_SPECS[HEALTHCHECK], healthy)
    invoking: list[asyncio.Task[Any]] = []

    async def reply_then_cancel(data: bytes) -> None:
        await asking.receive(data)
        invoking[0].cancel()  # in the turn the reply completed the invoke's wait

    devnet.network.register(asking.host, asking.handle.addr.inbox, reply_then_cancel)
    invoking.append(asyncio.create_task(asking.invoke(answering.handle, HEALTHCHECK, None, 10)))
    with pytest.raises(asyncio.CancelledError):
        await invoking[0]


async def test_a_stopping_node_cancels_again_a_task_that_ignored_its_cancel() -> None:
    node = Devnet(1, seed="stubborn-task").nodes[0].node
    cancels = 0

    async def stubborn() -> None:
        nonlocal cancels
        while True:
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                cancels += 1
                if cancels > 1:
                    raise

    node.spawn(stubborn(), "stubborn")
    await asyncio.sleep(0)  # the task starts waiting
    await node.cancel_tasks(again_s=0.01)
    assert cancels == 2
