"""A devnet: N simulated DMS nodes on one in-process network, each with a REST API on loopback.

The nodes trust each other's DIDs as roots (a devnet is one operator's playground), and each
node's operator can grant capabilities to outside keys such as the gateway's, exactly as with
``nunet cap grant``. :class:`Devnet` runs on the caller's event loop; :class:`BackgroundDevnet`
runs one on its own thread for synchronous callers (a REPL, ``dmsgw devnet up``, pytest).
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import threading
from collections.abc import Coroutine, Sequence
from typing import Any, TypeVar

from aiohttp import web

from dmsgw.clock import NS_PER_SECOND, Clock, system_clock
from dmsgw.devnet.handlers import install_basic_behaviors
from dmsgw.devnet.network import Network
from dmsgw.devnet.node import DmsNode
from dmsgw.devnet.rest import make_app
from dmsgw.keys.crypto import Ed25519PrivKey
from dmsgw.keys.did import DID
from dmsgw.keys.trust import provider_from_private_key
from dmsgw.keys.ucan.context import CapabilityContext
from dmsgw.keys.ucan.token import Action, TokenList

T = TypeVar("T")

DEFAULT_NODES = 3
DEFAULT_HOST = "127.0.0.1"


def node_key(seed: str, index: int) -> Ed25519PrivKey:
    """A node's key, derived from the devnet seed: the same seed gives the same identities, so
    a restarted node keeps its identity and a devnet can be described by one word."""
    return Ed25519PrivKey(hashlib.sha256(f"dmsgw-devnet/{seed}/{index}".encode()).digest())


@dataclasses.dataclass
class DevnetNode:
    """A running node: the simulated DMS and its REST server."""

    node: DmsNode
    runner: web.AppRunner | None = None
    url: str = ""


class Devnet:
    """``nodes`` simulated DMS nodes; ``base_port`` 0 picks free ports."""

    def __init__(
        self,
        nodes: int = DEFAULT_NODES,
        *,
        seed: str = "default",
        base_port: int = 0,
        host: str = DEFAULT_HOST,
        clock: Clock = system_clock,
        early_timeout: bool = False,
    ) -> None:
        if nodes < 1:
            raise ValueError("a devnet needs at least one node")
        self.network = Network()
        self.clock = clock
        self.host = host
        self.base_port = base_port
        self.early_timeout = early_timeout
        keys = [node_key(seed, i) for i in range(nodes)]
        dids = [DID.from_public_key(k.public_key()) for k in keys]
        self.nodes: list[DevnetNode] = []
        for i, key in enumerate(keys):
            ctx = CapabilityContext(
                provider_from_private_key(key),
                name="dms",
                roots=[d for j, d in enumerate(dids) if j != i],
                clock=clock,
            )
            node = DmsNode(key, self.network, name=f"node{i}", capabilities=ctx, clock=clock)
            install_basic_behaviors(node)
            self.nodes.append(DevnetNode(node))

    @property
    def urls(self) -> list[str]:
        return [n.url for n in self.nodes]

    async def start(self) -> None:
        for i, entry in enumerate(self.nodes):
            await self._serve(entry, self.base_port + i if self.base_port else 0)

    async def _serve(self, entry: DevnetNode, port: int) -> None:
        runner = web.AppRunner(make_app(entry.node, early_timeout=self.early_timeout))
        await runner.setup()
        site = web.TCPSite(runner, self.host, port)
        await site.start()
        bound = runner.addresses[0][1]
        entry.runner = runner
        entry.url = f"http://{self.host}:{bound}"
        self.network.set_down(entry.node.peer_id, False)

    async def stop_node(self, index: int) -> None:
        """Fault injection: the node's REST API goes away and the network loses it."""
        entry = self.nodes[index]
        self.network.set_down(entry.node.peer_id, True)
        if entry.runner is not None:
            await entry.runner.cleanup()
            entry.runner = None

    async def restart_node(self, index: int) -> None:
        """Bring a stopped node back on the same port, with the same identity."""
        entry = self.nodes[index]
        if entry.runner is None:
            await self._serve(entry, int(entry.url.rsplit(":", 1)[1]) if entry.url else 0)

    async def stop(self) -> None:
        for i in range(len(self.nodes)):
            await self.stop_node(i)

    def grant(
        self,
        subject: DID,
        caps: Sequence[str] = ("/dms/node",),
        *,
        topics: Sequence[str] = (),
        node: int = 0,
        duration_s: float = 365 * 24 * 3600.0,
        depth: int = 0,
    ) -> TokenList:
        """``nunet cap grant --context dms --cap … [--topic …] <subject>`` on node ``node``
        (broadcasting needs a topic, e.g. ``/nunet``)."""
        ctx = self.nodes[node].node.security.capabilities
        expire = self.clock() + int(duration_s * NS_PER_SECOND)
        return ctx.grant(
            Action.DELEGATE, subject, DID(), list(topics) or None, expire, depth, list(caps)
        )


class BackgroundDevnet:
    """A :class:`Devnet` on its own event loop thread, driven from synchronous code."""

    def __init__(self, devnet: Devnet) -> None:
        self.devnet = devnet
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="dmsgw-devnet", daemon=True
        )

    def start(self) -> Devnet:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self.devnet.start(), self._loop).result()
        return self.devnet

    def call(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run a devnet coroutine (``devnet.stop_node(1)``) on the devnet's loop."""
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def stop(self) -> None:
        if not self._thread.is_alive():
            return
        asyncio.run_coroutine_threadsafe(self.devnet.stop(), self._loop).result()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()
