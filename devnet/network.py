"""The devnet's in-process network: envelopes travel between simulated DMS nodes by peer ID.

It stands in for libp2p between DMS nodes. Knobs let tests make it unkind in the ways a real
network is: latency, loss, partitions. Randomness comes from an injected ``random.Random`` so a
lossy test is reproducible.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable

Inbox = Callable[[bytes], Awaitable[None]]


class Network:
    """Delivers message bytes to the inbox registered for a peer ID and inbox name."""

    def __init__(self, *, rng: random.Random | None = None) -> None:
        self._inboxes: dict[tuple[str, str], Inbox] = {}
        self._topics: dict[str, dict[str, Inbox]] = {}
        self._down: set[str] = set()
        self._partitions: list[tuple[frozenset[str], frozenset[str]]] = []
        self.latency_s = 0.0
        self.loss = 0.0
        self.rng = rng or random.Random()
        self.delivered = 0
        self.dropped = 0

    def register(self, peer_id: str, inbox: str, handler: Inbox) -> None:
        self._inboxes[(peer_id, inbox)] = handler

    def unregister(self, peer_id: str, inbox: str) -> None:
        self._inboxes.pop((peer_id, inbox), None)

    def subscribe(self, topic: str, peer_id: str, handler: Inbox) -> None:
        self._topics.setdefault(topic, {})[peer_id] = handler

    def peers(self) -> list[str]:
        """Every peer ID with a root inbox (what a DMS's pubsub peer list would show)."""
        return sorted({peer for peer, inbox in self._inboxes if inbox == "root"})

    def set_down(self, peer_id: str, down: bool) -> None:
        """A stopped node: nothing reaches it and nothing leaves it."""
        if down:
            self._down.add(peer_id)
        else:
            self._down.discard(peer_id)

    def partition(self, side_a: set[str], side_b: set[str]) -> None:
        """Cut every link between the two sets of peers (both directions)."""
        self._partitions.append((frozenset(side_a), frozenset(side_b)))

    def heal(self) -> None:
        self._partitions.clear()

    def reachable(self, source: str, target: str) -> bool:
        if source in self._down or target in self._down:
            return False
        for a, b in self._partitions:
            if (source in a and target in b) or (source in b and target in a):
                return False
        return True

    async def send(self, source: str, target: str, inbox: str, data: bytes) -> bool:
        """Deliver ``data`` to ``target``'s ``inbox``; False when it was lost or unreachable
        (libp2p would fail the send; the sender then only sees silence)."""
        handler = self._inboxes.get((target, inbox))
        if handler is None or not self.reachable(source, target):
            self.dropped += 1
            return False
        if self.loss and self.rng.random() < self.loss:
            self.dropped += 1
            return True  # sent, never arrives
        if self.latency_s:
            await asyncio.sleep(self.latency_s)
        self.delivered += 1
        await handler(data)
        return True

    async def publish(self, source: str, topic: str, data: bytes) -> int:
        """Gossip ``data`` to every reachable subscriber of ``topic`` (the publisher included,
        as libp2p pubsub delivers to local subscribers); returns how many it reached."""
        reached = 0
        for peer, handler in list(self._topics.get(topic, {}).items()):
            if self.reachable(source, peer) and not (self.loss and self.rng.random() < self.loss):
                if self.latency_s:
                    await asyncio.sleep(self.latency_s)
                await handler(data)
                reached += 1
        return reached
