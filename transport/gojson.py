"""Go ``encoding/json`` compatible encoding and decoding of Go structs.

The DMS signs ``json.Marshal`` output of its Go structs and a receiver verifies over its own
re-marshalling of what it decoded, so the bytes we sign must be exactly what Go would emit and
what we accept must be decoded exactly as Go decodes it. Python's :mod:`json` differs from Go
in field order, ``omitempty``, ``[]byte``, HTML escaping, float formatting and decoding rules,
hence this module.

A Go struct is mirrored by a frozen dataclass whose fields are declared with :func:`go_field`;
the type of each field is one of the :class:`GoType` singletons/constructors below. Nil and
empty are distinct, as in Go: ``None`` is the nil slice/map/pointer/``[]byte``.
"""

from __future__ import annotations

import base64
import binascii
import codecs
import dataclasses
import functools
import json
import math
import re
import struct
from collections.abc import Callable, Mapping, Sequence
from fractions import Fraction
from typing import Any, ClassVar, TypeVar

from dmsgw.errors import DmsgwError

__all__ = [
    "ANY",
    "BOOL",
    "BYTES",
    "FLOAT32",
    "FLOAT64",
    "INT64",
    "STRING",
    "UINT64",
    "GoDecodeError",
    "GoEncodeError",
    "GoStruct",
    "DecodeContext",
    "GoType",
    "MapOf",
    "Ptr",
    "SliceOf",
    "StructOf",
    "decode_any",
    "encode_any",
    "encode_string",
    "format_float32",
    "format_float64",
    "go_field",
    "marshal",
    "unmarshal",
]

_UINT64_MAX = (1 << 64) - 1
_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1


class GoEncodeError(DmsgwError):
    """A value cannot be represented in the Go type it is declared as."""


class GoDecodeError(DmsgwError):
    """JSON that Go's ``json.Unmarshal`` would refuse; the message mirrors Go's."""


# --- strings -------------------------------------------------------------------------------

_HTML_UNSAFE = re.compile("[<>&\u2028\u2029]")
_HTML_ESCAPES = {
    "<": "\\u003c",
    ">": "\\u003e",
    "&": "\\u0026",
    "\u2028": "\\u2028",
    "\u2029": "\\u2029",
}
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
_dumps_str = json.JSONEncoder(ensure_ascii=False).encode


def encode_string(s: str) -> str:
    """Quote ``s`` as Go does (HTML-safe; ``\\b``/``\\f`` short forms as Go >= 1.22)."""
    quoted = _dumps_str(s)
    if _HTML_UNSAFE.search(quoted):
        quoted = _HTML_UNSAFE.sub(lambda m: _HTML_ESCAPES[m.group()], quoted)
    if _LONE_SURROGATE.search(quoted):
        # Go strings are bytes; an invalid code point is written as U+FFFD.
        quoted = _LONE_SURROGATE.sub("\\\\ufffd", quoted)
    return quoted


# --- numbers -------------------------------------------------------------------------------

_F32 = struct.Struct("<f")
_U32 = struct.Struct("<I")
_F64 = struct.Struct("<d")
_U64 = struct.Struct("<Q")
_F32_MAX = float.fromhex("0x1.fffffep+127")
# Halfway between the largest float32 and 2**128: from here on a value rounds to infinity.
_F32_OVERFLOW_MIDPOINT = 2.0**128 - 2.0**103


def _go_unsupported_float(f: float) -> GoEncodeError:
    """Go's ``UnsupportedValueError`` (``strconv.FormatFloat(f, 'g', -1, 64)`` names the value)."""
    name = "NaN" if math.isnan(f) else ("+Inf" if f > 0 else "-Inf")
    return GoEncodeError(f"json: unsupported value: {name}")


def _to_float32(f: float) -> float:
    """``float32(f)``: the nearest float32 (ties to even); +-Inf past the float32 range."""
    try:
        return float(_F32.unpack(_F32.pack(f))[0])
    except OverflowError:
        return math.copysign(math.inf, f)


def _float32_step(f: float, up: bool) -> float:
    """The float32 adjacent to the finite float32 ``f``, above it when ``up``."""
    if f == 0:
        tiny = 2.0**-149
        return tiny if up else -tiny
    (bits,) = _U32.unpack(_F32.pack(f))
    bits += 1 if (f > 0) == up else -1
    return float(_F32.unpack(_U32.pack(bits))[0])


