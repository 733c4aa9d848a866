"""Go's float formatting (``encoding/json``'s ``floatEncoder``) and ``strconv.ParseFloat``.

Python's ``repr`` gives the same shortest digits as Go for float64; float32 needs its own
shortest-digits search and correctly rounded parsing, which Python does not provide.
"""

from __future__ import annotations

import functools
import math
import struct
from fractions import Fraction

from .codec_errors import GoEncodeError

__all__ = [
    "format_float32",
    "format_float64",
    "go_unsupported_float",
    "number_as_float64",
    "parse_float32",
    "repr_digits",
    "shortest_decimal",
]

_F32 = struct.Struct("<f")
_U32 = struct.Struct("<I")
_F64 = struct.Struct("<d")
_U64 = struct.Struct("<Q")
_F32_MAX = float.fromhex("0x1.fffffep+127")
# Halfway between the largest float32 and 2**128: from here on a value rounds to infinity.
_F32_OVERFLOW_MIDPOINT = 2.0**128 - 2.0**103


def go_unsupported_float(f: float) -> GoEncodeError:
    """Go's ``UnsupportedValueError`` (``strconv.FormatFloat(f, 'g', -1, 64)`` names the value)."""
    name = "NaN" if math.isnan(f) else ("+Inf" if f > 0 else "-Inf")
    return GoEncodeError(f"json: unsupported value: {name}")


def _to_float32(f: float) -> float:
    """``float32(f)``: the nearest float32 (ties to even); +-Inf past the float32 range."""
    try:
        return float(_F32.unpack(_F32.pack(f))[0])
    except OverflowError:
        return math.copysign(math.inf, f)


def _float32_step(f: float, up: bool) -> float:
    """The float32 adjacent to the finite float32 ``f``, above it when ``up``."""
    if f == 0:
        tiny = 2.0**-149
        return tiny if up else -tiny
    (bits,) = _U32.unpack(_F32.pack(f))
    bits += 1 if (f > 0) == up else -1
    return float(_F32.unpack(_U32.pack(bits))[0])


def parse_float32(text: str) -> float:
    """``strconv.ParseFloat(text, 32)``: the float32 nearest the decimal ``text`` (ties to even).

    Rounding through a float64 first is exact except when the float64 lands exactly on the
    midpoint of two float32 values; that case is settled with exact rational arithmetic.
    Returns +-Inf when the value is out of the float32 range (Go: ``ErrRange``).
    """
    d = float(text)
    if math.isinf(d) or d == 0:
        return d
    a = abs(d)
    c = _to_float32(a)
    if c == a:
        return math.copysign(c, d)
    if math.isinf(c):
        low, high = _F32_MAX, math.inf
    elif c < a:
        low, high = c, _float32_step(c, up=True)
    else:
        low, high = _float32_step(c, up=False), c
    mid = _F32_OVERFLOW_MIDPOINT if math.isinf(high) else (low + high) / 2
    if a != mid:
        return math.copysign(c, d)
    exact, half = abs(Fraction(text)), Fraction(mid)
    if exact != half:
        nearest = low if exact < half else high
    else:  # a true tie: to the even mantissa (the largest float32 is odd, so on to Inf)
        nearest = high if math.isinf(high) or _U32.unpack(_F32.pack(low))[0] % 2 else low
    return math.copysign(nearest, d)


def shortest_decimal(f: float, bits: int) -> tuple[str, int]:
    """The shortest decimal reading back as the ``bits``-wide float ``f`` (Go's ``-1`` precision).

    Among the shortest candidates the one nearest ``f`` is taken (ties to an even last digit), as
    by Go's ``strconv`` (``roundShortest``/Ryu). Returns ``(digits, point)``: the value is
    ``0.digits * 10**point``. ``f`` must be finite, non-zero and exact in ``bits``.
    """
    if bits == 32:
        (raw,) = _U32.unpack(_F32.pack(abs(f)))
        mantbits, bias = 23, 127
    else:
        (raw,) = _U64.unpack(_F64.pack(abs(f)))
        mantbits, bias = 52, 1023
    biased = raw >> mantbits
    mant = raw & ((1 << mantbits) - 1)
    if biased == 0:
        exp2 = 1 - bias - mantbits
    else:
        mant |= 1 << mantbits
        exp2 = biased - bias - mantbits
    two = Fraction(2)
    x = mant * two**exp2
    half_up = two ** (exp2 - 1)
    # Below a power of two the next float down is half as far away.
    half_down = two ** (exp2 - 2) if mant == 1 << mantbits and biased > 1 else half_up
    low, high = x - half_down, x + half_up
    inclusive = mant % 2 == 0  # round-half-even reads the bounds back as x itself

    ten = Fraction(10)
    exp10 = math.floor(math.log10(abs(f)))
    while ten**exp10 > x:
        exp10 -= 1
    while ten ** (exp10 + 1) <= x:
        exp10 += 1
    for ndigits in range(1, 40):
        scale = ten ** (exp10 - ndigits + 1)
        t = math.floor(x / scale)
        down, up = t * scale, (t + 1) * scale
        ok_down = down > low or (inclusive and down == low)
        ok_up = up < high or (inclusive and up == high)
        if ok_down and ok_up:
            gap_down, gap_up = x - down, up - x
            n = t if gap_down < gap_up or (gap_down == gap_up and t % 2 == 0) else t + 1
        elif ok_down:
            n = t
        elif ok_up:
            n = t + 1
        else:
            continue
        text = str(n)
        return text.rstrip("0"), len(text) + exp10 - ndigits + 1
    raise AssertionError("unreachable: the exact decimal always reads back")  # pragma: no cover


