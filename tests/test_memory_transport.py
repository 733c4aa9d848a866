"""The in-memory transport: the same client code path as over HTTP, without sockets."""

from __future__ import annotations

import asyncio

import pytest

import dmsgw
from dmsgw.devnet.devnet import Devnet
from dmsgw.devnet.rest import DmsApi
from dmsgw.keys.crypto import Ed25519PrivKey
from dmsgw.keys.did import DID
from dmsgw.keys.trust import provider_from_private_key
from dmsgw.keys.ucan import CapabilityContext
from dmsgw.transport.memory import MemoryTransport
from dmsgw.transport.rest import DMSRequestError, DMSTimeoutError

KEY = Ed25519PrivKey(bytes(range(60, 92)))


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
        with pytest.raises(DMSTimeoutError, match="none covers /dms/cap/list"):
            await dms.invoke("/dms/cap/list")
        transport = MemoryTransport(api)
        with pytest.raises(DMSRequestError, match="HTTP 400"):
            from dmsgw.transport.envelope import Envelope

            await transport.broadcast(Envelope(be="/broadcast/hello"))
    finally:
        await dms.aclose()
