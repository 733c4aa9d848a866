"""The Go types of struct fields: :class:`GoType` and the scalar types (``string``, ``bool``,
the integers, the floats, ``[]byte``).

Every type decodes twice over. :meth:`GoType.decode` is the reference: Go's rules for decoding
into an existing value, with the path for error messages. :meth:`GoType.fast` decodes into a
fresh zero value without tracking a path, for the input Go itself emits, and refuses anything
else with :class:`NotPlainError`, on which the caller falls back to :meth:`GoType.decode`.
"""

from __future__ import annotations

import binascii
import math
from typing import Any

from .base64 import CorruptInputError, go_base64_decode
from .codec_errors import DecodeContext, GoDecodeError, GoEncodeError, NotPlainError
from .floats import (
    format_float32,
    format_float64,
    go_unsupported_float,
    number_as_float64,
    parse_float32,
)
from .parse import GoNumber, is_array, json_kind
from .strings import encode_value_string

__all__ = ["BOOL", "BYTES", "FLOAT32", "FLOAT64", "INT64", "STRING", "UINT64", "GoType"]

_UINT64_MAX = (1 << 64) - 1
_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1

# The context given to decode() by the default fast(): its errors only say "not plain".
_NO_CONTEXT = DecodeContext("")


class GoType:
    """One Go type: how a Python value of it is written and read."""

    go_name: str = "?"

    def encode(self, value: Any, out: list[str]) -> None:
        raise NotImplementedError

    def is_empty(self, value: Any) -> bool:
        """Go's ``omitempty`` test (never true for structs)."""
        return False

    def decode(self, raw: Any, current: Any, ctx: DecodeContext) -> Any:
        """Go's decoding of ``raw`` (from :func:`~.parse.parse`) into ``current``."""
        raise NotImplementedError

    def fast(self, raw: Any) -> Any:
        """Exactly ``decode(raw, self.zero(), ctx)``, or :class:`NotPlainError`.

        This default is right for any type; the codec's own types override it to skip the
        error context and the merging into a current value, which a fresh value never needs.
        """
        try:
            return self.decode(raw, self.zero(), _NO_CONTEXT)
        except GoDecodeError:
            raise NotPlainError from None

    def zero(self) -> Any:
        return None


class _Scalar(GoType):
    """A type whose value replaces the current one (``null`` keeps it): decoding is
    :meth:`fast` on anything but ``null``, with its refusals reported as Go's type errors."""

    def decode(self, raw: Any, current: Any, ctx: DecodeContext) -> Any:
        if raw is None:
            return current
        try:
            return self.fast(raw)
        except NotPlainError:
            raise ctx.type_error(json_kind(raw), self.go_name) from None


class _String(_Scalar):
    go_name = "string"

    def encode(self, value: Any, out: list[str]) -> None:
        if not isinstance(value, str):
            raise GoEncodeError(f"expected a string, got {type(value).__name__}")
        out.append(encode_value_string(value))

    def is_empty(self, value: Any) -> bool:
        return bool(value == "")

    def fast(self, raw: Any) -> Any:
        if isinstance(raw, str) and not isinstance(raw, GoNumber):
            return raw
        if raw is None:
            return ""
        raise NotPlainError

    def zero(self) -> Any:
        return ""


class _Bool(_Scalar):
    go_name = "bool"

    def encode(self, value: Any, out: list[str]) -> None:
        out.append("true" if value else "false")

    def is_empty(self, value: Any) -> bool:
        return not value

    def fast(self, raw: Any) -> Any:
        if isinstance(raw, bool):
            return raw
        if raw is None:
            return False
        raise NotPlainError

    def zero(self) -> Any:
        return False


