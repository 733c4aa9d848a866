"""Go ``time.Time`` on the wire: RFC 3339 text, kept as the DMS wrote it.

The DMS marshals ``time.Time`` as an RFC 3339 string with nanoseconds and its zero value as
``"0001-01-01T00:00:00Z"``; it is a struct to ``encoding/json``, so ``omitempty`` never drops it.
Keeping the text (rather than a ``datetime``, which has only microseconds) lets a reply
re-marshal to the DMS's exact bytes.
"""

from __future__ import annotations

import re
from typing import Any

from ..gojson import STRING, DecodeContext, GoDecodeError, GoType

__all__ = ["GO_TIME", "ZERO_TIME"]

ZERO_TIME = "0001-01-01T00:00:00Z"

# time.RFC3339Nano as time.Time.UnmarshalJSON accepts it.
_RFC3339 = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})", re.ASCII)


class _GoTime(GoType):
    go_name = "time.Time"

    def encode(self, value: Any, out: list[str]) -> None:
        STRING.encode(value, out)

    def decode(self, raw: Any, current: Any, ctx: DecodeContext) -> Any:
        text = STRING.decode(raw, current, ctx)
        if not _RFC3339.fullmatch(text):
            raise GoDecodeError(
                f'parsing time "{text}" as "2006-01-02T15:04:05Z07:00": cannot parse'
            )
        return text

    def zero(self) -> Any:
        return ZERO_TIME


GO_TIME: GoType = _GoTime()
