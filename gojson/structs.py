"""Go structs: :class:`GoStruct` dataclasses declared with :func:`go_field`, and
:func:`marshal`/:func:`unmarshal`.

A struct decodes through :func:`fast_struct` (exact key names, each key once, every field's
:meth:`~.types.GoType.fast`) and, on anything else, through :func:`decode_struct`, the
reference: Go's case-insensitive key matching and its merging of repeated keys into the value
decoded so far. Both read the same :func:`~.parse.parse` output: what Go itself emits is
parsed and decoded once, and only input the fast decoder declines is decoded twice.
"""

from __future__ import annotations

import functools
from typing import Any, ClassVar, TypeVar

from .codec_errors import DecodeContext, GoDecodeError, GoEncodeError, NotPlainError
from .fields import Encoder, FieldSpec, StructInfo, struct_info
from .fold import fold
from .parse import Pairs, json_kind, parse
from .types import GoType

__all__ = [
    "GoStruct",
    "StructOf",
    "decode_struct",
    "encode_struct",
    "fast_struct",
    "marshal",
    "marshal_without",
    "unmarshal",
    "zero_struct",
]

S = TypeVar("S", bound="GoStruct")


class GoStruct:
    """Base of dataclasses mirroring a Go struct; field order is the Go declaration order."""

    GO_NAME: ClassVar[str] = ""
    GO_CACHED: ClassVar[bool] = False
    """Set on small immutable structs that recur in message after message (handles, DIDs):
    their encoding is remembered, keyed by value, and so is their decoding from plain JSON
    (strings only), keyed by that JSON."""
    _go_info: ClassVar[StructInfo | None] = None

    @classmethod
    def go_specs(cls) -> tuple[FieldSpec, ...]:
        return struct_info(cls).specs

    @classmethod
    def go_type_name(cls) -> str:
        return cls.GO_NAME or cls.__name__

    def to_json(self) -> bytes:
        """``json.Marshal(self)``."""
        return marshal(self)

    @classmethod
    def from_json(cls: type[S], data: bytes | str) -> S:
        """``json.Unmarshal(data, &v)`` into a zero ``cls``."""
        return unmarshal(cls, data)


class StructOf(GoType):
    """A nested struct value (never omitted, even under ``omitempty``)."""

    def __init__(self, cls: type[GoStruct]) -> None:
        self.cls = cls
        self.go_name = cls.go_type_name()

    def encode(self, value: Any, out: list[str]) -> None:
        if not isinstance(value, self.cls):
            raise GoEncodeError(f"expected {self.cls.__name__}, got {type(value).__name__}")
        encode_struct(value, out)

    def decode(self, raw: Any, current: Any, ctx: DecodeContext) -> Any:
        if raw is None:
            return current
        if not isinstance(raw, tuple):
            raise ctx.type_error(json_kind(raw), self.go_name)
        return decode_struct(self.cls, raw, current, ctx)

    def fast(self, raw: Any) -> Any:
        if type(raw) is tuple:
            return fast_struct(self.cls, raw)
        if raw is None:
            return zero_struct(self.cls)
        raise NotPlainError

    def zero(self) -> Any:
        return zero_struct(self.cls)


# --- encoding ------------------------------------------------------------------------------


def encode_struct(value: GoStruct, out: list[str]) -> None:
    if type(value).GO_CACHED:
        out.append(_remembered_encoding(value))
    else:
        _encode_fields(value, out, struct_info(type(value)).encoders)


def _remembered_encoding(value: GoStruct) -> str:
    """A ``GO_CACHED`` struct's encoding: by identity first (the same handle or DID object
    recurs, and hashing a dataclass by value runs Python code), else by value."""
    known = _ENCODED_BY_ID.get(id(value))
    if known is not None and known[0] is value:
        return known[1]
    text = _cached_encoding(value)
    if len(_ENCODED_BY_ID) >= _ENCODED_BY_ID_MAX:
        _ENCODED_BY_ID.clear()
    # The entry holds the struct, so its id cannot be reused by another object meanwhile.
    _ENCODED_BY_ID[id(value)] = (value, text)
    return text


_ENCODED_BY_ID: dict[int, tuple[GoStruct, str]] = {}
_ENCODED_BY_ID_MAX = 4096


@functools.lru_cache(maxsize=4096)
def _cached_encoding(value: GoStruct) -> str:
    out: list[str] = []
    _encode_fields(value, out, struct_info(type(value)).encoders)
    return "".join(out)


def _encode_fields(value: GoStruct, out: list[str], encoders: tuple[Encoder, ...]) -> None:
    written = False
    for get, first_key, key, encode, is_empty in encoders:
        item = get(value)
        if is_empty is not None and is_empty(item):
            continue
        out.append(key if written else first_key)
        written = True
        encode(item, out)
    out.append("}" if written else "{}")


