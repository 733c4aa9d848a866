"""DMS capability tokens (``lib/ucan/token.go``): the DMS's own JSON "UCAN".

A token says: ``iss`` lets ``sub`` ``act`` (invoke, delegate, broadcast, revoke) the capabilities
``cap`` on ``aud`` (empty: anyone) until ``exp`` (Unix ns). A token may embed the delegate token
it derives its authority from (``chain``), down to a root issuer the verifier trusts. The issuer
signs ``b"dms:token:"`` + the Go JSON of the token without ``sig``; the chain keeps its own.

Mirrors ``lib/ucan/token.go``: each of its types (``Token``, ``DMSToken``, ``BYOToken``,
``TokenList``, ``RevocationSet``) and each of their methods has its counterpart here, under the
Go name in snake case and with the checks in Go's order, so that a verdict here is the DMS's
verdict (``Size`` and ``Expired``, which nothing needs, are left out; the errors are those of
``errors.go``). Added to it: where the DMS only says "not authorized", :class:`TokenError` also
carries a :class:`Reason` code and a sentence naming the offending token, for the gateway's
preflight explanations; and a hand-written encoder for the JSON every signature covers.
"""

from __future__ import annotations

import base64
import dataclasses
import enum
import os
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any

from ...clock import NS_PER_SECOND
from ...errors import DmsgwError
from ...gojson import (
    BYTES,
    RAW,
    STRING,
    UINT64,
    DecodeContext,
    GoEncodeError,
    GoStruct,
    GoType,
    Ptr,
    SliceOf,
    StructOf,
    encode_string,
    go_field,
    marshal_without,
    unmarshal,
)
from ...gojson.strings import encode_value_string
from ..did import DID
from ..trust import InvalidSignatureError, Provider, TrustError, get_anchor
from .cap import Capability, implies_any

__all__ = [
    "NONCE_LENGTH",
    "SIGNATURE_PREFIX",
    "Action",
    "BYOToken",
    "DMSToken",
    "NotAuthorizedError",
    "Reason",
    "Rejection",
    "RevocationSet",
    "Token",
    "TokenError",
    "TokenList",
    "UcanError",
    "describe",
    "format_ns",
    "format_second",
    "random_nonce",
    "unmarshal_token_list",
]

NONCE_LENGTH = 12
SIGNATURE_PREFIX = b"dms:token:"
_UINT64_MAX = (1 << 64) - 1


class Action(enum.StrEnum):
    INVOKE = "invoke"
    DELEGATE = "delegate"
    BROADCAST = "broadcast"
    REVOKE = "revoke"


class Reason(enum.StrEnum):
    """Why a capability was refused: the short codes of the gateway's preflight explanations."""

    EXPIRED = "expired"
    NOT_IMPLIED = "not_implied"
    WRONG_AUDIENCE = "wrong_audience"
    WRONG_SUBJECT = "wrong_subject"
    UNTRUSTED_ISSUER = "untrusted_issuer"
    DEPTH_EXCEEDED = "depth_exceeded"
    REVOKED = "revoked"
    BAD_SIGNATURE = "bad_signature"
    CHAIN_NOT_DELEGATE = "chain_not_delegate"
    CHAIN_OUTLIVED = "chain_outlived"
    NOT_ALLOWED_BY_CHAIN = "not_allowed_by_chain"
    NO_CAPABILITY = "no_capability"
    CAP_TOO_BIG = "cap_too_big"
    BAD_CAP_JSON = "bad_cap_json"
    UNSUPPORTED_TOKEN = "unsupported_token"


@dataclasses.dataclass(frozen=True, slots=True)
class Rejection:
    """One refusal: the reason code, a sentence naming the token and the rule it broke, and the
    token as presented (``None`` when the whole capability blob was refused)."""

    reason: Reason
    message: str
    token: Token | None = None

    def __str__(self) -> str:
        return f"{self.reason}: {self.message}"


class UcanError(DmsgwError):
    """Base of the capability-token errors."""


