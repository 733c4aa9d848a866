"""JSON text to raw values: what both decoders read, and Go's syntax errors.

Objects are :data:`Pairs`: tuples of key/value pairs in document order, since Go processes
repeated keys one after the other (tuples, as the cheapest container the parser can build
that tells an empty object from an empty array). Arrays are lists; numbers with a fraction or
exponent stay text (:class:`GoNumber`), as only the target type says how to round them.
Parsing is Python's C parser; Go's wording of a syntax error comes from :mod:`.scanner`, run
only on a refusal.
"""

from __future__ import annotations

import codecs
import json
import re
from typing import Any

from .codec_errors import GoDecodeError
from .scanner import go_syntax_error
from .strings import LONE_SURROGATE

__all__ = ["GoNumber", "Pairs", "is_array", "json_kind", "parse"]


class GoNumber(str):
    """A JSON number literal kept as text (Go's ``json.Number``).

    Used for literals with a fraction or exponent, and for the integer literals Python's ``int``
    cannot stand for exactly as Go reads them: ``-0`` (a float ``-0`` in Go) and integers too
    long for Python's default int-conversion limit.
    """


Pairs = tuple[tuple[str, Any], ...]
"""A JSON object: ``isinstance(raw, tuple)`` (and an array: ``isinstance(raw, list)``)."""


def is_array(raw: Any) -> bool:
    """A decoded JSON array (an object is a tuple)."""
    return isinstance(raw, list)


def json_kind(raw: Any) -> str:
    """The JSON value as Go's type errors name it (``number 5``, ``string``, ``object``)."""
    if isinstance(raw, bool):
        return "bool"
    if isinstance(raw, (int, GoNumber)):
        return f"number {raw}"
    if isinstance(raw, str):
        return "string"
    if is_array(raw):
        return "array"
    return "object"


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


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")  # NaN, Infinity: the scanner names the error


# Two prepared decoders: json.loads would build one per call. Only a text containing "-0" or
# longer than the int limit can hold an integer literal that must stay text, so every other
# text is read with the C parser's own int conversion.
_DECODER = json.JSONDecoder(
    object_pairs_hook=tuple, parse_float=GoNumber, parse_constant=_reject_constant
)
_DECODER_EXACT_INTS = json.JSONDecoder(
    object_pairs_hook=tuple,
    parse_float=GoNumber,
    parse_int=_parse_int,
    parse_constant=_reject_constant,
)

# Only a \uD800-\uDFFF escape can leave a lone surrogate in what the parser returns.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def parse(data: bytes | str) -> Any:
    """The raw value of a JSON document; :class:`GoDecodeError` with Go's syntax error."""
    if isinstance(data, (bytes, bytearray)):
        text = bytes(data).decode("utf-8", errors="dmsgw-go-replace")
    else:
        text = data
    exact_ints = "-0" in text or len(text) > _MAX_INT_DIGITS
    try:
        raw = (_DECODER_EXACT_INTS if exact_ints else _DECODER).decode(text)
    except RecursionError:
        # Deeper than Python's parser goes, though Go's limit (10000 levels) may allow it.
        raise GoDecodeError(_syntax_error(data) or "exceeded max depth") from None
    except ValueError as exc:  # also a lowered sys.set_int_max_str_digits limit
        raise GoDecodeError(_syntax_error(data) or f"invalid JSON: {exc}") from None
    return _fix_surrogates(raw) if _SURROGATE_ESCAPE.search(text) else raw


def _syntax_error(data: bytes | str) -> str | None:
    if isinstance(data, str):
        data = data.encode("utf-8", errors="surrogatepass")
    return go_syntax_error(bytes(data))


def _fix_surrogates(raw: Any) -> Any:
    """Go decodes an unpaired ``\\ud800`` escape as U+FFFD; Python keeps the surrogate."""
    if isinstance(raw, str) and not isinstance(raw, GoNumber):
        return LONE_SURROGATE.sub("\ufffd", raw) if LONE_SURROGATE.search(raw) else raw
    if isinstance(raw, tuple):
        return tuple((_fix_surrogates(k), _fix_surrogates(v)) for k, v in raw)
    if isinstance(raw, list):
        return [_fix_surrogates(v) for v in raw]
    return raw
