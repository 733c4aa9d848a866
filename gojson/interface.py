"""Values Go holds without a struct of ours: ``interface{}`` (:data:`ANY`), a Go struct this
package does not mirror (:data:`PLAIN`), and ``json.RawMessage`` (:data:`RAW`).

:data:`ANY` decodes as Go decodes into ``interface{}``: every number becomes a ``float64``, so an
integer above 2^53 is rounded as Go rounds it (``9007199254740993`` is re-encoded as
``9007199254740992``) and one beyond the ``float64`` range is Go's error. :data:`PLAIN` is for a
field whose Go type is a struct we keep as plain JSON (executor stats, network statistics): Go
decodes its integer fields as integers, so integers stay exact ``int`` there; other numbers are
``float64``. Both write objects with sorted keys, as Go writes a ``map[string]interface{}``.

:data:`RAW` holds the JSON text itself (``bytes``) and writes it as Go writes a
``json.RawMessage``: compacted, HTML-escaped, key order, repeated keys and number literals kept
(:func:`compact_json`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from .codec_errors import DecodeContext, GoEncodeError, NotPlainError
from .containers import encode_map
from .floats import format_float64, number_as_float64
from .parse import GoNumber, json_kind, parse
from .scanner import go_syntax_error
from .strings import encode_string
from .structs import GoStruct, encode_struct
from .types import BYTES, GoType

__all__ = ["ANY", "PLAIN", "RAW", "compact_json", "decode_any", "decode_plain", "encode_any"]


def _encode_plain(value: Any, out: list[str]) -> None:
    """``json.Marshal`` of a plain value (dicts as Go maps, so keys are sorted)."""
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
        encode_map(value, _encode_plain, out)
    elif isinstance(value, Sequence):
        out.append("[")
        for i, item in enumerate(value):
            if i:
                out.append(",")
            _encode_plain(item, out)
        out.append("]")
    else:
        raise GoEncodeError(f"json: unsupported type: {type(value).__name__}")


class _Plain(GoType):
    """JSON values as Python's plain types; ``exact_integers`` says how integers are read."""

    def __init__(self, go_name: str, *, exact_integers: bool) -> None:
        self.go_name = go_name
        self.exact_integers = exact_integers

    def encode(self, value: Any, out: list[str]) -> None:
        _encode_plain(value, out)

    def is_empty(self, value: Any) -> bool:
        return value is None

    def decode(self, raw: Any, current: Any, ctx: DecodeContext) -> Any:
        """A raw value as Go holds it; the error names the number's path."""
        if isinstance(raw, tuple):
            result: dict[str, Any] = {}
            for k, v in raw:
                result[k] = self.decode(v, None, ctx.child(k))
            return result
        if isinstance(raw, list):
            return [self.decode(v, None, ctx) for v in raw]
        if isinstance(raw, GoNumber) or type(raw) is int:
            number = self._number(raw)
            if number is None:
                raise ctx.type_error(json_kind(raw), "float64")
            return number
        return raw

    def fast(self, raw: Any) -> Any:
        """:meth:`decode` without the path: :class:`NotPlainError` where that one raises."""
        if isinstance(raw, tuple):
            return {k: self.fast(v) for k, v in raw}
        if isinstance(raw, list):
            return [self.fast(v) for v in raw]
        if isinstance(raw, GoNumber) or type(raw) is int:
            number = self._number(raw)
            if number is None:
                raise NotPlainError
            return number
        return raw

    def _number(self, raw: int | GoNumber) -> float | int | None:
        """The number Go holds, or ``None`` when Go refuses it (beyond ``float64``)."""
        if self.exact_integers and type(raw) is int:
            return raw
        return number_as_float64(raw)


_INTERFACE = _Plain("interface {}", exact_integers=False)
_UNMIRRORED = _Plain("interface {}", exact_integers=True)

ANY: GoType = _INTERFACE
"""Go's ``interface{}``: numbers are ``float64``, as Go decodes them."""

PLAIN: GoType = _UNMIRRORED
"""A Go struct this package does not mirror, kept as plain JSON: integers stay exact."""


# A JSON string (escapes included) or a run of whitespace; in valid JSON nothing else can hold
# a quote, so this splits a document the way Go's scanner does.
_STRING_OR_SPACE = re.compile(rb'("(?:[^"\\]|\\.)*")|[ \t\r\n]+', re.DOTALL)
_HTML_BYTES = re.compile(b"[<>&]|\xe2\x80[\xa8\xa9]")


