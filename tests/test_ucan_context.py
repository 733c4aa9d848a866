"""Capability contexts: every operation, the refusal explanations, and the .cap file store."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dmsgw.clock import NS_PER_SECOND, FixedClock
from dmsgw.keys.crypto import Ed25519PrivKey
from dmsgw.keys.did import DID
from dmsgw.keys.id import ID
from dmsgw.keys.trust import (
    InvalidSignatureError,
    Provider,
    TrustError,
    get_anchor,
    provider_from_private_key,
)
from dmsgw.keys.ucan import (
    MAX_CAPABILITY_SIZE,
    Action,
    CapabilityBlobError,
    CapabilityContext,
    DMSToken,
    NotAuthorizedError,
    Reason,
    SelfSign,
    StoreError,
    Token,
    TokenError,
    TokenList,
    UcanError,
    load_context,
    save_context,
)

NOW = 1_767_225_600 * NS_PER_SECOND  # 2026-01-01
EXP = NOW + 3600 * NS_PER_SECOND
PAST = NOW - 3600 * NS_PER_SECOND


def key(seed: int) -> Provider:
    return provider_from_private_key(Ed25519PrivKey(bytes([seed]) * 32))


DMS, GW, OTHER, THIRD = key(1), key(2), key(3), key(4)


def id_of(p: Provider) -> ID:
    return ID.from_public_key(p.private_key.public_key())


def ctx_of(
    p: Provider | DID,
    *,
    roots: tuple[DID, ...] = (),
    require: TokenList | None = None,
    provide: TokenList | None = None,
    revoke: TokenList | None = None,
) -> CapabilityContext:
    return CapabilityContext(
        p, roots=roots, require=require, provide=provide, revoke=revoke, clock=FixedClock(NOW)
    )


def make(
    issuer: Provider,
    action: Action,
    subject: Provider,
    caps: list[str] | None,
    *,
    exp: int = EXP,
    aud: DID | None = None,
    chain: DMSToken | None = None,
    depth: int = 0,
    topic: list[str] | None = None,
    signer: Provider | None = None,
) -> DMSToken:
    """A hand-built token, signed by ``signer`` (default: the issuer), like the DMS's own tests."""
    return DMSToken(
        action=action.value,
        issuer=issuer.did,
        subject=subject.did,
        audience=aud if aud is not None else DID(),
        topic=tuple(topic) if topic else None,
        capability=None if caps is None else tuple(caps),
        nonce=bytes([len(caps or ()), depth]) * 6,
        expire=exp,
        depth=depth,
        chain=Token(dms=chain) if chain is not None else None,
    ).signed(signer or issuer)


def blob(*tokens: DMSToken) -> bytes:
    return TokenList.of(Token(dms=t) for t in tokens).to_json()


GRANT = make(DMS, Action.DELEGATE, GW, ["/dms/node"])
INVOKE = make(GW, Action.INVOKE, GW, ["/dms/node/peers/list"], aud=DMS.did, chain=GRANT)
PEERS = ["/dms/node/peers/list"]


def dms_check(
    data: bytes,
    required: list[str] = PEERS,
    *,
    roots: tuple[DID, ...] = (),
    require: TokenList | None = None,
) -> CapabilityContext:
    """Consume + Require as the DMS runs them; raises what the DMS would refuse with."""
    ctx = ctx_of(DMS, roots=roots, require=require)
    ctx.consume(GW.did, data)
    ctx.require(DMS.did, id_of(GW), id_of(DMS), required)
    return ctx


# --- trust ---------------------------------------------------------------------------------


def test_anchor_verifies_only_its_own_signatures() -> None:
    anchor = get_anchor(GW.did)
    assert anchor is get_anchor(GW.did)
    anchor.verify(b"x", GW.sign(b"x"))
    with pytest.raises(InvalidSignatureError, match="signature verification failed"):
        anchor.verify(b"x", OTHER.sign(b"x"))
    assert GW.anchor().public_key == anchor.public_key


