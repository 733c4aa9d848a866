"""Go's ``interface{}`` (:data:`ANY`): plain JSON values, and :func:`encode_any` /
:func:`decode_any` for whole documents of them.

Numbers with a fraction or exponent decode to ``float`` (Go's ``float64``; one out of its range
is Go's error); integers stay exact ``int`` where Go would round them to ``float64``. Objects
are written with sorted keys, as Go writes a ``map[string]interface{}``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .containers import encode_map
from .errors import DecodeContext, GoEncodeError, NotPlainError
from .floats import format_float64, number_as_float64
from .parse import GoNumber, json_kind, parse
from .strings import encode_string
from .structs import GoStruct, encode_struct
from .types import BYTES, GoType

__all__ = ["ANY", "decode_any", "encode_any"]


class _Any(GoType):
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
            encode_struct(value, out)
        elif isinstance(value, Mapping):
            encode_map(value, self.encode, out)
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

    def fast(self, raw: Any) -> Any:
        return _plain_fast(raw)


def _plain(raw: Any, ctx: DecodeContext) -> Any:
    """A raw value as Go's ``interface{}`` holds it; the error names the number's path."""
    if isinstance(raw, tuple):
        result: dict[str, Any] = {}
        for k, v in raw:
            result[k] = _plain(v, ctx.child(k))
        return result
    if isinstance(raw, list):
        return [_plain(v, ctx) for v in raw]
    if isinstance(raw, GoNumber):
        f = number_as_float64(raw)
        if f is None:
            raise ctx.type_error(json_kind(raw), "float64")
        return f
    return raw


def _plain_fast(raw: Any) -> Any:
    """:func:`_plain` without the path: :class:`NotPlainError` where that one raises."""
    if isinstance(raw, tuple):
        return {k: _plain_fast(v) for k, v in raw}
    if isinstance(raw, list):
        return [_plain_fast(v) for v in raw]
    if isinstance(raw, GoNumber):
        f = number_as_float64(raw)
        if f is None:
            raise NotPlainError
        return f
    return raw


ANY: GoType = _Any()


def encode_any(value: Any) -> bytes:
    """``json.Marshal`` of a plain value (dicts as Go maps, so keys are sorted)."""
    out: list[str] = []
    ANY.encode(value, out)
    return "".join(out).encode("utf-8")


def decode_any(data: bytes | str) -> Any:
    """``json.Unmarshal`` into ``interface{}``."""
    raw = parse(data)
    try:
        return _plain_fast(raw)
    except NotPlainError:
        return _plain(raw, DecodeContext(""))
