"""A simulated DMS node: its identity, its capability context, and the DMS receive path.

What arrives is handled exactly as a DMS handles it (``actor/basic.go``, ``dispatch.go``,
``security.go``): decode, check it is addressed to this actor, verify expiry and signature over
the canonical re-encoding, look the behavior up by exact name, consume + require capabilities
with the same :class:`~dmsgw.transport.security.SecurityContext` the gateway uses, then run the
handler and reply to ``opt.cont``. Anything that fails is dropped and logged — the sender hears
nothing, as from a DMS.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from dmsgw.behaviors.catalog import Behavior, get_behavior
from dmsgw.clock import Clock, system_clock
from dmsgw.devnet.network import Network
from dmsgw.keys.crypto import PrivKey
from dmsgw.keys.did import DID
from dmsgw.keys.peer import peer_id_from_public_key
from dmsgw.keys.trust import provider_from_private_key
from dmsgw.keys.ucan.context import CapabilityContext
from dmsgw.transport import envelope as env
from dmsgw.transport.envelope import Envelope, Handle
from dmsgw.transport.security import SecurityContext, SecurityError

log = logging.getLogger(__name__)

Handler = Callable[[Envelope, Any], Awaitable[Any]]
"""``handler(message, decoded request) -> reply payload`` (``None``: no reply)."""


@dataclasses.dataclass(frozen=True)
class Dropped:
    """A message the node refused, and the DMS's reason (what its log would say)."""

    behavior: str
    reason: str


class DmsNode:
    """One simulated DMS: a root actor on ``network`` under ``key``."""

    def __init__(
        self,
        key: PrivKey,
        network: Network,
        *,
        name: str = "dms",
        capabilities: CapabilityContext | None = None,
        clock: Clock = system_clock,
    ) -> None:
        self.name = name
        self.key = key
        self.network = network
        self.clock = clock
        self.handle = Handle.from_public_key(key.public_key())
        self.peer_id = peer_id_from_public_key(key.public_key())
        ctx = capabilities or CapabilityContext(
            provider_from_private_key(key), name="dms", clock=clock
        )
        self.security = SecurityContext(key, ctx, clock=clock)
        self._behaviors: dict[str, tuple[Behavior, Handler]] = {}
        self._failing: dict[str, str] = {}
        self.dropped: list[Dropped] = []
        self.handled = 0
        network.register(self.peer_id, self.handle.addr.inbox, self.receive)

    @property
    def did(self) -> DID:
        return self.handle.did

    def add_behavior(self, name: str, handler: Handler) -> None:
        behavior = get_behavior(name)
        self._behaviors[name] = (behavior, handler)
        if behavior.topic:
            self.network.subscribe(behavior.topic, self.peer_id, self.receive)

    def behaviors(self) -> list[str]:
        return sorted(self._behaviors)

    def fail_behavior(self, name: str, error: str | None) -> None:
        """Fault injection: ``name`` raises ``error`` in its handler (``None`` restores it)."""
        if error is None:
            self._failing.pop(name, None)
        else:
            self._failing[name] = error

    def _drop(self, behavior: str, reason: str) -> None:
        self.dropped.append(Dropped(behavior, reason))
        log.info("%s dropped %s: %s", self.name, behavior or "a message", reason)

    async def receive(self, data: bytes) -> None:
        """The DMS receive path for bytes arriving at the root actor's inbox."""
        try:
            msg = env.decode(data)
        except env.EnvelopeError as exc:
            self._drop("", str(exc))
            return
        if not msg.is_broadcast() and msg.to.id != self.handle.id:
            self._drop(msg.be, "message not addressed to this actor")
            return
        try:
            self.security.verify(msg)
        except env.EnvelopeError as exc:
            self._drop(msg.be, str(exc))
            return
        entry = self._behaviors.get(msg.be)
        if entry is None:
            self._drop(msg.be, "unknown behavior")
            return
        behavior, handler = entry
        try:
            if msg.is_broadcast():
                self.security.require_broadcast(msg, behavior.topic, [behavior.capability])
            else:
                self.security.require(msg, [behavior.capability])
        except SecurityError as exc:
            self._drop(msg.be, str(exc))
            return
        await self._dispatch(msg, behavior, handler)

    async def _dispatch(self, msg: Envelope, behavior: Behavior, handler: Handler) -> None:
        self.handled += 1
        try:
            request = behavior.decode_request(msg.msg or b"{}")
        except Exception as exc:  # the DMS logs a bad payload and answers nothing
            self._drop(msg.be, f"unmarshaling payload: {exc}")
            return
        if msg.be in self._failing:
            self._drop(msg.be, self._failing[msg.be])
            return
        try:
            reply = await handler(msg, request)
        except Exception as exc:  # a failing handler is logged by the DMS; the sender hears nothing
            log.exception("%s: handler of %s failed", self.name, msg.be)
            self._drop(msg.be, f"handler failed: {exc}")
            return
        if reply is not None and msg.opt.cont:
            await self.send_reply(msg, reply)

    async def send_reply(self, msg: Envelope, payload: Any) -> None:
        """``sendReply``: to the sender's inbox, on the request's ``cont``, same expiry (a
        broadcast was addressed to nobody, so its replies come from our own handle)."""
        if msg.is_broadcast():
            reply = env.message(self.handle, msg.from_, msg.opt.cont, payload, expire=msg.opt.exp)
        else:
            reply = env.reply_to(msg, payload)
        signed = self.security.provide(reply, [reply.be])
        await self.network.send(
            self.peer_id, msg.from_.addr.host, msg.from_.addr.inbox, signed.to_json()
        )