def _parse_float32(text: str) -> float:
    """``strconv.ParseFloat(text, 32)``: the float32 nearest the decimal ``text`` (ties to even).

    Rounding through a float64 first is exact except when the float64 lands exactly on the
    midpoint of two float32 values; that case is settled with exact rational arithmetic.
    Returns +-Inf when the value is out of the float32 range (Go: ``ErrRange``).
    """
    d = float(text)
    if math.isinf(d) or d == 0:
        return d
    a = abs(d)
    c = _to_float32(a)
    if c == a:
        return math.copysign(c, d)
    if math.isinf(c):
        low, high = _F32_MAX, math.inf
    elif c < a:
        low, high = c, _float32_step(c, up=True)
    else:
        low, high = _float32_step(c, up=False), c
    mid = _F32_OVERFLOW_MIDPOINT if math.isinf(high) else (low + high) / 2
    if a != mid:
        return math.copysign(c, d)
    exact, half = abs(Fraction(text)), Fraction(mid)
    if exact != half:
        nearest = low if exact < half else high
    else:  # a true tie: to the even mantissa (the largest float32 is odd, so on to Inf)
        nearest = high if math.isinf(high) or _U32.unpack(_F32.pack(low))[0] % 2 else low
    return math.copysign(nearest, d)


def _shortest_decimal(f: float, bits: int) -> tuple[str, int]:
    """The shortest decimal reading back as the ``bits``-wide float ``f`` (Go's ``-1`` precision).

    Among the shortest candidates the one nearest ``f`` is taken (ties to an even last digit), as
    by Go's ``strconv`` (``roundShortest``/Ryu). Returns ``(digits, point)``: the value is
    ``0.digits * 10**point``. ``f`` must be finite, non-zero and exact in ``bits``.
    """
    if bits == 32:
        (raw,) = _U32.unpack(_F32.pack(abs(f)))
        mantbits, bias = 23, 127
    else:
        (raw,) = _U64.unpack(_F64.pack(abs(f)))
        mantbits, bias = 52, 1023
    biased = raw >> mantbits
    mant = raw & ((1 << mantbits) - 1)
    if biased == 0:
        exp2 = 1 - bias - mantbits
    else:
        mant |= 1 << mantbits
        exp2 = biased - bias - mantbits
    two = Fraction(2)
    x = mant * two**exp2
    half_up = two ** (exp2 - 1)
    # Below a power of two the next float down is half as far away.
    half_down = two ** (exp2 - 2) if mant == 1 << mantbits and biased > 1 else half_up
    low, high = x - half_down, x + half_up
    inclusive = mant % 2 == 0  # round-half-even reads the bounds back as x itself

    ten = Fraction(10)
    exp10 = math.floor(math.log10(abs(f)))
    while ten**exp10 > x:
        exp10 -= 1
    while ten ** (exp10 + 1) <= x:
        exp10 += 1
    for ndigits in range(1, 40):
        scale = ten ** (exp10 - ndigits + 1)
        t = math.floor(x / scale)
        down, up = t * scale, (t + 1) * scale
        ok_down = down > low or (inclusive and down == low)
        ok_up = up < high or (inclusive and up == high)
        if ok_down and ok_up:
            gap_down, gap_up = x - down, up - x
            n = t if gap_down < gap_up or (gap_down == gap_up and t % 2 == 0) else t + 1
        elif ok_down:
            n = t
        elif ok_up:
            n = t + 1
        else:
            continue
        text = str(n)
        return text.rstrip("0"), len(text) + exp10 - ndigits + 1
    raise AssertionError("unreachable: the exact decimal always reads back")  # pragma: no cover


def _repr_digits(f: float) -> tuple[str, int]:
    """``(digits, point)`` of Python's shortest repr (the same digits as Go's for float64)."""
    mantissa, _, exponent = repr(abs(f)).partition("e")
    whole, _, frac = mantissa.partition(".")
    all_digits = whole + frac
    stripped = all_digits.lstrip("0")
    point = len(whole) + (int(exponent) if exponent else 0) - (len(all_digits) - len(stripped))
    return stripped.rstrip("0") or "0", point


def _format_json_float(negative: bool, digits: str, point: int, exponent_form: bool) -> str:
    """``strconv.AppendFloat(.., 'e' or 'f', -1, ..)`` plus ``encoding/json``'s exponent cleanup."""
    sign = "-" if negative else ""
    if exponent_form:
        lead = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        e = point - 1
        # %e writes at least two exponent digits ("1e-07", "1e+21"); encoding/json then
        # rewrites "e-0X" as "e-X" (the floatEncoder's "clean up e-09 to e-9").
        exp = f"{abs(e):02d}"
        if e < 0 and len(exp) == 2 and exp[0] == "0":
            exp = exp[1]
        return f"{sign}{lead}e{'-' if e < 0 else '+'}{exp}"
    if point <= 0:
        return f"{sign}0.{'0' * -point}{digits}"
    if point >= len(digits):
        return f"{sign}{digits}{'0' * (point - len(digits))}"
    return f"{sign}{digits[:point]}.{digits[point:]}"


