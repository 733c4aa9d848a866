"""tokens.json and actor_messages.json: the DMS's tokens rebuilt byte for byte, and its verdicts."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from dmsgw.clock import FixedClock
from dmsgw.keys.crypto import Ed25519PrivKey
from dmsgw.keys.did import DID
from dmsgw.keys.id import ID
from dmsgw.keys.trust import Provider, provider_from_private_key
from dmsgw.keys.ucan import (
    Action,
    CapabilityBlobError,
    CapabilityContext,
    NotAuthorizedError,
    SelfSign,
    Token,
    TokenError,
    TokenList,
    unmarshal_token_list,
)
from dmsgw.transport.envelope import Envelope, Handle
from dmsgw.transport.security import SecurityContext, SecurityError
from tests.support.vectors import (
    CASES,
    EXPECTED_REASONS,
    KEYS,
    NOW_2026,
    TOKENS,
    load_vector,
)

EXP_2100 = 4_102_444_800_000_000_000
INVOKE_EXP = EXP_2100 - 100 * 1_000_000_000


def provider(name: str) -> Provider:
    return provider_from_private_key(Ed25519PrivKey(bytes.fromhex(KEYS[name]["seed_hex"])))


def did(name: str) -> DID:
    return DID(KEYS[name]["did"])


def actor_id(name: str) -> ID:
    return ID.from_string(KEYS[name]["id_b32"])


def token_list(name: str) -> TokenList:
    return TokenList.from_json(TOKENS[name]["tokens_json"])


def nonce_of(name: str) -> bytes:
    first = token_list(name).present()[0]
    nonce = first.nonce()
    assert nonce is not None
    return nonce


def nonces(*values: bytes) -> Callable[[], bytes]:
    feed: Iterator[bytes] = iter(values)
    return lambda: next(feed)


def context(
    name: str, *, provide: TokenList | None = None, nonce: bytes | None = None
) -> CapabilityContext:
    return CapabilityContext(
        provider(name),
        provide=provide,
        clock=FixedClock(NOW_2026),
        nonce_source=nonces(nonce) if nonce is not None else nonces(),
    )


# --- building every token with our API -------------------------------------------------------


def _build(name: str) -> TokenList:
    nonce = nonce_of(name)
    dms_node = ["/dms/node"]
    peers_list = ["/dms/node/peers/list"]
    if name == "grant_dms_to_gateway_dms_node":
        return context("dms", nonce=nonce).grant(
            Action.DELEGATE, did("gateway"), DID(), None, EXP_2100, 0, dms_node
        )
    if name == "grant_depth1":
        return context("dms", nonce=nonce).grant(
            Action.DELEGATE, did("gateway"), DID(), None, EXP_2100, 1, dms_node
        )
    if name == "require_anchor_dms_to_org":
        return context("dms", nonce=nonce).grant(
            Action.DELEGATE, did("org"), DID(), None, EXP_2100, 0, ["/public"]
        )
    if name == "self_signed_invoke_gateway":
        return context("gateway", nonce=nonce).grant(
            Action.INVOKE, did("gateway"), did("dms"), None, INVOKE_EXP, 0, peers_list
        )
    if name == "revocation_of_grant":
        grant = token_list("grant_dms_to_gateway_dms_node").present()[0]
        return TokenList.of([context("dms").revoke(grant)])
    if name == "delegate_gateway_to_third":
        ctx = context("gateway", provide=token_list("grant_dms_to_gateway_dms_node"), nonce=nonce)
        return ctx.delegate(did("third"), DID(), None, EXP_2100, 0, dms_node, SelfSign.NO)
    grants = {
        "invoke_gateway_chained": ("gateway", "grant_dms_to_gateway_dms_node"),
        "invoke_gateway_on_depth1": ("gateway", "grant_depth1"),
        "invoke_third_two_hop": ("third", "delegate_gateway_to_third"),
    }
    invoker, grant_name = grants[name]
    ctx = context(invoker, provide=token_list(grant_name), nonce=nonce)
    return ctx.delegate_invocation(
        did("dms"), did(invoker), did("dms"), INVOKE_EXP, peers_list, SelfSign.NO
    )


BUILT = [name for name, entry in TOKENS.items() if "tokens_json" in entry]


@pytest.mark.parametrize("name", BUILT)
def test_token_rebuilt_byte_for_byte(name: str) -> None:
    built = _build(name)
    assert built.to_json().decode() == TOKENS[name]["tokens_json"]
    for token, expected in zip(
        built.present(), TOKENS[name].get("signature_data", []), strict=False
    ):
        assert token.signature_data().decode() == expected


def test_every_token_is_built() -> None:
    assert set(BUILT) == set(TOKENS) - {"delegate_depth1_api_refusal"}


def test_depth1_grant_cannot_be_redelegated_through_the_api() -> None:
    ctx = context("gateway", provide=token_list("grant_depth1"), nonce=b"\0" * 12)
    with pytest.raises(NotAuthorizedError) as info:
        ctx.delegate(did("third"), DID(), None, EXP_2100, 0, ["/dms/node"], SelfSign.NO)
    assert str(info.value) == TOKENS["delegate_depth1_api_refusal"]["error"]


def _all_token_blobs() -> Iterator[tuple[str, str]]:
    for name in BUILT:
        yield name, TOKENS[name]["tokens_json"]
    for case in CASES:
        if case["cap_text"].startswith("{"):
            yield case["name"], case["cap_text"]
        for key in ("dms_require", "dms_revoke"):
            yield f"{case['name']}.{key}", case[key]


@pytest.mark.parametrize(("name", "blob"), list(_all_token_blobs()), ids=lambda v: str(v)[:60])
def test_every_token_decodes_and_remarshals_identically(name: str, blob: str) -> None:
    fast = unmarshal_token_list(blob.encode())
    generic = TokenList.from_json(blob)
    assert fast == generic
    assert fast.to_json().decode() == blob
    for token in fast.present():
        assert token.to_json().decode() in blob
        dms = token.dms
        assert dms is not None
        assert Token(dms=dms).to_json() == token.to_json()


@pytest.mark.parametrize("name", BUILT)
def test_vector_tokens_verify(name: str) -> None:
    for token in token_list(name).present():
        token.verify(NOW_2026)


# --- the 34 Require cases ----------------------------------------------------------------


def dms_verdict(case: dict[str, Any]) -> tuple[CapabilityContext, str | None]:
    """What the DMS's BasicSecurityContext.Require returns: None, or its error text."""
    ctx = CapabilityContext(
        provider("dms"),
        roots=[DID(r) for r in case["dms_roots"]],
        require=TokenList.from_json(case["dms_require"]),
        revoke=TokenList.from_json(case["dms_revoke"]),
        clock=FixedClock(NOW_2026),
    )
    dms_key = Ed25519PrivKey(bytes.fromhex(KEYS["dms"]["seed_hex"]))
    security = SecurityContext(dms_key, ctx, clock=FixedClock(NOW_2026))
    sender = Handle(ID.from_string(case["sender_id_b32"]), DID(case["sender_did"]))
    msg = Envelope(
        to=Handle.from_public_key(dms_key.public_key()),
        from_=sender,
        cap=base64.b64decode(case["cap_b64"]) or None,
    )
    try:
        security.require(msg, case["required"])
    except SecurityError as exc:
        return ctx, str(exc)
    return ctx, None