def repr_digits(f: float) -> tuple[str, int]:
    """``(digits, point)`` of Python's shortest repr (the same digits as Go's for float64)."""
    mantissa, _, exponent = repr(abs(f)).partition("e")
    whole, _, frac = mantissa.partition(".")
    all_digits = whole + frac
    stripped = all_digits.lstrip("0")
    point = len(whole) + (int(exponent) if exponent else 0) - (len(all_digits) - len(stripped))
    return stripped.rstrip("0") or "0", point


def _format_json_float(negative: bool, digits: str, point: int, exponent_form: bool) -> str:
    """``strconv.AppendFloat(.., 'e' or 'f', -1, ..)`` plus ``encoding/json``'s exponent cleanup."""
    sign = "-" if negative else ""
    if exponent_form:
        lead = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        e = point - 1
        # %e writes at least two exponent digits ("1e-07", "1e+21"); encoding/json then
        # rewrites "e-0X" as "e-X" (the floatEncoder's "clean up e-09 to e-9").
        exp = f"{abs(e):02d}"
        if e < 0 and len(exp) == 2 and exp[0] == "0":
            exp = exp[1]
        return f"{sign}{lead}e{'-' if e < 0 else '+'}{exp}"
    if point <= 0:
        return f"{sign}0.{'0' * -point}{digits}"
    if point >= len(digits):
        return f"{sign}{digits}{'0' * (point - len(digits))}"
    return f"{sign}{digits[:point]}.{digits[point:]}"


def format_float64(f: float) -> str:
    """A ``float64`` as ``encoding/json`` writes it (Go's ``floatEncoder(64)``).

    ``strconv.FormatFloat(f, 'f', -1, 64)`` for ``1e-6 <= |f| < 1e21`` (and zero, keeping the
    sign of ``-0``), else the ``'e'`` form with a two-digit exponent cleaned up from ``e-07`` to
    ``e-7``: ``1e+21``, ``1e-7``, ``1.5e+300``, ``5e-324``. NaN and +-Inf are
    :class:`GoEncodeError` (``json: unsupported value: NaN``), as in Go.
    """
    if math.isnan(f) or math.isinf(f):
        raise go_unsupported_float(f)
    if f == 0:
        return "-0" if math.copysign(1.0, f) < 0 else "0"
    a = abs(f)
    digits, point = repr_digits(f)
    return _format_json_float(f < 0, digits, point, a < 1e-6 or a >= 1e21)


_F32_E_LOW = parse_float32("1e-6")  # float32(1e-6): Go compares in float32 for float32 values
_F32_E_HIGH = parse_float32("1e21")


def format_float32(f: float) -> str:
    """A Go ``float32`` as ``encoding/json`` writes it (Go's ``floatEncoder(32)``).

    ``f`` is first rounded to float32, as storing it in a Go ``float32`` field would; the digits
    are then the shortest that read back as that float32 (``float32(0.1)`` -> ``0.1``, while
    :func:`format_float64` of the same value gives ``0.10000000149011612``).
    """
    if math.isnan(f) or math.isinf(f):
        raise go_unsupported_float(f)
    v = _to_float32(f)
    if math.isinf(v):
        raise go_unsupported_float(v)
    if v == 0:
        return "-0" if math.copysign(1.0, v) < 0 else "0"
    text = _magnitude_float32(abs(v))
    return "-" + text if v < 0 else text


FLOAT32_TEXTS = 1024
"""float32 magnitudes whose text is kept. The search for the shortest digits is exact
arithmetic on fractions, slow beside the rest of an encoding, and the same few values recur:
the cores every peer of a DMS network reports, consolidated at each gathering of their
resources (bench/README.md, "The ping through the client")."""


@functools.lru_cache(maxsize=FLOAT32_TEXTS)
def _magnitude_float32(a: float) -> str:
    """The text of the positive float32 ``a`` (a key of its own: ``-0.0`` never comes here)."""
    digits, point = shortest_decimal(a, 32)
    return _format_json_float(False, digits, point, a < _F32_E_LOW or a >= _F32_E_HIGH)


def number_as_float64(raw: int | str) -> float | None:
    """``strconv.ParseFloat(literal, 64)``, or ``None`` when it overflows (Go: ``ErrRange``)."""
    try:
        f = float(raw)  # int -> float and str -> float both round correctly, ties to even
    except OverflowError:
        return None
    return None if math.isinf(f) else f
