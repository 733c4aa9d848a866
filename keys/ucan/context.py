"""Capability contexts (``lib/ucan/context.go``, ``BasicCapabilityContext``).

A context is one identity's view of authority: the DIDs it trusts outright (roots), the tokens
that admit side chains into it (require anchors), the tokens it can delegate from (provide
anchors), the tokens it has revoked, and the tokens other parties have presented to it
(consumed, per subject). An actor checks every incoming message with :meth:`consume` then
:meth:`require`, and attaches :meth:`provide` tokens to every outgoing one.

Mirrors ``lib/ucan/context.go``: every method of its ``CapabilityContext`` interface, as
``BasicCapabilityContext`` implements it, has its counterpart here under the Go name in snake
case (``Trust`` aside: trust is :mod:`~dmsgw.keys.trust`'s; the garbage collection that ``Start``
schedules is :meth:`gc`, which the owner calls), and so do its helpers (``getTokens`` is
:meth:`_live`, ``consumeAnchorToken`` :func:`_add_anchor_token`), so the verdicts are the DMS's.

Added to it: the DMS only ever says "not authorized"; this context also keeps, for every token
it refused, a :class:`~dmsgw.keys.ucan.token.Rejection` saying why (:meth:`consume`'s report,
:meth:`explain_require`, ``NotAuthorizedError.rejections``), which is what lets the gateway
tell its user what to fix before the DMS silently drops a message; and the ``explain_*``
methods, each beside the rule it explains, word the refusals of the ``cap`` commands.
"""

from __future__ import annotations

import dataclasses
import enum
import threading
from collections.abc import Callable, Iterable, Sequence

from ...clock import Clock, system_clock
from ...gojson import GoDecodeError
from ..did import DID
from ..id import ID
from ..trust import Provider, TrustError, did_from_id
from .cap import Capability, implies_any
from .token import (
    Action,
    DMSToken,
    NotAuthorizedError,
    Reason,
    Rejection,
    RevocationSet,
    Token,
    TokenError,
    TokenList,
    UcanError,
    describe,
    format_second,
    random_nonce,
    unmarshal_token_list,
)

__all__ = [
    "MAX_CAPABILITY_SIZE",
    "CapabilityBlobError",
    "CapabilityContext",
    "ConsumeReport",
    "RequireExplanation",
    "SelfSign",
    "TokenOutcome",
]

MAX_CAPABILITY_SIZE = 16384
"""The largest ``cap`` blob the DMS reads (``maxCapabilitySize``)."""


class SelfSign(enum.IntEnum):
    """Whether delegation also issues a token rooted in ourselves (``SelfSignMode``)."""

    NO = 0
    ALSO = 1
    ONLY = 2


class CapabilityBlobError(UcanError):
    """:meth:`CapabilityContext.consume` refused the blob as a whole (the DMS drops the message).

    The message is the DMS's; ``rejection`` explains it.
    """

    def __init__(self, message: str, rejection: Rejection) -> None:
        super().__init__(message)
        self.rejection = rejection


@dataclasses.dataclass(frozen=True, slots=True)
class TokenOutcome:
    """What :meth:`CapabilityContext.consume` did with one presented token."""

    token: Token
    rejection: Rejection | None = None

    @property
    def accepted(self) -> bool:
        return self.rejection is None


@dataclasses.dataclass(frozen=True, slots=True)
class ConsumeReport:
    """The outcome of one :meth:`CapabilityContext.consume`, token by token, in blob order."""

    origin: DID
    outcomes: tuple[TokenOutcome, ...]

    def accepted(self) -> tuple[Token, ...]:
        return tuple(o.token for o in self.outcomes if o.rejection is None)

    def rejections(self) -> tuple[Rejection, ...]:
        return tuple(o.rejection for o in self.outcomes if o.rejection is not None)


@dataclasses.dataclass(frozen=True, slots=True)
class RequireExplanation:
    """Why :meth:`CapabilityContext.require` would pass or fail.

    ``satisfied_by`` is the token that authorizes the call; when there is none, ``rejections``
    holds one entry per candidate token (stored for the subject, or presented in the last
    consume) with the first rule it breaks.
    """

    subject: DID
    audience: DID
    required: tuple[Capability, ...]
    satisfied_by: Token | None
    rejections: tuple[Rejection, ...]

    @property
    def ok(self) -> bool:
        return self.satisfied_by is not None

    def __str__(self) -> str:
        wanted = ", ".join(self.required) or "nothing"
        if self.satisfied_by is not None:
            return f"authorized: {self.satisfied_by.describe()} allows one of [{wanted}]"
        lines = [f"not authorized: {self.subject.uri} may not invoke any of [{wanted}]"]
        lines += [f"  - {r}" for r in self.rejections]
        return "\n".join(lines)


