"""Sizes, clock speeds and durations as the DMS CLI reads and as people read them.

Parsing mirrors what the DMS CLI applies to an ensemble file before sending it
(``utils/convert`` on top of ``go-humanize`` and ``time.ParseDuration``), so a YAML ``size: 4``
becomes the same byte count here as there. Formatting is for humans only (reprs, logs, the
REPL) and is never sent.
"""

from __future__ import annotations

import math
import re

from ..errors import DmsgwError

__all__ = [
    "UnitError",
    "format_bytes",
    "format_hz",
    "parse_bytes",
    "parse_clock_hz",
    "parse_go_duration",
]

KIB = 1 << 10
MIB = 1 << 20
GIB = 1 << 30
TIB = 1 << 40


class UnitError(DmsgwError):
    """A size, clock speed or duration that the DMS CLI would refuse (or misread)."""


# go-humanize's bytesSizeTable: lower-cased names, SI (kB = 1000) and IEC (KiB = 1024).
_BYTE_UNITS: dict[str, int] = {"": 1, "b": 1}
for _i, _p in enumerate("kmgtpe", start=1):
    _BYTE_UNITS[_p] = _BYTE_UNITS[_p + "b"] = 1000**_i
    _BYTE_UNITS[_p + "i"] = _BYTE_UNITS[_p + "ib"] = 1024**_i

# utils/convert's numberWithUnitRegex (RE2 \d and \s are ASCII-only).
_NUMBER_WITH_UNIT = re.compile(r"([+-]?\d*\.?\d+(?:[eE][+-]?\d+)?)\s*([a-zA-Z]+)?", re.ASCII)

