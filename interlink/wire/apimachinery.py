"""Kubernetes' apimachinery values as Go reads and writes them, and the base of every model of a
Go struct's JSON.

``resource.Quantity`` (parsed and formatted as apimachinery's ``quantity.go`` does),
``metav1.Time``, ``intstr.IntOrString`` and Go's ``[]byte`` are the scalar types of the
Kubernetes objects in :mod:`dmsgw.interlink.wire.k8s` and of interLink's own bodies in
:mod:`dmsgw.interlink.wire.bodies`. Decoding follows Go where it matters to a plugin: JSON ``null``
counts as absent, numbers and strings are not coerced into each other (``strict``), times are
RFC 3339 and bytes are base64. Serialising (:meth:`GoModel.to_wire`) omits ``None`` rather than
writing ``null`` or ``""``, which Go's ``metav1.Time`` would refuse.
"""

from __future__ import annotations

import base64
import decimal
import functools
import json
import re
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from typing import Annotated, Any, ClassVar, TypedDict

from pydantic import BaseModel, ConfigDict, PlainSerializer, PlainValidator, model_validator
from pydantic_core import PydanticSerializationError

from ...errors import DmsgwError
from ...gojson import BYTES, DecodeContext, GoDecodeError

__all__ = [
    "INT32_MAX",
    "INT32_MIN",
    "INT64_MAX",
    "Base64Data",
    "GoModel",
    "IntOrString",
    "Quantity",
    "QuantityError",
    "Time",
    "WireOptions",
    "format_quantity",
    "format_time",
    "json_kind",
    "parse_quantity",
    "parse_time",
    "validate_quantity",
    "wire_json",
]

INT32_MIN = -(1 << 31)
INT32_MAX = (1 << 31) - 1
INT64_MAX = (1 << 63) - 1


