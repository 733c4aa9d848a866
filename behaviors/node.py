"""``NodeActor``: the gateway's connection to one DMS, under the gateway's own identity;
:class:`NodeClient` carries requests through it.

It holds the identity (key, DID, capability context), discovers the DMS's handle, builds each
request envelope (fresh inbox, reply-to, expiry, invoke tokens chained on the delegated
capability), sends it through the transport, and checks the reply (addressed to us, from the
actor we asked, signed by it, in time) before decoding it with the behavior's reply model.

Invoke tokens are cached per capability and audience and renewed before they run out, so a
request costs one signature (the envelope's) instead of three. No token outlives the grant it
is chained on (the DMS would drop it without a word, as it drops one chained on a grant that
has run out): a request whose grant has run out is refused before it is sent, naming the grant
and the command that renews it, and the log warns a week, a day and an hour ahead. A request
that no delegated capability covers is refused before it is sent too (the DMS would drop it and
the caller would wait for its expiry) when the gateway works by delegation: it holds grants, or
``delegation_only`` says the DMS trusts it no other way (a devnet). When the DMS answers 408 —
its way of refusing silently — the client runs the preflight against its model of the DMS and
puts the reason in the error. Both name the command that grants what is missing
(``grant_hint``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
import shlex
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from ..actors.aio import AsyncActor, AsyncActorRef
from ..clock import NS_PER_SECOND, Clock, system_clock
from ..errors import DmsgwError
from ..keys.did import DID
from ..keys.id import ID
from ..keys.ucan.cap import Capability, implies_any
from ..keys.ucan.context import CapabilityContext
from ..keys.ucan.token import Action, Token, format_ns
from ..transport import envelope as env
from ..transport.envelope import Address, Envelope, Handle
from ..transport.preflight import preflight
from ..transport.rest import DMSError, DMSErrorKind, DMSTimeoutError, Transport, TransportError
from ..transport.security import SecurityContext
from .catalog import Behavior, Rep, Req, WireModel

log = logging.getLogger(__name__)

TOKEN_LIFETIME_S = 600.0
"""How long a cached invoke token is made to live (cut to the end of its grant)."""
TOKEN_RENEW_MARGIN_S = 60.0
"""A cached token is replaced when less than this remains beyond the message's own expiry."""
_RENEW_MARGIN_NS = int(TOKEN_RENEW_MARGIN_S * NS_PER_SECOND)
GRANT_DURATION = "8760h"
"""How long the grants the hints propose last: a year, long enough to forget about, short
enough to expire."""
GRANT_WARNINGS_S = (7 * 24 * 3600.0, 24 * 3600.0, 3600.0)
"""The log warns once when the grant has less than each of these left (a week, a day, an hour)."""


class DMSBehaviorError(DMSError):
    """The DMS handled the request and answered with an error; ``kind`` is what that error
    means (:func:`dms_error_kind`)."""

    def __init__(self, behavior: str, message: str, reply: Any = None) -> None:
        super().__init__(f"{behavior}: the DMS answered: {message}")
        self.behavior = behavior
        self.reply = reply
        self.kind = dms_error_kind(message)


_NOT_FOUND = (
    "deployment not found",
    "orchestrator with id not found",
    "failed to find deployment by id: %!w(<nil>)",
)


def dms_error_kind(error: str) -> DMSErrorKind:
    """The kind of the ``Error`` text of a DMS reply: the one place that text is read.

    A DMS handler answers an error with ``err.Error()`` and nothing else, often wrapped in
    context (``fmt.Errorf("failed to get deployment: %s", err)``), so its kind can only be
    read from Go's sentinel texts. For an ensemble the DMS does not know, the handlers of
    ``dms/node/behaviors_deployment.go`` answer:

    - ``ErrDeploymentNotFound`` ("deployment not found"): ``status`` on older DMSs;
    - ``ErrOrchestratorNotFound`` ("orchestrator with ID not found", returned by
      ``GetOrchestrator`` of ``dms/orchestrator/registry.go``): ``logs`` and ``shutdown``,
      and ``status``/``manifest`` on older DMSs, bare or after "failed to get orchestrator: ";
    - on the newest DMS, ``status``, ``manifest`` and ``info`` read the deployment store,
      whose ``Get`` (``dms/orchestrator/deployments_store.go``) wraps a nil error when no
      document matches: "failed to get deployment: failed to find deployment by ID:
      %!w(<nil>)" (a store that fails carries its own error there instead, which is not a
      not-found).

    Any other text is ``OTHER`` (``REFUSED`` and ``TIMEOUT`` are the silence of a DMS,
    :class:`DMSTimeoutError`, not an answer)."""
    text = error.lower()
    return DMSErrorKind.NOT_FOUND if any(s in text for s in _NOT_FOUND) else DMSErrorKind.OTHER


