"""Keccak-256 and the DMS's Eth key type, checked against independent Ethereum vectors."""

from __future__ import annotations

import hashlib

import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import Prehashed, encode_dss_signature
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from dmsgw.keys.crypto import (
    SECP256K1_ORDER,
    KeyFormatError,
    KeyType,
    Secp256k1PrivKey,
    Secp256k1PubKey,
)
from dmsgw.keys.did import DID, parse_key_uri
from dmsgw.keys.eth import EthPubKey, eth_message_hash
from dmsgw.keys.keccak import keccak256, sponge_256

NUNET_NETWORK_DID = "did:key:zzCHUybNYmK8QsttZwXqUX8aDLoBGHnMCakDX2RpsGwmXmYHEW"

# web3.js documentation: web3.eth.accounts.sign('Some data', <this key>).
WEB3_KEY = bytes.fromhex("4c0883a69102937d6231471b5dbb6204fe5129617082792ae468d01a3f362318")
WEB3_HASH = "1da44b586eb0729ff70a73c326926f6ed5a25f5b056e7f47fbc6e58d86871655"
WEB3_R = 0xB91467E570A6466AA9E9876CBCD013BABA02900B8979D43FE208A4A4F339F5FD
WEB3_S = 0x6007E74CD82E037B800186422FC2DA167C747EF045E5D18A5F5D4300F8E1A029


@pytest.mark.parametrize(
    ("data", "digest"),
    [
        (b"", "c5d2460186f7233c927e7db2dcc703c0e500b653ca82273b7bfad8045d85a470"),
        (b"abc", "4e03657aea45a94fc7d47ba826c8d667c0d1e6e33a64a036ec44f58fa12d6c45"),
        (b"hello world", "47173285a8d7341e5e972fc677286384f802f8ef42a5ec5f03bbfa254cb01fad"),
    ],
)
def test_keccak256_known_vectors(data: bytes, digest: str) -> None:
    assert keccak256(data).hex() == digest


@pytest.mark.parametrize("length", [0, 1, 135, 136, 137, 271, 272, 1000])
def test_the_sponge_with_sha3_padding_is_hashlib_sha3(length: int) -> None:
    """Same permutation, FIPS 202 padding: must equal hashlib across block boundaries."""
    data = bytes(i % 251 for i in range(length))
    assert sponge_256(data, 0x06) == hashlib.sha3_256(data).digest()
    assert keccak256(data) != hashlib.sha3_256(data).digest()


@pytest.mark.parametrize(
    ("message", "digest"),
    [
        (b"hello world", "d9eba16ed0ecae432b71fe008c98cc872bb4cc214d3220a36f365326cf807d68"),
        (b"Some data", WEB3_HASH),
    ],
)
def test_eth_message_hash_matches_ethereum_wallets(message: bytes, digest: str) -> None:
    assert eth_message_hash(message).hex() == digest


def test_eth_message_hash_writes_the_length_in_decimal() -> None:
    data = b"x" * 100
    assert eth_message_hash(data) == keccak256(b"\x19Ethereum Signed Message:\n100" + data)


def _web3_pub() -> EthPubKey:
    return EthPubKey(Secp256k1PrivKey(WEB3_KEY).public_key().raw())


def test_verifies_a_signature_made_by_an_ethereum_wallet_library() -> None:
    sig = encode_dss_signature(WEB3_R, WEB3_S)
    assert _web3_pub().verify(b"Some data", sig)
    assert not _web3_pub().verify(b"Some datA", sig)


def test_high_s_is_accepted_as_by_decred() -> None:
    sig = encode_dss_signature(WEB3_R, SECP256K1_ORDER - WEB3_S)
    assert _web3_pub().verify(b"Some data", sig)


def _eth_sign(scalar: bytes, data: bytes) -> bytes:
    """What a wallet does for the DMS: ECDSA over the EIP-191 digest, as DER."""
    key = ec.derive_private_key(int.from_bytes(scalar, "big"), ec.SECP256K1())
    return key.sign(eth_message_hash(data), ec.ECDSA(Prehashed(hashes.SHA256())))


@pytest.mark.parametrize(
    "sig", [b"", b"invalid-signature", b"\x30\x06\x02\x01\x01\x02\x01\x01", b"\x30" * 72]
)
def test_malformed_signatures_are_false_not_errors(sig: bytes) -> None:
    assert _web3_pub().verify(b"Some data", sig) is False


def test_eth_and_libp2p_secp256k1_signatures_are_not_interchangeable() -> None:
    priv = Secp256k1PrivKey(WEB3_KEY)
    eth_pub = EthPubKey(priv.public_key().raw())
    libp2p_sig = priv.sign(b"data")
    eth_sig = _eth_sign(WEB3_KEY, b"data")
    assert eth_pub.verify(b"data", eth_sig)
    assert not eth_pub.verify(b"data", libp2p_sig)
    assert not priv.public_key().verify(b"data", eth_sig)
    assert eth_pub != priv.public_key()  # same point, different key type


def test_raw_is_compressed_whatever_was_parsed() -> None:
    point = ec.derive_private_key(int.from_bytes(WEB3_KEY, "big"), ec.SECP256K1()).public_key()
    uncompressed = point.public_bytes(Encoding.X962, PublicFormat.UncompressedPoint)
    compressed = point.public_bytes(Encoding.X962, PublicFormat.CompressedPoint)
    assert EthPubKey(uncompressed).raw() == compressed
    assert EthPubKey(uncompressed) == EthPubKey(compressed)


@pytest.mark.parametrize("raw", [b"", b"\x02" * 32, b"\x05" + b"\x01" * 32])
def test_bad_points_are_refused(raw: bytes) -> None:
    with pytest.raises(KeyFormatError, match="Eth public key"):
        EthPubKey(raw)


def test_nunet_network_did_is_an_eth_key() -> None:
    key = parse_key_uri(NUNET_NETWORK_DID)
    assert isinstance(key, EthPubKey)
    assert key.type == KeyType.Eth == 127
    assert not isinstance(key, Secp256k1PubKey)
    assert DID.from_public_key(key).uri == NUNET_NETWORK_DID


def test_eth_did_round_trip() -> None:
    did = DID.from_public_key(_web3_pub())
    assert did.uri.startswith("did:key:zzCH")
    assert did.public_key() == _web3_pub()