@pytest.mark.parametrize("case", CASES, ids=lambda c: c["name"])
def test_require_case_verdict(case: dict[str, Any]) -> None:
    _, error = dms_verdict(case)
    assert (error is None) == case["expected"]["ok"]
    assert error == case["expected"]["error"]


def test_there_are_34_require_cases() -> None:
    assert len(CASES) == 34


@pytest.mark.parametrize("case", CASES, ids=lambda c: c["name"])
def test_token_verification_matches_the_dms_log(case: dict[str, Any]) -> None:
    expected = case["token_verify_no_revoke"]
    if expected is None:
        return
    tokens = unmarshal_token_list(case["cap_text"].encode()).present()
    assert len(tokens) == len(expected)
    for token, go_error in zip(tokens, expected, strict=True):
        try:
            token.verify(NOW_2026)
        except TokenError as exc:
            assert exc.go_error == go_error
        else:
            assert go_error is None


def test_every_refused_case_has_an_expected_reason() -> None:
    refused = {c["name"] for c in CASES if not c["expected"]["ok"]}
    assert refused == set(EXPECTED_REASONS)


@pytest.mark.parametrize(
    "case", [c for c in CASES if not c["expected"]["ok"]], ids=lambda c: c["name"]
)
def test_refusal_is_explained(case: dict[str, Any]) -> None:
    ctx = CapabilityContext(
        provider("dms"),
        roots=[DID(r) for r in case["dms_roots"]],
        require=TokenList.from_json(case["dms_require"]),
        revoke=TokenList.from_json(case["dms_revoke"]),
        clock=FixedClock(NOW_2026),
    )
    sender = ID.from_string(case["sender_id_b32"])
    try:
        ctx.consume(DID(case["sender_did"]), base64.b64decode(case["cap_b64"]))
    except CapabilityBlobError as exc:
        reasons = [exc.rejection.reason]
    else:
        explanation = ctx.explain_require(ctx.did, sender, actor_id("dms"), case["required"])
        assert not explanation.ok
        reasons = [r.reason for r in explanation.rejections]
        assert "not authorized" in str(explanation)
    assert reasons == [EXPECTED_REASONS[case["name"]]]


