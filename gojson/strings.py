"""Go's string quoting: HTML-safe, ``\\b``/``\\f`` in short form (Go >= 1.22), U+FFFD for
invalid code points."""

from __future__ import annotations

import functools
import json
import re

__all__ = ["LONE_SURROGATE", "encode_string", "encode_value_string"]

_HTML_UNSAFE = re.compile("[<>&\u2028\u2029]")
_HTML_ESCAPES = {
    "<": "\\u003c",
    ">": "\\u003e",
    "&": "\\u0026",
    "\u2028": "\\u2028",
    "\u2029": "\\u2029",
}
LONE_SURROGATE = re.compile("[\ud800-\udfff]")
_SPECIAL = re.compile("[<>&\u2028\u2029\ud800-\udfff]")  # either of the two above
_quote = json.encoder.encode_basestring  # JSON quoting with \b, \f, \n, \r, \t short forms


def encode_string(s: str) -> str:
    """Quote ``s`` as Go does (HTML-safe; ``\\b``/``\\f`` short forms as Go >= 1.22)."""
    quoted = _quote(s)
    if _SPECIAL.search(quoted):
        quoted = _HTML_UNSAFE.sub(lambda m: _HTML_ESCAPES[m.group()], quoted)
        # Go strings are bytes; an invalid code point is written as U+FFFD.
        quoted = LONE_SURROGATE.sub("\\\\ufffd", quoted)
    return quoted


_REMEMBERED_LENGTH = 256  # long strings are rare to recur and costly to keep


@functools.lru_cache(maxsize=4096)
def _encode_remembered(s: str) -> str:
    return encode_string(s)


def encode_value_string(s: str) -> str:
    """:func:`encode_string` for the strings of struct fields and map keys, remembered when
    short: actions, behaviors, capabilities and inboxes recur in message after message."""
    return _encode_remembered(s) if len(s) <= _REMEMBERED_LENGTH else encode_string(s)
