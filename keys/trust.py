"""The DMS trust layer (``lib/did`` anchors and providers): who may sign for a DID.

An :class:`Anchor` checks signatures made for a DID, a :class:`Provider` makes them. The DMS
resolves anchors only for ``did:key`` (the key is inside the DID), so resolution is pure and its
result can be cached for the life of the process, which keeps token chain verification cheap.
"""

from __future__ import annotations

from functools import lru_cache

from ..errors import DmsgwError
from .crypto import PrivKey, PubKey
from .did import DID, DIDError
from .id import ID

__all__ = [
    "Anchor",
    "InvalidSignatureError",
    "Provider",
    "TrustError",
    "anchor_from_public_key",
    "did_from_id",
    "get_anchor",
    "provider_from_private_key",
]


class TrustError(DmsgwError):
    """A DID that cannot be turned into an anchor (so nothing it signed can be checked)."""


class InvalidSignatureError(TrustError):
    """A signature that the DID's key did not make."""

    def __init__(self, did: DID) -> None:
        # The first words are the DMS's own error text, so logs compare with the DMS's.
        super().__init__(f"signature verification failed (not signed by {did.uri})")


class Anchor:
    """A DID with the public key that verifies its signatures (``did.PublicKeyAnchor``)."""

    __slots__ = ("did", "public_key")

    def __init__(self, did: DID, public_key: PubKey) -> None:
        self.did = did
        self.public_key = public_key

    def verify(self, data: bytes, sig: bytes) -> None:
        """Raise :class:`InvalidSignatureError` unless ``sig`` is the DID's signature."""
        if not self.public_key.verify(data, sig):
            raise InvalidSignatureError(self.did)

    def __repr__(self) -> str:
        return f"Anchor({self.did.uri!r})"


class Provider:
    """A DID together with the private key that signs for it (``did.PrivateKeyProvider``)."""

    __slots__ = ("did", "private_key")

    def __init__(self, did: DID, private_key: PrivKey) -> None:
        self.did = did
        self.private_key = private_key

    def sign(self, data: bytes) -> bytes:
        return self.private_key.sign(data)

    def anchor(self) -> Anchor:
        return Anchor(self.did, self.private_key.public_key())

    def __repr__(self) -> str:
        return f"Provider({self.did.uri!r})"


def provider_from_private_key(key: PrivKey) -> Provider:
    """The provider of the ``did:key`` of ``key``."""
    return Provider(DID.from_public_key(key.public_key()), key)


def anchor_from_public_key(key: PubKey) -> Anchor:
    return Anchor(DID.from_public_key(key), key)


@lru_cache(maxsize=4096)
def get_anchor(did: DID) -> Anchor:
    """``TrustContext.GetAnchor``: a ``did:key``'s anchor (cached: it never changes)."""
    if did.method() != "key":
        raise TrustError(
            f"cannot get an anchor for {did.uri!r}: no anchor method for DID method "
            f"{did.method()!r} (only did:key is resolvable)"
        )
    try:
        return Anchor(did, did.public_key())
    except DIDError as exc:
        raise TrustError(f"cannot get an anchor for {did.uri!r}: {exc}") from None


@lru_cache(maxsize=4096)
def did_from_id(actor_id: ID) -> DID:
    """``did.FromID``: the ``did:key`` of an actor ID (cached: checked on every message)."""
    try:
        return DID.from_public_key(actor_id.public_key_obj())
    except DmsgwError as exc:
        raise TrustError(f"actor ID {actor_id} has no DID: {exc}") from None
