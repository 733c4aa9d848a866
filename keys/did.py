"""Decentralized identifiers as the DMS uses them (``lib/did``): ``did:key`` only.

``did:key:z<base58btc(uvarint(codec) || raw key)>``. Ed25519 (0xed) and secp256k1 (0xe7) keys
are fully supported. The DMS's private codecs for Ethereum (0xef01) and Cardano (0xef02) keys
are recognised and named in errors; see :func:`parse_key_uri` for what is supported of them.
"""

from __future__ import annotations

import dataclasses
from functools import lru_cache

import base58

from ..errors import DmsgwError
from ..gojson import STRING, GoStruct, go_field
from .crypto import Ed25519PubKey, KeyFormatError, KeyType, PubKey, Secp256k1PubKey
from .varint import VarintError, decode_uvarint, encode_uvarint

KEY_PREFIX = "did:key:"

CODEC_ED25519 = 0xED
CODEC_SECP256K1 = 0xE7
CODEC_ETH = 0xEF01
CODEC_CARDANO = 0xEF02

_CODEC_OF_TYPE = {
    KeyType.Ed25519: CODEC_ED25519,
    KeyType.Secp256k1: CODEC_SECP256K1,
    KeyType.Eth: CODEC_ETH,
    KeyType.Cardano: CODEC_CARDANO,
}


class DIDError(DmsgwError):
    """A DID that cannot be parsed or resolved to a key."""


@dataclasses.dataclass(frozen=True, slots=True)
class DID(GoStruct):
    """``did.DID``: ``{"uri": "did:…"}``; the empty DID marshals as ``{}``."""

    GO_NAME = "DID"
    GO_CACHED = True
    uri: str = go_field("uri", STRING, omitempty=True, default="")

    def __str__(self) -> str:
        return self.uri

    def empty(self) -> bool:
        return not self.uri

    def method(self) -> str:
        parts = self.uri.split(":", 2)
        return parts[1] if len(parts) == 3 and parts[0] == "did" else ""

    @classmethod
    def from_public_key(cls, key: PubKey) -> DID:
        return cls(format_key_uri(key))

    def public_key(self) -> PubKey:
        """``did.PublicKeyFromDID``."""
        if self.method() != "key":
            raise DIDError(f"{self.uri!r} is not a did:key (only did:key resolves to a key)")
        return parse_key_uri(self.uri)


def from_string(text: str) -> DID:
    """``did.FromString``: ``did:<method>:<identifier>``, three non-empty parts.

    Stricter than Go in two ways, both for DIDs typed by people: the empty string is refused
    (where a DID is optional, test for it first), and a ``did:key`` must hold a key now, not
    when the key is first needed, since a typo there yields tokens nobody can ever use.
    """
    parts = text.split(":")
    if len(parts) != 3 or parts[0] != "did" or not all(parts):
        raise DIDError(f"{text!r}: expected did:<method>:<identifier>")
    did = DID(text)
    if did.method() == "key":
        did.public_key()
    return did


def format_key_uri(key: PubKey) -> str:
    codec = _CODEC_OF_TYPE.get(key.type)
    if codec is None:
        raise DIDError(f"{key.type.name} keys have no did:key codec in the DMS")
    return KEY_PREFIX + "z" + base58.b58encode(encode_uvarint(codec) + key.raw()).decode("ascii")


@lru_cache(maxsize=4096)
def parse_key_uri(uri: str) -> PubKey:
    """``did.ParseKeyURI``: the public key inside a ``did:key`` URI (cached, like the DMS)."""
    if not uri.startswith(KEY_PREFIX):
        raise DIDError(f"{uri!r} is not a did:key (it must start with {KEY_PREFIX!r})")
    body = uri[len(KEY_PREFIX) :]
    if not body:
        raise DIDError(f"{uri!r}: the key identifier is empty")
    if body[0] != "z":
        raise DIDError(
            f"{uri!r}: multibase prefix {body[0]!r} is not supported, only base58btc ('z')"
        )
    try:
        data = base58.b58decode(body[1:].encode("ascii"))
    except (ValueError, UnicodeEncodeError):
        raise DIDError(f"{uri!r}: the key identifier is not valid base58btc") from None
    try:
        codec, offset = decode_uvarint(data)
    except VarintError as exc:
        raise DIDError(f"{uri!r}: bad multicodec varint: {exc}") from None
    raw = data[offset:]
    try:
        if codec == CODEC_ED25519:
            return Ed25519PubKey(raw)
        if codec == CODEC_SECP256K1:
            return Secp256k1PubKey(raw)
    except KeyFormatError as exc:
        raise DIDError(f"{uri!r}: {exc}") from None
    if codec == CODEC_ETH:
        from .eth import EthPubKey

        try:
            key: PubKey = EthPubKey(raw)
            return key
        except KeyFormatError as exc:
            raise DIDError(f"{uri!r}: {exc}") from None
    if codec == CODEC_CARDANO:
        raise DIDError(
            f"{uri!r} is a Cardano key (codec 0xef02): recognised, but dms-gateway cannot "
            "verify Cardano (CIP-8/COSE) signatures; use an Ed25519 or secp256k1 did:key"
        )
    raise DIDError(f"{uri!r}: unknown key codec 0x{codec:x}")