@pytest.mark.parametrize("case", [c for c in CASES if c["expected"]["ok"]], ids=lambda c: c["name"])
def test_accepted_case_is_explained_as_ok(case: dict[str, Any]) -> None:
    ctx, error = dms_verdict(case)
    assert error is None
    sender = ID.from_string(case["sender_id_b32"])
    if sender == actor_id("dms"):
        return
    explanation = ctx.explain_require(ctx.did, sender, actor_id("dms"), case["required"])
    assert explanation.ok
    assert explanation.satisfied_by is not None
    assert str(explanation).startswith("authorized: ")


# --- actor_messages.json -----------------------------------------------------------------

MESSAGES = load_vector("actor_messages.json")


@pytest.mark.parametrize("which", ["request", "reply"])
def test_actor_message_tokens_verify_and_match_the_envelope(which: str) -> None:
    entry = MESSAGES[which]
    envelope = json.loads(entry["envelope_json"])
    cap = base64.b64decode(envelope["cap"])
    assert cap.decode() == entry["cap_text"]
    tokens = unmarshal_token_list(cap)
    assert tokens.to_json() == cap
    for token in tokens.present():
        token.verify(NOW_2026)


def _actor_verdict(
    own: str, sender: str, roots: list[DID], cap: bytes, required: list[str]
) -> str | None:
    ctx = CapabilityContext(provider(own), roots=roots, clock=FixedClock(NOW_2026))
    sender_keys = next(k for k in KEYS.values() if k["did"] == sender)
    ctx.consume(DID(sender), cap)
    try:
        ctx.require(ctx.did, ID.from_string(sender_keys["id_b32"]), actor_id(own), required)
    except NotAuthorizedError as exc:
        return f"requiring capabilities: {exc}"
    return None


def test_actor_request_is_authorized_only_for_a_root_anchored_gateway() -> None:
    entry = MESSAGES["request"]
    envelope = json.loads(entry["envelope_json"])
    cap = base64.b64decode(envelope["cap"])
    sender = envelope["from"]["did"]["uri"]
    required = [envelope["be"]]
    assert (
        _actor_verdict("dms", sender, [did("gateway")], cap, required)
        == entry["dms_require_gateway_root"]
    )
    assert _actor_verdict("dms", sender, [], cap, required) == entry["dms_require_untrusted"]


def test_actor_reply_is_refused_by_a_gateway_that_does_not_trust_the_dms() -> None:
    entry = MESSAGES["reply"]
    envelope = json.loads(entry["envelope_json"])
    cap = base64.b64decode(envelope["cap"])
    verdict = _actor_verdict("gateway", envelope["from"]["did"]["uri"], [], cap, [envelope["be"]])
    assert verdict == entry["gateway_require"]