class _Integer(_Scalar):
    def __init__(self, go_name: str, low: int, high: int) -> None:
        self.go_name = go_name
        self.low = low
        self.high = high

    def encode(self, value: Any, out: list[str]) -> None:
        if isinstance(value, bool) or not isinstance(value, int):
            raise GoEncodeError(f"expected an integer for {self.go_name}, got {value!r}")
        if not self.low <= value <= self.high:
            raise GoEncodeError(f"{value} is out of range for {self.go_name}")
        out.append(str(value))

    def is_empty(self, value: Any) -> bool:
        return bool(value == 0)

    def fast(self, raw: Any) -> Any:
        if isinstance(raw, int) and not isinstance(raw, bool) and self.low <= raw <= self.high:
            return raw
        if raw is None:
            return 0
        if raw == "-0" and isinstance(raw, GoNumber) and self.low < 0:
            return 0  # strconv.ParseInt accepts "-0"; ParseUint does not
        raise NotPlainError

    def zero(self) -> Any:
        return 0


def _encode_number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise GoEncodeError(f"expected a number, got {value!r}")
    try:
        return float(value)
    except OverflowError:
        raise go_unsupported_float(math.copysign(math.inf, value)) from None


class _Float64(_Scalar):
    go_name = "float64"

    def encode(self, value: Any, out: list[str]) -> None:
        out.append(format_float64(_encode_number(value)))

    def is_empty(self, value: Any) -> bool:
        return bool(value == 0)

    def fast(self, raw: Any) -> Any:
        if isinstance(raw, GoNumber) or (isinstance(raw, int) and not isinstance(raw, bool)):
            f = number_as_float64(raw)
            if f is not None:  # None: out of the float64 range, strconv.ErrRange
                return f
        elif raw is None:
            return 0.0
        raise NotPlainError

    def zero(self) -> Any:
        return 0.0


class _Float32(_Scalar):
    """Go ``float32``: values are rounded to float32 and written with float32-shortest digits."""

    go_name = "float32"

    def encode(self, value: Any, out: list[str]) -> None:
        out.append(format_float32(_encode_number(value)))

    def is_empty(self, value: Any) -> bool:
        return bool(value == 0)

    def fast(self, raw: Any) -> Any:
        if isinstance(raw, GoNumber) or (isinstance(raw, int) and not isinstance(raw, bool)):
            f = parse_float32(str(raw))
            if not math.isinf(f):  # Inf: out of the float32 range, strconv.ErrRange
                return f
        elif raw is None:
            return 0.0
        raise NotPlainError

    def zero(self) -> Any:
        return 0.0


class _Bytes(GoType):
    go_name = "[]uint8"

    def encode(self, value: Any, out: list[str]) -> None:
        if value is None:
            out.append("null")
            return
        if not isinstance(value, (bytes, bytearray, memoryview)):
            raise GoEncodeError(f"expected bytes, got {type(value).__name__}")
        out.append('"' + binascii.b2a_base64(value, newline=False).decode("ascii") + '"')

    def is_empty(self, value: Any) -> bool:
        return not value

    def decode(self, raw: Any, current: Any, ctx: DecodeContext) -> Any:
        if raw is None:
            return None
        if is_array(raw):
            # A JSON array decodes element-wise into the []byte, as into any slice (uint8s).
            old = bytes(current) if current is not None else b""
            return bytes(
                _UINT8.decode(item, old[i] if i < len(old) else 0, ctx)
                for i, item in enumerate(raw)
            )
        if not isinstance(raw, str) or isinstance(raw, GoNumber):
            raise ctx.type_error(json_kind(raw), self.go_name)
        try:
            return go_base64_decode(raw)
        except CorruptInputError as exc:
            # encoding/json reports base64.CorruptInputError as it is.
            raise GoDecodeError(f"illegal base64 data at input byte {exc.offset}") from None

    def fast(self, raw: Any) -> Any:
        if isinstance(raw, str) and not isinstance(raw, GoNumber):
            try:
                return go_base64_decode(raw)
            except CorruptInputError:
                raise NotPlainError from None
        if raw is None:
            return None
        if is_array(raw):
            return bytes([_UINT8.fast(item) for item in raw])
        raise NotPlainError


_UINT8 = _Integer("uint8", 0, 255)

STRING: GoType = _String()
BOOL: GoType = _Bool()
UINT64: GoType = _Integer("uint64", 0, _UINT64_MAX)
INT64: GoType = _Integer("int", _INT64_MIN, _INT64_MAX)
FLOAT64: GoType = _Float64()
FLOAT32: GoType = _Float32()
BYTES: GoType = _Bytes()