@pytest.mark.parametrize("uri", ["did:web:example.com", "did:key:zBad", ""])
def test_unresolvable_did_has_no_anchor(uri: str) -> None:
    with pytest.raises(TrustError, match="cannot get an anchor"):
        get_anchor(DID(uri))


# --- issuing -------------------------------------------------------------------------------


def test_grant_issues_a_signed_root_token() -> None:
    tokens = ctx_of(DMS).grant(Action.DELEGATE, GW.did, DID(), [], EXP, 2, ["/dms/node"])
    (t,) = tokens.present()
    assert t.issuer() == DMS.did and t.subject() == GW.did and t.dms is not None
    assert t.dms.depth == 2 and t.dms.nonce is not None and len(t.dms.nonce) == 12
    assert b'"topic"' not in t.to_json()  # no topics: omitted, as by the DMS
    t.verify(NOW)


def test_revoke_only_own_tokens() -> None:
    revocation = ctx_of(DMS).revoke(Token(dms=GRANT))
    revocation.verify(NOW)
    assert revocation.revocation_key() == Token(dms=GRANT).revocation_key()
    assert b'"cap":null' in revocation.to_json() and b'"aud":{}' in revocation.to_json()
    with pytest.raises(NotAuthorizedError, match=r"not authorized$"):
        ctx_of(GW).revoke(Token(dms=GRANT))


def test_read_only_context_cannot_sign_but_can_judge() -> None:
    ctx = ctx_of(DMS.did)
    with pytest.raises(UcanError, match="holds no private key"):
        ctx.grant(Action.INVOKE, GW.did, DID(), None, EXP, 0, PEERS)
    ctx.consume(GW.did, blob(INVOKE))
    ctx.require(DMS.did, id_of(GW), id_of(DMS), PEERS)


@pytest.mark.parametrize(
    ("mode", "chained", "self_signed"),
    [(SelfSign.NO, 1, 0), (SelfSign.ALSO, 1, 1), (SelfSign.ONLY, 0, 1)],
)
def test_delegate_self_sign_modes(mode: SelfSign, chained: int, self_signed: int) -> None:
    ctx = ctx_of(GW, provide=TokenList.of([Token(dms=GRANT)]))
    tokens = ctx.delegate(THIRD.did, DID(), None, EXP, 0, ["/dms/node/x"], mode).present()
    assert [t.dms.chain is not None for t in tokens if t.dms] == [True] * chained + [
        False
    ] * self_signed
    for t in tokens:
        t.verify(NOW)
        assert t.subject() == THIRD.did


def test_delegate_without_expiry_lasts_as_long_as_the_anchor() -> None:
    ctx = ctx_of(GW, provide=TokenList.of([Token(dms=GRANT)]))
    (t,) = ctx.delegate(THIRD.did, DID(), None, 0, 0, ["/dms/node"], SelfSign.NO).present()
    assert t.expire() == GRANT.expire


def test_delegate_refuses_to_widen_or_to_invent() -> None:
    ctx = ctx_of(GW, provide=TokenList.of([Token(dms=GRANT)]))
    with pytest.raises(NotAuthorizedError):
        ctx.delegate(THIRD.did, DID(), None, EXP, 0, ["/dms/node", "/dms/x"], SelfSign.NO)
    assert ctx.delegate(THIRD.did, DID(), None, EXP, 0, [], SelfSign.NO) == TokenList()


