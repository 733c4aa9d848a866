"""Property tests for ``dmsgw.gojson``: round trips and invariants over random values.

Deterministic (``derandomize``, no example database) and kept small so the suite stays fast.
"""

from __future__ import annotations

import base64
import dataclasses
import decimal
import json
import math
import struct
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dmsgw.gojson import (
    BYTES,
    FLOAT32,
    UINT64,
    GoDecodeError,
    GoStruct,
    compact_json,
    decode_any,
    decode_plain,
    encode_any,
    format_float32,
    format_float64,
    go_field,
    marshal,
    unmarshal,
)
from dmsgw.gojson import floats as floats_module
from dmsgw.gojson.base64 import CorruptInputError, go_base64_decode, go_base64_decode_exact
from dmsgw.gojson.floats import repr_digits, shortest_decimal
from tests.support.go_values import Leaf, Record

UINT64_MAX = (1 << 64) - 1
INT64_MIN = -(1 << 63)

PROPERTY = settings(
    max_examples=200,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
FEW = settings(PROPERTY, max_examples=100)

# Characters Go treats specially: HTML-unsafe, JS line separators, quotes, every kind of
# control character, DEL, BOM, the replacement character, astral and non-BMP characters.
TRICKY = (
    '<>&\u2028\u2029"\\/ \x00\x01\x07\x08\t\n\x0b\x0c\r\x1b\x1f\x7f\x80\u00a0\u00e9'
    "\u20ac\ufeff\ufffd\U0001f600\U0010ffff"
)
chars = st.one_of(st.sampled_from(TRICKY), st.characters(exclude_categories=["Cs"]))
texts = st.text(chars, max_size=12)
ints = st.one_of(
    st.integers(INT64_MIN, UINT64_MAX),
    st.sampled_from([0, -1, 1, 2**53 + 1, UINT64_MAX, INT64_MIN, (1 << 63) - 1]),
)
floats = st.floats(allow_nan=False, allow_infinity=False)
float32s = st.floats(allow_nan=False, allow_infinity=False, width=32)


def json_values(with_floats: bool) -> st.SearchStrategy[Any]:
    numbers = st.one_of(ints, floats) if with_floats else ints
    scalars = st.one_of(st.none(), st.booleans(), numbers, texts)
    return st.recursive(
        scalars,
        lambda inner: st.one_of(
            st.lists(inner, max_size=4), st.dictionaries(texts, inner, max_size=4)
        ),
        max_leaves=12,
    )


def same(a: Any, b: Any, signed_zero: bool = True) -> bool:
    """Equal as JSON values, modulo floats: a float equals the number it is written as, which
    may read back as an exact integer (``4.215193701546586e+16`` is written
    ``42151937015465860``); unless told otherwise the sign of a zero must match too."""
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        if isinstance(a, float) or isinstance(b, float):
            a, b = float(a), float(b)
        sign_ok = not signed_zero or math.copysign(1, a) == math.copysign(1, b)
        return a == b and sign_ok
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y, signed_zero) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k], signed_zero) for k in a)
    return type(a) is type(b) and a == b


HTML_ESCAPES = (
    ("<", "\\u003c"),
    (">", "\\u003e"),
    ("&", "\\u0026"),
    ("\u2028", "\\u2028"),
    ("\u2029", "\\u2029"),
)


