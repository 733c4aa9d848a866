"""The preflight: the DMS's verdict on whole envelopes, and the reason it never tells."""

from __future__ import annotations

import base64
import dataclasses
from typing import Any

import pytest

from dmsgw.clock import FixedClock
from dmsgw.gojson import marshal
from dmsgw.keys.crypto import Ed25519PrivKey
from dmsgw.keys.did import DID
from dmsgw.keys.id import ID
from dmsgw.keys.ucan import CapabilityContext, TokenList
from dmsgw.transport import envelope as env
from dmsgw.transport.preflight import Stage, preflight
from tests.support.vectors import CASES, EXPECTED_REASONS, KEYS, NOW_2026, TOKENS

DMS_KEY = Ed25519PrivKey(bytes.fromhex(KEYS["dms"]["seed_hex"]))
DMS = env.Handle.from_public_key(DMS_KEY.public_key())
GW_KEY = Ed25519PrivKey(bytes.fromhex(KEYS["gateway"]["seed_hex"]))


def _dms_model(case: dict[str, Any] | None = None) -> CapabilityContext:
    """The DMS as the gateway models it: its DID and the anchors of its dms.cap, no key."""
    case = case or {"dms_roots": [], "dms_require": "{}", "dms_revoke": "{}"}
    return CapabilityContext(
        DID(KEYS["dms"]["did"]),
        roots=[DID(r) for r in case["dms_roots"]],
        require=TokenList.from_json(case["dms_require"]),
        revoke=TokenList.from_json(case["dms_revoke"]),
        clock=FixedClock(NOW_2026),
    )


def _envelope(
    sender: str, cap: bytes | None, behavior: str = "/dms/node/peers/list"
) -> env.Envelope:
    key = Ed25519PrivKey(bytes.fromhex(KEYS[sender]["seed_hex"]))
    source = env.Handle(
        ID.from_public_key(key.public_key()),
        DID.from_public_key(key.public_key()),
        env.Address(DMS.addr.host, "user-1"),
    )
    msg = env.message(
        source, DMS, behavior, reply_to="/private/user/1", expire=NOW_2026 + 60 * 10**9
    )
    return env.sign(dataclasses.replace(msg, cap=cap), key)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c["name"])
def test_preflight_matches_every_dms_require_verdict(case: dict[str, Any]) -> None:
    msg = _envelope(case["sender"], base64.b64decode(case["cap_b64"]) or None)
    verdict = preflight(marshal(msg), _dms_model(case), now_ns=NOW_2026, required=case["required"])
    assert verdict.accepted == case["expected"]["ok"]
    if verdict.accepted:
        assert verdict.reasons
        return
    assert verdict.stage is Stage.CAPABILITY
    assert verdict.dms_error == case["expected"]["error"]
    assert [r.reason for r in verdict.rejections] == [EXPECTED_REASONS[case["name"]]]
    assert str(verdict).startswith("refused at capability: ")


def _chained_invoke() -> bytes:
    return TOKENS["invoke_gateway_chained"]["tokens_json"].encode()


def test_a_good_message_is_accepted_and_the_model_is_left_untouched() -> None:
    model = _dms_model()
    msg = _envelope("gateway", _chained_invoke())
    first = preflight(msg, model, now_ns=NOW_2026)
    assert first.accepted and "authorized by" in first.reasons[0]
    # nothing was kept: the same tokens are judged afresh, and a token-less message is refused
    assert preflight(msg, model, now_ns=NOW_2026).accepted
    bare = preflight(_envelope("gateway", None), model, now_ns=NOW_2026)
    assert bare.stage is Stage.CAPABILITY
    assert "cap is mandatory" in bare.reasons[0]