DELEGATION_REFUSALS: dict[str, tuple[DMSToken, dict[str, Any], Reason, str]] = {
    "not a delegation": (
        make(DMS, Action.INVOKE, GW, ["/dms/node"]),
        {},
        Reason.CHAIN_NOT_DELEGATE,
        f"is not a delegation to {GW.did.uri}",
    ),
    "to someone else": (
        make(DMS, Action.DELEGATE, OTHER, ["/dms/node"]),
        {},
        Reason.WRONG_SUBJECT,
        f"is not a delegation to {GW.did.uri}",
    ),
    "depth reached": (
        make(DMS, Action.DELEGATE, GW, ["/dms/node"], depth=1),
        {},
        Reason.DEPTH_EXCEEDED,
        "allows no further delegation (its depth limit is reached)",
    ),
    "outlived": (
        GRANT,
        {"expire": EXP + 1},
        Reason.CHAIN_OUTLIVED,
        "expires before 2026-01-01T01:00:00Z",
    ),
    "audience": (
        make(DMS, Action.DELEGATE, GW, ["/dms/node"], aud=DMS.did),
        {"audience": THIRD.did},
        Reason.WRONG_AUDIENCE,
        f"is restricted to audience {DMS.did.uri}",
    ),
    "topics": (GRANT, {"topics": ["/nunet"]}, Reason.NOT_IMPLIED, "does not cover topics /nunet"),
    "capabilities": (
        GRANT,
        {"caps": ["/dms/node/x", "/dms/x", "/public"]},
        Reason.NOT_IMPLIED,
        "does not cover /dms/x, /public",
    ),
}


@pytest.mark.parametrize("name", sorted(DELEGATION_REFUSALS))
def test_explain_delegate_names_the_rule_each_anchor_breaks(name: str) -> None:
    """One rejection per refusing anchor, and only when ``delegate`` refuses it too."""
    anchor, asked, reason, words = DELEGATION_REFUSALS[name]
    request: dict[str, Any] = {"audience": DID(), "topics": None, "expire": EXP, "caps": PEERS}
    request |= asked
    ctx = ctx_of(GW, provide=TokenList.of([Token(dms=anchor)]))
    (rejection,) = ctx.explain_delegate(**request)
    assert (rejection.reason, rejection.token) == (reason, Token(dms=anchor))
    assert rejection.message == f"{Token(dms=anchor).describe()} {words}"
    with pytest.raises(NotAuthorizedError):
        ctx.delegate(THIRD.did, depth=0, self_sign=SelfSign.NO, **request)


def test_explain_delegate_has_nothing_to_say_when_an_anchor_allows_it() -> None:
    ctx = ctx_of(GW, provide=TokenList.of([Token(dms=GRANT)]))
    assert ctx.explain_delegate(DID(), None, 0, ["/dms/node"]) == ()  # 0: the anchor's expiry
    assert ctx_of(GW).explain_delegate(DID(), None, EXP, PEERS) == ()  # no anchor at all


def test_a_provide_anchor_must_be_a_delegation_to_the_context() -> None:
    ctx = ctx_of(GW)
    assert ctx.explain_provide_anchor(Token(dms=GRANT)) is None
    invoke = Token(dms=make(DMS, Action.INVOKE, GW, ["/dms/node"]))
    refusal = ctx.explain_provide_anchor(invoke)
    assert refusal is not None and refusal.reason == Reason.CHAIN_NOT_DELEGATE
    assert refusal.message.endswith(
        "is not a delegation: only a delegate token can be delegated from"
    )
    elsewhere = Token(dms=make(DMS, Action.DELEGATE, OTHER, ["/dms/node"]))
    refusal = ctx.explain_provide_anchor(elsewhere)
    assert refusal is not None and refusal.reason == Reason.WRONG_SUBJECT
    assert refusal.message == (
        f"provide anchor {elsewhere.describe()} delegates to {OTHER.did.uri}, not to this "
        f"context's DID {GW.did.uri}"
    )


def test_delegate_invocation_chains_on_consumed_delegations() -> None:
    ctx = ctx_of(GW)
    ctx.consume(DMS.did, blob(GRANT))  # a delegation to us, presented by the DMS
    tokens = ctx.delegate_invocation(DMS.did, GW.did, DMS.did, EXP, PEERS, SelfSign.ONLY)
    chained, self_signed = tokens.present()
    assert chained.dms is not None and chained.dms.chain == Token(dms=GRANT)
    assert self_signed.issuer() == GW.did and self_signed.dms and self_signed.dms.chain is None
    with pytest.raises(NotAuthorizedError):
        ctx_of(OTHER).delegate_invocation(DMS.did, OTHER.did, DMS.did, EXP, PEERS, SelfSign.NO)


