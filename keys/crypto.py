"""Keys as the DMS (``lib/crypto``, i.e. go-libp2p ``core/crypto``) uses them.

Ed25519 is what DMS and ``nunet key`` generate; secp256k1 is accepted everywhere the DMS accepts
it (``AllowedKey``). Signatures are byte-identical to go-libp2p's: plain Ed25519 over the data,
and for secp256k1 ECDSA over SHA-256 with an RFC 6979 nonce, low-S, DER-encoded.
"""

from __future__ import annotations

import enum
import hashlib
from abc import ABC, abstractmethod

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from cryptography.hazmat.primitives.asymmetric.utils import (
    decode_dss_signature,
    encode_dss_signature,
)
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from ..errors import DmsgwError
from .varint import VarintError, decode_uvarint, encode_uvarint

__all__ = [
    "Ed25519PrivKey",
    "Ed25519PubKey",
    "KeyFormatError",
    "KeyType",
    "PrivKey",
    "PubKey",
    "Secp256k1PrivKey",
    "Secp256k1PubKey",
    "generate_key_pair",
    "marshal_private_key",
    "marshal_public_key",
    "unmarshal_private_key",
    "unmarshal_public_key",
]

SECP256K1_ORDER = 0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFEBAAEDCE6AF48A03BBFD25E8CD0364141


class KeyFormatError(DmsgwError):
    """Key bytes that cannot be a key of the declared type."""


class KeyType(enum.IntEnum):
    """libp2p ``pb.KeyType`` values, plus the DMS's own Eth and Cardano types."""

    RSA = 0
    Ed25519 = 1
    Secp256k1 = 2
    ECDSA = 3
    Eth = 127
    Cardano = 128


class PubKey(ABC):
    """A public key that can check signatures made by its private key."""

    type: KeyType

    @abstractmethod
    def raw(self) -> bytes:
        """The key's raw bytes (libp2p ``Raw()``)."""

    @abstractmethod
    def verify(self, data: bytes, sig: bytes) -> bool:
        """True when ``sig`` is this key's signature over ``data``; never raises on bad input."""

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PubKey) and other.type == self.type and other.raw() == self.raw()

    def __hash__(self) -> int:
        return hash((self.type, self.raw()))

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.raw().hex()}>"


class PrivKey(ABC):
    """A private key that signs exactly as go-libp2p signs."""

    type: KeyType

    @abstractmethod
    def raw(self) -> bytes:
        """libp2p ``Raw()`` of the private key (what goes in the protobuf ``Data`` field)."""

    @abstractmethod
    def public_key(self) -> PubKey: ...

    @abstractmethod
    def sign(self, data: bytes) -> bytes: ...

    def __repr__(self) -> str:  # never print secret material
        return f"<{type(self).__name__} for {self.public_key()!r}>"


class Ed25519PubKey(PubKey):
    type = KeyType.Ed25519

    def __init__(self, raw: bytes) -> None:
        if len(raw) != 32:
            raise KeyFormatError(f"an Ed25519 public key is 32 bytes, got {len(raw)}")
        self._raw = bytes(raw)
        self._key = ed25519.Ed25519PublicKey.from_public_bytes(self._raw)

    def raw(self) -> bytes:
        return self._raw

    def verify(self, data: bytes, sig: bytes) -> bool:
        try:
            self._key.verify(sig, data)
        except InvalidSignature:
            return False
        return True


class Ed25519PrivKey(PrivKey):
    type = KeyType.Ed25519

    def __init__(self, seed: bytes) -> None:
        if len(seed) != 32:
            raise KeyFormatError(f"an Ed25519 seed is 32 bytes, got {len(seed)}")
        self._seed = bytes(seed)
        self._key = ed25519.Ed25519PrivateKey.from_private_bytes(self._seed)
        self._pub = Ed25519PubKey(
            self._key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        )

    @classmethod
    def generate(cls) -> Ed25519PrivKey:
        from cryptography.hazmat.primitives.serialization import NoEncryption, PrivateFormat

        key = ed25519.Ed25519PrivateKey.generate()
        return cls(key.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption()))

    def seed(self) -> bytes:
        return self._seed

    def raw(self) -> bytes:
        return self._seed + self._pub.raw()

    def public_key(self) -> Ed25519PubKey:
        return self._pub

    def sign(self, data: bytes) -> bytes:
        return self._key.sign(data)


class Secp256k1PubKey(PubKey):
    type = KeyType.Secp256k1

    def __init__(self, raw: bytes) -> None:
        if len(raw) not in (33, 65):
            raise KeyFormatError(
                f"a secp256k1 public key is 33 (compressed) or 65 bytes, got {len(raw)}"
            )
        try:
            self._key = ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256K1(), bytes(raw))
        except ValueError:
            raise KeyFormatError("bytes are not a point on the secp256k1 curve") from None
        self._raw = self._key.public_bytes(Encoding.X962, PublicFormat.CompressedPoint)

    def raw(self) -> bytes:
        return self._raw

    def verify(self, data: bytes, sig: bytes) -> bool:
        return self.verify_digest_der(hashlib.sha256(data).digest(), sig)

    def verify_digest_der(self, digest: bytes, sig: bytes) -> bool:
        """Check a DER ECDSA signature over a 32-byte digest (high-S accepted, as Go does)."""
        from cryptography.hazmat.primitives.asymmetric.utils import Prehashed

        try:
            self._key.verify(sig, digest, ec.ECDSA(Prehashed(hashes.SHA256())))
        except (InvalidSignature, ValueError):
            return False
        return True


