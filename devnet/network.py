"""The devnet's in-process network: envelopes travel between simulated DMS nodes by peer ID.

It stands in for libp2p between DMS nodes. Knobs let tests make it unkind in the ways a real
network is: latency, loss, partitions, and rules that drop or delay chosen messages (by
behavior, sender or receiver). Randomness comes from an injected ``random.Random`` so a lossy
test is reproducible.

Delivery is inline: ``send`` returns once the receiver has handled the bytes. That keeps the
REST API's "nothing came back" answer exact (see ``rest.py``) and needs no queues; the
receivers hand long work to background tasks, as DMS behaviors hand it to goroutines.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
from collections.abc import Awaitable, Callable

Inbox = Callable[[bytes], Awaitable[None]]


@dataclasses.dataclass(frozen=True)
class FaultRule:
    """Drop or delay the messages it matches. Empty fields match anything; ``behavior`` matches
    as a path prefix (``/dms/deployment`` matches ``/dms/deployment/bid``)."""

    behavior: str = ""
    source: str = ""
    target: str = ""
    drop: bool = False
    delay_s: float = 0.0

    def matches(self, source: str, target: str, behavior: str) -> bool:
        if self.source and self.source != source:
            return False
        if self.target and self.target != target:
            return False
        if not self.behavior:
            return True
        return behavior == self.behavior or behavior.startswith(self.behavior.rstrip("/") + "/")


class Network:
    """Delivers message bytes to the inbox registered for a peer ID and inbox name."""

    def __init__(self, *, rng: random.Random | None = None) -> None:
        self._inboxes: dict[tuple[str, str], Inbox] = {}
        self._topics: dict[str, dict[str, Inbox]] = {}
        self._down: set[str] = set()
        self._partitions: list[tuple[frozenset[str], frozenset[str]]] = []
        self._rules: list[FaultRule] = []
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

    def add_rule(self, rule: FaultRule) -> FaultRule:
        """Start dropping or delaying the messages ``rule`` matches; returns it for removal."""
        self._rules.append(rule)
        return rule

    def remove_rule(self, rule: FaultRule) -> None:
        self._rules.remove(rule)

    @property
    def rules(self) -> tuple[FaultRule, ...]:
        return tuple(self._rules)

    def heal(self) -> None:
        """Undo partitions and fault rules (stopped nodes stay stopped)."""
        self._partitions.clear()
        self._rules.clear()

    def reachable(self, source: str, target: str) -> bool:
        if source in self._down or target in self._down:
            return False
        for a, b in self._partitions:
            if (source in a and target in b) or (source in b and target in a):
                return False
        return True

    async def _survives(self, source: str, target: str, behavior: str) -> bool:
        """Apply loss, rules and latency to one delivery; False when it is lost on the way."""
        if self.loss and self.rng.random() < self.loss:
            return False
        delay = self.latency_s
        for rule in self._rules:
            if rule.matches(source, target, behavior):
                if rule.drop:
                    return False
                delay += rule.delay_s
        if delay:
            await asyncio.sleep(delay)
        return self.reachable(source, target)

    async def send(
        self, source: str, target: str, inbox: str, data: bytes, behavior: str = ""
    ) -> bool:
        """Deliver ``data`` to ``target``'s ``inbox``; False when the target is unknown or
        unreachable (libp2p would fail the send). A message lost on the way counts as sent:
        the sender only ever sees silence."""
        handler = self._inboxes.get((target, inbox))
        if handler is None or not self.reachable(source, target):
            self.dropped += 1
            return False
        if not await self._survives(source, target, behavior):
            self.dropped += 1
            return True
        self.delivered += 1
        await handler(data)
        return True

    async def publish(self, source: str, topic: str, data: bytes, behavior: str = "") -> int:
        """Gossip ``data`` to every reachable subscriber of ``topic`` (the publisher included,
        as libp2p pubsub delivers to local subscribers); returns how many it reached."""
        reached = 0
        for peer, handler in list(self._topics.get(topic, {}).items()):
            if not self.reachable(source, peer):
                continue
            if not await self._survives(source, peer, behavior):
                self.dropped += 1
                continue
            self.delivered += 1
            await handler(data)
            reached += 1
        return reached