def test_provide_then_require_round_trip() -> None:
    gw = ctx_of(GW, provide=TokenList.of([Token(dms=GRANT)]))
    cap = gw.provide(DMS.did, id_of(GW), id_of(DMS), EXP - 1, PEERS, ["/private/user/1"])
    tokens = TokenList.from_json(cap).present()
    assert [t.action() for t in tokens] == ["invoke", "invoke", "delegate"]
    assert tokens[2].subject() == DMS.did and tokens[2].audience() == GW.did
    assert tokens[2].dms is not None and tokens[2].dms.depth == 1
    dms_check(cap)
    with pytest.raises(NotAuthorizedError, match=r"^no capabilities: not authorized$"):
        gw.provide(DMS.did, id_of(GW), id_of(DMS), EXP, [], [])
    with pytest.raises(NotAuthorizedError, match=r"^no invocation capabilities"):
        gw.provide(DMS.did, id_of(GW), id_of(DMS), EXP, [], ["/x"])


def test_broadcast_round_trip() -> None:
    org = ctx_of(DMS)
    grant = make(DMS, Action.DELEGATE, GW, ["/broadcast"], topic=["/nunet"])
    gw = ctx_of(GW, provide=TokenList.of([Token(dms=grant)]))
    cap = gw.provide_broadcast(id_of(GW), "/nunet/hello", EXP, ["/broadcast/hello"])
    org.consume(GW.did, cap)
    org.require_broadcast(DMS.did, id_of(GW), "/nunet/hello", ["/broadcast/hello"])
    with pytest.raises(NotAuthorizedError):
        org.require_broadcast(DMS.did, id_of(GW), "/other", ["/broadcast/hello"])
    with pytest.raises(NotAuthorizedError, match=r"^no capabilities"):
        org.require_broadcast(DMS.did, id_of(GW), "/nunet", [])


# --- anchors -------------------------------------------------------------------------------


def test_roots_anchor_self_signed_tokens() -> None:
    own = make(GW, Action.INVOKE, GW, PEERS, aud=DMS.did)
    with pytest.raises(NotAuthorizedError):
        dms_check(blob(own))
    dms_check(blob(own), roots=(GW.did,))


def test_require_anchor_admits_a_side_chain() -> None:
    side = make(DMS, Action.DELEGATE, OTHER, ["/public"])
    grant = make(OTHER, Action.DELEGATE, GW, ["/public"])
    invoke = make(GW, Action.INVOKE, GW, ["/public/hello"], chain=grant)
    dms_check(blob(invoke), ["/public/hello"], require=TokenList.of([Token(dms=side)]))


def test_add_roots_checks_anchor_tokens() -> None:
    with pytest.raises(UcanError, match=r"provide anchor rejected .capability expired."):
        ctx_of(
            GW, provide=TokenList.of([Token(dms=make(DMS, Action.DELEGATE, GW, PEERS, exp=PAST))])
        )
    with pytest.raises(UcanError, match="is not a revoke token"):
        ctx_of(DMS, revoke=TokenList.of([Token(dms=GRANT)]))


def test_revocation_drops_consumed_tokens() -> None:
    ctx = dms_check(blob(INVOKE))
    ctx.add_roots(revoke=TokenList.of([ctx.revoke(Token(dms=GRANT))]))
    with pytest.raises(NotAuthorizedError):
        ctx.require(DMS.did, id_of(GW), id_of(DMS), PEERS)


def test_wider_anchor_subsumes_narrower() -> None:
    narrow = make(DMS, Action.DELEGATE, GW, ["/dms/node/peers"])
    ctx = ctx_of(GW, provide=TokenList.of([Token(dms=narrow), Token(dms=GRANT)]))
    assert ctx.list_roots()[2].present() == (Token(dms=GRANT),)
    ctx.add_roots(provide=TokenList.of([Token(dms=narrow)]))  # already covered
    assert ctx.list_roots()[2].present() == (Token(dms=GRANT),)