def format_float64(f: float) -> str:
    """A ``float64`` as ``encoding/json`` writes it (Go's ``floatEncoder(64)``).

    ``strconv.FormatFloat(f, 'f', -1, 64)`` for ``1e-6 <= |f| < 1e21`` (and zero, keeping the
    sign of ``-0``), else the ``'e'`` form with a two-digit exponent cleaned up from ``e-07`` to
    ``e-7``: ``1e+21``, ``1e-7``, ``1.5e+300``, ``5e-324``. NaN and +-Inf are
    :class:`GoEncodeError` (``json: unsupported value: NaN``), as in Go.
    """
    if math.isnan(f) or math.isinf(f):
        raise _go_unsupported_float(f)
    if f == 0:
        return "-0" if math.copysign(1.0, f) < 0 else "0"
    a = abs(f)
    digits, point = _repr_digits(f)
    return _format_json_float(f < 0, digits, point, a < 1e-6 or a >= 1e21)


_F32_E_LOW = _parse_float32("1e-6")  # float32(1e-6): Go compares in float32 for float32 values
_F32_E_HIGH = _parse_float32("1e21")


def format_float32(f: float) -> str:
    """A Go ``float32`` as ``encoding/json`` writes it (Go's ``floatEncoder(32)``).

    ``f`` is first rounded to float32, as storing it in a Go ``float32`` field would; the digits
    are then the shortest that read back as that float32 (``float32(0.1)`` -> ``0.1``, while
    :func:`format_float64` of the same value gives ``0.10000000149011612``).
    """
    if math.isnan(f) or math.isinf(f):
        raise _go_unsupported_float(f)
    v = _to_float32(f)
    if math.isinf(v):
        raise _go_unsupported_float(v)
    if v == 0:
        return "-0" if math.copysign(1.0, v) < 0 else "0"
    a = abs(v)
    digits, point = _shortest_decimal(v, 32)
    return _format_json_float(v < 0, digits, point, a < _F32_E_LOW or a >= _F32_E_HIGH)


# --- types ---------------------------------------------------------------------------------


class GoNumber(str):
    """A JSON number literal kept as text (Go's ``json.Number``).

    Used for literals with a fraction or exponent, and for the integer literals Python's ``int``
    cannot stand for exactly as Go reads them: ``-0`` (a float ``-0`` in Go) and integers too
    long for Python's default int-conversion limit.
    """


class DecodeContext:
    """Where in the value a decode error happened, for Go-shaped messages."""

    __slots__ = ("path", "root")

    def __init__(self, root: str, path: tuple[str, ...] = ()) -> None:
        self.root = root
        self.path = path

    def child(self, name: str) -> DecodeContext:
        return DecodeContext(self.root, (*self.path, name))

    def type_error(self, what: str, gotype: str) -> GoDecodeError:
        if self.path:
            where = f" into Go struct field {self.root}.{'.'.join(self.path)}"
        else:
            where = " into Go value"
        return GoDecodeError(f"json: cannot unmarshal {what}{where} of type {gotype}")


def _json_kind(raw: Any) -> str:
    if isinstance(raw, bool):
        return "bool"
    if isinstance(raw, (int, GoNumber)):
        return f"number {raw}"
    if isinstance(raw, str):
        return "string"
    if _is_array(raw):
        return "array"
    return "object"


def _is_array(raw: Any) -> bool:
    """A decoded JSON array (objects are decoded as :class:`_Pairs`, a list subclass)."""
    return isinstance(raw, list) and not isinstance(raw, _Pairs)


class GoType:
    """One Go type: how a Python value of it is written and read."""

    go_name: str = "?"

    def encode(self, value: Any, out: list[str]) -> None:
        raise NotImplementedError

    def is_empty(self, value: Any) -> bool:
        """Go's ``omitempty`` test (never true for structs)."""
        return False

    def decode(self, raw: Any, current: Any, ctx: DecodeContext) -> Any:
        raise NotImplementedError

    def zero(self) -> Any:
        return None