class ReplyError(TransportError):
    """A reply that is not from the actor we asked, not to us, or not validly signed."""


class CapabilityExpiredError(DmsgwError):
    """The grant the gateway's tokens would be chained on has run out: nothing was sent."""


class NotGrantedError(DmsgwError):
    """No capability delegated to the gateway covers the behavior: refused before sending."""


class Invoke(Protocol):
    """How code reaches the DMS: a behavior of the catalog and its request in, the decoded
    reply out, checked by the type checker end to end (``Req`` must be the behavior's
    request model, the result is its reply model). :meth:`NodeClient.invoke` is one; the
    gateway's actors take one, so that tests can stand in for the DMS."""

    async def __call__(
        self,
        behavior: Behavior[Req, Rep],
        payload: Req | None = None,
        *,
        to: str | None = None,
        timeout_s: float | None = None,
    ) -> Rep: ...


class CallObserver(Protocol):
    """Told of every call :meth:`NodeClient.invoke` made: the behavior's name, the error it
    ended with (``None``: a reply) and how long it took (s). The gateway counts them on its
    operator port; this layer knows nothing of metrics."""

    def __call__(self, behavior: str, error: BaseException | None, seconds: float) -> None: ...


GrantHint = Callable[[Behavior[Any, Any]], str]
"""Where the capability for a behavior comes from, as a sentence naming the command."""


def nunet_grant_command(did: str, caps: Sequence[str], topics: Sequence[str] = ()) -> str:
    """The ``nunet cap grant`` a DMS operator runs on the DMS host to delegate ``caps`` (and
    broadcasts on ``topics``) to ``did`` for :data:`GRANT_DURATION`: the one place it is
    written, for every hint and message that names it."""
    scope = [arg for c in caps for arg in ("--cap", c)]
    scope += [arg for t in topics for arg in ("--topic", t)]
    argv = ["nunet", "cap", "grant", "--context", "dms", *scope, "--duration", GRANT_DURATION]
    return shlex.join([*argv, did])


def dms_grant_hint(did: str) -> GrantHint:
    """The hint for a real DMS: its operator runs ``nunet cap grant`` on the DMS host."""

    def hint(b: Behavior[Any, Any]) -> str:
        topics = (b.topic,) if b.broadcast else ()
        return (
            f"the DMS operator grants it with `{nunet_grant_command(did, (b.capability,), topics)}`"
        )

    return hint


def covers(token: Token, b: Behavior[Any, Any]) -> bool:
    """Whether a delegated capability (a provide anchor) lets the gateway call ``b``."""
    if not implies_any(token.capability(), b.capability):
        return False
    return not b.broadcast or implies_any(token.topic(), b.topic)


@dataclasses.dataclass(frozen=True)
class _CachedTokens:
    blob: bytes
    expire: int
    grant_end: bool
    """The tokens expire with their grant: no new token could live longer."""

    def serve(self, now: int, until: int) -> bool:
        """Whether these tokens may go on a message that wants them valid until ``until``:
        still valid, and either valid that long or as long as their grant allows."""
        return now <= self.expire and (self.expire >= until or self.grant_end)