def json_kind(value: object) -> str:
    """``value`` named by its JSON type, for messages about what arrived instead."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def _quote(text: str) -> str:
    """``text`` quoted for an error message, cut short: messages end up in pod statuses."""
    return repr(text if len(text) <= 40 else text[:39] + "…")


# --- quantities ----------------------------------------------------------------------------


class QuantityError(DmsgwError, ValueError):
    """Not a Kubernetes quantity.

    Also a :class:`ValueError` so that pydantic reports it at the field's path when a model
    field's validation raises it.
    """


# The scanner of apimachinery's parseQuantityString: sign, digits, fraction, then the suffix
# letters, an optional sign and digits (the suffix is checked against the tables afterwards).
_QUANTITY = re.compile(r"([+-]?)([0-9]*)(?:\.([0-9]*))?([eEinumkKMGTP]*[+-]?[0-9]*)", re.ASCII)
_EXPONENT_SUFFIX = re.compile(r"[eE]([+-]?)0*([0-9]+)", re.ASCII)
_DECIMAL_SI = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_DECIMAL_SUFFIX = {power: suffix for suffix, power in _DECIMAL_SI.items()}
_BINARY_SI = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_BINARY_SUFFIX = ("", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei")
_NANO = Decimal("1e-9")
_QUANTITY_HINT = "a number with an optional suffix (m, k, M, G, Ki, Mi, Gi, …) or exponent (e3)"


def _exact_context(digits: int) -> decimal.Context:
    """A context in which nothing below rounds: enough digits, and exponents unbounded."""
    return decimal.Context(prec=digits + 40, Emax=decimal.MAX_EMAX, Emin=decimal.MIN_EMIN)


def _round_up_to_nano(value: Decimal, ctx: decimal.Context) -> Decimal:
    """Quantities hold nothing finer than 1n: Go rounds finer values away from zero, so that
    asking for a sliver of a resource still asks for some."""
    exponent = value.as_tuple().exponent
    if value and isinstance(exponent, int) and exponent < -9:
        return value.quantize(_NANO, rounding=decimal.ROUND_UP, context=ctx)
    return value


def parse_quantity(text: str) -> Decimal:
    """:func:`_parse_quantity`, remembered for the short texts that recur in pod after pod
    (``"100m"``, ``"64Mi"``: four parses of a pod's translation); a long one is not kept."""
    return (
        _parsed_quantity(text) if len(text) <= _REMEMBERED_QUANTITY_CHARS else _parse_quantity(text)
    )


_REMEMBERED_QUANTITY_CHARS = 32


@functools.lru_cache(maxsize=1024)
def _parsed_quantity(text: str) -> Decimal:
    return _parse_quantity(text)


def _parse_quantity(text: str) -> Decimal:
    """The exact value of a Kubernetes quantity: ``"500m"`` is 0.5, ``"1Gi"`` is 2**30.

    Mirrors apimachinery's ``ParseQuantity``: decimal SI suffixes (``n u m k M G T P E``),
    binary ones (``Ki Mi Gi Ti Pi Ei``) or an exponent (``1e3``, ``2E-3``); values are rounded
    away from zero to 1n, and binary ones are capped at 2**63-1 as Go does. Unlike Go we refuse
    a quantity without digits (Go reads ``"Gi"`` or ``"."`` as zero) and an exponent beyond
    int32 (which Go silently wraps), because either can only be a mistake.
    """
    match = _QUANTITY.fullmatch(text)
    if match is None or not (match[2] or match[3]):
        raise QuantityError(f"invalid quantity {_quote(text)}: expected {_QUANTITY_HINT}")
    number = match[1] + (match[2] or "0") + (f".{match[3]}" if match[3] else "")
    suffix = match[4]
    ctx = _exact_context(len(text))
    if suffix in _BINARY_SI:
        value = _round_up_to_nano(ctx.multiply(Decimal(number), 2 ** _BINARY_SI[suffix]), ctx)
        if abs(value) > INT64_MAX:
            value = Decimal(INT64_MAX).copy_sign(value)
    else:
        value = _round_up_to_nano(Decimal(f"{number}E{_decimal_exponent(text, suffix)}"), ctx)
    return value if value else Decimal(0)


def _decimal_exponent(text: str, suffix: str) -> int:
    """The power of ten a decimal SI suffix or an ``e``/``E`` exponent stands for."""
    if suffix in _DECIMAL_SI:
        return _DECIMAL_SI[suffix]
    match = _EXPONENT_SUFFIX.fullmatch(suffix)
    if match is None:
        raise QuantityError(f"invalid quantity {_quote(text)}: unknown suffix {_quote(suffix)}")
    magnitude = int(match[2]) if len(match[2]) <= 10 else INT32_MAX + 1
    exponent = -magnitude if match[1] == "-" else magnitude
    if not INT32_MIN <= exponent <= INT32_MAX:
        raise QuantityError(f"invalid quantity {_quote(text)}: exponent out of range")
    return exponent


def format_quantity(value: Decimal | int, *, binary: bool = False) -> str:
    """``value`` in the canonical form Go's ``Quantity.String()`` gives it.

    Decimal form uses the largest SI suffix that keeps an integer mantissa (``1.5`` is
    ``"1500m"``, ``256`` stays ``"256"``, ``3000`` is ``"3k"``); ``binary`` uses powers of 1024
    when the value is a whole number of at least 1024 (``2**40`` is ``"1Ti"``, 1.5 Gi is
    ``"1536Mi"``) and falls back to decimal otherwise, as Go does.
    """
    number = Decimal(value)
    if not number.is_finite():
        raise QuantityError(f"{value!r} is not a finite quantity")
    number = _round_up_to_nano(number, _exact_context(len(number.as_tuple().digits)))
    if not number:
        return "0"
    if binary and 1024 <= abs(number) <= INT64_MAX and number == number.to_integral_value():
        mantissa, power = int(number), 0
        while power < len(_BINARY_SUFFIX) - 1 and mantissa % 1024 == 0:
            mantissa //= 1024
            power += 1
        return f"{mantissa}{_BINARY_SUFFIX[power]}"
    negative, digit_tuple, exponent = number.as_tuple()
    assert isinstance(exponent, int)  # finite, checked above
    digits = "".join(map(str, digit_tuple))
    mantissa_text = digits.rstrip("0")
    exponent += len(digits) - len(mantissa_text)
    shift = exponent % 3  # SI suffixes step by 10**3
    mantissa_text += "0" * shift
    exponent -= shift
    suffix = _DECIMAL_SUFFIX.get(exponent, f"e{exponent}")
    return f"{'-' if negative else ''}{mantissa_text}{suffix}"


def validate_quantity(value: object) -> str:
    """The quantity string a decoded JSON value stands for, checked to parse.

    Go's ``Quantity`` also decodes a bare JSON number and trims spaces inside the string.
    """
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise QuantityError(f"expected a quantity such as '500m' or '1Gi', got {json_kind(value)}")
    text = value.strip() if isinstance(value, str) else repr(value)
    parse_quantity(text)
    return text


Quantity = Annotated[str, PlainValidator(validate_quantity)]
"""A quantity string as written (``"500m"``, ``"1Gi"``), checked to parse; see parse_quantity."""


# --- times, bytes, int-or-string -----------------------------------------------------------

_RFC3339 = re.compile(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.([0-9]+))?"
    r"(?:Z|([+-])([0-9]{2}):([0-9]{2}))",
    re.ASCII,
)