def test_list_remove_and_gc() -> None:
    side = make(DMS, Action.DELEGATE, OTHER, ["/public"])
    revocation = ctx_of(DMS).revoke(Token(dms=make(DMS, Action.DELEGATE, THIRD, ["/x"])))
    clock = FixedClock(NOW)
    ctx = CapabilityContext(
        DMS,
        roots=[GW.did],
        require=TokenList.of([Token(dms=side)]),
        revoke=TokenList.of([revocation]),
        clock=clock,
    )
    roots, require, provide, revoke = ctx.list_roots()
    assert roots == [GW.did] and require.present() == (Token(dms=side),)
    assert provide == TokenList() and revoke.present() == (revocation,)
    ctx.remove_roots([GW.did], require=require, revoke=revoke)
    assert ctx.list_roots() == ([], TokenList(), TokenList(), TokenList())
    ctx.add_roots(require=require)
    clock.advance(7200)
    ctx.gc()
    assert ctx.list_roots()[1] == TokenList()


# --- consuming -----------------------------------------------------------------------------


def test_consume_reports_each_token_and_skips_bad_ones() -> None:
    stranger = make(OTHER, Action.INVOKE, OTHER, PEERS)
    broken = make(GW, Action.INVOKE, GW, PEERS, chain=GRANT, signer=OTHER)
    ctx = ctx_of(DMS)
    report = ctx.consume(GW.did, blob(stranger, broken, INVOKE))
    assert ctx.last_consume is report
    assert report.accepted() == (Token(dms=INVOKE),)
    assert [r.reason for r in report.rejections()] == [
        Reason.UNTRUSTED_ISSUER,
        Reason.BAD_SIGNATURE,
    ]
    assert [o.accepted for o in report.outcomes] == [False, False, True]
    ctx.require(DMS.did, id_of(GW), id_of(DMS), PEERS)


def test_discard_forgets_consumed_tokens() -> None:
    ctx = dms_check(blob(INVOKE))
    ctx.discard(blob(INVOKE))
    ctx.discard(b"not json")  # ignored, as by the DMS
    with pytest.raises(NotAuthorizedError):
        ctx.require(DMS.did, id_of(GW), id_of(DMS), PEERS)


def test_consumed_tokens_persist_across_messages() -> None:
    """As in the DMS: a token consumed with one message still counts for the next."""
    ctx = dms_check(blob(INVOKE))
    ctx.consume(GW.did, b"{}")
    ctx.require(DMS.did, id_of(GW), id_of(DMS), PEERS)


def test_require_with_an_id_that_is_not_a_key() -> None:
    ctx = dms_check(blob(INVOKE))
    with pytest.raises(UcanError, match=r"^DID for subject: "):
        ctx.require(DMS.did, ID(b"\x01\x02"), id_of(DMS), PEERS)


# --- explanations, one per reason ------------------------------------------------------------


def _list(*tokens: DMSToken) -> TokenList:
    return TokenList.of(Token(dms=t) for t in tokens)


def _gw_invoke(chain: DMSToken | None = None, **kwargs: Any) -> bytes:
    """GW's invoke token for /dms/node/peers/list on ``chain``, as a cap blob."""
    return blob(make(GW, Action.INVOKE, GW, PEERS, chain=chain, **kwargs))


def _via_other(caps: list[str]) -> DMSToken:
    return make(OTHER, Action.DELEGATE, GW, caps)


def _depth_exceeded() -> bytes:
    grant = make(DMS, Action.DELEGATE, GW, ["/dms/node"], depth=1)
    hop = make(GW, Action.DELEGATE, THIRD, ["/dms/node"], chain=grant)
    return blob(make(THIRD, Action.INVOKE, GW, PEERS, chain=hop))


def _two_links_below_other() -> bytes:
    hop = make(
        THIRD, Action.DELEGATE, GW, ["/dms"], chain=make(OTHER, Action.DELEGATE, THIRD, ["/"])
    )
    return _gw_invoke(hop)


