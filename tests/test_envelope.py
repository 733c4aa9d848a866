"""Envelope building, signing and the receiver path on inputs beyond the golden vectors."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dmsgw.clock import FixedClock
from dmsgw.gojson import marshal
from dmsgw.keys.crypto import Ed25519PrivKey, Secp256k1PrivKey
from dmsgw.keys.did import DID
from dmsgw.keys.id import ID
from dmsgw.transport import envelope as env

NOW = FixedClock(1_795_000_000 * 10**9)
DMS_KEY = Ed25519PrivKey(bytes(range(32)))
GW_KEY = Ed25519PrivKey(bytes(range(32, 64)))
DMS = env.Handle.from_public_key(DMS_KEY.public_key())


def _gateway_handle(key: Ed25519PrivKey | Secp256k1PrivKey = GW_KEY) -> env.Handle:
    return env.Handle(
        ID.from_public_key(key.public_key()),
        DID.from_public_key(key.public_key()),
        env.Address(DMS.addr.host, "user-7"),
    )


def _signed(payload: object = None) -> env.Envelope:
    request = env.message(
        _gateway_handle(),
        DMS,
        "/dms/node/peers/list",
        payload,
        reply_to="/private/user/7",
        nonce=7,
        clock=NOW,
    )
    return env.sign(request, GW_KEY)


def test_default_expiry_is_thirty_seconds_from_the_clock() -> None:
    assert _signed().opt.exp == NOW() + 30 * 10**9


def test_signed_envelope_is_received() -> None:
    signed = _signed({"Host": "12D3<&>"})
    received = env.receive(marshal(signed), NOW())
    assert received == signed
    assert received.payload() == {"Host": "12D3<&>"}


def test_secp256k1_sender_round_trip() -> None:
    key = Secp256k1PrivKey(bytes(range(1, 33)))
    request = env.message(_gateway_handle(key), DMS, "/public/hello", clock=NOW)
    env.receive(marshal(env.sign(request, key)), NOW())


def test_only_the_from_actor_may_sign() -> None:
    with pytest.raises(env.BadSenderError, match="bad sender"):
        env.sign(env.message(DMS, DMS, "/x", clock=NOW), GW_KEY)


def test_expiry_is_checked_in_nanoseconds_and_inclusive() -> None:
    signed = _signed()
    env.verify(signed, signed.opt.exp)  # now == exp is still valid, as in Go
    with pytest.raises(env.MessageExpiredError, match="message expired"):
        env.verify(signed, signed.opt.exp + 1)


def test_reply_to_swaps_handles_and_keeps_expiry() -> None:
    request = _signed()
    reply = env.reply_to(request, {"Peers": []})
    assert (reply.to, reply.from_, reply.be) == (request.from_, request.to, "/private/user/7")
    assert reply.opt.exp == request.opt.exp
    with pytest.raises(env.EnvelopeError, match="no behavior to reply to"):
        env.reply_to(dataclasses.replace(request, opt=env.EnvelopeOptions(1)))


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        (b"", "unexpected end of JSON input"),
        (b"not json", r"^unmarshal: invalid character 'o' in literal null \(expecting 'u'\)$"),
        (b'{"to":', "^unmarshal: unexpected end of JSON input$"),
        (b"{'be':1}", r"^unmarshal: invalid character '\\'' looking for beginning of object key"),
        (b'{"nonce":NaN}', "^unmarshal: invalid character 'N' looking for beginning of value$"),
        (b"[]", "cannot unmarshal array"),
        (b'{"nonce":-1}', "cannot unmarshal number -1 into Go struct field Envelope.nonce"),
        (b'{"be":5}', "cannot unmarshal number 5 into Go struct field Envelope.be of type string"),
        (b'{"msg":"***"}', "illegal base64 data"),
        (b'{"from":{"id":{"pub":"nope"}}}', "unmarshaling ID"),
    ],
)
def test_malformed_envelopes_name_the_problem(data: bytes, fragment: str) -> None:
    with pytest.raises(env.EnvelopeError, match=fragment):
        env.receive(data, NOW())


def test_unsigned_and_keyless_envelopes_are_rejected() -> None:
    with pytest.raises(env.SignatureVerificationError):
        env.receive(marshal(dataclasses.replace(_signed(), sig=None)), NOW())
    with pytest.raises(env.EnvelopeError, match="public key from id"):
        env.verify(dataclasses.replace(_signed(), from_=env.Handle()), NOW())


@pytest.mark.parametrize(
    "text",
    [DMS.addr.host, DMS.did.uri, marshal(DMS).decode()],
    ids=["peer-id", "did", "json"],
)
def test_handle_parse_accepts_peer_id_did_and_json(text: str) -> None:
    assert env.Handle.parse(text) == DMS


@pytest.mark.parametrize("text", ["", "12D3KooWnope", "did:key:zzz", "{bad", "did:web:x"])
def test_handle_parse_rejects_garbage_clearly(text: str) -> None:
    with pytest.raises(env.HandleError):
        env.Handle.parse(text)


def test_a_peer_id_asked_again_is_parsed_once_and_a_bad_one_still_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The gateway asks the same peers by ID at every gathering of their resources: the
    handle of a peer ID met lately is the one already parsed (the same object, so the
    encoder's memo knows it too); a bad ID is refused every time, never remembered."""
    parsed: list[str] = []
    parse = env.public_key_from_peer_id

    def counting(peer_id: str) -> object:
        parsed.append(peer_id)
        return parse(peer_id)

    monkeypatch.setattr(env, "public_key_from_peer_id", counting)
    env._handle_of_peer.cache_clear()  # a handle another test parsed is not this test's
    peer = Ed25519PrivKey(bytes(range(64, 96)))
    peer_id = env.Handle.from_public_key(peer.public_key()).addr.host
    first = env.Handle.parse(peer_id)
    assert [env.Handle.parse(f" {peer_id}") for _ in range(3)] == [first] * 3
    assert all(env.Handle.parse(peer_id) is first for _ in range(3))
    assert first == env.Handle.from_public_key(peer.public_key())
    assert parsed == [peer_id]
    for _ in range(2):
        with pytest.raises(env.HandleError, match="12D3KooWnope"):
            env.Handle.parse("12D3KooWnope")
    assert parsed == [peer_id, "12D3KooWnope", "12D3KooWnope"]