def _escape_html_bytes(match: re.Match[bytes]) -> bytes:
    found = match.group()
    if len(found) == 1:
        return b"\\u00%02x" % found[0]
    return b"\\u202%d" % (found[2] & 0xF)


def _compact_token(match: re.Match[bytes]) -> bytes:
    string = match.group(1)
    return _HTML_BYTES.sub(_escape_html_bytes, string) if string is not None else b""


def compact_json(data: bytes) -> bytes:
    """What Go writes for a ``json.RawMessage`` holding ``data`` (``appendCompact`` with HTML
    escaping): whitespace between tokens dropped, ``<``, ``>``, ``&``, U+2028 and U+2029 in
    strings escaped, everything else (key order, repeated keys, number literals, escapes and
    invalid UTF-8) byte for byte. Invalid JSON is Go's ``MarshalJSON`` error."""
    error = go_syntax_error(data)
    if error is not None:
        raise GoEncodeError(f"json: error calling MarshalJSON for type json.RawMessage: {error}")
    return _STRING_OR_SPACE.sub(_compact_token, data)


def _raw_text(raw: Any, out: list[str]) -> None:
    """The compact text of a parsed value, keys in document order and literals as written.

    A string comes out in Go's spelling (``\\u0041`` is written ``A``); what a Go encoder
    wrote, which is what a DMS sends, comes out unchanged.
    """
    if isinstance(raw, tuple):
        out.append("{")
        for i, (key, value) in enumerate(raw):
            if i:
                out.append(",")
            out.append(encode_string(key))
            out.append(":")
            _raw_text(value, out)
        out.append("}")
    elif isinstance(raw, list):
        out.append("[")
        for i, value in enumerate(raw):
            if i:
                out.append(",")
            _raw_text(value, out)
        out.append("]")
    elif raw is None:
        out.append("null")
    elif raw is True:
        out.append("true")
    elif raw is False:
        out.append("false")
    elif isinstance(raw, GoNumber) or not isinstance(raw, str):
        out.append(str(raw))  # a number literal: GoNumber keeps its text, ints are exact
    else:
        out.append(encode_string(raw))


class _Raw(GoType):
    """``json.RawMessage``: ``bytes`` of JSON text; ``None`` is the nil message (``null``)."""

    go_name = "json.RawMessage"

    def encode(self, value: Any, out: list[str]) -> None:
        if value is None:
            out.append("null")
            return
        if not isinstance(value, (bytes, bytearray)):
            raise GoEncodeError(f"expected JSON text as bytes, got {type(value).__name__}")
        out.append(compact_json(bytes(value)).decode("utf-8", errors="surrogateescape"))

    def is_empty(self, value: Any) -> bool:
        return not value

    def decode(self, raw: Any, current: Any, ctx: DecodeContext) -> Any:
        out: list[str] = []
        _raw_text(raw, out)  # null too: Go's UnmarshalJSON keeps the text "null"
        return "".join(out).encode("utf-8", errors="surrogateescape")

    def fast(self, raw: Any) -> Any:
        return self.decode(raw, None, _NO_PATH)


_NO_PATH = DecodeContext("")

RAW: GoType = _Raw()
"""Go's ``json.RawMessage``: the JSON text, re-marshalled as Go re-marshals it."""


def encode_any(value: Any) -> bytes:
    """``json.Marshal`` of a plain value (dicts as Go maps, so keys are sorted)."""
    out: list[str] = []
    _encode_plain(value, out)
    return "".join(out).encode("utf-8", errors="surrogateescape")


def _decode(gotype: _Plain, data: bytes | str) -> Any:
    raw = parse(data)
    try:
        return gotype.fast(raw)
    except NotPlainError:
        return gotype.decode(raw, None, DecodeContext(""))


def decode_any(data: bytes | str) -> Any:
    """``json.Unmarshal`` into ``interface{}``: numbers are ``float64``, as in Go."""
    return _decode(_INTERFACE, data)


def decode_plain(data: bytes | str) -> Any:
    """JSON that Go decodes into a struct we do not mirror: integers stay exact."""
    return _decode(_UNMIRRORED, data)
