"""Token expiries as ``nunet cap`` reads them, and the expiries no token should be issued with.

An expiry given as a time is read as ``nunet``'s ``TimeValue.Set`` (``cmd/utils/flags.go``)
reads it: the first of Go's layouts RFC 822, RFC 822Z, RFC 3339 (with or without nanoseconds),
``DateTime`` and ``DateOnly`` that matches, a missing zone meaning UTC. An expiry given as a
lifetime is ``time.Now().Add(duration)``, as in ``cmd/cap/grant.go``. Where ``nunet`` would issue
a token that is dead on arrival, these functions refuse with the reason instead.

Every :class:`ExpiryError` says what is wrong with the value, not which value it is: the caller
names it (a command-line option, a field).
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

from ...clock import NS_PER_SECOND
from .token import Token, UcanError, format_second

__all__ = [
    "EXPIRY_FORMATS",
    "ExpiryError",
    "check_revocable",
    "expiry_after",
    "future_expiry",
    "parse_expiry",
]


class ExpiryError(UcanError):
    """An expiry that cannot be read, or that would make a token dead on arrival."""


def _instant(fields: Sequence[str | None], fraction: str | None, offset_s: int) -> int:
    year, month, day, hour, minute, second = (int(f or 0) for f in fields)
    moment = datetime(year, month, day, hour, minute, second, tzinfo=UTC)  # checks the ranges
    seconds = calendar.timegm(moment.timetuple()) - offset_s
    return seconds * NS_PER_SECOND + int((fraction or "").ljust(9, "0"))


def _offset(text: str) -> int:
    """``Z``, ``UTC``, ``GMT``, ``+hh:mm`` or ``+hhmm``, in seconds east of UTC."""
    if text in ("Z", "UTC", "GMT"):
        return 0
    digits = text[1:].replace(":", "")
    seconds = int(digits[:2]) * 3600 + int(digits[2:]) * 60
    return -seconds if text[0] == "-" else seconds


def _from_rfc3339(m: re.Match[str]) -> int:
    return _instant(m.groups()[:6], m[7], _offset(m[8]))


def _from_date_time(m: re.Match[str]) -> int:
    return _instant(m.groups(), None, 0)


_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


def _from_rfc822(m: re.Match[str]) -> int:
    year = int(m[3]) + (1900 if int(m[3]) >= 69 else 2000)  # Go's two-digit year rule
    month = _MONTHS.index(m[2]) + 1
    return _instant((str(year), str(month), m[1], m[4], m[5], None), None, _offset(m[6]))


_LAYOUTS: tuple[tuple[re.Pattern[str], Callable[[re.Match[str]], int]], ...] = (
    (
        re.compile(
            r"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?(Z|[+-]\d{2}:\d{2})"
        ),
        _from_rfc3339,
    ),
    (re.compile(r"(\d{4})-(\d{2})-(\d{2})(?: (\d{2}):(\d{2}):(\d{2}))?"), _from_date_time),
    (
        re.compile(
            rf"(\d{{2}}) ({'|'.join(_MONTHS)}) (\d{{2}}) (\d{{2}}):(\d{{2}}) (UTC|GMT|[+-]\d{{4}})"
        ),
        _from_rfc822,
    ),
)

EXPIRY_FORMATS = (
    "2025-12-31, '2025-12-31 23:59:59' (both UTC), RFC 3339 (2025-12-31T23:59:59Z, "
    "2025-12-31T23:59:59.5+01:00) or RFC 822 ('31 Dec 25 23:59 +0100')"
)
"""The layouts :func:`parse_expiry` reads, with an example of each, for help and errors."""


def parse_expiry(text: str) -> int:
    """An expiry in Unix ns, in the layouts ``nunet`` accepts (``TimeValue.Set``).

    Named zones other than UTC/GMT are refused: Go would silently read them as UTC.
    """
    value = text.strip()
    for pattern, build in _LAYOUTS:
        match = pattern.fullmatch(value)
        if match is not None:
            try:
                return build(match)
            except ValueError as exc:
                raise ExpiryError(str(exc)) from None
    raise ExpiryError(f"use {EXPIRY_FORMATS}")


def future_expiry(expire: int, now: int) -> int:
    """``expire``, if it lies after ``now``.

    The DMS's ``Verify`` begins with ``ExpireBefore(now)``, so a token issued with an expiry
    already past is refused by everyone: dead on arrival.
    """
    if expire <= now:
        raise ExpiryError(f"it is in the past ({format_second(expire)})")
    return expire


def expiry_after(now: int, duration: int) -> int:
    """``time.Now().Add(duration)``, for a positive ``duration`` (ns): a zero or negative
    lifetime would give a token that is dead on arrival."""
    if duration <= 0:
        raise ExpiryError("must be positive, e.g. 8760h or 30m")
    return now + duration


def check_revocable(t: Token, now: int) -> None:
    """Refuse to revoke a token that has expired: every verifier refuses it already
    (``ExpireBefore``), and its revocation, which copies its expiry (``Revoke``), would be
    expired too, so no context would accept it as an anchor."""
    if t.expire_before(now):
        raise ExpiryError(f"{t.describe()} has already expired: there is nothing to revoke")
