"""``BasicSecurityContext`` (DMS ``actor/security.go``): an actor's key, ID, nonce counter and
capability context, and the four things an actor does with them — sign and verify envelopes,
attach capability tokens to what it sends (``provide``), check those of what it receives
(``require``). Both the gateway (sender) and the embedded devnet (receiver) use this one class,
so they cannot disagree about a rule.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Sequence

from ..clock import Clock, system_clock
from ..errors import DmsgwError
from ..keys.crypto import PrivKey
from ..keys.did import DID
from ..keys.id import ID
from ..keys.ucan.cap import Capability
from ..keys.ucan.context import CapabilityBlobError, CapabilityContext
from ..keys.ucan.token import NotAuthorizedError
from . import envelope as env
from .envelope import Envelope


class SecurityError(DmsgwError):
    """A message refused by ``require``; the text is the DMS's (``consuming capabilities: …``
    or ``requiring capabilities: …``)."""


class SecurityContext:
    """One actor's security: ``private_key`` signs, ``capabilities`` decides."""

    def __init__(
        self,
        private_key: PrivKey,
        capabilities: CapabilityContext,
        *,
        clock: Clock = system_clock,
        id: ID | None = None,
    ) -> None:
        self.private_key = private_key
        self.id = id if id is not None else ID.from_public_key(private_key.public_key())
        self.capabilities = capabilities
        self.clock = clock
        self._nonce = clock()
        self._lock = threading.Lock()

    @property
    def did(self) -> DID:
        return self.capabilities.did

    def nonce(self) -> int:
        """A per-context counter seeded with the time, as the DMS's (never reused here)."""
        with self._lock:
            nonce = self._nonce % (1 << 64)
            self._nonce += 1
            return nonce

    def sign(self, msg: Envelope) -> Envelope:
        if msg.from_.id != self.id:
            raise env.BadSenderError()
        return env.signed(msg, self.private_key)

    def verify(self, msg: Envelope) -> None:
        env.verify(msg, self.clock())

    def _to_self(self, msg: Envelope) -> bool:
        return msg.from_.id == self.id and msg.to.id == self.id

    def provide(
        self, msg: Envelope, invoke: Sequence[Capability], delegate: Sequence[Capability] = ()
    ) -> Envelope:
        """Attach invoke (and reply-delegation) tokens, then sign; a message to ourselves
        needs no tokens."""
        if self._to_self(msg):
            return self.sign(msg)
        blob = self.capabilities.provide(
            msg.to.did, self.id, msg.to.id, msg.opt.exp, invoke, delegate
        )
        return self.sign(dataclasses.replace(msg, cap=blob))

    def provide_broadcast(self, msg: Envelope, broadcast: Sequence[Capability]) -> Envelope:
        if not msg.is_broadcast():
            raise SecurityError("not a broadcast message: invalid message")
        blob = self.capabilities.provide_broadcast(self.id, msg.opt.topic, msg.opt.exp, broadcast)
        return self.sign(dataclasses.replace(msg, cap=blob))

    def require(self, msg: Envelope, caps: Sequence[Capability]) -> None:
        """Consume the message's tokens and demand one of ``caps``; the DMS's exact errors."""
        if self._to_self(msg):
            return  # the signature, already verified, is proof enough
        try:
            self.capabilities.consume(msg.from_.did, msg.cap or b"")
        except CapabilityBlobError as exc:
            raise SecurityError(f"consuming capabilities: {exc}") from exc
        try:
            self.capabilities.require(self.did, msg.from_.id, self.id, caps)
        except NotAuthorizedError as exc:
            self.capabilities.discard(msg.cap or b"")
            raise SecurityError(f"requiring capabilities: {exc}") from exc

    def discard(self, msg: Envelope) -> None:
        """``Discard``: forget the tokens ``msg`` brought in. A DMS behavior does this once it
        has handled the message (``defer msg.Discard()``); without it every message would add
        its tokens to the context for good, and each ``require`` would scan them all."""
        self.capabilities.discard(msg.cap or b"")

    def require_broadcast(
        self, msg: Envelope, topic: Capability, caps: Sequence[Capability]
    ) -> None:
        if not msg.is_broadcast():
            raise SecurityError("not a broadcast message: invalid message")
        if topic != msg.opt.topic:
            raise SecurityError("broadcast topic mismatch: invalid message")
        try:
            self.capabilities.consume(msg.from_.did, msg.cap or b"")
        except CapabilityBlobError as exc:
            raise SecurityError(f"consuming capabilities: {exc}") from exc
        try:
            self.capabilities.require_broadcast(self.did, msg.from_.id, topic, caps)
        except NotAuthorizedError as exc:
            self.capabilities.discard(msg.cap or b"")
            raise SecurityError(f"requiring capabilities: {exc}") from exc
