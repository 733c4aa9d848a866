"""The in-memory transport: the same client code path as over HTTP, without sockets."""

from __future__ import annotations

import asyncio

import pytest

import dmsgw
from dmsgw.behaviors.node import NotGrantedError
from dmsgw.devnet.devnet import Devnet
from dmsgw.devnet.rest_api import DmsApi
from dmsgw.keys.crypto import Ed25519PrivKey
from dmsgw.keys.did import DID
from dmsgw.keys.trust import provider_from_private_key
from dmsgw.keys.ucan import CapabilityContext
from dmsgw.transport import envelope as env
from dmsgw.transport.memory import MemoryTransport
from dmsgw.transport.rest import DMSRequestError, DMSTimeoutError
from dmsgw.transport.security import SecurityContext

KEY = Ed25519PrivKey(bytes(range(60, 92)))
OTHER_KEY = Ed25519PrivKey(bytes(range(61, 93)))


async def test_the_client_works_over_memory_like_over_http() -> None:
    devnet = Devnet(2, seed="memory-tests")  # nodes only: no REST server is started
    api = DmsApi(devnet.nodes[0].node, early_timeout=True)
    grant = devnet.grant(DID.from_public_key(KEY.public_key()), ["/dms/node", "/public"])
    ctx = CapabilityContext(provider_from_private_key(KEY), provide=grant)
    dms = dmsgw.connect(
        key=KEY, context=ctx, transport=MemoryTransport(api), loop=asyncio.get_running_loop()
    )
    try:
        assert (await dms.peers.self()).id == devnet.nodes[0].node.peer_id
        assert (await dms.public.hello(to=devnet.nodes[1].node.peer_id)).did == devnet.nodes[
            1
        ].node.did
        with pytest.raises(NotGrantedError, match="none covers /dms/cap/list"):
            await dms.invoke("/dms/cap/list")  # refused before it is sent
        stranger = dmsgw.connect(
            key=OTHER_KEY,
            context=CapabilityContext(provider_from_private_key(OTHER_KEY)),
            transport=MemoryTransport(api),
            loop=asyncio.get_running_loop(),
        )
        async with stranger:  # no grant at all: sent, dropped, 408, explained
            with pytest.raises(DMSTimeoutError, match="untrusted_issuer"):
                await stranger.invoke("/dms/cap/list")
        transport = MemoryTransport(api)
        with pytest.raises(DMSRequestError, match="HTTP 400"):
            await transport.broadcast(env.Envelope(be="/broadcast/hello"))
    finally:
        await dms.aclose()


async def test_a_message_cannot_ride_on_the_tokens_of_one_already_handled() -> None:
    """A DMS discards a message's tokens once it has handled it (``defer msg.Discard()``): a
    later message must bring its own, and the node's context does not grow per message."""
    devnet = Devnet(1, seed="memory-discard")
    node = devnet.nodes[0].node
    api = DmsApi(node, early_timeout=True)
    grant = devnet.grant(DID.from_public_key(KEY.public_key()), ["/dms/node"])
    ctx = CapabilityContext(provider_from_private_key(KEY), provide=grant)
    transport = MemoryTransport(api)
    dms = dmsgw.connect(key=KEY, context=ctx, transport=transport, loop=asyncio.get_running_loop())
    try:
        for _ in range(3):
            assert (await dms.peers.self()).id == node.peer_id
        ungranted = SecurityContext(KEY, CapabilityContext(provider_from_private_key(KEY)))
        dms_handle = await transport.handle()
        source = env.Handle(ungranted.id, ungranted.did, env.Address(dms_handle.addr.host, "u-9"))
        msg = env.message(source, dms_handle, "/dms/node/peers/self", reply_to="/private/user/9")
        with pytest.raises(DMSTimeoutError):
            await transport.invoke(ungranted.provide(msg, ["/dms/node/peers/self"]))
        assert "requiring capabilities" in node.dropped[-1].reason
    finally:
        await dms.aclose()


async def test_a_request_reads_only_the_provide_anchors(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each request checks the gateway's grants before it is sent: it reads the live provide
    anchors, not a copy of every anchor table and the revocations (``list_roots``)."""
    devnet = Devnet(1, seed="memory-anchors")
    api = DmsApi(devnet.nodes[0].node, early_timeout=True)
    grant = devnet.grant(DID.from_public_key(KEY.public_key()), ["/dms/node"])
    ctx = CapabilityContext(provider_from_private_key(KEY), provide=grant)
    dms = dmsgw.connect(
        key=KEY, context=ctx, transport=MemoryTransport(api), loop=asyncio.get_running_loop()
    )
    try:

        def copied(self: CapabilityContext) -> None:
            raise AssertionError("list_roots() copied on a request")

        monkeypatch.setattr(CapabilityContext, "list_roots", copied)
        for _ in range(2):
            assert (await dms.peers.self()).id == devnet.nodes[0].node.peer_id
    finally:
        await dms.aclose()