class _String(GoType):
    go_name = "string"

    def encode(self, value: Any, out: list[str]) -> None:
        if not isinstance(value, str):
            raise GoEncodeError(f"expected a string, got {type(value).__name__}")
        out.append(encode_string(value))

    def is_empty(self, value: Any) -> bool:
        return bool(value == "")

    def decode(self, raw: Any, current: Any, ctx: DecodeContext) -> Any:
        if raw is None:
            return current
        if isinstance(raw, str) and not isinstance(raw, GoNumber):
            return raw
        raise ctx.type_error(_json_kind(raw), self.go_name)

    def zero(self) -> Any:
        return ""


class _Bool(GoType):
    go_name = "bool"

    def encode(self, value: Any, out: list[str]) -> None:
        out.append("true" if value else "false")

    def is_empty(self, value: Any) -> bool:
        return not value

    def decode(self, raw: Any, current: Any, ctx: DecodeContext) -> Any:
        if raw is None:
            return current
        if isinstance(raw, bool):
            return raw
        raise ctx.type_error(_json_kind(raw), self.go_name)

    def zero(self) -> Any:
        return False


class _Integer(GoType):
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

    def decode(self, raw: Any, current: Any, ctx: DecodeContext) -> Any:
        if raw is None:
            return current
        if isinstance(raw, int) and not isinstance(raw, bool) and self.low <= raw <= self.high:
            return raw
        if raw == "-0" and isinstance(raw, GoNumber) and self.low < 0:
            return 0  # strconv.ParseInt accepts "-0"; ParseUint does not
        raise ctx.type_error(_json_kind(raw), self.go_name)

    def zero(self) -> Any:
        return 0


class _Float64(GoType):
    go_name = "float64"

    def encode(self, value: Any, out: list[str]) -> None:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise GoEncodeError(f"expected a number, got {value!r}")
        try:
            f = float(value)
        except OverflowError:
            raise _go_unsupported_float(math.copysign(math.inf, value)) from None
        out.append(format_float64(f))

    def is_empty(self, value: Any) -> bool:
        return bool(value == 0)

    def decode(self, raw: Any, current: Any, ctx: DecodeContext) -> Any:
        if raw is None:
            return current
        if isinstance(raw, GoNumber) or (isinstance(raw, int) and not isinstance(raw, bool)):
            f = _number_as_float64(raw)
            if f is None:  # out of the float64 range: strconv.ErrRange
                raise ctx.type_error(_json_kind(raw), self.go_name)
            return f
        raise ctx.type_error(_json_kind(raw), self.go_name)

    def zero(self) -> Any:
        return 0.0


def _number_as_float64(raw: int | str) -> float | None:
    """``strconv.ParseFloat(literal, 64)``, or ``None`` when it overflows (Go: ``ErrRange``)."""
    try:
        f = float(raw)  # int -> float and str -> float both round correctly, ties to even
    except OverflowError:
        return None
    return None if math.isinf(f) else f


class _Float32(GoType):
    """Go ``float32``: values are rounded to float32 and written with float32-shortest digits."""

    go_name = "float32"

    def encode(self, value: Any, out: list[str]) -> None:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise GoEncodeError(f"expected a number, got {value!r}")
        try:
            f = float(value)
        except OverflowError:
            raise _go_unsupported_float(math.copysign(math.inf, value)) from None
        out.append(format_float32(f))

    def is_empty(self, value: Any) -> bool:
        return bool(value == 0)

    def decode(self, raw: Any, current: Any, ctx: DecodeContext) -> Any:
        if raw is None:
            return current
        if isinstance(raw, GoNumber) or (isinstance(raw, int) and not isinstance(raw, bool)):
            f = _parse_float32(str(raw))
            if math.isinf(f):  # strconv.ErrRange
                raise ctx.type_error(_json_kind(raw), self.go_name)
            return f
        raise ctx.type_error(_json_kind(raw), self.go_name)

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
        out.append('"' + base64.b64encode(value).decode("ascii") + '"')

    def is_empty(self, value: Any) -> bool:
        return not value

    def decode(self, raw: Any, current: Any, ctx: DecodeContext) -> Any:
        if raw is None:
            return None
        if _is_array(raw):
            # A JSON array decodes element-wise into the []byte, as into any slice (uint8s).
            old = bytes(current) if current is not None else b""
            return bytes(
                _UINT8.decode(item, old[i] if i < len(old) else 0, ctx)
                for i, item in enumerate(raw)
            )
        if not isinstance(raw, str) or isinstance(raw, GoNumber):
            raise ctx.type_error(_json_kind(raw), self.go_name)
        try:
            return _go_base64_decode(raw.encode("utf-8"))
        except _CorruptInputError as exc:
            # encoding/json reports base64.CorruptInputError as it is.
            raise GoDecodeError(f"illegal base64 data at input byte {exc.offset}") from None


