"""``NodeActor``: the gateway's connection to one DMS, under the gateway's own identity;
:class:`NodeClient` carries requests through it.

It holds the identity (key, DID, capability context), discovers the DMS's handle, builds each
request envelope (fresh inbox, reply-to, expiry, invoke tokens chained on the delegated
capability), sends it through the transport, and checks the reply (addressed to us, from the
actor we asked, signed by it, in time) before decoding it with the behavior's reply model.

Invoke tokens are cached per capability and audience and renewed before they run out, so a
request costs one signature (the envelope's) instead of three. When the DMS answers 408 — its
way of refusing silently — the actor runs the preflight against its model of the DMS and puts
the reason in the error.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from typing import Any

from dmsgw.actors.aio import AsyncActor, AsyncActorRef
from dmsgw.behaviors.catalog import Behavior, WireModel, get_behavior
from dmsgw.clock import NS_PER_SECOND, Clock, system_clock
from dmsgw.errors import DmsgwError
from dmsgw.keys.did import DID
from dmsgw.keys.ucan.cap import Capability, implies
from dmsgw.keys.ucan.context import CapabilityContext
from dmsgw.keys.ucan.token import format_ns
from dmsgw.transport import envelope as env
from dmsgw.transport.envelope import Address, Envelope, Handle
from dmsgw.transport.preflight import preflight
from dmsgw.transport.rest import DMSTimeoutError, Transport, TransportError
from dmsgw.transport.security import SecurityContext

log = logging.getLogger(__name__)

TOKEN_LIFETIME_S = 600.0
"""How long a cached invoke token is made to live (capped by the delegated capability)."""
TOKEN_RENEW_MARGIN_S = 60.0
"""A cached token is replaced when less than this remains beyond the message's own expiry."""
CAPABILITY_WARN_S = 7 * 24 * 3600.0
"""Warn when the delegated capability expires within this."""


class DMSBehaviorError(DmsgwError):
    """The DMS handled the request and answered with an error."""

    def __init__(self, behavior: str, message: str, reply: Any = None) -> None:
        super().__init__(f"{behavior}: the DMS answered: {message}")
        self.behavior = behavior
        self.reply = reply


class ReplyError(TransportError):
    """A reply that is not from the actor we asked, not to us, or not validly signed."""


class CapabilityExpiredError(DmsgwError):
    """The capability delegated to the gateway has run out."""


@dataclasses.dataclass(frozen=True)
class _CachedTokens:
    blob: bytes
    expire: int