def parse_time(value: object) -> datetime:
    """An RFC 3339 time (as Go's ``time.Parse(time.RFC3339, …)``) or an aware datetime, in UTC.

    Naive datetimes and other formats are refused: a time without a zone would be read as
    local time by one side and UTC by the other.
    """
    if isinstance(value, datetime):
        if value.utcoffset() is None:
            raise ValueError("a time needs a timezone")
        moment = value
    elif isinstance(value, str):
        match = _RFC3339.fullmatch(value)
        if match is None:
            raise ValueError(
                f"{_quote(value)} is not an RFC 3339 time such as 2026-07-14T10:00:00Z"
            )
        year, month, day, hour, minute, second = (int(g) for g in match.groups()[:6])
        micros = int((match[7] or "0")[:6].ljust(6, "0"))
        offset = timedelta()
        if match[8]:
            offset = timedelta(hours=int(match[9]), minutes=int(match[10]))
            offset = -offset if match[8] == "-" else offset
        try:
            moment = datetime(
                year, month, day, hour, minute, second, micros, tzinfo=timezone(offset)
            )
        except ValueError as exc:
            raise ValueError(f"{_quote(value)} is not a valid time: {exc}") from None
    else:
        raise ValueError(f"expected an RFC 3339 time string, got {json_kind(value)}")
    try:
        return moment.astimezone(UTC)
    except OverflowError:
        raise ValueError(f"{value!s} is out of the supported time range") from None


def format_time(moment: datetime) -> str:
    """``metav1.Time`` JSON: UTC, whole seconds, ``Z`` (``2026-07-14T10:00:00Z``)."""
    t = moment.astimezone(UTC)
    return f"{t.year:04d}-{t.month:02d}-{t.day:02d}T{t.hour:02d}:{t.minute:02d}:{t.second:02d}Z"


Time = Annotated[
    datetime,
    PlainValidator(parse_time),
    PlainSerializer(format_time, return_type=str, when_used="json"),
]
"""``metav1.Time``: an aware datetime, written in RFC 3339 at second precision."""


def _decode_base64(value: object) -> bytes:
    """Go's ``[]byte`` JSON: standard base64 with padding, CR/LF ignored, as ``encoding/json``."""
    if isinstance(value, bytes):
        return value
    if not isinstance(value, str):
        raise ValueError(f"expected a base64 string, got {json_kind(value)}")
    try:
        return bytes(BYTES.decode(value, None, DecodeContext("")))
    except GoDecodeError as exc:
        raise ValueError(str(exc)) from None


Base64Data = Annotated[
    bytes,
    PlainValidator(_decode_base64),
    PlainSerializer(
        lambda b: base64.b64encode(b).decode("ascii"), return_type=str, when_used="json"
    ),
]
"""Bytes carried as base64 in JSON (``Secret.data``, ``ConfigMap.binaryData``)."""


def _int_or_string(value: object) -> int | str:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ValueError(f"expected a port number or name, got {json_kind(value)}")
    return value


IntOrString = Annotated[int | str, PlainValidator(_int_or_string)]
"""``intstr.IntOrString``, e.g. a probe port given as ``8080`` or ``"http"``."""


# --- base models ---------------------------------------------------------------------------


def wire_json(value: Any) -> bytes:
    """Compact JSON for Go's decoder. ASCII only: a lone surrogate that arrived as a ``\\ud800``
    escape goes back out as an escape (Go reads U+FFFD) instead of as invalid UTF-8."""
    return json.dumps(value, ensure_ascii=True, separators=(",", ":"), allow_nan=False).encode()


class WireOptions(TypedDict, total=False):
    """What a model leaves out of its JSON (pydantic's options of the same names)."""

    by_alias: bool
    exclude_unset: bool
    exclude_none: bool
    exclude_defaults: bool


class GoModel(BaseModel):
    """Base of models of a Go struct's JSON: read as strictly as Go reads it, written for Go."""

    model_config = ConfigDict(populate_by_name=True, strict=True)

    @model_validator(mode="before")
    @classmethod
    def _null_is_absent(cls, data: Any) -> Any:
        """Go decodes ``null`` into a field by leaving it at its zero value; so do we (on a
        copy, made only when there is a ``null``: every model of every pod passes here)."""
        if isinstance(data, dict) and None in data.values():
            return {key: value for key, value in data.items() if value is not None}
        return data

    WIRE: ClassVar[WireOptions] = {"by_alias": True, "exclude_none": True}
    """What is left out of the JSON: ``None`` fields here, more in some subclasses."""

    def to_wire(self) -> dict[str, Any]:
        """The JSON object (as Python values) with the Go keys, less what :attr:`WIRE` leaves
        out."""
        return self.model_dump(mode="json", **self.WIRE)

    def to_json(self) -> bytes:
        """:meth:`to_wire` encoded, ready to send: by pydantic's own encoder, in a third of the
        time (a pod's ``/status`` entry is written at each change). The same JSON in ASCII as
        :func:`wire_json` writes, spelled alike but for DEL (written as it is) and some small
        floats (``0.00001`` and ``1e-7`` for ``1e-05`` and ``1e-07``), which Go reads alike;
        a string holding a lone surrogate, which only :func:`wire_json` escapes, goes that
        way."""
        try:
            return self.model_dump_json(ensure_ascii=True, **self.WIRE).encode()
        except PydanticSerializationError:
            return wire_json(self.to_wire())