class CapabilityContext:
    """``BasicCapabilityContext``, with an injected clock and nonce source.

    ``identity`` is a :class:`Provider` for a context that issues tokens, or just a
    :class:`DID` for a read-only model of someone else's context (e.g. a DMS's ``dms.cap``,
    to predict its verdicts): such a context can consume, require and explain, not sign.
    ``lapsed`` are provide anchors that had run out before the context was made (a file's,
    which :func:`~dmsgw.keys.ucan.store.load_context` drops as the DMS does): never used,
    only named by :meth:`lapsed_anchors`.
    """

    def __init__(
        self,
        identity: Provider | DID,
        *,
        name: str = "dms",
        roots: Iterable[DID] = (),
        require: TokenList | None = None,
        provide: TokenList | None = None,
        revoke: TokenList | None = None,
        lapsed: TokenList | None = None,
        clock: Clock = system_clock,
        nonce_source: Callable[[], bytes] = random_nonce,
    ) -> None:
        self.name = name
        self._provider = identity if isinstance(identity, Provider) else None
        self._did = identity.did if isinstance(identity, Provider) else identity
        self._clock = clock
        self._nonce_source = nonce_source
        self._lock = threading.RLock()
        self._roots: dict[DID, None] = {}  # an ordered set
        self._require: dict[DID, list[Token]] = {}  # issuer -> side-chain roots
        self._provide: dict[DID, list[Token]] = {}  # issuer -> tokens we delegate from
        self._tokens: dict[DID, list[Token]] = {}  # subject -> consumed tokens
        self._revocations = RevocationSet()
        # Every provide anchor we were given, kept past its expiry (the tables above forget
        # it, as the DMS does) so that whoever relied on it can be told which grant ran out.
        self._given: dict[bytes, Token] = {t.revocation_key(): t for t in _present(lapsed)}
        self.last_consume: ConsumeReport | None = None
        """The report of the latest :meth:`consume`, which a failing :meth:`require` explains
        itself with (pass a report to :meth:`explain_require` when consumes interleave)."""
        self.add_roots(roots, require, provide, revoke)

    @property
    def did(self) -> DID:
        return self._did

    def now(self) -> int:
        return self._clock()

    def _signer(self) -> Provider:
        if self._provider is None:
            raise UcanError(
                f"the capability context of {self._did.uri} holds no private key, "
                "so it cannot issue tokens"
            )
        return self._provider

    # -- anchors --------------------------------------------------------------------------

    def add_roots(
        self,
        roots: Iterable[DID] = (),
        require: TokenList | None = None,
        provide: TokenList | None = None,
        revoke: TokenList | None = None,
    ) -> None:
        """``AddRoots``: trust ``roots`` outright; add require, provide and revocation anchors.

        Every anchor token must verify; a revocation also drops, from every list, the tokens
        it revokes.
        """
        now = self.now()
        with self._lock:
            self._roots.update(dict.fromkeys(roots))
            for t in _present(revoke):
                if t.action() != Action.REVOKE:
                    raise UcanError(f"revocation anchor {t.describe()} is not a revoke token")
                self._verify_anchor("revocation", t, now)
                self._revocations.revoke(t)
            for t in _present(require):
                self._verify_anchor("require", t, now)
                _add_anchor_token(self._require.setdefault(t.issuer(), []), t)
            for t in _present(provide):
                self._verify_anchor("provide", t, now)
                _add_anchor_token(self._provide.setdefault(t.issuer(), []), t)
                self._given[t.revocation_key()] = t
            self._drop_invalid(now)

    def explain_provide_anchor(self, t: Token) -> Rejection | None:
        """Why ``t`` can never serve as one of our provide anchors (``None`` if it can).

        The DMS takes any token that verifies, but a provide anchor is only ever chained on
        (:meth:`delegate`, :meth:`delegate_invocation`, :meth:`delegate_broadcast`), which
        needs a delegate token whose subject is our DID: anything else is a token given to
        the wrong context.
        """
        text = f"provide anchor {t.describe()}"
        if t.action() != Action.DELEGATE:
            return Rejection(
                Reason.CHAIN_NOT_DELEGATE,
                f"{text} is not a delegation: only a delegate token can be delegated from",
                t,
            )
        if t.subject() != self._did:
            return Rejection(
                Reason.WRONG_SUBJECT,
                f"{text} delegates to {t.subject().uri}, not to this context's DID {self._did.uri}",
                t,
            )
        return None

    def _verify_anchor(self, kind: str, t: Token, now: int) -> None:
        try:
            t.verify(now, self._revocations)
        except TokenError as exc:
            raise UcanError(f"{kind} anchor rejected ({exc.go_error}): {exc}") from exc

    def _drop_invalid(self, now: int) -> None:
        for table in (self._require, self._provide, self._tokens):
            for key, tokens in table.items():
                table[key] = [t for t in tokens if self._verifies(t, now)]

    def _verifies(self, t: Token, now: int) -> bool:
        try:
            t.verify(now, self._revocations)
        except TokenError:
            return False
        return True

    def remove_roots(
        self,
        roots: Iterable[DID] = (),
        require: TokenList | None = None,
        provide: TokenList | None = None,
        revoke: TokenList | None = None,
    ) -> None:
        """``RemoveRoots``: anchor tokens are matched by issuer and nonce."""
        with self._lock:
            for root in roots:
                self._roots.pop(root, None)
            for table, tokens in ((self._require, require), (self._provide, provide)):
                for t in _present(tokens):
                    _remove_by_nonce(table, t.issuer(), t)
            for t in _present(provide):
                self._given = {
                    key: ot
                    for key, ot in self._given.items()
                    if not (ot.issuer() == t.issuer() and ot.nonce() == t.nonce())
                }
            for t in _present(revoke):
                self._revocations.remove(t)

    def list_roots(self) -> tuple[list[DID], TokenList, TokenList, TokenList]:
        """``ListRoots``: roots and the live require, provide and revocation anchors."""
        now = self.now()
        with self._lock:
            roots = list(self._roots)
            require = [
                t for issuer in list(self._require) for t in self._live(self._require, issuer)
            ]
            provide = [
                t for issuer in list(self._provide) for t in self._live(self._provide, issuer)
            ]
            revoke = self._revocations.list(now)
        return roots, TokenList.of(require), TokenList.of(provide), TokenList.of(revoke)

    def provide_anchors(self) -> tuple[Token, ...]:
        """The live provide anchors, and nothing else: what a sender reads on every message
        (:meth:`list_roots` copies every table, roots, require anchors and revocations too)."""
        return tuple(t for issuer in list(self._provide) for t in self._live(self._provide, issuer))

    def lapsed_anchors(self) -> TokenList:
        """The provide anchors we were given that have run out — and were otherwise sound
        (validly signed, not revoked, on the day they last held). Not in the DMS, which
        forgets them without a word; kept so that a sender can name the grant to renew
        instead of sending a message the DMS would drop."""
        now = self.now()
        with self._lock:
            given = list(self._given.values())
        return TokenList.of(
            t for t in given if t.expire_before(now) and self._verifies(t, t.chain_expiry())
        )

    def anchors_for(
        self,
        action: Action,
        audience: DID,
        topics: Sequence[Capability] | None,
        caps: Sequence[Capability],
        *,
        lapsed: bool = False,
    ) -> list[Token]:
        """The live provide anchors (with ``lapsed``, those that ran out) on which we could
        chain ``action`` tokens for every one of ``caps`` on ``audience``, time aside: what
        :meth:`delegate_invocation` and :meth:`delegate_broadcast` decide, asked at each
        anchor's last valid instant (:meth:`Token.chain_expiry`)."""
        anchors = self.lapsed_anchors().present() if lapsed else self.provide_anchors()
        return [
            t
            for t in anchors
            if all(
                t.allow_delegation(action, self._did, audience, topics, t.chain_expiry(), c)
                for c in caps
            )
        ]

    def gc(self) -> None:
        """Forget expired tokens and revocations (the DMS runs this periodically)."""
        now = self.now()
        with self._lock:
            for table in (self._require, self._provide, self._tokens):
                for key in list(table):
                    live = [t for t in table[key] if not t.expire_before(now)]
                    if live:
                        table[key] = live
                    else:
                        del table[key]
            self._revocations.gc(now)

    def _live(self, table: dict[DID, list[Token]], key: DID) -> list[Token]:
        """``getTokens``: the unexpired tokens under ``key``; expired ones are forgotten."""
        with self._lock:
            tokens = table.get(key)
            if tokens is None:
                return []
            now = self.now()
            live = [t for t in tokens if not t.expire_before(now)]
            table[key] = live
            return list(live)

    def _require_tokens(self) -> list[Token]:
        return [t for issuer in list(self._require) for t in self._live(self._require, issuer)]

    # -- issuing tokens -------------------------------------------------------------------

    def grant(
        self,
        action: Action | str,
        subject: DID,
        audience: DID,
        topics: Sequence[Capability] | None,
        expire: int,
        depth: int,
        caps: Sequence[Capability] | None,
    ) -> TokenList:
        """``Grant``: a fresh token issued by us, chained on nothing."""
        provider = self._signer()
        token = DMSToken(
            action=str(action),
            issuer=provider.did,
            subject=subject,
            audience=audience,
            topic=tuple(topics or ()) or None,
            capability=None if caps is None else tuple(caps),
            nonce=self._nonce_source(),
            expire=expire,
            depth=depth,
        ).signed(provider)
        return TokenList.of([Token(dms=token)])

    def revoke(self, token: Token) -> Token:
        """``Revoke``: the revocation token for one of our own tokens (filed as iss#sub#nonce)."""
        provider = self._signer()
        if token.issuer() != provider.did:
            raise NotAuthorizedError(
                f"cannot revoke {token.describe()}: it is issued by {token.issuer().uri}, "
                f"not by {provider.did.uri}"
            )
        revocation = DMSToken(
            action=Action.REVOKE.value,
            issuer=token.issuer(),
            subject=token.subject(),
            nonce=token.nonce(),
            expire=token.expire(),
        ).signed(provider)
        return Token(dms=revocation)

    def delegate(
        self,
        subject: DID,
        audience: DID,
        topics: Sequence[Capability] | None,
        expire: int,
        depth: int,
        caps: Sequence[Capability],
        self_sign: SelfSign,
    ) -> TokenList:
        """``Delegate``: delegate tokens for ``caps``, chained on our provide anchors.

        ``expire`` 0 means "as long as the anchor". A provide anchor is used only if it covers
        every capability asked for; with :attr:`SelfSign.NO` and no such anchor this raises
        ``not authorized``.
        """
        if not caps:
            return TokenList()
        provider = self._signer()
        topic_caps = tuple(topics or ()) or None
        result: list[Token] = []
        if self_sign != SelfSign.ONLY:
            for anchor in list(self._provide):
                for t in self._live(self._provide, anchor):
                    until = expire or t.expire()
                    allowed = [
                        c
                        for c in caps
                        if t.anchor(anchor)
                        and t.allow_delegation(
                            Action.DELEGATE, provider.did, audience, topic_caps, until, c
                        )
                    ]
                    if not allowed or len(allowed) < len(caps):
                        continue
                    result.append(
                        t.delegate(
                            provider,
                            subject,
                            audience,
                            topic_caps,
                            until,
                            depth,
                            allowed,
                            self._nonce_source(),
                        )
                    )
            if self_sign == SelfSign.NO:
                return _non_empty(result)
        result += self.grant(
            Action.DELEGATE, subject, audience, topics, expire, depth, caps
        ).present()
        return TokenList.of(result)

    def explain_delegate(
        self,
        audience: DID,
        topics: Sequence[Capability] | None,
        expire: int,
        caps: Sequence[Capability],
    ) -> tuple[Rejection, ...]:
        """Why :meth:`delegate` chains nothing on our provide anchors: for each live anchor
        that refuses, the first rule of ``AllowDelegation`` it breaks (``expire`` 0 meaning
        each anchor's own expiry, as in :meth:`delegate`)."""
        anchors = self.provide_anchors()
        refusals = (
            _delegation_refusal(t, self._did, audience, topics, expire or t.expire(), caps)
            for t in anchors
        )
        return tuple(r for r in refusals if r is not None)

    def delegate_invocation(
        self,
        target: DID,
        subject: DID,
        audience: DID,
        expire: int,
        caps: Sequence[Capability],
        self_sign: SelfSign,
    ) -> TokenList:
        """``DelegateInvocation``: invoke tokens for ``caps``, chained on delegations we were
        given (anchored on ``target``) and on our provide anchors, and/or self-signed."""
        if not caps:
            return TokenList()
        result = self._invocations(
            self._live(self._tokens, self._did), target, subject, audience, expire, caps
        )
        if self_sign != SelfSign.ONLY:
            for anchor in list(self._provide):
                tokens = self._live(self._provide, anchor)
                result += self._invocations(tokens, anchor, subject, audience, expire, caps)
            if self_sign == SelfSign.NO:
                return _non_empty(result)
        result += self.grant(Action.INVOKE, subject, audience, None, expire, 0, caps).present()
        return TokenList.of(result)

    def _invocations(
        self,
        tokens: Iterable[Token],
        anchor: DID,
        subject: DID,
        audience: DID,
        expire: int,
        caps: Sequence[Capability],
    ) -> list[Token]:
        provider = self._signer()
        result = []
        for t in tokens:
            allowed = [
                c
                for c in caps
                if t.anchor(anchor)
                and t.allow_delegation(Action.INVOKE, provider.did, audience, None, expire, c)
            ]
            if allowed and len(allowed) == len(caps):
                result.append(
                    t.delegate_invocation(
                        provider, subject, audience, expire, allowed, self._nonce_source()
                    )
                )
        return result

    def delegate_broadcast(
        self,
        subject: DID,
        topic: Capability,
        expire: int,
        caps: Sequence[Capability],
        self_sign: SelfSign,
    ) -> TokenList:
        """``DelegateBroadcast``: broadcast tokens on ``topic``, chained on our provide
        anchors and/or self-signed."""
        if not caps:
            return TokenList()
        provider = self._signer()
        result: list[Token] = []
        if self_sign != SelfSign.ONLY:
            for anchor in list(self._provide):
                for t in self._live(self._provide, anchor):
                    allowed = [
                        c
                        for c in caps
                        if t.anchor(anchor)
                        and t.allow_delegation(
                            Action.BROADCAST, provider.did, DID(), (topic,), expire, c
                        )
                    ]
                    if allowed and len(allowed) == len(caps):
                        result.append(
                            t.delegate_broadcast(
                                provider, subject, topic, expire, allowed, self._nonce_source()
                            )
                        )
            if self_sign == SelfSign.NO:
                return _non_empty(result)
        result += self.grant(Action.BROADCAST, subject, DID(), (topic,), expire, 0, caps).present()
        return TokenList.of(result)

    def provide(
        self,
        target: DID,
        subject: ID,
        audience: ID,
        expire: int,
        invoke: Sequence[Capability],
        delegate: Sequence[Capability] = (),
    ) -> bytes:
        """``Provide``: the ``cap`` blob for a message from ``subject`` to ``audience``.

        Invoke tokens for ``invoke`` (chained where we can, plus one self-signed), and
        depth-1 delegations of ``delegate`` to ``target`` (for replies).
        """
        if not invoke and not delegate:
            raise NotAuthorizedError("no capabilities")
        subject_did = _did_for("subject", subject)
        audience_did = _did_for("audience", audience)
        if not invoke:
            raise NotAuthorizedError("no invocation capabilities")
        tokens = list(
            self.delegate_invocation(
                target, subject_did, audience_did, expire, invoke, SelfSign.ALSO
            ).present()
        )
        if delegate:
            tokens += self.delegate(
                target, subject_did, None, expire, 1, delegate, SelfSign.ONLY
            ).present()
        return TokenList.of(tokens).to_json()

    def provide_broadcast(
        self, subject: ID, topic: Capability, expire: int, caps: Sequence[Capability]
    ) -> bytes:
        """``ProvideBroadcast``: the ``cap`` blob for a broadcast on ``topic``."""
        if not caps:
            raise NotAuthorizedError("no capabilities")
        subject_did = _did_for("subject", subject)
        return self.delegate_broadcast(subject_did, topic, expire, caps, SelfSign.ALSO).to_json()

    # -- checking incoming tokens ---------------------------------------------------------

    def consume(self, origin: DID, data: bytes) -> ConsumeReport:
        """``Consume``: take in the tokens of a message's ``cap`` blob from ``origin``.

        A token is kept (under its subject) when it is anchored on us, on ``origin``, on a
        root or on a require anchor, and verifies; others are skipped, as by the DMS, with
        the reason in the returned report. Raises :class:`CapabilityBlobError` (the DMS's
        message) when the blob is too big or not a token list.
        """
        self.last_consume = None
        tokens = _decode_blob(data)
        now = self.now()
        roots = list(self._roots)
        side_chains = self._require_tokens()
        outcomes = []
        for i, t in enumerate(tokens.tokens or ()):
            if t is None:
                raise CapabilityBlobError(
                    "nil token in the capability list",
                    Rejection(Reason.BAD_CAP_JSON, f"token #{i} of the capability list is null"),
                )
            rejection = self._admit(t, origin, roots, side_chains, now)
            if rejection is None:
                with self._lock:
                    self._tokens.setdefault(t.subject(), []).append(t)
            outcomes.append(TokenOutcome(t, rejection))
        report = ConsumeReport(origin, tuple(outcomes))
        self.last_consume = report
        return report

    def _admit(
        self, t: Token, origin: DID, roots: list[DID], side_chains: list[Token], now: int
    ) -> Rejection | None:
        anchored = (
            t.anchor(self._did)
            or t.anchor(origin)
            or any(t.anchor(root) for root in roots)
            or any(rt.allow_action(t) for rt in side_chains)
        )
        if not anchored:
            if t.dms is None:
                return Rejection(
                    Reason.UNSUPPORTED_TOKEN,
                    f"{t.describe()} was ignored: the DMS only understands DMS tokens",
                    t,
                )
            return Rejection(
                Reason.UNTRUSTED_ISSUER,
                f"{t.describe()} was ignored: none of its issuers ({_issuers(t)}) is this node "
                f"({self._did.uri}), the sender ({origin.uri}) or a root anchor, and no "
                "require anchor admits it",
                t,
            )
        try:
            t.verify(now, self._revocations)
        except TokenError as exc:
            return Rejection(exc.reason, str(exc), t)
        return None

    def discard(self, data: bytes) -> None:
        """``Discard``: forget the consumed tokens of a blob (after its message was refused)."""
        try:
            tokens = unmarshal_token_list(data)
        except GoDecodeError:
            return
        with self._lock:
            for t in tokens.present():
                _remove_by_nonce(self._tokens, t.subject(), t)

    def require(self, anchor: DID, subject: ID, audience: ID, caps: Sequence[Capability]) -> None:
        """``Require``: some token consumed for ``subject`` must let it invoke one of ``caps``
        on ``audience``, and lead back to ``anchor`` (our DID), a root or a require anchor.

        Raises :class:`NotAuthorizedError` with the DMS's message; its ``rejections`` say why
        (see :meth:`explain_require`).
        """
        if not caps:
            raise NotAuthorizedError("no capabilities", (_no_caps_rejection(),))
        subject_did = _did_for("subject", subject)
        audience_did = _did_for("audience", audience)
        if self._satisfying(anchor, subject_did, audience_did, caps) is None:
            explanation = self.explain_require(anchor, subject, audience, caps)
            raise NotAuthorizedError(rejections=explanation.rejections)

    def _satisfying(
        self, anchor: DID, subject: DID, audience: DID, caps: Sequence[Capability]
    ) -> Token | None:
        roots = list(self._roots)
        side_chains = self._require_tokens()
        for t in self._live(self._tokens, subject):
            for c in caps:
                if not t.allow_invocation(subject, audience, c):
                    continue
                if (
                    t.anchor(anchor)
                    or any(t.anchor(root) for root in roots)
                    or any(rt.allow_action(t) for rt in side_chains)
                ):
                    return t
        return None

    def require_broadcast(
        self, anchor: DID, subject: ID, topic: Capability, caps: Sequence[Capability]
    ) -> None:
        """``RequireBroadcast``: as :meth:`require`, for a broadcast on ``topic``."""
        if not caps:
            raise NotAuthorizedError("no capabilities")
        subject_did = _did_for("subject", subject)
        roots = list(self._roots)
        side_chains = self._require_tokens()
        for t in self._live(self._tokens, subject_did):
            for c in caps:
                if t.allow_broadcast(subject_did, topic, c) and (
                    t.anchor(anchor)
                    or any(t.anchor(root) for root in roots)
                    or any(rt.allow_action(t) for rt in side_chains)
                ):
                    return
        raise NotAuthorizedError()

    def explain_require(
        self,
        anchor: DID,
        subject: ID,
        audience: ID,
        caps: Sequence[Capability],
        consumed: ConsumeReport | None = None,
    ) -> RequireExplanation:
        """What :meth:`require` decides, and why, token by token.

        The candidates are the tokens stored for ``subject`` and those presented in
        ``consumed`` (default: the last :meth:`consume`), so that a token refused on the way
        in, or stored under another subject, is explained too.
        """
        subject_did = _did_for("subject", subject)
        audience_did = _did_for("audience", audience)
        required = tuple(caps)
        if not required:
            return RequireExplanation(
                subject_did, audience_did, required, None, (_no_caps_rejection(),)
            )
        found = self._satisfying(anchor, subject_did, audience_did, required)
        if found is not None:
            return RequireExplanation(subject_did, audience_did, required, found, ())
        stored = self._live(self._tokens, subject_did)
        why = [self._why_not(anchor, t, subject_did, audience_did, required) for t in stored]
        report = consumed if consumed is not None else self.last_consume
        for outcome in report.outcomes if report is not None else ():
            if outcome.rejection is not None:
                why.append(outcome.rejection)
            elif outcome.token not in stored:
                why.append(
                    self._why_not(anchor, outcome.token, subject_did, audience_did, required)
                )
        if not why:
            why.append(
                Rejection(
                    Reason.NO_CAPABILITY,
                    f"no capability token for {subject_did.uri} has been presented",
                )
            )
        return RequireExplanation(subject_did, audience_did, required, None, tuple(why))

    def _why_not(
        self,
        anchor: DID,
        t: Token,
        subject: DID,
        audience: DID,
        caps: Sequence[Capability],
    ) -> Rejection:
        """The first rule of :meth:`require` that ``t`` breaks."""
        try:
            t.verify(self.now(), self._revocations)
        except TokenError as exc:
            return Rejection(exc.reason, str(exc), t)
        d = t.dms
        assert d is not None  # verify() refuses anything else
        text = describe(d)
        if d.action != Action.INVOKE:
            return Rejection(
                Reason.NO_CAPABILITY,
                f"{text} is a {d.action} token; only an invoke token authorizes a call",
                t,
            )
        if d.subject != subject:
            return Rejection(
                Reason.WRONG_SUBJECT,
                f"{text} is for {d.subject.uri}, but the message comes from {subject.uri}",
                t,
            )
        if not d.audience.empty() and d.audience != audience:
            return Rejection(
                Reason.WRONG_AUDIENCE,
                f"{text} is for audience {d.audience.uri}, but the receiver is {audience.uri}",
                t,
            )
        if not any(implies_any(d.capability, c) for c in caps):
            return Rejection(
                Reason.NOT_IMPLIED,
                f"{text} does not cover the call: it needs one of [{', '.join(caps)}]",
                t,
            )
        for rt in self._require_tokens():
            if t.anchor(rt.subject()):
                return _side_chain_refusal(rt, t)
        roots = ", ".join(root.uri for root in self._roots) or "none"
        return Rejection(
            Reason.UNTRUSTED_ISSUER,
            f"{text} does not lead back to a trusted DID: its chain is issued by "
            f"{_issuers(t)}; trusted are {anchor.uri} and the roots ({roots})",
            t,
        )