# name: (expected reason, cap blob, require anchors of the DMS, revocations of the DMS)
SCENARIOS: dict[str, tuple[Reason, Callable[[], bytes], Callable[[], TokenList | None]]] = {
    "expired invoke": (Reason.EXPIRED, lambda: _gw_invoke(GRANT, exp=PAST), lambda: None),
    "expired grant": (
        Reason.EXPIRED,
        lambda: _gw_invoke(make(DMS, Action.DELEGATE, GW, ["/dms"], exp=PAST)),
        lambda: None,
    ),
    "not implied": (
        Reason.NOT_IMPLIED,
        lambda: blob(make(GW, Action.INVOKE, GW, ["/dms/node/other"], chain=GRANT)),
        lambda: None,
    ),
    "wrong audience": (
        Reason.WRONG_AUDIENCE,
        lambda: _gw_invoke(GRANT, aud=OTHER.did),
        lambda: None,
    ),
    "wrong subject": (
        Reason.WRONG_SUBJECT,
        lambda: blob(make(GW, Action.INVOKE, OTHER, PEERS, chain=GRANT)),
        lambda: None,
    ),
    "untrusted issuer": (
        Reason.UNTRUSTED_ISSUER,
        lambda: _gw_invoke(_via_other(["/"])),
        lambda: None,
    ),
    "depth exceeded": (Reason.DEPTH_EXCEEDED, _depth_exceeded, lambda: None),
    "bad signature": (Reason.BAD_SIGNATURE, lambda: _gw_invoke(GRANT, signer=THIRD), lambda: None),
    "chain not delegate": (
        Reason.CHAIN_NOT_DELEGATE,
        lambda: _gw_invoke(make(DMS, Action.INVOKE, GW, ["/dms"])),
        lambda: None,
    ),
    "chain outlived": (Reason.CHAIN_OUTLIVED, lambda: _gw_invoke(GRANT, exp=EXP + 1), lambda: None),
    "not allowed by chain": (
        Reason.NOT_ALLOWED_BY_CHAIN,
        lambda: blob(make(GW, Action.INVOKE, GW, ["/dms"], chain=GRANT)),
        lambda: None,
    ),
    "issuer is not the chain's subject": (
        Reason.NOT_ALLOWED_BY_CHAIN,
        lambda: blob(make(OTHER, Action.INVOKE, GW, PEERS, chain=GRANT)),
        lambda: None,
    ),
    "delegate token used to invoke": (Reason.NO_CAPABILITY, lambda: blob(GRANT), lambda: None),
    "no token for the sender": (Reason.NO_CAPABILITY, lambda: b'{"tok":[]}', lambda: None),
    "cap too big": (
        Reason.CAP_TOO_BIG,
        lambda: b" " * (MAX_CAPABILITY_SIZE + 1),
        lambda: None,
    ),
    "empty cap": (Reason.BAD_CAP_JSON, lambda: b"", lambda: None),
    "cap not a token list": (Reason.BAD_CAP_JSON, lambda: b'{"tok":"x"}', lambda: None),
    "null token": (Reason.BAD_CAP_JSON, lambda: b'{"tok":[null]}', lambda: None),
    "standard UCAN": (
        Reason.UNSUPPORTED_TOKEN,
        lambda: b'{"tok":[{"ucan":{"v":"1.0"}}]}',
        lambda: None,
    ),
    # Go decodes nothing of a standard UCAN (an empty struct), so no number in it is refused.
    "standard UCAN with a number beyond float64": (
        Reason.UNSUPPORTED_TOKEN,
        lambda: b'{"tok":[{"ucan":{"v":1e400,"n":' + b"9" * 400 + b"}}]}",
        lambda: None,
    ),
    "empty token": (Reason.UNSUPPORTED_TOKEN, lambda: b'{"tok":[{}]}', lambda: None),
    "side chain does not cover": (
        Reason.NOT_IMPLIED,
        lambda: _gw_invoke(_via_other(["/dms"])),
        lambda: _list(make(DMS, Action.DELEGATE, OTHER, ["/public"])),
    ),
    "side chain too short": (
        Reason.CHAIN_OUTLIVED,
        lambda: _gw_invoke(_via_other(["/dms"])),
        lambda: _list(make(DMS, Action.DELEGATE, OTHER, ["/"], exp=NOW)),
    ),
    "side chain for another audience": (
        Reason.WRONG_AUDIENCE,
        lambda: _gw_invoke(_via_other(["/dms"])),
        lambda: _list(make(DMS, Action.DELEGATE, OTHER, ["/"], aud=GW.did)),
    ),
    "side chain too deep": (
        Reason.DEPTH_EXCEEDED,
        _two_links_below_other,
        lambda: _list(make(DMS, Action.DELEGATE, OTHER, ["/"], depth=1)),
    ),
}


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_refusal_reason(name: str) -> None:
    reason, build, require = SCENARIOS[name]
    ctx = ctx_of(DMS, require=require())
    try:
        ctx.consume(GW.did, build())
    except CapabilityBlobError as exc:
        assert exc.rejection.reason == reason
        assert exc.rejection.message
        return
    with pytest.raises(NotAuthorizedError) as info:
        ctx.require(DMS.did, id_of(GW), id_of(DMS), PEERS)
    assert str(info.value) == "not authorized"  # the DMS's words, exactly
    assert [r.reason for r in info.value.rejections] == [reason]
    explanation = ctx.explain_require(DMS.did, id_of(GW), id_of(DMS), PEERS)
    assert not explanation.ok and explanation.rejections == info.value.rejections
    assert str(explanation).splitlines()[1].startswith(f"  - {reason}: ")