_UINT8 = _Integer("uint8", 0, 255)
_B64_DECODE_MAP = bytes(
    b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".find(bytes([c])) % 256
    for c in range(256)
)  # 0xff for bytes outside the alphabet


class _CorruptInputError(Exception):
    def __init__(self, offset: int) -> None:
        super().__init__(offset)
        self.offset = offset


def _go_base64_decode(src: bytes) -> bytes:
    """``base64.StdEncoding.DecodeString``: padding required, CR and LF skipped anywhere,
    non-zero unused trailing bits accepted; errors carry Go's ``CorruptInputError`` offset."""
    if b"\n" not in src and b"\r" not in src:
        try:
            return binascii.a2b_base64(src, strict_mode=True)
        except binascii.Error:
            pass  # rejected: let the exact port below find the offset Go reports
    return _go_base64_decode_exact(src)


def _go_base64_decode_exact(src: bytes) -> bytes:
    """A line-by-line port of Go's ``(*Encoding).Decode``/``decodeQuantum`` for StdEncoding."""
    out = bytearray()
    si, n = 0, len(src)
    while si < n:
        quantum = [0, 0, 0, 0]
        dlen = 4
        j = 0
        while j < 4:
            if si == n:
                if j == 0:
                    return bytes(out)
                raise _CorruptInputError(si - j)
            c = src[si]
            si += 1
            value = _B64_DECODE_MAP[c]
            if value != 0xFF:
                quantum[j] = value
                j += 1
                continue
            if c in (0x0A, 0x0D):  # newlines are ignored
                continue
            if c != 0x3D:  # "="
                raise _CorruptInputError(si - 1)
            # Padding: the end of the data.
            if j < 2:
                raise _CorruptInputError(si - 1)
            if j == 2:  # "==" expected; the first "=" is consumed
                while si < n and src[si] in (0x0A, 0x0D):
                    si += 1
                if si == n:
                    raise _CorruptInputError(n)
                if src[si] != 0x3D:
                    raise _CorruptInputError(si - 1)
                si += 1
            while si < n and src[si] in (0x0A, 0x0D):
                si += 1
            if si < n:
                raise _CorruptInputError(si)  # trailing garbage
            dlen = j
            break
        val = quantum[0] << 18 | quantum[1] << 12 | quantum[2] << 6 | quantum[3]
        out += val.to_bytes(3, "big")[: dlen - 1]
    return bytes(out)


class SliceOf(GoType):
    """``[]T``; ``None`` is the nil slice (``null``), ``[]`` the empty one."""

    def __init__(self, elem: GoType) -> None:
        self.elem = elem
        self.go_name = "[]" + elem.go_name

    def encode(self, value: Any, out: list[str]) -> None:
        if value is None:
            out.append("null")
            return
        out.append("[")
        for i, item in enumerate(value):
            if i:
                out.append(",")
            self.elem.encode(item, out)
        out.append("]")

    def is_empty(self, value: Any) -> bool:
        return not value

    def decode(self, raw: Any, current: Any, ctx: DecodeContext) -> Any:
        if raw is None:
            return None
        if not _is_array(raw):
            raise ctx.type_error(_json_kind(raw), self.go_name)
        # Go decodes element i into the slice's existing element i when there is one (its
        # length is reset, not its contents), so a repeated key merges into earlier elements.
        old = tuple(current) if current is not None else ()
        return tuple(
            self.elem.decode(item, old[i] if i < len(old) else self.elem.zero(), ctx)
            for i, item in enumerate(raw)
        )


class MapOf(GoType):
    """``map[string]T``: keys are written sorted, as Go does."""

    def __init__(self, elem: GoType) -> None:
        self.elem = elem
        self.go_name = "map[string]" + elem.go_name

    def encode(self, value: Any, out: list[str]) -> None:
        if value is None:
            out.append("null")
            return
        out.append("{")
        for i, key in enumerate(sorted(value)):
            if not isinstance(key, str):
                raise GoEncodeError(f"map keys must be strings, got {key!r}")
            if i:
                out.append(",")
            out.append(encode_string(key))
            out.append(":")
            self.elem.encode(value[key], out)
        out.append("}")

    def is_empty(self, value: Any) -> bool:
        return not value

    def decode(self, raw: Any, current: Any, ctx: DecodeContext) -> Any:
        if raw is None:
            return None
        if not isinstance(raw, _Pairs):
            raise ctx.type_error(_json_kind(raw), self.go_name)
        # Go keeps an existing map and its entries; each value is decoded into a fresh zero
        # element (so a repeated key replaces, it does not merge).
        result: dict[str, Any] = dict(current) if current is not None else {}
        for key, item in raw:
            result[key] = self.elem.decode(item, self.elem.zero(), ctx.child(key))
        return result


