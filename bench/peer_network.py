"""A DMS and the peers of its network, in a process of their own: what ``ping.py`` asks.

The local DMS is an embedded-devnet node (``DmsNode`` with the devnet's peer behaviors and
its REST API), as a gateway finds it: ``peers/self`` and ``peers/list`` (the peers of its
network, from the network's registry, as the devnet answers) and ``resources/free`` and
``resources/onboarded`` of its own. Each peer is a ``DmsNode`` of its own on the same
in-process network, under a key made in this process, that trusts chains rooted in the
local DMS's operator for ``/dms/node`` (a require anchor, as devnet nodes trust each other's
operators). A request the gateway addresses to a peer goes the devnet's way: the DMS's REST
API decodes it and sends it to the peer over the network; the peer receives it as a DMS does
(decode, check the addressing, verify the signature, consume and require the capability
tokens), answers after ``latency_s`` (its round trip through the DMS network) and signs its
reply with its own key; the reply comes back to the API's waiting inbox and is written out.
Every tenth peer has a GPU. What the stand-in skips: libp2p (the network is in-process), and
the peers' work runs on this process's CPU, where a real network's runs on each peer's own
machine.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from typing import Any

from aiohttp import web

import dmsgw
from dmsgw.behaviors.node_resources import ResourcesResponse
from dmsgw.behaviors.resources import CPU, GPU, RAM, Disk, Resources
from dmsgw.clock import NS_PER_SECOND, system_clock
from dmsgw.devnet.devnet import grant_token, node_key
from dmsgw.devnet.handlers import install_basic_behaviors
from dmsgw.devnet.network import Network
from dmsgw.devnet.rest_api import make_app
from dmsgw.devnet.simulated_node import DmsNode
from dmsgw.keys.crypto import Ed25519PrivKey
from dmsgw.keys.did import DID
from dmsgw.keys.trust import provider_from_private_key
from dmsgw.keys.ucan.context import CapabilityContext
from dmsgw.keys.ucan.token import TokenList
from dmsgw.transport.rest import RestTransport

SEED = "bench-ping"
GIB = 2**30
ANCHOR_S = 30 * 24 * 3600  # outlives the run: no renewal warning
RESOURCE_BEHAVIORS = ("/dms/node/resources/free", "/dms/node/resources/onboarded")


def dms_key() -> Ed25519PrivKey:
    """The local DMS's key (from the seed: the bench grants the gateway with it)."""
    return node_key(SEED, 0)


def free_of(index: int) -> Resources:
    """A typical provider: 8 cores, 16 GiB, 200 GiB; every tenth has an NVIDIA card."""
    gpus = (
        (GPU(index=0, vendor="NVIDIA", model="RTX 3090", vram=24 * GIB, uuid=f"GPU-{index}"),)
        if index % 10 == 0
        else None
    )
    return Resources(
        cpu=CPU(cores=8.0, clock_speed=3.0e9),
        gpus=gpus,
        ram=RAM(size=16 * GIB),
        disk=Disk(size=200 * GIB),
    )


def _answer(resources: Resources, latency_s: float) -> Callable[[Any, Any], Any]:
    """A ``resources/*`` handler: the node's resources, after its round trip."""
    reply = ResourcesResponse(ok=True, resources=resources)

    async def handler(msg: Any, request: Any) -> ResourcesResponse:
        if latency_s:
            await asyncio.sleep(latency_s)
        return reply

    return handler


def _peer(index: int, network: Network, operator: CapabilityContext, latency_s: float) -> None:
    """One remote DMS under a fresh key, trusting the local DMS's operator for ``/dms/node``."""
    key = Ed25519PrivKey(os.urandom(32))
    ctx = CapabilityContext(provider_from_private_key(key), name="dms")
    expire = system_clock() + ANCHOR_S * NS_PER_SECOND
    anchor = grant_token(ctx, operator.did, ["/dms/node"], expire=expire)
    ctx.add_roots(require=TokenList.of(anchor.present()))
    peer = DmsNode(key, network, name=f"peer{index}", capabilities=ctx)
    for name in RESOURCE_BEHAVIORS:
        peer.add_behavior(name, _answer(free_of(index + 1), latency_s))


def serve_network(port: int, *, peers: int, latency_s: float) -> None:
    """The child process: the local DMS on ``port`` and ``peers`` peers, until killed."""

    async def forever() -> None:
        network = Network()
        dms = DmsNode(dms_key(), network, name="dms")
        install_basic_behaviors(dms)
        for name in RESOURCE_BEHAVIORS:  # the local DMS answers of itself at once
            dms.add_behavior(name, _answer(free_of(0), 0.0))
        for index in range(peers):
            _peer(index, network, dms.capabilities, latency_s)
        runner = web.AppRunner(make_app(dms), access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        await asyncio.Event().wait()

    asyncio.run(forever())


def gateway_client(url: str, key: Ed25519PrivKey) -> Any:
    """A DMS client under ``key`` to the stand-in at ``url``, granted ``/dms/node`` by the
    local DMS's operator, with the REST transport ``dmsgw serve`` uses (64 requests at once):
    its ``NodeClient`` is how the gateway calls the DMS."""
    operator = CapabilityContext(provider_from_private_key(dms_key()))
    expire = system_clock() + ANCHOR_S * NS_PER_SECOND
    subject = DID.from_public_key(key.public_key())
    grant = grant_token(operator, subject, ["/dms/node"], expire=expire)
    ctx = CapabilityContext(provider_from_private_key(key), provide=grant)
    loop = asyncio.get_running_loop()
    transport = RestTransport(url, max_concurrency=64)
    return dmsgw.connect(url, key=key, context=ctx, transport=transport, loop=loop)