def reference_go_json(value: Any) -> bytes:
    """The ``go_json()`` recipe of runtime-notes section 3.4, verified against Go for values
    without floats: compact ``json.dumps`` with sorted keys, then Go's HTML-safe escapes."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, sort_keys=True)
    for raw, escaped in HTML_ESCAPES:
        text = text.replace(raw, escaped)
    return text.encode()


# --- plain values through encode_any / decode_plain / decode_any ---------------------------


@PROPERTY
@given(json_values(with_floats=True))
def test_plain_values_round_trip(value: Any) -> None:
    assert same(decode_plain(encode_any(value)), value)


@PROPERTY
@given(json_values(with_floats=True))
def test_reencoding_decoded_go_output_is_the_identity_on_bytes(value: Any) -> None:
    encoded = encode_any(value)
    assert encode_any(decode_plain(encoded)) == encoded


def go_float64_of_integer(n: int) -> float | None:
    """Go's ``strconv.ParseFloat`` of an integer literal, by integer arithmetic alone: round to
    53 significant bits, ties to even; ``None`` where the result overflows (``ErrRange``)."""
    magnitude, shift = abs(n), max(abs(n).bit_length() - 53, 0)
    kept, rest = divmod(magnitude, 1 << shift)
    half = (1 << shift) >> 1
    if shift and (rest > half or (rest == half and kept & 1)):
        kept += 1
    rounded = kept << shift
    if rounded >= 1 << 1024:
        return None
    return math.copysign(float(rounded), n) if n else 0.0


wide_ints = st.one_of(
    ints,
    st.integers(-(10**25), 10**25),
    st.integers(2**1023, 2**1025),
    st.sampled_from([(1 << 1024) - (1 << 970) - 1, (1 << 1024) - (1 << 970), 10**400]),
)


@PROPERTY
@given(wide_ints)
def test_interface_numbers_are_go_float64s(n: int) -> None:
    expected = go_float64_of_integer(n)
    if expected is None:
        with pytest.raises(GoDecodeError) as info:
            decode_any(str(n))
        assert str(info.value) == f"json: cannot unmarshal number {n} into Go value of type float64"
        return
    decoded = decode_any(f"[{n}]")
    assert decoded == [expected] and isinstance(decoded[0], float)
    if abs(expected) < 1e21:  # Go writes the float's shortest digits, zero-padded ('f' format)
        text = format(decimal.Decimal(repr(expected)), "f").removesuffix(".0")
        assert encode_any(decoded) == f"[{text}]".encode()


@PROPERTY
@given(json_values(with_floats=True), st.booleans())
def test_raw_messages_are_remarshalled_compact_and_html_safe(value: Any, ascii_only: bool) -> None:
    # Go's appendCompact with HTML escaping: the same text without the whitespace between
    # tokens, and <, >, &, U+2028, U+2029 escaped; escapes and literals as written.
    pretty = json.dumps(value, indent=2, ensure_ascii=ascii_only).encode()
    compact = json.dumps(value, separators=(",", ":"), ensure_ascii=ascii_only).encode()
    for raw, escaped in HTML_ESCAPES:
        compact = compact.replace(raw.encode(), escaped.encode())
    assert compact_json(pretty) == compact
    assert marshal(Record(literal=pretty)) == marshal(Record(literal=compact))
    if not ascii_only:  # decoding writes strings in Go's spelling, which is Python's here
        assert unmarshal(Record, marshal(Record(literal=pretty))).literal == compact


@PROPERTY
@given(json_values(with_floats=True))
def test_output_is_compact_json_that_python_reads_as_the_same_value(value: Any) -> None:
    encoded = encode_any(value)
    # Python reads Go's "-0" as the integer 0, hence no sign check on zeros here.
    assert same(json.loads(encoded), value, signed_zero=False)
    assert b"\n" not in encoded  # newlines only ever appear escaped


@PROPERTY
@given(json_values(with_floats=True))
def test_html_characters_and_line_separators_never_appear_raw(value: Any) -> None:
    encoded = encode_any(value)
    for raw in (b"<", b">", b"&", "\u2028".encode(), "\u2029".encode()):
        assert raw not in encoded


@PROPERTY
@given(json_values(with_floats=False))
def test_float_free_values_match_the_verified_reference_recipe(value: Any) -> None:
    assert encode_any(value) == reference_go_json(value)


@PROPERTY
@given(st.text(st.one_of(chars, st.integers(0xD800, 0xDFFF).map(chr)), max_size=12))
def test_strings_with_lone_surrogates_still_encode_to_valid_utf8_json(text: str) -> None:
    encoded = encode_any(text)
    decoded = json.loads(encoded.decode("utf-8"))
    assert decoded == "".join("\ufffd" if 0xD800 <= ord(c) <= 0xDFFF else c for c in text)


# --- structs -------------------------------------------------------------------------------


leaves = st.builds(Leaf, name=texts, tag=texts)
records = st.builds(
    Record,
    text=texts,
    text_o=texts,
    flag=st.booleans(),
    nonce=st.integers(0, UINT64_MAX),
    delta=st.integers(INT64_MIN, (1 << 63) - 1),
    ratio=floats,
    cores=float32s,
    blob=st.none() | st.binary(max_size=10),
    blob_o=st.none() | st.binary(max_size=10),
    names=st.none() | st.lists(texts, max_size=3).map(tuple),
    counts=st.none() | st.dictionaries(texts, st.integers(0, UINT64_MAX), max_size=3),
    leaf=leaves,
    parent=st.none() | leaves,
    leaves=st.none() | st.lists(leaves, max_size=3).map(tuple),
    extra=json_values(with_floats=False),
    literal=st.none() | json_values(with_floats=True).map(encode_any),
)


@PROPERTY
@given(records)
def test_structs_round_trip_byte_exactly(record: Record) -> None:
    encoded = marshal(record)
    decoded = unmarshal(Record, encoded)
    assert marshal(decoded) == encoded
    # Fields without omitempty come back exactly (nil and empty stay distinct).
    for attr in ("text", "nonce", "blob", "names", "leaf", "leaves"):
        assert getattr(decoded, attr) == getattr(record, attr)
    assert decoded.ratio == record.ratio
    assert math.copysign(1, decoded.ratio) == math.copysign(1, record.ratio)


class _Object(list[tuple[str, Any]]):
    """A JSON object read as its pairs, to tell it from an array."""


def _reversed_objects(value: Any) -> Any:
    """Every JSON object with its keys in reverse order."""
    if isinstance(value, _Object):
        return {key: _reversed_objects(item) for key, item in reversed(value)}
    if isinstance(value, list):
        return [_reversed_objects(item) for item in value]
    return value


@PROPERTY
@given(records)
def test_key_order_case_and_whitespace_do_not_change_the_remarshalled_bytes(
    record: Record,
) -> None:
    # A Go receiver decodes reordered, re-cased (struct field names) and pretty-printed input
    # to the same struct, and re-marshals it in struct order again (a RawMessage keeps its
    # own key order, see test_raw_messages_are_remarshalled_compact_and_html_safe).
    record = dataclasses.replace(record, literal=None)
    encoded = marshal(record)
    reordered = _reversed_objects(json.loads(encoded, object_pairs_hook=_Object))
    recased = {key.upper(): item for key, item in reordered.items()}
    shuffled = json.dumps(recased, indent=2, ensure_ascii=True)
    assert marshal(unmarshal(Record, shuffled)) == encoded


@PROPERTY
@given(
    st.text(st.sampled_from("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_"), min_size=1),
    st.randoms(use_true_random=False),
)
def test_ascii_field_names_match_keys_in_any_letter_case(name: str, rng: Any) -> None:
    @dataclasses.dataclass(frozen=True, slots=True)
    class One(GoStruct):
        v: int = go_field(name, UINT64, default=0)

    key = "".join(c.swapcase() if rng.random() < 0.5 else c for c in name)
    assert unmarshal(One, json.dumps({key: 7})).v == 7


# --- numbers -------------------------------------------------------------------------------


@PROPERTY
@given(floats)
def test_float64_text_reads_back_exactly_and_uses_go_exponent_rules(f: float) -> None:
    text = format_float64(f)
    assert float(text) == f and math.copysign(1, float(text)) == math.copysign(1, f)
    exponent_form = f != 0 and (abs(f) < 1e-6 or abs(f) >= 1e21)
    assert ("e" in text) is exponent_form
    if exponent_form:
        _, exponent = text.split("e")
        assert exponent[0] in "+-"
        assert len(exponent) >= 3 if exponent[0] == "+" else not exponent[1:].startswith("0")


@PROPERTY
@given(floats.filter(lambda f: f != 0))
def test_float64_digits_are_the_shortest_nearest_ones(f: float) -> None:
    # The exact shortest/nearest search used for float32, run at 64 bits, agrees with repr().
    assert shortest_decimal(f, 64) == repr_digits(f)
    digits, _ = repr_digits(f)
    for n in range(1, len(digits)):
        assert float(f"{f:.{n - 1}e}") != f


@dataclasses.dataclass(frozen=True, slots=True)
class Cores(GoStruct):
    v: float = go_field("v", FLOAT32, default=0.0)


@PROPERTY
@given(float32s)
def test_float32_text_is_the_shortest_that_reads_back_as_the_same_float32(f: float) -> None:
    text = format_float32(f)
    decoded = unmarshal(Cores, f'{{"v":{text}}}').v
    assert decoded == f and math.copysign(1, decoded) == math.copysign(1, f)
    assert marshal(Cores(f)) == f'{{"v":{text}}}'.encode()
    if f != 0:
        digits, _ = shortest_decimal(f, 32)
        for n in range(1, len(digits)):
            shorter = f"{f:.{n - 1}e}"
            try:
                assert unmarshal(Cores, f'{{"v":{shorter}}}').v != f
            except GoDecodeError:  # rounded up past the largest float32: Go's ErrRange
                assert abs(float(shorter)) > 3.4028234663852886e38


def test_a_float32_written_again_is_searched_once_and_keeps_its_sign(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The shortest digits of a float32 (the cores each peer reports, consolidated at every
    gathering) are searched once per magnitude; the sign and zero are written as before."""
    searched: list[float] = []
    search = floats_module.shortest_decimal

    def counting(f: float, bits: int) -> tuple[str, int]:
        searched.append(f)
        return search(f, bits)

    monkeypatch.setattr(floats_module, "shortest_decimal", counting)
    floats_module._magnitude_float32.cache_clear()
    texts = [format_float32(v) for v in (0.1, 0.1, -0.1, 8.0, -8.0, 1e-7, 0.0, -0.0)]
    assert texts == ["0.1", "0.1", "-0.1", "8", "-8", "1e-7", "0", "-0"]
    assert len(searched) == 3  # 0.1, 8 and 1e-7: once each


