"""The actor ``ID``: the libp2p-marshalled public key, written ``{"pub": base32}``.

Mirrors ``lib/crypto/id.go``: standard base32 with padding, an empty ID is ``{"pub":""}``.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import functools
from typing import Any

from ..errors import DmsgwError
from ..gojson import (
    STRING,
    DecodeContext,
    GoDecodeError,
    GoStruct,
    GoType,
    NotPlainError,
    StructOf,
    go_field,
)
from .crypto import PubKey, marshal_public_key, unmarshal_public_key


class IDError(DmsgwError):
    """A string that is not an actor ID."""


@dataclasses.dataclass(frozen=True, slots=True)
class ID:
    """An actor's identity: the public key protobuf bytes (empty for a broadcast target)."""

    public_key: bytes = b""

    @classmethod
    def from_public_key(cls, key: PubKey) -> ID:
        return cls(marshal_public_key(key))

    @classmethod
    def from_string(cls, text: str) -> ID:
        return _id_from_string(text)

    def __str__(self) -> str:
        return _base32(self.public_key)

    def __repr__(self) -> str:
        return f"ID({str(self)!r})"

    def empty(self) -> bool:
        return not self.public_key

    def public_key_obj(self) -> PubKey:
        """``crypto.PublicKeyFromID``: raises when the bytes are not a key protobuf."""
        return _public_key(self.public_key)


# IDs recur in every message: encode and decode each one once.
@functools.lru_cache(maxsize=4096)
def _base32(key: bytes) -> str:
    return base64.b32encode(key).decode("ascii")


@functools.lru_cache(maxsize=4096)
def _public_key(blob: bytes) -> PubKey:
    """Keys are immutable, and parsing one builds an OpenSSL key object: once per sender."""
    return unmarshal_public_key(blob)


@functools.lru_cache(maxsize=4096)
def _id_from_string(text: str) -> ID:
    try:
        return ID(base64.b32decode(text.encode("ascii"))) if text else ID()
    except (binascii.Error, UnicodeEncodeError, ValueError):
        raise IDError(f"actor ID {text!r} is not padded standard base32") from None


@dataclasses.dataclass(frozen=True, slots=True)
class _IDJSONView(GoStruct):
    GO_NAME = "IDJSONView"
    pub: str = go_field("pub", STRING, default="")


_ID_VIEW = StructOf(_IDJSONView)


class _IDType(GoType):
    """``ID`` has its own ``MarshalJSON``/``UnmarshalJSON`` in Go: ``{"pub": base32}``."""

    go_name = "crypto.ID"

    def encode(self, value: Any, out: list[str]) -> None:
        out.append('{"pub":"' + str(value) + '"}')

    def decode(self, raw: Any, current: Any, ctx: DecodeContext) -> Any:
        view = _ID_VIEW.decode(raw, _IDJSONView(), ctx)
        try:
            return ID.from_string(view.pub)
        except IDError as exc:
            raise GoDecodeError(f"unmarshaling ID: {exc}") from None

    def fast(self, raw: Any) -> Any:
        try:
            return ID.from_string(_ID_VIEW.fast(raw).pub)
        except IDError:
            raise NotPlainError from None

    def zero(self) -> Any:
        return ID()


ID_TYPE: GoType = _IDType()
