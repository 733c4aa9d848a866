"""The DMS's Eth key type (``lib/crypto/eth.go``): secp256k1 keys held in Ethereum wallets.

NuNet's network identity (``did:key:zzCHUybNYmK8QsttZwXqUX8aDLoBGHnMCakDX2RpsGwmXmYHEW``) is such
a key on a Ledger, so tokens it issues must be checkable here. The DMS only *verifies* Eth
signatures (signing happens in the wallet, through ``personal_sign``), hence there is no private
key type: the key is public-only, as in Go.

Wire rules mirrored from Go: the raw form is the 33-byte compressed point (``Raw`` re-serialises
compressed whatever was parsed); a signature is DER ECDSA over
``keccak256("\\x19Ethereum Signed Message:\\n" + decimal(len(data)) + data)``.
"""

from __future__ import annotations

from .crypto import KeyFormatError, KeyType, PubKey, Secp256k1PubKey
from .keccak import keccak256

__all__ = ["ETH_SIGN_MAGIC", "EthPubKey", "eth_message_hash"]

ETH_SIGN_MAGIC = b"\x19Ethereum Signed Message:\n"


def eth_message_hash(data: bytes) -> bytes:
    """The digest an Ethereum wallet signs for ``personal_sign(data)`` (EIP-191 version 0x45)."""
    return keccak256(ETH_SIGN_MAGIC + str(len(data)).encode("ascii") + data)


class EthPubKey(PubKey):
    """``crypto.EthPublicKey``: key type 127, did:key codec 0xef01."""

    type = KeyType.Eth

    def __init__(self, raw: bytes) -> None:
        # Same point parsing as a libp2p secp256k1 key; kept as a member, not a base class,
        # so an Eth key is never mistaken for a libp2p Secp256k1 key (different hash, type).
        try:
            self._point = Secp256k1PubKey(raw)
        except KeyFormatError as exc:
            raise KeyFormatError(f"Eth public key: {exc}") from None

    def raw(self) -> bytes:
        return self._point.raw()

    def verify(self, data: bytes, sig: bytes) -> bool:
        return self._point.verify_digest_der(eth_message_hash(data), sig)
