"""Go ``encoding/json`` compatible encoding and decoding of Go structs.

The DMS signs ``json.Marshal`` output of its Go structs and a receiver verifies over its own
re-marshalling of what it decoded, so the bytes we sign must be exactly what Go would emit and
what we accept must be decoded exactly as Go decodes it. Python's :mod:`json` differs from Go
in field order, ``omitempty``, ``[]byte``, HTML escaping, float formatting and decoding rules,
hence this package.

A Go struct is mirrored by a frozen dataclass whose fields are declared with :func:`go_field`;
the type of each field is one of the :class:`GoType` singletons/constructors. Nil and empty are
distinct, as in Go: ``None`` is the nil slice/map/pointer/``[]byte``.

:func:`unmarshal` parses once, with Python's C parser, then decodes with the fast decoder (exact
key names, plain values, no error paths) and, when that one declines, with the generic one:
Go's full rules and the reference for every result. A syntax error carries Go's exact message.

One job per module: :mod:`.strings` (quoting), :mod:`.floats` (float formatting and parsing),
:mod:`.base64` (Go's base64), :mod:`.fold` (``EqualFold`` key matching), :mod:`.scanner` (Go's
syntax errors), :mod:`.parse` (JSON text to raw values), :mod:`.types` (scalar types),
:mod:`.containers` (slices, maps, pointers), :mod:`.fields` (struct fields), :mod:`.structs`
(structs, ``marshal``, ``unmarshal``), :mod:`.interface` (``interface{}``, unmirrored structs,
``json.RawMessage``).
"""

from .codec_errors import DecodeContext, GoDecodeError, GoEncodeError, NotPlainError
from .containers import MapOf, Ptr, SliceOf
from .fields import go_field
from .floats import format_float32, format_float64
from .interface import ANY, PLAIN, RAW, compact_json, decode_any, decode_plain, encode_any
from .strings import encode_string
from .structs import GoStruct, StructOf, marshal, marshal_without, unmarshal
from .types import BOOL, BYTES, FLOAT32, FLOAT64, INT64, STRING, UINT64, GoType

__all__ = [
    "ANY",
    "BOOL",
    "BYTES",
    "FLOAT32",
    "FLOAT64",
    "INT64",
    "PLAIN",
    "RAW",
    "STRING",
    "UINT64",
    "DecodeContext",
    "GoDecodeError",
    "GoEncodeError",
    "GoStruct",
    "GoType",
    "MapOf",
    "NotPlainError",
    "Ptr",
    "SliceOf",
    "StructOf",
    "compact_json",
    "decode_any",
    "decode_plain",
    "encode_any",
    "encode_string",
    "format_float32",
    "format_float64",
    "go_field",
    "marshal",
    "marshal_without",
    "unmarshal",
]
