"""An idle actor lends itself to a caller on its loop for one synchronous step
(``AsyncActorRef.idle``), and the DMS client signs a request that way while its actor is idle,
through the actor's mailbox otherwise: either way one request, one nonce each."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import dmsgw
from dmsgw.actors.aio import AsyncActor
from dmsgw.actors.turns import Turns
from dmsgw.behaviors.catalog import PEERS_SELF
from dmsgw.behaviors.node import NodeActor
from dmsgw.devnet.devnet import Devnet
from dmsgw.devnet.rest_api import DmsApi
from dmsgw.keys.crypto import Ed25519PrivKey
from dmsgw.keys.did import DID
from dmsgw.keys.trust import provider_from_private_key
from dmsgw.keys.ucan import CapabilityContext
from dmsgw.transport.memory import MemoryTransport

KEY = Ed25519PrivKey(bytes(range(70, 102)))
WAIT_S = 10.0


class Holder(AsyncActor):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.gate = asyncio.Event()

    async def hold(self) -> None:
        await self.gate.wait()

    async def noop(self) -> None:
        return None


async def test_an_actor_lends_itself_only_while_started_idle_and_alive() -> None:
    ref = Holder.start()
    assert ref.idle() is None  # its first task (the start) is under way
    await ref.proxy().noop()
    actor = ref.idle()
    assert isinstance(actor, Holder)
    held = asyncio.ensure_future(ref.proxy().hold())
    assert ref.idle() is None  # a message in the mailbox
    await asyncio.sleep(0)
    assert ref.idle() is None  # one being handled
    actor.gate.set()
    await asyncio.wait_for(held, WAIT_S)
    assert ref.idle() is actor
    ref.stop()
    assert ref.idle() is None  # stopping
    await ref.wait_stopped()
    assert ref.idle() is None


async def test_an_actor_that_takes_turns_is_always_asked() -> None:
    ref = Holder.start(turns=Turns())
    try:
        await ref.proxy().noop()
        assert ref.idle() is None
    finally:
        ref.stop()
        await ref.wait_stopped()


@pytest.fixture
def counted_asks(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The behaviors the client asked its actor to sign through the mailbox."""
    asked: list[str] = []
    prepare = NodeActor.prepare_invoke

    async def counting(self: NodeActor, behavior: Any, *args: Any, **kwargs: Any) -> Any:
        asked.append(behavior.name)
        return await prepare(self, behavior, *args, **kwargs)

    monkeypatch.setattr(NodeActor, "prepare_invoke", counting)
    return asked


async def test_the_client_signs_in_its_own_turn_while_its_actor_is_idle(
    counted_asks: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    devnet = Devnet(1, seed="idle-actor-tests")
    api = DmsApi(devnet.nodes[0].node, early_timeout=True)
    grant = devnet.grant(DID.from_public_key(KEY.public_key()), ["/dms/node"])
    ctx = CapabilityContext(provider_from_private_key(KEY), provide=grant)
    transport = MemoryTransport(api)
    dms = dmsgw.connect(key=KEY, context=ctx, transport=transport, loop=asyncio.get_running_loop())
    client = dms._runtime.client
    try:
        await client.invoke(PEERS_SELF)  # the actor is still starting: asked
        assert counted_asks == [PEERS_SELF.name]
        await client.invoke(PEERS_SELF)  # now idle: signed in this turn
        assert counted_asks == [PEERS_SELF.name]
        counted_asks.clear()
        # Busy (a message of its own under way): the next call waits in its mailbox.
        gate = asyncio.Event()

        async def hold(self: NodeActor) -> None:
            await gate.wait()

        monkeypatch.setattr(NodeActor, "hold", hold, raising=False)
        busy = client.actor.proxy().hold()
        call = asyncio.ensure_future(client.invoke(PEERS_SELF))
        asyncio.get_running_loop().call_soon(gate.set)  # once both have taken their step
        reply, _ = await asyncio.wait_for(asyncio.gather(call, busy), WAIT_S)
        assert counted_asks == [PEERS_SELF.name]
        assert reply.id == devnet.nodes[0].node.peer_id
        # Many at once, each signed with a nonce of its own (the DMS refuses a repeat).
        many = await asyncio.wait_for(
            asyncio.gather(*(client.invoke(PEERS_SELF) for _ in range(20))), WAIT_S
        )
        assert {r.id for r in many} == {devnet.nodes[0].node.peer_id}
    finally:
        await dms.aclose()
