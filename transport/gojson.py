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
import dataclasses
import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, TypeVar

from dmsgw.errors import DmsgwError

__all__ = [
    "ANY",
    "BOOL",
    "BYTES",
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


def format_float64(f: float) -> str:
    """``strconv.AppendFloat(f, 'f' or 'e', -1, 64)`` as ``encoding/json`` chooses them."""
    if math.isnan(f) or math.isinf(f):
        raise GoEncodeError(f"json: unsupported value: {f!r}")
    if f == 0:
        return "-0" if math.copysign(1.0, f) < 0 else "0"
    shortest = repr(f)  # the shortest round-tripping digits, as Go's -1 precision
    mantissa, _, exponent = shortest.partition("e")
    exp = int(exponent) if exponent else 0
    a = abs(f)
    if a < 1e-6 or a >= 1e21:
        # Go: %e with the shortest digits, exponent at least two digits ("1e-07", "1e+21").
        digits, point = _digits_and_point(mantissa, exp)
        lead = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        e = point - 1
        sign = "-" if f < 0 else ""
        return f"{sign}{lead}e{'-' if e < 0 else '+'}{abs(e):02d}"
    if not exponent:
        return mantissa[:-2] if mantissa.endswith(".0") else mantissa
    digits, point = _digits_and_point(mantissa, exp)
    sign = "-" if f < 0 else ""
    if point <= 0:
        return f"{sign}0.{'0' * -point}{digits}"
    if point >= len(digits):
        return f"{sign}{digits}{'0' * (point - len(digits))}"
    return f"{sign}{digits[:point]}.{digits[point:]}"


def _digits_and_point(mantissa: str, exp: int) -> tuple[str, int]:
    """Split a repr mantissa into significant digits and the decimal point position."""
    m = mantissa.lstrip("-")
    whole, _, frac = m.partition(".")
    digits = (whole + frac).lstrip("0")
    point = len(whole) + exp - (len(whole + frac) - len((whole + frac).lstrip("0")))
    digits = digits.rstrip("0") or "0"
    return digits, point


# --- types ---------------------------------------------------------------------------------


class GoNumber(str):
    """A JSON number literal with a fraction or exponent, kept as text (Go's ``json.Number``)."""


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
    if isinstance(raw, list):
        return "array"
    return "object"


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
        raise ctx.type_error(_json_kind(raw), self.go_name)

    def zero(self) -> Any:
        return 0


class _Float64(GoType):
    go_name = "float64"

    def encode(self, value: Any, out: list[str]) -> None:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise GoEncodeError(f"expected a number, got {value!r}")
        out.append(format_float64(float(value)))

    def is_empty(self, value: Any) -> bool:
        return bool(value == 0)

    def decode(self, raw: Any, current: Any, ctx: DecodeContext) -> Any:
        if raw is None:
            return current
        if isinstance(raw, GoNumber) or (isinstance(raw, int) and not isinstance(raw, bool)):
            f = float(raw)
            if math.isinf(f):
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
        if not isinstance(raw, str) or isinstance(raw, GoNumber):
            raise ctx.type_error(_json_kind(raw), self.go_name)
        text = raw.replace("\r", "").replace("\n", "")
        try:
            return base64.b64decode(text.encode("ascii"), validate=True)
        except (binascii.Error, UnicodeEncodeError, ValueError):
            raise GoDecodeError(
                f"illegal base64 data in field {'.'.join(ctx.path) or 'value'}"
            ) from None


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
        if not isinstance(raw, list):
            raise ctx.type_error(_json_kind(raw), self.go_name)
        return tuple(self.elem.decode(item, self.elem.zero(), ctx) for item in raw)


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
        result: dict[str, Any] = {}
        for key, item in raw:
            result[key] = self.elem.decode(item, result.get(key, self.elem.zero()), ctx.child(key))
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
        return _plain(raw)


def _plain(raw: Any) -> Any:
    """A decoded JSON value as Go's ``interface{}`` holds it (numbers are ``float64``)."""
    if isinstance(raw, _Pairs):
        return {k: _plain(v) for k, v in raw}
    if isinstance(raw, list):
        return [_plain(v) for v in raw]
    if isinstance(raw, GoNumber):
        return float(raw)
    return raw  # integers stay exact (Go would hold them as float64)


STRING: GoType = _String()
BOOL: GoType = _Bool()
UINT64: GoType = _Integer("uint64", 0, _UINT64_MAX)
INT64: GoType = _Integer("int", _INT64_MIN, _INT64_MAX)
FLOAT64: GoType = _Float64()
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
    _go_specs: ClassVar[tuple[_FieldSpec, ...] | None] = None
    _go_lookup: ClassVar[dict[str, _FieldSpec] | None] = None

    @classmethod
    def go_specs(cls) -> tuple[_FieldSpec, ...]:
        specs = cls.__dict__.get("_go_specs")
        if specs is None:
            found = []
            for f in dataclasses.fields(cls):  # type: ignore[arg-type]
                if _GO_META in f.metadata:
                    name, gotype, omitempty = f.metadata[_GO_META]
                    found.append(_FieldSpec(name, f.name, gotype, omitempty))
            specs = tuple(found)
            cls._go_specs = specs
            cls._go_lookup = {s.json: s for s in specs}
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
    out.append("{")
    first = True
    for spec in type(value).go_specs():
        item = getattr(value, spec.attr)
        if spec.omitempty and spec.type.is_empty(item):
            continue
        if not first:
            out.append(",")
        first = False
        out.append('"' + spec.json + '":')
        spec.type.encode(item, out)
    out.append("}")


def _zero(cls: type[S]) -> S:
    kwargs = {s.attr: s.type.zero() for s in cls.go_specs()}
    return cls(**kwargs)


def _fold(name: str) -> str:
    return name.casefold()


def _decode_struct(cls: type[S], pairs: _Pairs, current: S | None, ctx: DecodeContext) -> S:
    cls.go_specs()
    lookup = cls._go_lookup
    assert lookup is not None
    values = {s.attr: getattr(current, s.attr) for s in cls.go_specs()} if current else None
    if values is None:
        values = {s.attr: s.type.zero() for s in cls.go_specs()}
    for key, raw in pairs:
        spec = lookup.get(key)
        if spec is None:
            folded = _fold(key)
            spec = next((s for s in cls.go_specs() if _fold(s.json) == folded), None)
            if spec is None:
                continue  # unknown fields are ignored, as by Go
        values[spec.attr] = spec.type.decode(raw, values[spec.attr], ctx.child(spec.json))
    return cls(**values)


# --- entry points --------------------------------------------------------------------------


class _Pairs(list[tuple[str, Any]]):
    """A JSON object as its key/value pairs in document order (Go processes them in order)."""


def _reject_constant(name: str) -> Any:
    raise GoDecodeError(f"invalid character '{name[0]}' looking for beginning of value")


def _parse(data: bytes | str) -> Any:
    text = data.decode("utf-8", errors="replace") if isinstance(data, (bytes, bytearray)) else data
    try:
        raw = json.loads(
            text,
            object_pairs_hook=_Pairs,
            parse_float=GoNumber,
            parse_constant=_reject_constant,
        )
    except json.JSONDecodeError as exc:
        if not text.strip():
            raise GoDecodeError("unexpected end of JSON input") from None
        raise GoDecodeError(
            f"invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}"
        ) from None
    except RecursionError:
        raise GoDecodeError("exceeded max depth") from None
    return _fix_surrogates(raw)


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
    return _plain(_parse(data))
