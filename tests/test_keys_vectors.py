"""keys.json, and the key material inside every other vector file, reproduced byte for byte."""

from __future__ import annotations

import pytest

from dmsgw.keys.crypto import (
    Ed25519PrivKey,
    marshal_private_key,
    marshal_public_key,
    unmarshal_private_key,
    unmarshal_public_key,
)
from dmsgw.keys.did import DID
from dmsgw.keys.id import ID
from dmsgw.keys.peer import peer_id_from_public_key, public_key_from_peer_id
from tests.support.vectors import load_vector

KEYS = load_vector("keys.json")["keys"]


def _all_key_entries() -> list[dict[str, str]]:
    entries = list(KEYS)
    for name in ("envelopes.json", "tokens.json", "actor_messages.json"):
        entries.extend(load_vector(name)["keys"].values())
    return [e for e in entries if "seed_hex" in e and e["priv_protobuf_hex"].startswith("0801")]


@pytest.mark.parametrize("entry", _all_key_entries(), ids=lambda e: e["name"])
def test_ed25519_key_material(entry: dict[str, str]) -> None:
    key = Ed25519PrivKey(bytes.fromhex(entry["seed_hex"]))
    pub = key.public_key()
    assert pub.raw().hex() == entry["pub_raw_hex"]
    assert marshal_private_key(key).hex() == entry["priv_protobuf_hex"]
    assert marshal_public_key(pub).hex() == entry["pub_protobuf_hex"]
    assert str(ID.from_public_key(pub)) == entry["id_b32"]
    assert DID.from_public_key(pub).uri == entry["did"]
    assert DID.from_public_key(pub).to_json().decode() == entry["did_json"]
    assert peer_id_from_public_key(pub) == entry["peer_id"]
    # and back
    assert unmarshal_private_key(bytes.fromhex(entry["priv_protobuf_hex"])).public_key() == pub
    assert unmarshal_public_key(bytes.fromhex(entry["pub_protobuf_hex"])) == pub
    assert DID.from_json(entry["did_json"]).public_key() == pub
    assert ID.from_string(entry["id_b32"]).public_key_obj() == pub
    assert public_key_from_peer_id(entry["peer_id"]) == pub


def test_secp256k1_key_material_and_signature() -> None:
    import base64

    from dmsgw.keys.crypto import Secp256k1PrivKey

    entry = next(k for k in KEYS if k["name"] == "secp256k1_example")
    key = Secp256k1PrivKey(bytes.fromhex(entry["seed_hex"]))
    pub = key.public_key()
    assert marshal_private_key(key).hex() == entry["priv_protobuf_hex"]
    assert marshal_public_key(pub).hex() == entry["pub_protobuf_hex"]
    assert str(ID.from_public_key(pub)) == entry["id_b32"]
    assert DID.from_public_key(pub).uri == entry["did"]
    assert peer_id_from_public_key(pub) == entry["peer_id"]
    sig = base64.b64decode(entry["sig_of_hello_b64"])
    assert key.sign(b"hello") == sig  # RFC 6979 + low-S, as go-libp2p
    assert pub.verify(b"hello", sig)
    assert not pub.verify(b"hellO", sig)
    assert DID(entry["did"]).public_key() == pub
    assert unmarshal_private_key(bytes.fromhex(entry["priv_protobuf_hex"])).public_key() == pub