@PROPERTY
@given(floats)
def test_float32_encoding_rounds_like_a_go_float32_conversion(f: float) -> None:
    try:
        expected = struct.unpack("<f", struct.pack("<f", f))[0]
    except OverflowError:
        return
    assert format_float32(f) == format_float32(expected)


@PROPERTY
@given(st.integers(INT64_MIN - 10, UINT64_MAX + 10))
def test_uint64_accepts_exactly_its_range(n: int) -> None:
    @dataclasses.dataclass(frozen=True, slots=True)
    class Counter(GoStruct):
        n: int = go_field("n", UINT64, default=0)

    text = f'{{"n":{n}}}'
    if 0 <= n <= UINT64_MAX:
        assert unmarshal(Counter, text).n == n
        assert marshal(Counter(n)) == text.encode()
    else:
        try:
            unmarshal(Counter, text)
        except GoDecodeError as exc:
            assert str(exc).startswith(f"json: cannot unmarshal number {n} into")
        else:
            raise AssertionError("out of range uint64 accepted")


# --- []byte --------------------------------------------------------------------------------


@PROPERTY
@given(st.binary(max_size=64))
def test_bytes_round_trip_through_padded_standard_base64(data: bytes) -> None:
    @dataclasses.dataclass(frozen=True, slots=True)
    class Blob(GoStruct):
        b: bytes | None = go_field("b", BYTES, default=None)

    encoded = marshal(Blob(data))
    assert encoded == f'{{"b":"{base64.b64encode(data).decode()}"}}'.encode()
    assert unmarshal(Blob, encoded).b == data


def _outcome(decode: Any, data: bytes) -> bytes | int:
    try:
        result: bytes = decode(data)
    except CorruptInputError as exc:
        return exc.offset
    return result


@FEW
@given(st.text(st.sampled_from("AQgw+/=\n\r* \u00e9"), max_size=14))
def test_fast_base64_path_agrees_with_the_port_of_go_decoder(text: str) -> None:
    data = text.encode()
    assert _outcome(go_base64_decode, data) == _outcome(go_base64_decode_exact, data)


@FEW
@given(st.binary(max_size=24), st.lists(st.integers(0, 40), max_size=4))
def test_newlines_anywhere_in_base64_are_ignored(data: bytes, cuts: list[int]) -> None:
    text = base64.b64encode(data).decode()
    for cut in sorted(cuts, reverse=True):
        text = text[:cut] + "\r\n" + text[cut:]
    assert go_base64_decode(text.encode()) == data