def _side_chain_refusal(rt: Token, t: Token) -> Rejection:
    """Why require anchor ``rt`` does not admit ``t`` (``AllowAction``), rule by rule."""
    side = f"require anchor {rt.describe()}"
    text = t.describe()
    if rt.action() != Action.DELEGATE:
        return Rejection(Reason.CHAIN_NOT_DELEGATE, f"{side} is not a delegate token", t)
    if rt.expire_before(t.expire()):
        return Rejection(Reason.CHAIN_OUTLIVED, f"{text} outlives {side}", t)
    depth, _ = t.anchor_depth(rt.subject())
    rt_depth = rt.dms.depth if rt.dms is not None else 0
    if rt_depth > 0 and depth > rt_depth:
        return Rejection(
            Reason.DEPTH_EXCEEDED,
            f"{text} sits {depth} links below {rt.subject().uri}, more than the {rt_depth} "
            f"that {side} allows",
            t,
        )
    if not rt.audience().empty() and rt.audience() != t.audience():
        return Rejection(
            Reason.WRONG_AUDIENCE, f"{side} is restricted to audience {rt.audience().uri}", t
        )
    return Rejection(Reason.NOT_IMPLIED, f"{side} does not cover {text}", t)


def _delegation_refusal(
    t: Token,
    issuer: DID,
    audience: DID,
    topics: Sequence[Capability] | None,
    expire: int,
    caps: Sequence[Capability],
) -> Rejection | None:
    """The first rule of ``AllowDelegation`` that provide anchor ``t`` breaks when ``issuer``
    delegates ``caps`` on it (``None`` when it allows them all).

    Whom it delegates to is told first: a token that is not a delegation to ``issuer`` is the
    wrong token altogether, whatever its depth or expiry say.
    """
    text = t.describe()
    if t.action() != Action.DELEGATE:
        return Rejection(
            Reason.CHAIN_NOT_DELEGATE, f"{text} is not a delegation to {issuer.uri}", t
        )
    if t.subject() != issuer:
        return Rejection(Reason.WRONG_SUBJECT, f"{text} is not a delegation to {issuer.uri}", t)
    if not t.verify_depth(2):
        return Rejection(
            Reason.DEPTH_EXCEEDED,
            f"{text} allows no further delegation (its depth limit is reached)",
            t,
        )
    if t.expire_before(expire):
        return Rejection(Reason.CHAIN_OUTLIVED, f"{text} expires before {format_second(expire)}", t)
    if not t.audience().empty() and t.audience() != audience:
        return Rejection(
            Reason.WRONG_AUDIENCE, f"{text} is restricted to audience {t.audience().uri}", t
        )
    outside = [topic for topic in topics or () if not implies_any(t.topic(), topic)]
    if outside:
        return Rejection(
            Reason.NOT_IMPLIED, f"{text} does not cover topics {', '.join(outside)}", t
        )
    missing = [c for c in caps if not implies_any(t.capability(), c)]
    if missing:
        return Rejection(Reason.NOT_IMPLIED, f"{text} does not cover {', '.join(missing)}", t)
    return None