class Secp256k1PrivKey(PrivKey):
    type = KeyType.Secp256k1

    def __init__(self, scalar: bytes) -> None:
        if len(scalar) != 32:
            raise KeyFormatError(f"a secp256k1 private key is 32 bytes, got {len(scalar)}")
        value = int.from_bytes(scalar, "big")
        if not 0 < value < SECP256K1_ORDER:
            raise KeyFormatError("secp256k1 private key is out of range")
        self._scalar = bytes(scalar)
        self._key = ec.derive_private_key(value, ec.SECP256K1())
        self._pub = Secp256k1PubKey(
            self._key.public_key().public_bytes(Encoding.X962, PublicFormat.CompressedPoint)
        )

    @classmethod
    def generate(cls) -> Secp256k1PrivKey:
        key = ec.generate_private_key(ec.SECP256K1())
        return cls(key.private_numbers().private_value.to_bytes(32, "big"))

    def raw(self) -> bytes:
        return self._scalar

    def public_key(self) -> Secp256k1PubKey:
        return self._pub

    def sign(self, data: bytes) -> bytes:
        der = self._key.sign(data, ec.ECDSA(hashes.SHA256(), deterministic_signing=True))
        r, s = decode_dss_signature(der)
        if s > SECP256K1_ORDER // 2:
            s = SECP256K1_ORDER - s
        return encode_dss_signature(r, s)


def generate_key_pair(key_type: KeyType = KeyType.Ed25519) -> PrivKey:
    """``crypto.GenerateKeyPair``: Ed25519 unless asked otherwise."""
    if key_type == KeyType.Ed25519:
        return Ed25519PrivKey.generate()
    if key_type == KeyType.Secp256k1:
        return Secp256k1PrivKey.generate()
    raise KeyFormatError(f"cannot generate {key_type.name} keys: only Ed25519 and Secp256k1")


# --- libp2p protobuf ``PublicKey``/``PrivateKey {Type=1; Data=2}`` --------------------------


def _marshal(key_type: KeyType, data: bytes) -> bytes:
    return b"\x08" + encode_uvarint(int(key_type)) + b"\x12" + encode_uvarint(len(data)) + data


def _unmarshal(blob: bytes, what: str) -> tuple[KeyType, bytes]:
    key_type: int | None = None
    data: bytes | None = None
    i = 0
    try:
        while i < len(blob):
            tag, i = decode_uvarint(blob, i)
            if tag == 0x08:
                key_type, i = decode_uvarint(blob, i)
            elif tag == 0x12:
                length, i = decode_uvarint(blob, i)
                if i + length > len(blob):
                    raise KeyFormatError(f"{what} protobuf: Data is truncated")
                data = blob[i : i + length]
                i += length
            else:
                raise KeyFormatError(f"{what} protobuf: unexpected field tag 0x{tag:02x}")
    except VarintError as exc:
        raise KeyFormatError(f"{what} protobuf: {exc}") from None
    if key_type is None or data is None:
        raise KeyFormatError(f"{what} protobuf: missing {'Type' if key_type is None else 'Data'}")
    try:
        return KeyType(key_type), data
    except ValueError:
        raise KeyFormatError(f"{what} protobuf: unknown key type {key_type}") from None


def marshal_public_key(key: PubKey) -> bytes:
    return _marshal(key.type, key.raw())


def marshal_private_key(key: PrivKey) -> bytes:
    return _marshal(key.type, key.raw())


def public_key_from_raw(key_type: KeyType, raw: bytes) -> PubKey:
    if key_type == KeyType.Ed25519:
        return Ed25519PubKey(raw)
    if key_type == KeyType.Secp256k1:
        return Secp256k1PubKey(raw)
    raise KeyFormatError(f"{key_type.name} keys are not allowed (only Ed25519 and Secp256k1)")


def unmarshal_public_key(blob: bytes) -> PubKey:
    key_type, data = _unmarshal(blob, "public key")
    return public_key_from_raw(key_type, data)


def unmarshal_private_key(blob: bytes) -> PrivKey:
    key_type, data = _unmarshal(blob, "private key")
    if key_type == KeyType.Ed25519:
        if len(data) == 96:  # legacy form: seed || pub || pub
            if data[64:] != data[32:64]:
                raise KeyFormatError("legacy Ed25519 private key: the two public keys differ")
            data = data[:64]
        if len(data) != 64:
            raise KeyFormatError(
                f"an Ed25519 private key is 64 bytes (seed || pub), got {len(data)}"
            )
        key = Ed25519PrivKey(data[:32])
        if key.public_key().raw() != data[32:]:
            raise KeyFormatError("Ed25519 private key: the public half does not match the seed")
        return key
    if key_type == KeyType.Secp256k1:
        return Secp256k1PrivKey(data)
    raise KeyFormatError(f"{key_type.name} private keys are not supported")