class Ptr(GoType):
    """``*T``: ``None`` is nil (``null``; omitted under ``omitempty``)."""

    def __init__(self, elem: GoType) -> None:
        self.elem = elem
        self.go_name = "*" + elem.go_name

    def encode(self, value: Any, out: list[str]) -> None:
        if value is None:
            out.append("null")
        else:
            self.elem.encode(value, out)

    def is_empty(self, value: Any) -> bool:
        return value is None

    def decode(self, raw: Any, current: Any, ctx: DecodeContext) -> Any:
        if raw is None:
            return None
        return self.elem.decode(raw, current if current is not None else self.elem.zero(), ctx)


class _Any(GoType):
    """``any`` / ``interface{}``: plain JSON values; objects are written with sorted keys."""

    go_name = "interface {}"

    def encode(self, value: Any, out: list[str]) -> None:
        if value is None:
            out.append("null")
        elif value is True:
            out.append("true")
        elif value is False:
            out.append("false")
        elif isinstance(value, str):
            out.append(encode_string(value))
        elif isinstance(value, int):
            out.append(str(value))
        elif isinstance(value, float):
            out.append(format_float64(value))
        elif isinstance(value, (bytes, bytearray)):
            BYTES.encode(value, out)
        elif isinstance(value, GoStruct):
            StructOf(type(value)).encode(value, out)
        elif isinstance(value, Mapping):
            out.append("{")
            for i, key in enumerate(sorted(value)):
                if not isinstance(key, str):
                    raise GoEncodeError(f"map keys must be strings, got {key!r}")
                if i:
                    out.append(",")
                out.append(encode_string(key))
                out.append(":")
                self.encode(value[key], out)
            out.append("}")
        elif isinstance(value, Sequence):
            out.append("[")
            for i, item in enumerate(value):
                if i:
                    out.append(",")
                self.encode(item, out)
            out.append("]")
        else:
            raise GoEncodeError(f"json: unsupported type: {type(value).__name__}")

    def is_empty(self, value: Any) -> bool:
        return value is None

    def decode(self, raw: Any, current: Any, ctx: DecodeContext) -> Any:
        return _plain(raw, ctx)


def _plain(raw: Any, ctx: DecodeContext) -> Any:
    """A decoded JSON value as Go's ``interface{}`` holds it.

    Numbers with a fraction or exponent become ``float`` (Go's ``float64``; one out of its range
    is Go's error); integers stay exact ``int`` where Go would round them to ``float64``.
    """
    if isinstance(raw, _Pairs):
        result: dict[str, Any] = {}
        for k, v in raw:
            result[k] = _plain(v, ctx.child(k))
        return result
    if isinstance(raw, list):
        return [_plain(v, ctx) for v in raw]
    if isinstance(raw, GoNumber):
        f = _number_as_float64(raw)
        if f is None:
            raise ctx.type_error(_json_kind(raw), "float64")
        return f
    return raw


STRING: GoType = _String()
BOOL: GoType = _Bool()
UINT64: GoType = _Integer("uint64", 0, _UINT64_MAX)
INT64: GoType = _Integer("int", _INT64_MIN, _INT64_MAX)
FLOAT64: GoType = _Float64()
FLOAT32: GoType = _Float32()
BYTES: GoType = _Bytes()
ANY: GoType = _Any()


# --- structs -------------------------------------------------------------------------------

_GO_META = "go"


@dataclasses.dataclass(frozen=True, slots=True)
class _FieldSpec:
    json: str
    attr: str
    type: GoType
    omitempty: bool
    # '"name":' as Go writes it: the name HTML-escaped like any string (<, >, & are legal in tags).
    key: str = ""