def _decode_blob(data: bytes) -> TokenList:
    if len(data) > MAX_CAPABILITY_SIZE:
        raise CapabilityBlobError(
            "capability blob too big",
            Rejection(
                Reason.CAP_TOO_BIG,
                f"the capability blob is {len(data)} bytes; the DMS reads at most "
                f"{MAX_CAPABILITY_SIZE} (send fewer or shorter tokens)",
            ),
        )
    try:
        return unmarshal_token_list(data)
    except GoDecodeError as exc:
        what = "is empty" if not data else f"is not a JSON token list ({exc})"
        raise CapabilityBlobError(
            f"unmarshaling payload: {exc}",
            Rejection(Reason.BAD_CAP_JSON, f"the capability blob {what}"),
        ) from None


def _did_for(role: str, actor_id: ID) -> DID:
    try:
        return did_from_id(actor_id)
    except TrustError as exc:
        raise UcanError(f"DID for {role}: {exc}") from None


def _no_caps_rejection() -> Rejection:
    return Rejection(
        Reason.NO_CAPABILITY, "no capability was required, and the DMS refuses an empty list"
    )


def _issuers(t: Token) -> str:
    issuers = []
    d = t.dms
    while d is not None:
        issuers.append(d.issuer.uri)
        d = d.chain.dms if d.chain is not None else None
    return ", ".join(issuers)


def _present(tokens: TokenList | None) -> tuple[Token, ...]:
    return tokens.present() if tokens is not None else ()


def _non_empty(tokens: list[Token]) -> TokenList:
    if not tokens:
        raise NotAuthorizedError()
    return TokenList.of(tokens)


def _add_anchor_token(tokens: list[Token], t: Token) -> None:
    """``consumeAnchorToken``: keep only tokens that no other token subsumes."""
    if any(ot.subsumes(t) for ot in tokens):
        return
    tokens[:] = [ot for ot in tokens if not t.subsumes(ot)]
    tokens.append(t)


def _remove_by_nonce(table: dict[DID, list[Token]], key: DID, t: Token) -> None:
    tokens = table.get(key)
    if tokens is None:
        return
    remaining = [ot for ot in tokens if not (ot.issuer() == t.issuer() and ot.nonce() == t.nonce())]
    if remaining:
        table[key] = remaining
    else:
        del table[key]