# The clock units that mean what they say under go-humanize's case-sensitive SI prefixes.
_CLOCK_UNITS = {"hz": 1.0, "khz": 1e3, "mhz": 1e6, "ghz": 1e9, "thz": 1e12}
_SI_PREFIXES = {"k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "m": 1e-3}


def _number_and_unit(value: object) -> tuple[float, str]:
    """``extractValueAndUnit``: a YAML number, or a string like ``"4GiB"`` / ``"2.4 GHz"``."""
    if isinstance(value, bool) or value is None:
        raise UnitError(f"{_show(value)} is not a number")
    if isinstance(value, (int, float)):
        number = float(value)
        if not math.isfinite(number):
            raise UnitError(f"{_show(value)} is not a number")
        return number, ""
    if not isinstance(value, str):
        raise UnitError(f"{_show(value)} is not a number")
    match = _NUMBER_WITH_UNIT.fullmatch(value.strip())
    if match is None:
        raise UnitError(f"{value!r} is not a number with an optional unit")
    return float(match.group(1)), match.group(2) or ""


def parse_bytes(value: object, default_unit: str = "GiB") -> int:
    """A size in bytes, as ``ParseBytesWithDefaultUnit``: ``4`` is ``4GiB``, ``"512MiB"``,
    ``"1GB"``.

    Units are case-insensitive; ``KB/MB/GB`` are powers of 1000, ``KiB/MiB/GiB`` of 1024. The
    number goes through ``%.10f`` as in the DMS CLI, so fractions of a byte are cut off.
    """
    number, unit = _number_and_unit(value)
    if number < 0:
        raise UnitError(f"{_show(value)}: a size cannot be negative")
    unit = unit or default_unit
    scale = _BYTE_UNITS.get(unit.lower())
    if scale is None:
        raise UnitError(f"{_show(value)}: unknown size unit {unit!r} (use B, KiB, MiB, GiB, …)")
    size = float(f"{number:.10f}") * scale
    if size >= 2.0**64:
        raise UnitError(f"{_show(value)} is too large (more than 2^64 bytes)")
    return int(size)


def parse_clock_hz(value: object, default_unit: str = "GHz") -> float:
    """A clock speed in Hz, as ``ParseSIWithDefaultUnit``: ``2.4`` is 2.4 GHz, ``"2400MHz"``.

    Stricter than the DMS CLI, deliberately: go-humanize's SI prefixes are case-sensitive, so
    the CLI reads ``"2.4ghz"`` as 2.4 Hz and ``"2400mhz"`` as 2.4 Hz (milli); such units, and
    ones that are no clock unit at all, are refused here instead of being misread.
    """
    number, unit = _number_and_unit(value)
    unit = unit or default_unit
    intended = _CLOCK_UNITS.get(unit.lower())
    if intended is None:
        raise UnitError(f"{_show(value)}: unknown clock unit {unit!r} (use Hz, kHz, MHz, GHz)")
    go_scale = _SI_PREFIXES.get(unit[0], 1.0)
    if go_scale != intended:
        raise UnitError(
            f"{_show(value)}: write the unit as {_canonical_clock_unit(intended)}; the DMS reads "
            f"the SI prefix case-sensitively and would take {unit!r} as {go_scale:g} Hz per unit"
        )
    return float(f"{number:.10f}") * go_scale


def _canonical_clock_unit(scale: float) -> str:
    return {1.0: "Hz", 1e3: "kHz", 1e6: "MHz", 1e9: "GHz", 1e12: "THz"}[scale]


# time.ParseDuration's unit table ("µs" is U+00B5, "μs" U+03BC).
_DURATION_UNITS = {
    "ns": 1,
    "us": 1_000,
    "\u00b5s": 1_000,
    "\u03bcs": 1_000,
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60_000_000_000,
    "h": 3_600_000_000_000,
}
_INT64_LIMIT = 1 << 63


def parse_go_duration(text: str) -> int:
    """``time.ParseDuration`` in nanoseconds: ``"30s"``, ``"1h30m"``, ``"1.5s"``, ``"-2ms"``.

    The error messages are Go's, because the DMS CLI shows them for bad ensemble files.
    """
    original = text
    invalid = UnitError(f"time: invalid duration {_go_quote(original)}")
    negative = False
    if text[:1] in ("-", "+"):
        negative = text[0] == "-"
        text = text[1:]
    if text == "0":
        return 0
    if not text:
        raise invalid
    total = 0
    while text:
        if not (text[0] == "." or "0" <= text[0] <= "9"):
            raise invalid
        whole, text, whole_digits = _leading_digits(text)
        if whole is None:
            raise invalid
        fraction, scale, fraction_digits = 0, 1.0, False
        if text[:1] == ".":
            fraction, scale, text, fraction_digits = _leading_fraction(text[1:])
        if not whole_digits and not fraction_digits:
            raise invalid
        end = 0
        while end < len(text) and not (text[end] == "." or "0" <= text[end] <= "9"):
            end += 1
        if end == 0:
            raise UnitError(f"time: missing unit in duration {_go_quote(original)}")
        name, text = text[:end], text[end:]
        unit = _DURATION_UNITS.get(name)
        if unit is None:
            raise UnitError(
                f"time: unknown unit {_go_quote(name)} in duration {_go_quote(original)}"
            )
        if whole > _INT64_LIMIT // unit:
            raise invalid
        value = whole * unit
        if fraction:
            value += int(float(fraction) * (float(unit) / scale))
            if value > _INT64_LIMIT:
                raise invalid
        total += value
        if total > _INT64_LIMIT:
            raise invalid
    if negative:
        return -total
    if total > _INT64_LIMIT - 1:
        raise invalid
    return total


def _leading_digits(text: str) -> tuple[int | None, str, bool]:
    """``leadingInt``: the value (``None`` on overflow), the rest, whether digits were read."""
    end = 0
    while end < len(text) and "0" <= text[end] <= "9":
        end += 1
    if end == 0:
        return 0, text, False
    value = int(text[:end])
    return (value if value <= _INT64_LIMIT else None), text[end:], True


def _leading_fraction(text: str) -> tuple[int, float, str, bool]:
    """``leadingFraction``: digits after the point, stopping (but consuming) at overflow."""
    value, scale, end, overflow = 0, 1.0, 0, False
    while end < len(text) and "0" <= text[end] <= "9":
        if not overflow:
            bigger = value * 10 + int(text[end])
            if value > (_INT64_LIMIT - 1) // 10 or bigger > _INT64_LIMIT:
                overflow = True
            else:
                value, scale = bigger, scale * 10
        end += 1
    return value, scale, text[end:], end > 0


def _go_quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _show(value: object) -> str:
    return repr(value) if isinstance(value, str) else str(value)


def _trim(number: float) -> str:
    return f"{number:.2f}".rstrip("0").rstrip(".")


def format_bytes(size: int) -> str:
    """``17179869184`` -> ``"16 GiB"``; binary units, at most two decimals."""
    for unit, scale in (("TiB", TIB), ("GiB", GIB), ("MiB", MIB), ("KiB", KIB)):
        if size >= scale:
            return f"{_trim(size / scale)} {unit}"
    return f"{size} B"


def format_hz(hz: float) -> str:
    """``3.2e9`` -> ``"3.2 GHz"``."""
    for unit, scale in (("THz", 1e12), ("GHz", 1e9), ("MHz", 1e6), ("kHz", 1e3)):
        if hz >= scale:
            return f"{_trim(hz / scale)} {unit}"
    return f"{_trim(hz)} Hz"