def go_field(
    name: str,
    gotype: GoType,
    *,
    omitempty: bool = False,
    default: Any = dataclasses.MISSING,
    default_factory: Callable[[], Any] | Any = dataclasses.MISSING,
) -> Any:
    """Declare a dataclass field as a Go struct field ``json:"name[,omitempty]"``."""
    meta = {_GO_META: (name, gotype, omitempty)}
    if default_factory is not dataclasses.MISSING:
        return dataclasses.field(default_factory=default_factory, metadata=meta)
    if default is dataclasses.MISSING:
        return dataclasses.field(metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


S = TypeVar("S", bound="GoStruct")


class GoStruct:
    """Base of dataclasses mirroring a Go struct; field order is the Go declaration order."""

    GO_NAME: ClassVar[str] = ""
    GO_CACHED: ClassVar[bool] = False
    """Set on small immutable structs that recur in message after message (handles, DIDs):
    their encoding is remembered, keyed by value."""
    _go_specs: ClassVar[tuple[_FieldSpec, ...] | None] = None
    _go_lookup: ClassVar[dict[str, _FieldSpec] | None] = None
    _go_folded: ClassVar[dict[str, _FieldSpec] | None] = None

    @classmethod
    def go_specs(cls) -> tuple[_FieldSpec, ...]:
        specs = cls.__dict__.get("_go_specs")
        if specs is None:
            found = []
            for f in dataclasses.fields(cls):  # type: ignore[arg-type]
                if _GO_META in f.metadata:
                    name, gotype, omitempty = f.metadata[_GO_META]
                    key = encode_string(name) + ":"
                    found.append(_FieldSpec(name, f.name, gotype, omitempty, key))
            specs = tuple(found)
            folded: dict[str, _FieldSpec] = {}
            for spec in specs:
                folded.setdefault(_fold(spec.json), spec)  # the first folded match wins, as in Go
            cls._go_specs = specs
            cls._go_lookup = {s.json: s for s in specs}
            cls._go_folded = folded
        return specs

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
        _encode_struct(value, out)

    def decode(self, raw: Any, current: Any, ctx: DecodeContext) -> Any:
        if raw is None:
            return current
        if not isinstance(raw, _Pairs):
            raise ctx.type_error(_json_kind(raw), self.go_name)
        return _decode_struct(self.cls, raw, current, ctx)

    def zero(self) -> Any:
        return _zero(self.cls)


def _encode_struct(value: GoStruct, out: list[str]) -> None:
    if type(value).GO_CACHED:
        out.append(_cached_encoding(value))
    else:
        _encode_fields(value, out)


@functools.lru_cache(maxsize=4096)
def _cached_encoding(value: GoStruct) -> str:
    out: list[str] = []
    _encode_fields(value, out)
    return "".join(out)


def _encode_fields(value: GoStruct, out: list[str]) -> None:
    out.append("{")
    first = True
    for spec in type(value).go_specs():
        item = getattr(value, spec.attr)
        if spec.omitempty and spec.type.is_empty(item):
            continue
        if not first:
            out.append(",")
        first = False
        out.append(spec.key)
        spec.type.encode(item, out)
    out.append("}")


def _zero(cls: type[S]) -> S:
    kwargs = {s.attr: s.type.zero() for s in cls.go_specs()}
    return cls(**kwargs)


# Simple case folding pairs newer than Python 3.11's Unicode 14 tables (Unicode 15.0, which
# Go >= 1.21 uses): CaseFolding.txt status S entries for precomposed Greek and a ligature.
_FOLD_UNICODE15 = {"\u1fd3": "\u0390", "\u1fe3": "\u03b0", "\ufb05": "\ufb06"}


@functools.lru_cache(maxsize=4096)
def _simple_fold(c: str) -> str:
    """A representative of ``c``'s ``unicode.SimpleFold`` orbit (simple case folding, C + S).

    ``str.casefold`` is *full* folding (``"ß"`` -> ``"ss"``); where that yields several characters
    the simple folding is the single-character lowercase mapping (status S, e.g. U+1E9E -> U+00DF)
    if there is one, else the character itself (``ß``, ``İ`` and ``ŉ`` fold only to themselves).
    """
    if c in _FOLD_UNICODE15:
        return _FOLD_UNICODE15[c]
    folded = c.casefold()
    if len(folded) == 1:
        return folded
    lower = c.lower()
    return lower if len(lower) == 1 else c


def _fold(name: str) -> str:
    """Folds ``name`` so that ``_fold(a) == _fold(b)`` exactly when Go's ``strings.EqualFold``.

    ``EqualFold`` compares rune by rune under Unicode simple case folding: ``"k"`` matches the
    Kelvin sign U+212A and ``"s"`` the long s U+017F, but ``"ss"`` never matches ``"ß"``.
    """
    if name.isascii():
        return name.lower()
    return "".join(_simple_fold(c) for c in name)


def _decode_struct(cls: type[S], pairs: _Pairs, current: S | None, ctx: DecodeContext) -> S:
    specs = cls.go_specs()
    lookup, folded = cls._go_lookup, cls._go_folded
    assert lookup is not None and folded is not None
    if current is not None:
        values = {s.attr: getattr(current, s.attr) for s in specs}
    else:
        values = {s.attr: s.type.zero() for s in specs}
    for key, raw in pairs:
        # An exact name match first, else the first field whose name folds equal (Go >= 1.21
        # fields.byFoldedName; older Go scans with bytes.EqualFold, same result).
        spec = lookup.get(key) or folded.get(_fold(key))
        if spec is None:
            continue  # unknown fields are ignored, as by Go
        values[spec.attr] = spec.type.decode(raw, values[spec.attr], ctx.child(spec.json))
    return cls(**values)


# --- entry points --------------------------------------------------------------------------


class _Pairs(list[tuple[str, Any]]):
    """A JSON object as its key/value pairs in document order (Go processes them in order)."""


def _reject_constant(name: str) -> Any:
    raise GoDecodeError(f"invalid character '{name[0]}' looking for beginning of value")


def _replace_each_byte(exc: UnicodeError) -> tuple[str, int]:
    """Go reads every byte of invalid UTF-8 as its own U+FFFD (``utf8.DecodeRune`` size 1);
    Python's ``"replace"`` writes one U+FFFD per maximal invalid subsequence."""
    if not isinstance(exc, UnicodeDecodeError):
        raise exc
    return "\ufffd" * (exc.end - exc.start), exc.end


codecs.register_error("dmsgw-go-replace", _replace_each_byte)

# Longest integer literal handed to int(): beyond Python's int-conversion limit it stays text.
_MAX_INT_DIGITS = 4000


def _parse_int(text: str) -> Any:
    if text == "-0" or len(text) > _MAX_INT_DIGITS:
        return GoNumber(text)  # "-0" is a float -0 in Go, not int 0
    return int(text)


def _parse(data: bytes | str) -> Any:
    if isinstance(data, (bytes, bytearray)):
        text = bytes(data).decode("utf-8", errors="dmsgw-go-replace")
    else:
        text = data
    try:
        raw = json.loads(
            text,
            object_pairs_hook=_Pairs,
            parse_float=GoNumber,
            parse_int=_parse_int,
            parse_constant=_reject_constant,
        )
    except json.JSONDecodeError as exc:
        if not text.strip(" \t\r\n"):  # JSON whitespace only, as Go's scanner
            raise GoDecodeError("unexpected end of JSON input") from None
        raise GoDecodeError(
            f"invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}"
        ) from None
    except RecursionError:
        raise GoDecodeError("exceeded max depth") from None
    except ValueError as exc:  # e.g. a lowered sys.set_int_max_str_digits limit
        raise GoDecodeError(f"invalid JSON: {exc}") from None
    return _fix_surrogates(raw) if _SURROGATE_ESCAPE.search(text) else raw


# Only a \uD800-\uDFFF escape can leave a lone surrogate in what json.loads returns.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def _fix_surrogates(raw: Any) -> Any:
    """Go decodes an unpaired ``\\ud800`` escape as U+FFFD; Python keeps the surrogate."""
    if isinstance(raw, str) and not isinstance(raw, GoNumber):
        return _LONE_SURROGATE.sub("\ufffd", raw) if _LONE_SURROGATE.search(raw) else raw
    if isinstance(raw, _Pairs):
        return _Pairs((_fix_surrogates(k), _fix_surrogates(v)) for k, v in raw)
    if isinstance(raw, list):
        return [_fix_surrogates(v) for v in raw]
    return raw


def marshal(value: GoStruct) -> bytes:
    """``json.Marshal`` of a Go struct value."""
    out: list[str] = []
    _encode_struct(value, out)
    return "".join(out).encode("utf-8")


def unmarshal(cls: type[S], data: bytes | str) -> S:
    """``json.Unmarshal`` into a zero value of ``cls``; raises :class:`GoDecodeError`."""
    raw = _parse(data)
    if raw is None:
        return _zero(cls)
    if not isinstance(raw, _Pairs):
        raise GoDecodeError(
            f"json: cannot unmarshal {_json_kind(raw)} into Go value of type {cls.go_type_name()}"
        )
    return _decode_struct(cls, raw, None, DecodeContext(cls.go_type_name()))


def encode_any(value: Any) -> bytes:
    """``json.Marshal`` of a plain value (dicts as Go maps, so keys are sorted)."""
    out: list[str] = []
    ANY.encode(value, out)
    return "".join(out).encode("utf-8")


def decode_any(data: bytes | str) -> Any:
    """``json.Unmarshal`` into ``interface{}``."""
    return _plain(_parse(data), DecodeContext(""))