@pytest.mark.parametrize(
    ("mutate", "stage", "error"),
    [
        (lambda m: b"{", Stage.DECODE, "unmarshal: "),
        (
            lambda m: marshal(
                dataclasses.replace(m, to=env.Handle.from_public_key(GW_KEY.public_key()))
            ),
            Stage.ADDRESS,
            "message not addressed to this actor",
        ),
        (
            lambda m: marshal(
                env.sign(
                    dataclasses.replace(
                        m, from_=dataclasses.replace(m.from_, addr=env.Address("12D3KooWx", "u"))
                    ),
                    GW_KEY,
                )
            ),
            Stage.ADDRESS,
            "reply address is not this DMS",
        ),
        (
            lambda m: marshal(dataclasses.replace(m, nonce=m.nonce + 1)),
            Stage.VERIFY,
            "signature verification failed",
        ),
        (
            lambda m: marshal(
                env.sign(dataclasses.replace(m, opt=env.EnvelopeOptions(1, "/c")), GW_KEY)
            ),
            Stage.VERIFY,
            "message expired",
        ),
        (
            lambda m: marshal(env.sign(dataclasses.replace(m, be="/dms/node/nope"), GW_KEY)),
            Stage.BEHAVIOR,
            "unknown behavior '/dms/node/nope'",
        ),
    ],
    ids=[
        "not-json",
        "wrong-addressee",
        "wrong-reply-host",
        "tampered",
        "expired",
        "unknown-behavior",
    ],
)
def test_each_stage_of_the_receive_path_is_named(mutate: Any, stage: Stage, error: str) -> None:
    data = mutate(_envelope("gateway", _chained_invoke()))
    verdict = preflight(
        data, _dms_model(), now_ns=NOW_2026, known_behaviors={"/dms/node/peers/list"}
    )
    assert verdict.stage is stage and not verdict.accepted
    assert verdict.dms_error.startswith(error)
    assert verdict.reasons


def test_the_dms_key_itself_needs_no_capability() -> None:
    msg = env.message(
        dataclasses.replace(DMS, addr=env.Address(DMS.addr.host, "user-1")),
        DMS,
        "/dms/node/peers/list",
        expire=NOW_2026 + 10**9,
    )
    verdict = preflight(env.sign(msg, DMS_KEY), _dms_model(), now_ns=NOW_2026)
    assert verdict.accepted and "no capability needed" in verdict.reasons[0]


def _broadcast(grant_topics: list[str] | None) -> tuple[CapabilityContext, env.Envelope]:
    """A gateway broadcast on /nunet/hello with tokens chained on a DMS grant."""
    from dmsgw.keys.trust import provider_from_private_key
    from dmsgw.keys.ucan import Action
    from dmsgw.transport.security import SecurityContext

    dms_ctx = CapabilityContext(provider_from_private_key(DMS_KEY), clock=FixedClock(NOW_2026))
    gw_did = DID.from_public_key(GW_KEY.public_key())
    exp = NOW_2026 + 3600 * 10**9
    grant = dms_ctx.grant(Action.DELEGATE, gw_did, DID(), grant_topics, exp, 0, ["/broadcast"])
    gw_ctx = CapabilityContext(
        provider_from_private_key(GW_KEY), provide=grant, clock=FixedClock(NOW_2026)
    )
    security = SecurityContext(GW_KEY, gw_ctx, clock=FixedClock(NOW_2026))
    source = env.Handle(security.id, security.did, env.Address(DMS.addr.host, "user-9"))
    msg = env.message(
        source, env.Handle(), "/broadcast/hello", topic="/nunet/hello", expire=exp - 1
    )
    return _dms_model(), security.provide_broadcast(msg, ["/broadcast/hello"])


def test_broadcasts_are_judged_by_require_broadcast() -> None:
    model, msg = _broadcast(["/nunet"])
    assert preflight(msg, model, now_ns=NOW_2026).accepted
    model, msg = _broadcast(None)  # a grant without the topic: only the self-signed token is left
    verdict = preflight(msg, model, now_ns=NOW_2026)
    assert verdict.stage is Stage.CAPABILITY
    assert verdict.dms_error == "requiring capabilities: not authorized"