def test_revoked_token_is_explained() -> None:
    ctx = ctx_of(DMS)
    ctx.consume(GW.did, blob(INVOKE))
    ctx.add_roots(revoke=TokenList.of([ctx.revoke(Token(dms=GRANT))]))
    with pytest.raises(NotAuthorizedError) as info:
        ctx.require(DMS.did, id_of(GW), id_of(DMS), PEERS)
    assert [r.reason for r in info.value.rejections] == [Reason.REVOKED]
    assert "has been revoked by its issuer" in info.value.rejections[0].message


def test_rejection_messages_name_the_token_and_the_rule() -> None:
    data = blob(make(GW, Action.INVOKE, GW, PEERS, chain=GRANT, aud=OTHER.did))
    ctx = ctx_of(DMS)
    ctx.consume(GW.did, data)
    (rejection,) = ctx.explain_require(DMS.did, id_of(GW), id_of(DMS), PEERS).rejections
    assert GW.did.uri in rejection.message and "/dms/node/peers/list" in rejection.message
    assert f"audience {OTHER.did.uri}" in rejection.message
    assert str(rejection) == f"wrong_audience: {rejection.message}"


def test_explanation_with_an_explicit_report() -> None:
    ctx = ctx_of(DMS)
    report = ctx.consume(GW.did, blob(make(GW, Action.INVOKE, GW, PEERS)))
    ctx.consume(OTHER.did, b"{}")
    explanation = ctx.explain_require(DMS.did, id_of(GW), id_of(DMS), PEERS, report)
    assert [r.reason for r in explanation.rejections] == [Reason.UNTRUSTED_ISSUER]


def test_expired_chain_error_names_the_expired_link() -> None:
    old_grant = make(DMS, Action.DELEGATE, GW, ["/dms"], exp=PAST)
    with pytest.raises(TokenError) as info:
        make(GW, Action.INVOKE, GW, PEERS, chain=old_grant).verify(NOW)
    assert info.value.reason == Reason.EXPIRED and info.value.go_error == "capability expired"
    assert info.value.culprit == old_grant
    assert "in the chain of invoke token" in str(info.value)


# --- the .cap file store -------------------------------------------------------------------


def test_store_round_trip(tmp_path: Path) -> None:
    side = make(DMS, Action.DELEGATE, OTHER, ["/public"])
    ctx = CapabilityContext(
        DMS,
        roots=[GW.did],
        require=TokenList.of([Token(dms=side)]),
        clock=FixedClock(NOW),
    )
    path = save_context(ctx, directory=tmp_path, clock=FixedClock(NOW))
    assert path == tmp_path / "dms.cap"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    text = path.read_bytes()
    assert text == (
        b'{"did":'
        + DMS.did.to_json()
        + b',"roots":['
        + GW.did.to_json()
        + b'],"require":'
        + TokenList.of([Token(dms=side)]).to_json()
        + b',"provide":{},"revoke":{}}\n'
    )
    loaded = load_context("dms", DMS, directory=tmp_path, clock=FixedClock(NOW))
    assert loaded.list_roots() == ctx.list_roots()
    assert loaded.name == "dms" and loaded.did == DMS.did