class NotAuthorizedError(UcanError):
    """The DMS's ``ErrNotAuthorized``; its message is the DMS's, word for word.

    ``rejections`` says why, token by token, when the refusal came from checking tokens.
    """

    def __init__(self, context: str = "", rejections: Sequence[Rejection] = ()) -> None:
        super().__init__(f"{context}: not authorized" if context else "not authorized")
        self.rejections = tuple(rejections)


class TokenError(UcanError):
    """A token that fails verification.

    ``str()`` names the offending token (which may sit deep in the chain) and the broken rule;
    ``go_error`` is the text the DMS logs for the same failure; ``culprit`` is that token.
    """

    def __init__(
        self, reason: Reason, go_error: str, detail: str, culprit: DMSToken | None
    ) -> None:
        super().__init__(detail)
        self.reason = reason
        self.go_error = go_error
        self.culprit = culprit


def random_nonce() -> bytes:
    return os.urandom(NONCE_LENGTH)


def format_ns(ns: int) -> str:
    """A Unix-ns instant as UTC ISO 8601, for messages (to the ns when not a whole second)."""
    seconds, fraction = divmod(ns, NS_PER_SECOND)
    text = datetime.fromtimestamp(seconds, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S")
    return f"{text}.{fraction:09d}Z" if fraction else f"{text}Z"


def format_second(ns: int) -> str:
    """An instant to the second, for people: they need no nanoseconds (the JSON keeps them)."""
    return format_ns(ns - ns % NS_PER_SECOND)


def _caps_text(caps: Sequence[Capability] | None) -> str:
    return "[" + ", ".join(caps) + "]" if caps else "no capabilities"


def describe(t: DMSToken) -> str:
    """A token in one line, for messages: action, issuer, subject, audience, capabilities."""
    text = f"{t.action or '(no action)'} token from {t.issuer.uri or '(no issuer)'} to "
    text += f"{t.subject.uri or '(no subject)'} for {_caps_text(t.capability)}"
    if t.topic:
        text += f" on topics {_caps_text(t.topic)}"
    if not t.audience.empty():
        text += f" (audience {t.audience.uri})"
    return text


# --- Go structs ----------------------------------------------------------------------------


class _LaterStruct(StructOf):
    """``StructOf`` a class defined further down (``Token`` and ``DMSToken`` nest each other),
    bound once it exists."""

    def __init__(self, go_name: str) -> None:
        self.go_name = go_name

    def bind(self, cls: type[GoStruct]) -> None:
        self.cls = cls


_TOKEN = _LaterStruct("Token")
_DID_TYPE = StructOf(DID)
_CAPS_TYPE = SliceOf(STRING)


@dataclasses.dataclass(frozen=True, slots=True)
class DMSToken(GoStruct):
    """``ucan.DMSToken``; fields in Go declaration order, which is the signed JSON key order."""

    GO_NAME = "DMSToken"
    action: str = go_field("act", STRING, default="")
    issuer: DID = go_field("iss", _DID_TYPE, default=DID())
    subject: DID = go_field("sub", _DID_TYPE, default=DID())
    audience: DID = go_field("aud", _DID_TYPE, default=DID())
    topic: tuple[Capability, ...] | None = go_field(
        "topic", _CAPS_TYPE, omitempty=True, default=None
    )
    capability: tuple[Capability, ...] | None = go_field("cap", _CAPS_TYPE, default=None)
    nonce: bytes | None = go_field("nonce", BYTES, default=None)
    expire: int = go_field("exp", UINT64, default=0)
    depth: int = go_field("depth", UINT64, omitempty=True, default=0)
    chain: Token | None = go_field("chain", Ptr(_TOKEN), omitempty=True, default=None)
    signature: bytes | None = go_field("sig", BYTES, omitempty=True, default=None)
    # Not a Go field: the JSON without ``sig``, built once. The token is immutable and
    # dataclasses.replace() starts the copy without it, so it can never be stale.
    _unsigned: str | None = dataclasses.field(default=None, init=False, repr=False, compare=False)

    # -- JSON and signing ---------------------------------------------------------------

    def unsigned_json(self) -> str:
        """The Go JSON of this token without ``sig`` (what its issuer signs)."""
        text = self._unsigned
        if text is None:
            text = _encode_unsigned(self)
            object.__setattr__(self, "_unsigned", text)
        return text

    def go_json(self) -> str:
        """The Go JSON of this token; a chain's JSON is reused, not rebuilt."""
        text = self.unsigned_json()
        if not self.signature:
            return text
        return f'{text[:-1]},"sig":"{base64.b64encode(self.signature).decode("ascii")}"}}'

    def to_json(self) -> bytes:
        return self.go_json().encode("utf-8")

    def signature_data(self) -> bytes:
        """``b"dms:token:"`` + the Go JSON of this token without ``sig``."""
        return SIGNATURE_PREFIX + self.unsigned_json().encode("utf-8")

    def signed(self, provider: Provider) -> DMSToken:
        """This token with ``sig`` set by ``provider`` (which should be the issuer's)."""
        result = dataclasses.replace(self, signature=provider.sign(self.signature_data()))
        object.__setattr__(result, "_unsigned", self._unsigned)
        return result

    def revocation_key(self) -> bytes:
        """``iss#sub#nonce``, the key a revocation token is filed under (nonce as raw bytes)."""
        return f"{self.issuer.uri}#{self.subject.uri}#".encode() + (self.nonce or b"")

    # -- chain structure ----------------------------------------------------------------

    def expire_before(self, deadline: int) -> bool:
        """True when this token or any token in its chain expires before ``deadline``."""
        if deadline > self.expire:
            return True
        return self.chain is not None and self.chain.expire_before(deadline)

    def chain_expiry(self) -> int:
        """The earliest expiry along this token and its chain: the last instant at which it
        verifies, and so the latest expiry a token chained on it may have (0 when the chain
        holds a token that is not a DMS token: as for :meth:`expire_before`, it never verifies)."""
        t, earliest = self, self.expire
        while t.chain is not None:
            if t.chain.dms is None:
                return 0
            t = t.chain.dms
            earliest = min(earliest, t.expire)
        return earliest

    def anchor(self, anchor: DID) -> bool:
        """True when ``anchor`` issued this token or a token in its chain."""
        if self.issuer == anchor:
            return True
        return self.chain is not None and self.chain.anchor(anchor)

    def anchor_depth(self, anchor: DID) -> tuple[int, bool]:
        """How many links below this token ``anchor``'s deepest token sits, and whether it does."""
        depth, have = (0, True) if self.issuer == anchor else (0, False)
        if self.chain is not None:
            chain_depth, chain_have = self.chain.anchor_depth(anchor)
            if chain_have:
                depth, have = chain_depth + 1, True
        return depth, have

    def self_signed(self, origin: DID) -> bool:
        """True when the root of the chain was issued by ``origin``."""
        if self.chain is not None:
            return self.chain.self_signed(origin)
        return self.issuer == origin

    def verify_depth(self, depth: int) -> bool:
        """Whether a token at ``depth`` below this one respects every depth limit in the chain."""
        if self.depth > 0 and depth > self.depth:
            return False
        return self.chain is None or self.chain.verify_depth(depth + 1)

    # -- what the token allows ----------------------------------------------------------

    def allow_invocation(self, subject: DID, audience: DID, c: Capability) -> bool:
        if self.action != Action.INVOKE or self.subject != subject:
            return False
        if not self.audience.empty() and self.audience != audience:
            return False
        return implies_any(self.capability, c)

    def allow_broadcast(self, subject: DID, topic: Capability, c: Capability) -> bool:
        if self.action != Action.BROADCAST or self.subject != subject:
            return False
        if not self.audience.empty():
            return False
        return implies_any(self.topic, topic) and implies_any(self.capability, c)

    def allow_delegation(
        self,
        action: str,
        issuer: DID,
        audience: DID,
        topics: Sequence[Capability] | None,
        expire: int,
        c: Capability,
    ) -> bool:
        """Whether ``issuer`` may derive an ``action`` token for ``c`` from this one.

        A delegation needs room for one more link below the new token (depth 2), or it
        would be a dead end; an invocation needs room for itself (depth 1).
        """
        if not self.verify_depth(2 if action == Action.DELEGATE else 1):
            return False
        return self._allow_delegation(issuer, audience, topics, expire, c)

    def _allow_delegation(
        self,
        issuer: DID,
        audience: DID,
        topics: Sequence[Capability] | None,
        expire: int,
        c: Capability,
    ) -> bool:
        if self.action != Action.DELEGATE or self.expire_before(expire):
            return False
        if self.subject != issuer:
            return False
        if not self.audience.empty() and self.audience != audience:
            return False
        if not all(implies_any(self.topic, topic) for topic in topics or ()):
            return False
        return implies_any(self.capability, c)

    def allow_action(self, ot: Token) -> bool:
        """Whether this (require anchor) token admits ``ot`` as a side chain."""
        if self.action != Action.DELEGATE or self.expire_before(ot.expire()):
            return False
        if not ot.anchor(self.subject):
            return False
        if self.depth > 0:
            depth, have = ot.anchor_depth(self.subject)
            if have and depth > self.depth:
                return False
        if not self.audience.empty() and self.audience != ot.audience():
            return False
        if not all(implies_any(self.capability, oc) for oc in ot.capability() or ()):
            return False
        return all(implies_any(self.topic, topic) for topic in ot.topic() or ())

    def subsumes(self, ot: Token) -> bool:
        """Whether this token makes ``ot`` redundant (same parties, longer, wider)."""
        if (
            self.issuer != ot.issuer()
            or self.subject != ot.subject()
            or self.audience != ot.audience()
            or self.expire < ot.expire()
        ):
            return False
        return all(implies_any(self.capability, oc) for oc in ot.capability() or ())

    # -- deriving tokens ----------------------------------------------------------------

    def delegate(
        self,
        provider: Provider,
        subject: DID,
        audience: DID,
        topics: Sequence[Capability] | None,
        expire: int,
        depth: int,
        caps: Sequence[Capability] | None,
        nonce: bytes | None = None,
    ) -> DMSToken:
        return self._delegate(
            Action.DELEGATE, provider, subject, audience, topics, expire, depth, caps, nonce
        )

    def delegate_invocation(
        self,
        provider: Provider,
        subject: DID,
        audience: DID,
        expire: int,
        caps: Sequence[Capability] | None,
        nonce: bytes | None = None,
    ) -> DMSToken:
        return self._delegate(
            Action.INVOKE, provider, subject, audience, None, expire, 0, caps, nonce
        )

    def delegate_broadcast(
        self,
        provider: Provider,
        subject: DID,
        topic: Capability,
        expire: int,
        caps: Sequence[Capability] | None,
        nonce: bytes | None = None,
    ) -> DMSToken:
        return self._delegate(
            Action.BROADCAST, provider, subject, DID(), (topic,), expire, 0, caps, nonce
        )

    def _delegate(
        self,
        action: Action,
        provider: Provider,
        subject: DID,
        audience: DID,
        topics: Sequence[Capability] | None,
        expire: int,
        depth: int,
        caps: Sequence[Capability] | None,
        nonce: bytes | None,
    ) -> DMSToken:
        if self.action != Action.DELEGATE:
            raise NotAuthorizedError(f"cannot chain on a {self.action} token")
        if not self.verify_depth(2 if action == Action.DELEGATE else 1):
            raise NotAuthorizedError(f"{describe(self)} allows no further {action} token")
        return DMSToken(
            action=str(action),
            issuer=provider.did,
            subject=subject,
            audience=audience,
            topic=None if topics is None else tuple(topics),
            capability=None if caps is None else tuple(caps),
            nonce=random_nonce() if nonce is None else nonce,
            expire=expire,
            depth=depth,
            chain=Token(dms=self),
        ).signed(provider)

    # -- verification -------------------------------------------------------------------

    def verify(self, now: int, revoke: RevocationSet | None = None) -> None:
        """``Verify``: raise :class:`TokenError` unless the whole chain holds at ``now``."""
        self._verify(now, 0, revoke)

    def _verify(self, now: int, depth: int, revoke: RevocationSet | None) -> None:
        if self.expire_before(now):
            raise _expired_error(self, now)
        if self.action == Action.REVOKE:
            self._check_signature()
            return
        if self.depth > 0 and depth > self.depth:
            raise TokenError(
                Reason.DEPTH_EXCEEDED,
                "max token depth exceeded: not authorized",
                f"{describe(self)} allows at most {self.depth} link(s) below it, "
                f"but {depth} follow it",
                self,
            )
        if revoke is not None and revoke.revoked(self.revocation_key()):
            raise TokenError(
                Reason.REVOKED,
                "verify: token has been revoked: not authorized",
                f"{describe(self)} has been revoked by its issuer",
                self,
            )
        if self.chain is not None:
            self._verify_chain(self.chain, now, depth, revoke)
        self._check_signature()

    def _verify_chain(
        self, chain: Token, now: int, depth: int, revoke: RevocationSet | None
    ) -> None:
        granting = chain.dms
        if granting is None or granting.action != Action.DELEGATE:
            raise TokenError(
                Reason.CHAIN_NOT_DELEGATE,
                "verify: chain does not allow delegation: not authorized",
                f"{describe(self)} is chained on {chain.describe()}; "
                "only delegate tokens can be chained on",
                self,
            )
        if granting.expire_before(self.expire):
            raise TokenError(
                Reason.CHAIN_OUTLIVED,
                "capability expired",
                f"{describe(self)} expires at {format_ns(self.expire)}, after its chain "
                f"(which expires at {format_ns(granting.chain_expiry())})",
                self,
            )
        granting._verify(now, depth + 1, revoke)
        if self.issuer != granting.subject:
            raise TokenError(
                Reason.NOT_ALLOWED_BY_CHAIN,
                "verify: issuer/chain subject mismatch: not authorized",
                f"{describe(self)} is issued by {self.issuer.uri}, but its chain "
                f"({describe(granting)}) delegates to {granting.subject.uri}",
                self,
            )
        missing = [
            c
            for c in self.capability or ()
            if not granting._allow_delegation(
                self.issuer, self.audience, self.topic, self.expire, c
            )
        ]
        if missing:
            raise TokenError(
                Reason.NOT_ALLOWED_BY_CHAIN,
                "verify: capabilities are not allowed by the chain: not authorized",
                f"{describe(self)} claims {_caps_text(missing)}, which its chain "
                f"({describe(granting)}) does not delegate: {_chain_refusal(granting, self)}",
                self,
            )

    def _check_signature(self) -> None:
        try:
            valid = _signed_by(self.issuer, self.signature_data(), self.signature or b"")
        except TrustError as exc:
            raise TokenError(
                Reason.BAD_SIGNATURE,
                f"verify: anchor: {exc}",
                f"cannot check the signature of {describe(self)}: {exc}",
                self,
            ) from None
        if not valid:
            raise TokenError(
                Reason.BAD_SIGNATURE,
                "verify: signature: signature verification failed",
                f"{describe(self)} is not validly signed by its issuer "
                "(altered after signing, or signed by another key)",
                self,
            )


class _NotPlainError(ValueError):
    """A token outside the shapes :func:`_plain_unsigned` writes; the generic codec takes it."""


def _encode_unsigned(t: DMSToken) -> str:
    """The JSON of ``t`` without ``sig``, by the hand-written encoder below when it applies.

    Every token is written once per message it arrives in (its issuer signed that JSON), and
    the hand-written encoder is faster than the generic codec's per-field dispatch
    (bench/README.md, "Signing and verifying"). The
    generic codec stays the reference, and takes every value outside the plain shapes.
    """
    try:
        return _plain_unsigned(t)
    except _NotPlainError:
        return marshal_without(t, "signature").decode("utf-8")


def _plain_unsigned(t: DMSToken) -> str:
    parts = [
        '{"act":',
        _plain_str(t.action),
        ',"iss":',
        _plain_did(t.issuer),
        ',"sub":',
        _plain_did(t.subject),
        ',"aud":',
        _plain_did(t.audience),
    ]
    if t.topic:
        parts += (',"topic":', _plain_caps(t.topic))
    parts += (',"cap":', _plain_caps(t.capability), ',"nonce":', _plain_bytes(t.nonce))
    parts += (',"exp":', _plain_uint(t.expire))
    if t.depth:
        parts += (',"depth":', _plain_uint(t.depth))
    if t.chain is not None:
        parts += (',"chain":', _plain_token(t.chain))
    parts.append("}")
    return "".join(parts)


# DIDs recur in every token: write each once.
@lru_cache(maxsize=4096)
def _did_json(uri: str) -> str:
    return '{"uri":' + encode_string(uri) + "}" if uri else "{}"


def _plain_str(value: object) -> str:
    if not isinstance(value, str):
        raise _NotPlainError
    return encode_value_string(value)


def _plain_did(value: object) -> str:
    if type(value) is not DID or not isinstance(value.uri, str):
        raise _NotPlainError
    return _did_json(value.uri)


def _plain_caps(value: object) -> str:
    if value is None:
        return "null"
    if not isinstance(value, (tuple, list)):
        raise _NotPlainError
    return "[" + ",".join(_plain_str(c) for c in value) + "]"


def _plain_bytes(value: object) -> str:
    if value is None:
        return "null"
    if not isinstance(value, bytes):
        raise _NotPlainError
    return '"' + base64.b64encode(value).decode("ascii") + '"'


def _plain_uint(value: object) -> str:
    if type(value) is not int or not 0 <= value <= _UINT64_MAX:
        raise _NotPlainError
    return str(value)


def _plain_token(value: object) -> str:
    if type(value) is not Token or not (value.dms is None or type(value.dms) is DMSToken):
        raise _NotPlainError
    parts = ['"dms":' + value.dms.go_json()] if value.dms is not None else []
    if value.ucan is not None:
        parts.append('"ucan":{}')
    return "{" + ",".join(parts) + "}"


class _DMSTokenType(StructOf):
    """``*DMSToken`` inside a ``Token``: written as the token's remembered JSON (a chain's
    JSON is part of every token derived from it), read as the struct it is."""

    def __init__(self) -> None:
        super().__init__(DMSToken)

    def encode(self, value: Any, out: list[str]) -> None:
        if not isinstance(value, DMSToken):
            raise GoEncodeError(f"expected a DMSToken, got {type(value).__name__}")
        out.append(value.go_json())


@lru_cache(maxsize=1024)
def _signed_by(issuer: DID, data: bytes, sig: bytes) -> bool:
    """Signature checks, remembered: the answer depends on nothing but these bytes, and the
    same grants come back in message after message."""
    try:
        get_anchor(issuer).verify(data, sig)
    except InvalidSignatureError:
        return False
    return True


def _expired_error(t: DMSToken, now: int) -> TokenError:
    culprit: DMSToken | None = t
    while culprit is not None and now <= culprit.expire:
        culprit = culprit.chain.dms if culprit.chain is not None else None
    if culprit is None:  # a non-DMS token in the chain expires at once
        detail = f"the chain of {describe(t)} ends in a token that is not a DMS token"
        return TokenError(Reason.EXPIRED, "capability expired", detail, t)
    where = "" if culprit is t else f" (in the chain of {describe(t)})"
    detail = (
        f"{describe(culprit)} expired at {format_ns(culprit.expire)}{where}; "
        f"it is now {format_ns(now)}"
    )
    return TokenError(Reason.EXPIRED, "capability expired", detail, culprit)


def _chain_refusal(granting: DMSToken, t: DMSToken) -> str:
    """Which part of ``granting``'s delegation ``t`` oversteps (for messages)."""
    if not granting.audience.empty() and granting.audience != t.audience:
        return f"the chain is restricted to audience {granting.audience.uri}"
    outside = [topic for topic in t.topic or () if not implies_any(granting.topic, topic)]
    if outside:
        return f"topics {_caps_text(outside)} are outside the chain's {_caps_text(granting.topic)}"
    return f"the chain grants only {_caps_text(granting.capability)}"


@dataclasses.dataclass(frozen=True, slots=True)
class BYOToken:
    """A standard-UCAN ("bring your own") envelope: the DMS defines it but supports nothing of
    it, and re-marshals it as ``{}``. ``raw`` keeps what was received, compacted (Go decodes
    nothing of it, so it refuses no number in it either)."""

    raw: bytes = b"{}"


@dataclasses.dataclass(frozen=True, slots=True)
class _BYOTokenView(GoStruct):
    """The DMS's empty ``BYOToken`` struct, to decode (and refuse non-objects) as Go does."""

    GO_NAME = "BYOToken"


_BYO_VIEW = StructOf(_BYOTokenView)


class _BYOType(GoType):
    go_name = "BYOToken"

    def encode(self, value: Any, out: list[str]) -> None:
        out.append("{}")

    def decode(self, raw: Any, current: Any, ctx: DecodeContext) -> Any:
        _BYO_VIEW.decode(raw, _BYOTokenView(), ctx)
        return BYOToken(RAW.decode(raw, None, ctx))

    def zero(self) -> Any:
        return BYOToken()


@dataclasses.dataclass(frozen=True, slots=True)
class Token(GoStruct):
    """``ucan.Token``: a DMS token, or a standard UCAN envelope (unsupported, as in the DMS).

    The methods answer as the DMS does for a token that is not a DMS token: it anchors nothing,
    allows nothing and is always expired.
    """

    GO_NAME = "Token"
    dms: DMSToken | None = go_field("dms", Ptr(_DMSTokenType()), omitempty=True, default=None)
    ucan: BYOToken | None = go_field("ucan", Ptr(_BYOType()), omitempty=True, default=None)

    def action(self) -> str:
        return self.dms.action if self.dms else ""

    def issuer(self) -> DID:
        return self.dms.issuer if self.dms else DID()

    def subject(self) -> DID:
        return self.dms.subject if self.dms else DID()

    def audience(self) -> DID:
        return self.dms.audience if self.dms else DID()

    def capability(self) -> tuple[Capability, ...] | None:
        return self.dms.capability if self.dms else None

    def topic(self) -> tuple[Capability, ...] | None:
        return self.dms.topic if self.dms else None

    def expire(self) -> int:
        return self.dms.expire if self.dms else 0

    def nonce(self) -> bytes | None:
        return self.dms.nonce if self.dms else None

    def signature_data(self) -> bytes:
        return self._require_dms().signature_data()

    def revocation_key(self) -> bytes:
        return self.dms.revocation_key() if self.dms else b""

    def expire_before(self, deadline: int) -> bool:
        return self.dms.expire_before(deadline) if self.dms else True

    def chain_expiry(self) -> int:
        return self.dms.chain_expiry() if self.dms else 0

    def anchor(self, anchor: DID) -> bool:
        return self.dms is not None and self.dms.anchor(anchor)

    def anchor_depth(self, anchor: DID) -> tuple[int, bool]:
        return self.dms.anchor_depth(anchor) if self.dms else (0, False)

    def self_signed(self, origin: DID) -> bool:
        return self.dms is not None and self.dms.self_signed(origin)

    def verify_depth(self, depth: int) -> bool:
        return self.dms is not None and self.dms.verify_depth(depth)

    def allow_invocation(self, subject: DID, audience: DID, c: Capability) -> bool:
        return self.dms is not None and self.dms.allow_invocation(subject, audience, c)

    def allow_broadcast(self, subject: DID, topic: Capability, c: Capability) -> bool:
        return self.dms is not None and self.dms.allow_broadcast(subject, topic, c)

    def allow_delegation(
        self,
        action: str,
        issuer: DID,
        audience: DID,
        topics: Sequence[Capability] | None,
        expire: int,
        c: Capability,
    ) -> bool:
        return self.dms is not None and self.dms.allow_delegation(
            action, issuer, audience, topics, expire, c
        )

    def allow_action(self, ot: Token) -> bool:
        return self.dms is not None and self.dms.allow_action(ot)

    def subsumes(self, ot: Token) -> bool:
        return self.dms is not None and self.dms.subsumes(ot)

    def delegate(
        self,
        provider: Provider,
        subject: DID,
        audience: DID,
        topics: Sequence[Capability] | None,
        expire: int,
        depth: int,
        caps: Sequence[Capability] | None,
        nonce: bytes | None = None,
    ) -> Token:
        dms = self._require_dms()
        return Token(
            dms=dms.delegate(provider, subject, audience, topics, expire, depth, caps, nonce)
        )

    def delegate_invocation(
        self,
        provider: Provider,
        subject: DID,
        audience: DID,
        expire: int,
        caps: Sequence[Capability] | None,
        nonce: bytes | None = None,
    ) -> Token:
        dms = self._require_dms()
        return Token(dms=dms.delegate_invocation(provider, subject, audience, expire, caps, nonce))

    def delegate_broadcast(
        self,
        provider: Provider,
        subject: DID,
        topic: Capability,
        expire: int,
        caps: Sequence[Capability] | None,
        nonce: bytes | None = None,
    ) -> Token:
        dms = self._require_dms()
        return Token(dms=dms.delegate_broadcast(provider, subject, topic, expire, caps, nonce))

    def verify(self, now: int, revoke: RevocationSet | None = None) -> None:
        """``Verify``: raise :class:`TokenError` unless the whole chain holds at ``now``."""
        self._verify(now, 0, revoke)

    def _verify(self, now: int, depth: int, revoke: RevocationSet | None) -> None:
        self._require_dms()._verify(now, depth, revoke)

    def _require_dms(self) -> DMSToken:
        if self.dms is None:
            kind = "a standard UCAN (BYO) envelope" if self.ucan else "empty"
            raise TokenError(
                Reason.UNSUPPORTED_TOKEN,
                "bad token",
                f"the token is {kind}; the DMS only understands DMS tokens",
                None,
            )
        return self.dms

    def describe(self) -> str:
        if self.dms is not None:
            return describe(self.dms)
        return "a standard UCAN (BYO) envelope" if self.ucan else "an empty token"


@dataclasses.dataclass(frozen=True, slots=True)
class TokenList(GoStruct):
    """``ucan.TokenList``: what travels in an envelope's ``cap`` and in anchor lists.

    An element is ``None`` where the JSON had ``null`` (a nil token, which the DMS cannot
    process).
    """

    GO_NAME = "TokenList"
    tokens: tuple[Token | None, ...] | None = go_field(
        "tok", SliceOf(Ptr(StructOf(Token))), omitempty=True, default=None
    )

    @classmethod
    def of(cls, tokens: Iterable[Token]) -> TokenList:
        """A list of the given tokens (nil, so omitted from JSON, when there are none)."""
        return cls(tuple(tokens) or None)

    def present(self) -> tuple[Token, ...]:
        """The tokens, without nil entries."""
        return tuple(t for t in self.tokens or () if t is not None)


_TOKEN.bind(Token)


class RevocationSet:
    """Revoked tokens, by ``iss#sub#nonce`` (``ucan.RevocationSet``)."""

    __slots__ = ("_revoked",)

    def __init__(self) -> None:
        self._revoked: dict[bytes, Token] = {}

    def revoked(self, key: bytes) -> bool:
        return key in self._revoked

    def revoke(self, t: Token) -> None:
        self._revoked[t.revocation_key()] = t

    def remove(self, t: Token) -> None:
        self._revoked.pop(t.revocation_key(), None)

    def list(self, now: int) -> list[Token]:
        """The revocation tokens still in force at ``now``."""
        return [t for t in self._revoked.values() if not t.expire_before(now)]

    def gc(self, now: int) -> None:
        for key, t in list(self._revoked.items()):
            if t.expire_before(now):
                del self._revoked[key]


# --- decoding a capability blob ------------------------------------------------------------


def unmarshal_token_list(data: bytes) -> TokenList:
    """``json.Unmarshal`` into a ``TokenList``; :class:`GoDecodeError` carries Go's message
    (syntax errors included: ``invalid character 'o' in literal null (expecting 'u')``)."""
    return _token_list(bytes(data))


@lru_cache(maxsize=256)
def _token_list(data: bytes) -> TokenList:
    """Decoded blobs, remembered: a receiver decodes a message's blob more than once (to
    consume its tokens, then to discard them), and the tokens are immutable."""
    return unmarshal(TokenList, data)