SIGNED_BYTES = marshal(_signed({"a": [1, "x<y"]}))


@settings(max_examples=400, deadline=None)
@given(st.integers(0, len(SIGNED_BYTES) - 1), st.integers(1, 255))
def test_any_single_byte_mutation_is_rejected_or_changes_nothing(pos: int, delta: int) -> None:
    """A DMS decodes before it verifies, so a mutation that decodes to the very same envelope
    (a key's letter case, say) is still that envelope; every other one must be refused."""
    original = env.decode(SIGNED_BYTES)
    mutated = bytearray(SIGNED_BYTES)
    mutated[pos] = (mutated[pos] + delta) % 256
    try:
        received = env.receive(bytes(mutated), NOW())
    except env.EnvelopeError:
        return
    assert received.signature_data() == original.signature_data()
    assert received.sig == original.sig


@pytest.mark.parametrize("cap", [None, b"\x00tokens<&>"])
def test_the_wire_bytes_of_a_signed_envelope_are_its_go_json(cap: bytes | None) -> None:
    request = dataclasses.replace(
        env.message(_gateway_handle(), DMS, "/dms/node/peers/list", {"a": "<&>"}, clock=NOW),
        cap=cap,
    )
    signed = env.sign(request, GW_KEY)
    assert env.wire(signed) == marshal(signed)  # from the bytes it signed
    assert env.wire(signed) == marshal(signed)  # once let go: encoded again, the same
    other = dataclasses.replace(signed, be="/dms/node/peers/self")  # not the one signed
    assert env.wire(other) == marshal(other)