def test_store_backs_up_the_previous_file(tmp_path: Path) -> None:
    ctx = CapabilityContext(GW, name="user", clock=FixedClock(NOW))
    first = save_context(ctx, directory=tmp_path, clock=FixedClock(NOW)).read_bytes()
    ctx.add_roots([OTHER.did])
    save_context(ctx, directory=tmp_path, clock=FixedClock(NOW + 5 * NS_PER_SECOND))
    backup = tmp_path / f"user.cap.{NOW // NS_PER_SECOND + 5}"
    assert backup.read_bytes() == first
    assert OTHER.did.uri in (tmp_path / "user.cap").read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["user.cap", backup.name]


def test_load_drops_expired_tokens(tmp_path: Path) -> None:
    stale = make(DMS, Action.DELEGATE, GW, ["/dms"], exp=PAST)
    view = {
        "did": {"uri": GW.did.uri},
        "roots": [],
        "require": {},
        "provide": json.loads(TokenList.of([Token(dms=stale), Token(dms=GRANT)]).to_json()),
        "revoke": {},
    }
    (tmp_path / "user.cap").write_text(json.dumps(view))
    ctx = load_context("user", GW, directory=tmp_path, clock=FixedClock(NOW))
    assert ctx.list_roots()[2].present() == (Token(dms=GRANT),)


def test_load_old_untagged_file_read_only(tmp_path: Path) -> None:
    old = {
        "DID": {"uri": DMS.did.uri},
        "Roots": [{"uri": GW.did.uri}],
        "Require": {"tok": None},
        "Provide": {},
    }
    (tmp_path / "dms.cap").write_text(json.dumps(old))
    ctx = load_context("dms", directory=tmp_path, clock=FixedClock(NOW))
    assert ctx.did == DMS.did and ctx.list_roots()[0] == [GW.did]
    ctx.consume(GW.did, blob(make(GW, Action.INVOKE, GW, PEERS)))
    ctx.require(DMS.did, id_of(GW), id_of(DMS), PEERS)


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (None, r"does not exist \(create it with `dmsgw cap new dms --cap-dir /\S+`\)"),
        (
            "{not json",
            "is not a valid context: invalid character 'n' looking for beginning of object key",
        ),
        ('{"did": "x"}', "is not a valid context: json: cannot unmarshal string"),
        ("{}", "names no DID"),
        (
            f'{{"did":{GW.did.to_json().decode()}}}',
            f"belongs to {GW.did.uri}, not to {DMS.did.uri}",
        ),
        (
            f'{{"did":{DMS.did.to_json().decode()},"require":'
            f"{blob(make(DMS, Action.DELEGATE, GW, ['/'], signer=GW)).decode()}}}",
            "require anchor rejected .verify: signature: signature verification failed.",
        ),
    ],
)
def test_bad_files_give_clear_errors(tmp_path: Path, content: str | None, problem: str) -> None:
    if content is not None:
        (tmp_path / "dms.cap").write_text(content)
    with pytest.raises(StoreError, match=problem) as info:
        load_context("dms", DMS, directory=tmp_path, clock=FixedClock(NOW))
    assert str(tmp_path / "dms.cap") in str(info.value)


def test_save_error_names_the_file(tmp_path: Path) -> None:
    blocker = tmp_path / "cap"
    blocker.write_text("a file, not a directory")
    with pytest.raises(StoreError, match="cannot save capability context"):
        save_context(ctx_of(DMS), directory=blocker / "sub")
    assert not any(p.name.startswith(".dms.cap") for p in tmp_path.iterdir())
    assert os.listdir(tmp_path) == ["cap"]