def marshal(value: GoStruct) -> bytes:
    """``json.Marshal`` of a Go struct value."""
    out: list[str] = []
    encode_struct(value, out)
    return _utf8(out)


def marshal_without(value: GoStruct, attr: str) -> bytes:
    """``json.Marshal`` of ``value`` with its field ``attr`` at the zero value (so left out
    under ``omitempty``): what a signer signs is its struct without the signature, and this
    writes it without building that copy of the struct."""
    out: list[str] = []
    _encode_fields(value, out, struct_info(type(value)).encoders_without(attr))
    return _utf8(out)


def _utf8(out: list[str]) -> bytes:
    """The written text as bytes. Strings are written valid (Go writes U+FFFD for an invalid
    code point), so only a ``json.RawMessage`` holds escaped bytes, which go out as they came
    (Go copies its bytes unchecked)."""
    return "".join(out).encode("utf-8", errors="surrogateescape")


# --- decoding ------------------------------------------------------------------------------


def zero_struct(cls: type[S]) -> S:
    """The zero value of a struct: every field at its Go type's zero."""
    return cls(**{attr: zero() for attr, zero in struct_info(cls).fills})


def fast_struct(cls: type[S], pairs: Pairs, *, remember: bool = True) -> S:
    """The struct decoded from ``pairs`` into its zero value, or :class:`NotPlainError` when
    a key is not a field's exact name but folds to one, or names a field twice.

    A ``GO_CACHED`` struct made of strings (a DID, a handle) is decoded once per distinct JSON
    (unless not to ``remember`` it).
    """
    if remember and cls.GO_CACHED and _only_strings(pairs):
        return _remembered(cls, pairs)
    info = struct_info(cls)
    field_of = info.fast_fields.get
    values: dict[str, Any] = {}
    for key, raw in pairs:
        field = field_of(key)
        if field is None:
            if fold(key) in info.folded:
                raise NotPlainError  # matched case-insensitively, as only Go's rules say how
            continue  # unknown fields are ignored, as by Go
        attr, fast = field
        if attr in values:
            raise NotPlainError  # Go decodes a repeated key into the value decoded so far
        values[attr] = fast(raw)
    for attr, zero in info.fills:
        if attr not in values:
            values[attr] = zero()
    return cls(**values)


# Decoded GO_CACHED structs by class and raw JSON object (immutable structs can be shared).
_DECODED: dict[tuple[type[GoStruct], Pairs], Any] = {}
_DECODED_MAX = 4096


def _remembered(cls: type[S], pairs: Pairs) -> S:
    found: S | None = _DECODED.get((cls, pairs))
    if found is None:
        found = fast_struct(cls, pairs, remember=False)
        if len(_DECODED) >= _DECODED_MAX:
            _DECODED.clear()
        _DECODED[cls, pairs] = found
    return found


def _only_strings(pairs: Pairs) -> bool:
    """Whether ``pairs`` hold only strings and objects of strings, so that they equal other
    pairs exactly when the JSON is the same (``True == 1`` and ``GoNumber("1") == "1"``, but
    they decode differently)."""
    for _, raw in pairs:
        if type(raw) is not str and not (type(raw) is tuple and _only_strings(raw)):
            return False
    return True


def decode_struct(cls: type[S], pairs: Pairs, current: S | None, ctx: DecodeContext) -> S:
    """Go's decoding of an object into the struct ``current`` (``None``: a zero struct)."""
    info = struct_info(cls)
    lookup, folded = info.lookup, info.folded
    values: dict[str, Any] = {}
    if current is not None:
        values = {s.attr: getattr(current, s.attr) for s in info.specs}
    for key, raw in pairs:
        # An exact name match first, else the first field whose name folds equal (Go >= 1.21
        # fields.byFoldedName; older Go scans with bytes.EqualFold, same result).
        spec = lookup.get(key) or folded.get(fold(key))
        if spec is None:
            continue  # unknown fields are ignored, as by Go
        old = values[spec.attr] if spec.attr in values else spec.type.zero()
        values[spec.attr] = spec.type.decode(raw, old, ctx.child(spec.json))
    for attr, zero in info.fills:
        if attr not in values:
            values[attr] = zero()
    return cls(**values)


def unmarshal(cls: type[S], data: bytes | str) -> S:
    """``json.Unmarshal`` into a zero value of ``cls``; raises :class:`GoDecodeError`."""
    raw = parse(data)
    if isinstance(raw, tuple):
        try:
            return fast_struct(cls, raw)
        except NotPlainError:
            return decode_struct(cls, raw, None, DecodeContext(cls.go_type_name()))
    if raw is None:
        return zero_struct(cls)
    raise GoDecodeError(
        f"json: cannot unmarshal {json_kind(raw)} into Go value of type {cls.go_type_name()}"
    )