class NodeActor(AsyncActor):
    """One DMS connection. Ask it through its proxy: ``await ref.proxy().invoke(...)``."""

    def __init__(
        self,
        security: SecurityContext,
        transport: Transport,
        *,
        clock: Clock = system_clock,
        token_lifetime_s: float = TOKEN_LIFETIME_S,
        warn_before_s: Sequence[float] = GRANT_WARNINGS_S,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.security = security
        self.transport = transport
        self.clock = clock
        self.token_lifetime_ns = int(token_lifetime_s * NS_PER_SECOND)
        self.warn_before_ns = [int(w * NS_PER_SECOND) for w in warn_before_s]
        # by capabilities and the actor addressed: a token's audience is the actor's ID, and
        # the DMS's child actors share their node's DID with IDs of their own
        self._tokens: dict[tuple[tuple[Capability, ...], DID, ID], _CachedTokens] = {}
        self._warned: set[tuple[int, int]] = set()  # (grant's end, warning) already logged

    # --- the API -------------------------------------------------------------------------

    async def dms_handle(self, refresh: bool = False) -> Handle:
        return await self.transport.handle(refresh=refresh)

    async def prepare_invoke(
        self,
        behavior: Behavior[Any, Any],
        payload: WireModel | None = None,
        *,
        to: Handle | None = None,
        timeout_s: float | None = None,
    ) -> Envelope:
        """The signed request for ``behavior`` (on the DMS, or on ``to`` through it). Only
        this runs in the actor — its nonce counter and token cache are state; the request's
        I/O is the :class:`NodeClient`'s, so requests travel concurrently."""
        return self.sign_invoke(await self.transport.handle(), behavior, payload, to, timeout_s)

    async def prepare_broadcast(
        self,
        behavior: Behavior[Any, Any],
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
        caps = (behavior.capability,)
        end = self._grant_end(Action.BROADCAST, DID(), (behavior.topic,), caps)
        blob = self.security.capabilities.provide_broadcast(
            self.security.id, behavior.topic, _within(msg.opt.exp, end), list(caps)
        )
        return self.security.sign(dataclasses.replace(msg, cap=blob))

    # --- building requests --------------------------------------------------------------

    def sign_invoke(
        self,
        dms: Handle,
        b: Behavior[Any, Any],
        payload: WireModel | None,
        to: Handle | None,
        timeout_s: float | None,
    ) -> Envelope:
        """The signed request for ``b`` on ``to`` (or on the DMS, ``dms``). Synchronous: a
        caller may run it in its own turn while the actor is idle (``AsyncActorRef.idle``)."""
        target = to or dms
        nonce = self.security.nonce()
        expire = self._expiry(b, timeout_s)
        own = self.security.id == target.id  # the DMS's own key: no tokens needed
        msg = env.message(
            self._source(dms, nonce),
            target,
            b.name,
            b.encode_request(payload),
            expire=expire,
            reply_to=f"/private/user/{nonce}",
            nonce=nonce,
            cap=None if own else self._tokens_for((b.capability,), target, expire),
        )
        return self.security.sign(msg)

    def _source(self, dms: Handle, nonce: int) -> Handle:
        """Our handle as the DMS REST API needs it: our ID and DID, the DMS's host, a fresh
        inbox per request (the API waits for the reply on that inbox)."""
        return Handle(self.security.id, self.security.did, Address(dms.addr.host, f"user-{nonce}"))

    def _expiry(self, b: Behavior[Any, Any], timeout_s: float | None) -> int:
        seconds = timeout_s if timeout_s is not None else b.timeout_s
        if seconds < b.min_timeout_s:
            raise DmsgwError(
                f"{b.name} needs a timeout of at least {b.min_timeout_s:g} s "
                f"(the DMS refuses shorter ones), got {seconds:g} s"
            )
        return self.clock() + int(seconds * NS_PER_SECOND)

    def _tokens_for(self, caps: tuple[Capability, ...], target: Handle, msg_exp: int) -> bytes:
        key = (caps, target.did, target.id)
        now = self.clock()
        cached = self._tokens.get(key)
        if cached is not None and cached.serve(now, msg_exp + _RENEW_MARGIN_NS):
            return cached.blob
        end = self._grant_end(Action.INVOKE, target.did, None, caps)
        expire = _within(max(msg_exp, now + self.token_lifetime_ns), end)
        blob = self.security.capabilities.provide(
            target.did, self.security.id, target.id, expire, list(caps)
        )
        self._tokens[key] = _CachedTokens(blob, expire, grant_end=expire == end)
        return blob

    def _grant_end(
        self,
        action: Action,
        audience: DID,
        topics: tuple[Capability, ...] | None,
        caps: tuple[Capability, ...],
    ) -> int | None:
        """When the longest-lived grant that ``action`` tokens for ``caps`` can be chained on
        runs out (the earliest expiry along its chain); ``None`` when no grant covers them
        (the tokens are then self-signed only: the gateway may be a root of the DMS).

        Raises :class:`CapabilityExpiredError` when only grants that ran out cover them:
        the DMS would drop the message without a word."""
        capabilities = self.security.capabilities
        live = capabilities.anchors_for(action, audience, topics, caps)
        if live:
            end = max(t.chain_expiry() for t in live)
            self._warn_if_ending(end, max(live, key=Token.chain_expiry))
            return end
        lapsed = capabilities.anchors_for(action, audience, topics, caps, lapsed=True)
        if lapsed:
            grant = max(lapsed, key=Token.chain_expiry)
            raise CapabilityExpiredError(
                f"not sent: the grant to {self.security.did.uri} ran out at "
                f"{format_ns(grant.chain_expiry())} ({grant.describe()}), and the DMS drops a "
                f"message it no longer covers without a word. "
                f"Renew it: {self._renewal(grant)}"
            )
        return None

    def _warn_if_ending(self, end: int, grant: Token) -> None:
        """Log once when the grant has less than each of :data:`GRANT_WARNINGS_S` left
        (only the nearest, when the gateway starts with several already passed)."""
        left = end - self.clock()
        passed = [w for w in self.warn_before_ns if left < w]
        if not passed or (end, min(passed)) in self._warned:
            return
        self._warned.update((end, w) for w in passed)
        log.warning(
            "the grant to %s runs out at %s, in %s (%s); renew it: %s",
            self.security.did.uri,
            format_ns(end),
            _time_left(left),
            grant.describe(),
            self._renewal(grant),
        )

    def _renewal(self, grant: Token) -> str:
        """The commands that renew ``grant`` (same capabilities and topics, a year long)."""
        did = self.security.did.uri
        context = self.security.capabilities.name
        caps, topics = grant.capability() or (), grant.topic() or ()
        scope = [arg for c in caps for arg in ("--cap", c)]
        scope += [arg for t in topics for arg in ("--topic", t)]
        nunet = nunet_grant_command(did, caps, topics)
        devnet = shlex.join(["dmsgw", "devnet", "grant", *scope, "--anchor", context, did])
        anchor = shlex.join(["dmsgw", "cap", "anchor", "--context", context, "--provide"])
        return (
            f"on a DMS, its operator runs `{nunet}` (or `dmsgw cap "
            f"grant` with the same arguments) and you add the token list it prints with "
            f"`{anchor} '<token list>'`; on a `dmsgw devnet`, `{devnet}` does both; then "
            "restart the gateway (or reconnect)"
        )


class NodeClient:
    """Invokes behaviors through a :class:`NodeActor`: the actor builds and signs each
    request (in the caller's turn while it is idle), the HTTP round trip and the reply's checks
    run in the caller's task."""

    def __init__(
        self,
        actor: AsyncActorRef[NodeActor],
        transport: Transport,
        security: SecurityContext,
        *,
        dms_model: CapabilityContext | None = None,
        clock: Clock = system_clock,
        grant_hint: GrantHint | None = None,
        delegation_only: bool = False,
    ) -> None:
        self.actor = actor
        self.transport = transport
        self.security = security
        self.dms_model = dms_model
        self.clock = clock
        self.grant_hint = grant_hint or dms_grant_hint(security.did.uri)
        self.delegation_only = delegation_only
        self.observer: CallObserver | None = None
        """Told of every :meth:`invoke` (the gateway's DMS call metrics)."""
        # Callers beyond the actor's mailbox wait for room instead of being refused.
        self._room = asyncio.Semaphore(actor.actor_class.mailbox_size)

    async def invoke(
        self,
        behavior: Behavior[Req, Rep],
        payload: Req | None = None,
        *,
        to: Handle | str | None = None,
        timeout_s: float | None = None,
    ) -> Rep:
        """Invoke ``behavior`` (on the DMS, or on ``to`` through it: a handle, or a peer ID,
        DID or handle JSON) and return the decoded reply; a reply carrying an error raises
        :class:`DMSBehaviorError`, a refusal the explained :class:`DMSTimeoutError`. This is
        :class:`Invoke`, the one way both the REPL's facade and the gateway call the DMS;
        each call is told to :attr:`observer`."""
        started, error = time.perf_counter(), None
        try:
            return await self._invoke(behavior, payload, to, timeout_s)
        except BaseException as exc:
            error = exc
            raise
        finally:
            if self.observer is not None:
                self.observer(behavior.name, error, time.perf_counter() - started)

    async def _invoke(
        self,
        behavior: Behavior[Req, Rep],
        payload: Req | None,
        to: Handle | str | None,
        timeout_s: float | None,
    ) -> Rep:
        target = Handle.parse(to) if isinstance(to, str) else to
        self._refuse_ungranted(behavior)
        dms = await self.transport.handle()  # no wait once known
        actor = self.actor.idle()
        if actor is not None:  # signed in this turn: no task, no two turns of the loop
            request = actor.sign_invoke(dms, behavior, payload, target, timeout_s)
        else:
            async with self._room:
                request = await self.actor.proxy().prepare_invoke(
                    behavior, payload, to=target, timeout_s=timeout_s
                )
        try:
            reply = await self.transport.invoke(request)
        except DMSTimeoutError as exc:
            raise self._explain_timeout(exc, behavior, request) from None
        return self._accept_reply(behavior, request, reply)

    async def broadcast(
        self,
        behavior: Behavior[Req, Rep],
        payload: Req | None = None,
        *,
        timeout_s: float | None = None,
    ) -> list[Rep]:
        """Every reply to a broadcast that arrived before it expired."""
        self._refuse_ungranted(behavior)
        async with self._room:
            request = await self.actor.proxy().prepare_broadcast(
                behavior, payload, timeout_s=timeout_s
            )
        replies = await self.transport.broadcast(request)
        # The DMS collects replies until the request expires and answers then: each arrived
        # in time, and shares the request's expiry, so it is checked as of that moment.
        arrived_by = min(self.clock(), request.opt.exp)
        return [self._accept_reply(behavior, request, r, now_ns=arrived_by) for r in replies]

    def _refuse_ungranted(self, b: Behavior[Any, Any]) -> None:
        """Refuse at once what the DMS would drop silently after the caller waited for the
        message's expiry: a gateway working by delegation holding nothing that covers ``b``.
        A gateway with no grant at all may be a root of the DMS, so it is let through unless
        ``delegation_only``."""
        grants = self.security.capabilities.provide_anchors()
        if any(covers(t, b) for t in grants):
            return
        if not grants and (
            not self.delegation_only or self.security.capabilities.lapsed_anchors().present()
        ):
            return  # a root, perhaps; or a grant that ran out, which the actor names
        raise NotGrantedError(
            f"{b.name}: not sent, the DMS would drop it: {self._holdings(grants, b)}"
            f"\n  hint: {self.grant_hint(b)}"
        )

    def _holdings(self, grants: tuple[Token, ...], b: Behavior[Any, Any]) -> str:
        """What the gateway holds, said against what ``b`` needs."""
        did = self.security.did.uri
        if not grants:
            lapsed = self.security.capabilities.lapsed_anchors().present()
            ended = "; ".join(f"{t.describe()} at {format_ns(t.chain_expiry())}" for t in lapsed)
            held = f"only grants that ran out ({ended})" if lapsed else "no delegated capability"
            return f"{did} holds {held}"
        held = ", ".join(c for t in grants for c in t.capability() or ())
        needed = f"{b.capability} on topic {b.topic}" if b.broadcast else b.capability
        return f"the capabilities delegated to {did} ([{held}]) — none covers {needed}"

    # --- replies ------------------------------------------------------------------------

    def _accept_reply(
        self,
        b: Behavior[Req, Rep],
        request: Envelope,
        reply: Envelope,
        *,
        now_ns: int | None = None,
    ) -> Rep:
        """Check and decode a reply; ``now_ns`` (a broadcast's: any sender) is when it is
        checked for expiry, default now."""
        if reply.to.id != self.security.id:
            raise ReplyError(f"{b.name}: the reply is addressed to {reply.to.id}, not to us")
        if not b.broadcast and reply.from_.id != request.to.id:
            raise ReplyError(
                f"{b.name}: the reply comes from {reply.from_.id}, not {request.to.id}"
            )
        if reply.be != request.opt.cont:
            raise ReplyError(f"{b.name}: the reply is for {reply.be!r}, not {request.opt.cont!r}")
        try:
            env.verify(reply, self.clock() if now_ns is None else now_ns)
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

    def _explain_timeout(
        self, exc: DMSTimeoutError, b: Behavior[Any, Any], request: Envelope
    ) -> DmsgwError:
        receiver = request.to
        model = self.dms_model
        if receiver.addr.host != request.from_.addr.host:
            # Sent to another DMS through ours: our DMS's REST API checked the reply address
            # (ours, by construction); the receiver is another DMS, which our model is not.
            receiver = dataclasses.replace(
                receiver, addr=dataclasses.replace(receiver.addr, host=request.from_.addr.host)
            )
        if model is None or model.did != receiver.did:
            model = CapabilityContext(receiver.did, clock=self.clock)
        verdict = preflight(
            request, model, now_ns=min(self.clock(), request.opt.exp), receiver_handle=receiver
        )
        if verdict.accepted:
            return DMSTimeoutError(
                exc.behavior,
                detail="the preflight accepts the message, so the DMS (or the peer behind it) "
                "did not answer in time",
            )
        detail = f"the preflight says why: {verdict}{self._delegation_hint(b)}"
        return DMSTimeoutError(exc.behavior, detail=detail, verdict=verdict)

    def _delegation_hint(self, b: Behavior[Any, Any]) -> str:
        """What the gateway was delegated and how to get what it lacks, when none of its
        grants covers ``b``."""
        grants = self.security.capabilities.provide_anchors()
        if any(covers(t, b) for t in grants):
            return ""
        return f"\n  hint: {self._holdings(grants, b)}; {self.grant_hint(b)}"


def _within(expire: int, grant_end: int | None) -> int:
    """``expire``, cut to the end of the grant the token is chained on (if any): a token
    that outlives its chain does not verify, and the DMS drops its message unheard."""
    return expire if grant_end is None else min(expire, grant_end)


def _time_left(ns: int) -> str:
    """A span as an operator reads it in a warning: minutes, hours or days, rounded down."""
    minutes = ns // (60 * NS_PER_SECOND)
    if minutes < 120:
        return f"{minutes} min"
    hours = minutes // 60
    return f"{hours} h" if hours < 72 else f"{hours // 24} days"


def grant_expiry(capabilities: CapabilityContext) -> int | None:
    """When the gateway's grant runs (or ran) out, Unix ns: the latest chain expiry among its
    provide anchors, the live ones if any are left; ``None`` when it was given none."""
    anchors = capabilities.provide_anchors() or capabilities.lapsed_anchors().present()
    return max((t.chain_expiry() for t in anchors), default=None)


def seconds_until_grant_expiry(capabilities: CapabilityContext, clock: Clock) -> float:
    """For a gauge: seconds until the grant runs out (negative once it has; NaN without one,
    so that an alert on ``< 86400`` stays quiet for a gateway the DMS trusts as a root)."""
    expiry = grant_expiry(capabilities)
    return math.nan if expiry is None else (expiry - clock()) / NS_PER_SECOND
