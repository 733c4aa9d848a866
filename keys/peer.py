"""libp2p peer IDs: the DMS's network address is the peer ID of its key."""

from __future__ import annotations

import hashlib

import base58

from ..errors import DmsgwError
from .crypto import PubKey, marshal_public_key, unmarshal_public_key
from .varint import VarintError, decode_uvarint, encode_uvarint

_IDENTITY = 0x00
_SHA2_256 = 0x12
_MAX_INLINE_KEY_LENGTH = 42


class PeerIDError(DmsgwError):
    """A string that is not a libp2p peer ID."""


def peer_id_bytes(key: PubKey) -> bytes:
    """Identity multihash of the key protobuf when it is at most 42 bytes, else SHA-256."""
    pb = marshal_public_key(key)
    if len(pb) <= _MAX_INLINE_KEY_LENGTH:
        return bytes([_IDENTITY]) + encode_uvarint(len(pb)) + pb
    return bytes([_SHA2_256, 32]) + hashlib.sha256(pb).digest()


def peer_id_from_public_key(key: PubKey) -> str:
    """The peer ID string (base58btc, no multibase prefix): ``12D3KooW…`` for Ed25519."""
    return base58.b58encode(peer_id_bytes(key)).decode("ascii")


def parse_peer_id(peer_id: str) -> bytes:
    """Validate a base58 peer ID string and return its multihash bytes."""
    if not peer_id:
        raise PeerIDError("empty peer ID")
    try:
        mh = base58.b58decode(peer_id.encode("ascii"))
    except (ValueError, UnicodeEncodeError):
        raise PeerIDError(f"peer ID {peer_id!r} is not base58btc") from None
    try:
        code, i = decode_uvarint(mh)
        length, i = decode_uvarint(mh, i)
    except VarintError as exc:
        raise PeerIDError(f"peer ID {peer_id!r}: {exc}") from None
    if len(mh) - i != length:
        raise PeerIDError(f"peer ID {peer_id!r}: multihash length {length} != {len(mh) - i}")
    if code == _SHA2_256 and length == 32:
        return mh
    if code == _IDENTITY and length <= _MAX_INLINE_KEY_LENGTH:
        return mh
    raise PeerIDError(f"peer ID {peer_id!r}: unsupported multihash 0x{code:x}/{length}")


def public_key_from_peer_id(peer_id: str) -> PubKey:
    """Extract the key inlined in an identity-multihash peer ID (Ed25519, secp256k1)."""
    mh = parse_peer_id(peer_id)
    if mh[0] != _IDENTITY:
        raise PeerIDError(f"peer ID {peer_id!r} is a hash: its public key cannot be extracted")
    _, i = decode_uvarint(mh, 1)
    return unmarshal_public_key(mh[i:])
