"""envelopes.json: every envelope reproduced byte for byte, every receiver verdict matched."""

from __future__ import annotations

import base64
import dataclasses
from typing import Any

import pytest

from dmsgw.clock import FixedClock
from dmsgw.gojson import marshal
from dmsgw.keys.crypto import Ed25519PrivKey
from dmsgw.transport import envelope as env
from tests.support.vectors import load_vector

DATA = load_vector("envelopes.json")
NOW = FixedClock(1_795_000_000 * 10**9)  # 2026: vectors expire in 2001 or 2100


def _verdict(data: str) -> dict[str, Any]:
    try:
        env.receive(data, NOW())
    except env.EnvelopeError as exc:
        return {"ok": False, "error": str(exc)}
    return {"ok": True, "error": None}


@pytest.mark.parametrize("case", DATA["cases"], ids=lambda c: c["name"])
def test_signed_envelope_reproduced(case: dict[str, Any]) -> None:
    decoded = env.decode(case["envelope_json"])
    assert marshal(decoded).decode() == case["envelope_json"]
    sig_data = decoded.signature_data()
    assert sig_data == base64.b64decode(case["signature_data_b64"])
    assert sig_data.decode() == case["signature_data_text"]
    assert decoded.msg == case["msg_text"].encode()
    assert (decoded.cap or b"").decode() == case["cap_text"]
    # Build it again from its parts and sign it: the same bytes and signature come out.
    rebuilt = env.message(
        decoded.from_,
        decoded.to,
        decoded.be,
        case["msg_text"].encode() if case["msg_text"] else None,
        expire=decoded.opt.exp,
        reply_to=decoded.opt.cont,
        topic=decoded.opt.topic,
        nonce=decoded.nonce,
    )
    rebuilt = dataclasses.replace(rebuilt, cap=case["cap_text"].encode() or None)
    signed = env.sign(rebuilt, Ed25519PrivKey(bytes.fromhex(case["signer_seed_hex"])))
    assert signed.sig == base64.b64decode(case["sig_b64"])
    assert marshal(signed).decode() == case["envelope_json"]
    assert _verdict(case["envelope_json"]) == case["verify"]


@pytest.mark.parametrize("case", DATA["receiver_variants"]["cases"], ids=lambda c: c["name"])
def test_receiver_variant_verdict(case: dict[str, Any]) -> None:
    assert _verdict(case["received_json"]) == case["verify"]
    if case["go_remarshal"]:
        assert marshal(env.decode(case["received_json"])).decode() == case["go_remarshal"]