class NodeActor(AsyncActor):
    """One DMS connection. Ask it through its proxy: ``await ref.proxy().invoke(...)``."""

    def __init__(
        self,
        security: SecurityContext,
        transport: Transport,
        *,
        clock: Clock = system_clock,
        token_lifetime_s: float = TOKEN_LIFETIME_S,
        warn_before_s: float = CAPABILITY_WARN_S,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.security = security
        self.transport = transport
        self.clock = clock
        self.token_lifetime_ns = int(token_lifetime_s * NS_PER_SECOND)
        self.warn_before_ns = int(warn_before_s * NS_PER_SECOND)
        self._tokens: dict[tuple[tuple[Capability, ...], DID], _CachedTokens] = {}
        self._warned_for: int | None = None

    # --- the API -------------------------------------------------------------------------

    async def dms_handle(self, refresh: bool = False) -> Handle:
        return await self.transport.handle(refresh=refresh)

    async def prepare_invoke(
        self,
        behavior: Behavior,
        payload: WireModel | None = None,
        *,
        to: Handle | None = None,
        timeout_s: float | None = None,
    ) -> Envelope:
        """The signed request for ``behavior`` (on the DMS, or on ``to`` through it). Only
        this runs in the actor — its nonce counter and token cache are state; the request's
        I/O is the :class:`NodeClient`'s, so requests travel concurrently."""
        return await self._request(behavior, payload, to, timeout_s)

    async def prepare_broadcast(
        self,
        behavior: Behavior,
        payload: WireModel | None = None,
        *,
        timeout_s: float | None = None,
    ) -> Envelope:
        """The signed broadcast on the behavior's topic."""
        if not behavior.broadcast:
            raise DmsgwError(f"{behavior.name} is not a broadcast behavior")
        dms = await self.transport.handle()
        nonce = self.security.nonce()
        msg = env.message(
            self._source(dms, nonce),
            Handle(),
            behavior.name,
            behavior.encode_request(payload),
            expire=self._expiry(behavior, timeout_s),
            reply_to=f"/public/user/{nonce}",
            topic=behavior.topic,
            nonce=nonce,
        )
        return self.security.provide_broadcast(msg, [behavior.capability])

    def capability_expiry(self) -> int | None:
        """When the latest-expiring delegated capability (provide anchor) runs out, Unix ns."""
        _, _, provide, _ = self.security.capabilities.list_roots()
        expiries = [t.expire() for t in provide.present()]
        return max(expiries) if expiries else None

    # --- building requests --------------------------------------------------------------

    async def _request(
        self, b: Behavior, payload: WireModel | None, to: Handle | None, timeout_s: float | None
    ) -> Envelope:
        dms = await self.transport.handle()
        target = to or dms
        nonce = self.security.nonce()
        msg = env.message(
            self._source(dms, nonce),
            target,
            b.name,
            b.encode_request(payload),
            expire=self._expiry(b, timeout_s),
            reply_to=f"/private/user/{nonce}",
            nonce=nonce,
        )
        if msg.from_.id == target.id:
            return self.security.sign(msg)  # the DMS's own key: no tokens needed
        blob = self._tokens_for((b.capability,), target, msg.opt.exp)
        return self.security.sign(dataclasses.replace(msg, cap=blob))

    def _source(self, dms: Handle, nonce: int) -> Handle:
        """Our handle as the DMS REST API needs it: our ID and DID, the DMS's host, a fresh
        inbox per request (the API waits for the reply on that inbox)."""
        return Handle(self.security.id, self.security.did, Address(dms.addr.host, f"user-{nonce}"))

    def _expiry(self, b: Behavior, timeout_s: float | None) -> int:
        seconds = timeout_s if timeout_s is not None else b.timeout_s
        if seconds < b.min_timeout_s:
            raise DmsgwError(
                f"{b.name} needs a timeout of at least {b.min_timeout_s:g} s "
                f"(the DMS refuses shorter ones), got {seconds:g} s"
            )
        return self.clock() + int(seconds * NS_PER_SECOND)

    def _tokens_for(self, caps: tuple[Capability, ...], target: Handle, msg_exp: int) -> bytes:
        key = (caps, target.did)
        cached = self._tokens.get(key)
        margin = int(TOKEN_RENEW_MARGIN_S * NS_PER_SECOND)
        if cached is None or cached.expire < msg_exp + margin:
            self._check_capability_expiry()
            expire = max(msg_exp, self._token_expiry())
            blob = self.security.capabilities.provide(
                target.did, self.security.id, target.id, expire, list(caps)
            )
            cached = _CachedTokens(blob, expire)
            self._tokens[key] = cached
        return cached.blob

    def _token_expiry(self) -> int:
        wanted = self.clock() + self.token_lifetime_ns
        anchor = self.capability_expiry()
        return min(wanted, anchor) if anchor is not None else wanted

    def _check_capability_expiry(self) -> None:
        anchor = self.capability_expiry()
        if anchor is None:
            return
        now = self.clock()
        if anchor < now:
            raise CapabilityExpiredError(
                f"the capability delegated to {self.security.did.uri} expired at "
                f"{format_ns(anchor)}: ask the DMS operator for a new grant "
                f"(nunet cap grant --context dms --cap /dms/node --duration 8760h "
                f"{self.security.did.uri})"
            )
        if anchor - now < self.warn_before_ns and self._warned_for != anchor:
            self._warned_for = anchor
            log.warning(
                "the capability delegated to %s expires at %s; renew it soon",
                self.security.did.uri,
                format_ns(anchor),
            )


class NodeClient:
    """Invokes behaviors through a :class:`NodeActor`: the actor builds and signs each
    request, the HTTP round trip and the reply's checks run in the caller's task."""

    def __init__(
        self,
        actor: AsyncActorRef[NodeActor],
        transport: Transport,
        security: SecurityContext,
        *,
        dms_model: CapabilityContext | None = None,
        clock: Clock = system_clock,
    ) -> None:
        self.actor = actor
        self.transport = transport
        self.security = security
        self.dms_model = dms_model
        self.clock = clock
        # Callers beyond the actor's mailbox wait for room instead of being refused.
        self._room = asyncio.Semaphore(actor.actor_class.mailbox_size)

    async def invoke(
        self,
        behavior: str | Behavior,
        payload: WireModel | None = None,
        *,
        to: Handle | None = None,
        timeout_s: float | None = None,
    ) -> Any:
        """Invoke ``behavior`` and return the decoded reply; a reply carrying an error
        raises :class:`DMSBehaviorError`, a refusal the explained :class:`DMSTimeoutError`."""
        b = behavior if isinstance(behavior, Behavior) else get_behavior(behavior)
        async with self._room:
            request = await self.actor.proxy().prepare_invoke(
                b, payload, to=to, timeout_s=timeout_s
            )
        try:
            reply = await self.transport.invoke(request)
        except DMSTimeoutError as exc:
            raise self._explain_timeout(exc, request) from None
        return self._accept_reply(b, request, reply)

    async def broadcast(
        self,
        behavior: str | Behavior,
        payload: WireModel | None = None,
        *,
        timeout_s: float | None = None,
    ) -> list[Any]:
        """Every reply to a broadcast that arrived before it expired."""
        b = behavior if isinstance(behavior, Behavior) else get_behavior(behavior)
        async with self._room:
            request = await self.actor.proxy().prepare_broadcast(b, payload, timeout_s=timeout_s)
        replies = await self.transport.broadcast(request)
        return [self._accept_reply(b, request, r, any_sender=True) for r in replies]

    # --- replies ------------------------------------------------------------------------

    def _accept_reply(
        self, b: Behavior, request: Envelope, reply: Envelope, *, any_sender: bool = False
    ) -> Any:
        if reply.to.id != self.security.id:
            raise ReplyError(f"{b.name}: the reply is addressed to {reply.to.id}, not to us")
        if not any_sender and reply.from_.id != request.to.id:
            raise ReplyError(
                f"{b.name}: the reply comes from {reply.from_.id}, not {request.to.id}"
            )
        if reply.be != request.opt.cont:
            raise ReplyError(f"{b.name}: the reply is for {reply.be!r}, not {request.opt.cont!r}")
        try:
            env.verify(reply, self.clock())
        except env.EnvelopeError as exc:
            raise ReplyError(f"{b.name}: the reply does not verify: {exc}") from None
        try:
            decoded = b.decode_reply(reply.msg or b"null")
        except DmsgwError as exc:
            raise ReplyError(
                f"{b.name}: the reply payload is not a {b.reply.__name__}: {exc}"
            ) from None
        error = getattr(decoded, "error", "")
        if isinstance(error, str) and error:
            raise DMSBehaviorError(b.name, error, decoded)
        return decoded

    def _explain_timeout(self, exc: DMSTimeoutError, request: Envelope) -> DmsgwError:
        model = self.dms_model or CapabilityContext(request.to.did, clock=self.clock)
        verdict = preflight(
            request, model, now_ns=min(self.clock(), request.opt.exp), receiver_handle=request.to
        )
        if verdict.accepted:
            return DMSTimeoutError(
                exc.behavior,
                detail="the preflight accepts the message, so the DMS (or the peer behind it) "
                "did not answer in time",
            )
        detail = f"the preflight says why: {verdict}{self._delegation_hint(request.be)}"
        return DMSTimeoutError(exc.behavior, detail=detail, verdict=verdict)

    def _delegation_hint(self, behavior: str) -> str:
        """What the gateway was delegated, when none of it covers ``behavior``."""
        _, _, provide, _ = self.security.capabilities.list_roots()
        grants = provide.present()
        if not grants:
            return (
                f"\n  hint: {self.security.did.uri} holds no delegated capability; the DMS "
                "operator grants one with `nunet cap grant --context dms --cap /dms/node …`"
            )
        covered = [c for t in grants for c in t.capability() or ()]
        if any(implies(c, behavior) for c in covered):
            return ""
        return (
            f"\n  hint: the capabilities delegated to {self.security.did.uri} "
            f"([{', '.join(covered)}]) — none covers {behavior}"
        )
