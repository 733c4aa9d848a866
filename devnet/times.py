"""Instants as the DMS writes them: Go's RFC 3339 text of a UTC ``time.Time``."""

from __future__ import annotations

from datetime import UTC, datetime

from ..clock import NS_PER_SECOND


def rfc3339(ns: int) -> str:
    """A Unix-ns instant as Go marshals a UTC ``time.Time`` (RFC 3339, nanoseconds)."""
    seconds, frac = divmod(ns, NS_PER_SECOND)
    stamp = datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S")
    digits = f"{frac:09d}".rstrip("0")
    return f"{stamp}.{digits}Z" if digits else f"{stamp}Z"


def parse_rfc3339(text: str) -> int:
    """RFC 3339 text (as ``GO_TIME`` accepts it) to Unix ns."""
    head, _, rest = text.partition(".")
    frac, zone = "", ""
    if rest:
        digits = len(rest) - len(rest.lstrip("0123456789"))
        frac, zone = rest[:digits], rest[digits:]
    else:
        for mark in ("Z", "+", "-"):
            at = head.find(mark, 19)
            if at != -1:
                head, zone = head[:at], head[at:]
                break
    moment = datetime.fromisoformat(head + (zone.replace("Z", "+00:00") or "+00:00"))
    return int(moment.timestamp()) * NS_PER_SECOND + int((frac + "000000000")[:9])
