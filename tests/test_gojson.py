"""``dmsgw.gojson`` against Go ``encoding/json``, rule by rule.

Expected outputs are Go's: either from the golden vectors the DMS Go code produced
(``tests/vectors``), or from Go's own sources and tests (``encoding/json`` ``floatEncoder`` and
``encodeState.string``, ``encoding/base64`` ``TestDecodeCorrupt``, ``strings.EqualFold``).
"""

from __future__ import annotations

import dataclasses
import math
import re
import struct
import sys
from typing import Any

import pytest

from dmsgw.gojson import (
    ANY,
    BYTES,
    FLOAT32,
    FLOAT64,
    INT64,
    RAW,
    STRING,
    UINT64,
    DecodeContext,
    GoDecodeError,
    GoEncodeError,
    GoStruct,
    GoType,
    MapOf,
    Ptr,
    SliceOf,
    StructOf,
    compact_json,
    decode_any,
    decode_plain,
    encode_any,
    encode_string,
    format_float32,
    format_float64,
    go_field,
    marshal,
    unmarshal,
)
from tests.support.go_values import EVERYTHING_ZERO, Everything, Inner
from tests.support.vectors import load_vector

UINT64_MAX = (1 << 64) - 1
INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1


def f32(x: float) -> float:
    """``float32(x)`` as a Python float."""
    return float(struct.unpack("<f", struct.pack("<f", x))[0])


# --- Go structs used by the tests ----------------------------------------------------------


# The DMS actor envelope (actor/interface.go, dms-wire.md section 3).
@dataclasses.dataclass(frozen=True, slots=True)
class IDView(GoStruct):
    GO_NAME = "ID"
    pub: str = go_field("pub", STRING, default="")


@dataclasses.dataclass(frozen=True, slots=True)
class DIDView(GoStruct):
    GO_NAME = "DID"
    uri: str = go_field("uri", STRING, omitempty=True, default="")


@dataclasses.dataclass(frozen=True, slots=True)
class Address(GoStruct):
    GO_NAME = "Address"
    host: str = go_field("host", STRING, omitempty=True, default="")
    inbox: str = go_field("inbox", STRING, omitempty=True, default="")


@dataclasses.dataclass(frozen=True, slots=True)
class Handle(GoStruct):
    GO_NAME = "Handle"
    id: IDView = go_field("id", StructOf(IDView), default_factory=IDView)
    did: DIDView = go_field("did", StructOf(DIDView), default_factory=DIDView)
    addr: Address = go_field("addr", StructOf(Address), default_factory=Address)


@dataclasses.dataclass(frozen=True, slots=True)
class EnvelopeOptions(GoStruct):
    GO_NAME = "EnvelopeOptions"
    exp: int = go_field("exp", UINT64, default=0)
    cont: str = go_field("cont", STRING, omitempty=True, default="")
    topic: str = go_field("topic", STRING, omitempty=True, default="")


@dataclasses.dataclass(frozen=True, slots=True)
class Envelope(GoStruct):
    GO_NAME = "Envelope"
    to: Handle = go_field("to", StructOf(Handle), default_factory=Handle)
    be: str = go_field("be", STRING, default="")
    from_: Handle = go_field("from", StructOf(Handle), default_factory=Handle)
    nonce: int = go_field("nonce", UINT64, default=0)
    opt: EnvelopeOptions = go_field(
        "opt", StructOf(EnvelopeOptions), default_factory=EnvelopeOptions
    )
    msg: bytes | None = go_field("msg", BYTES, default=None)
    cap: bytes | None = go_field("cap", BYTES, omitempty=True, default=None)
    sig: bytes | None = go_field("sig", BYTES, omitempty=True, default=None)


# The DMS capability token (lib/ucan/token.go, dms-wire.md section 5); Token and DMSToken
# refer to each other, so the Token type is resolved lazily.
class _TokenType(GoType):
    go_name = "Token"

    def encode(self, value: Any, out: list[str]) -> None:
        StructOf(Token).encode(value, out)

    def decode(self, raw: Any, current: Any, ctx: DecodeContext) -> Any:
        return StructOf(Token).decode(raw, current, ctx)

    def zero(self) -> Any:
        return Token()


TOKEN = _TokenType()


@dataclasses.dataclass(frozen=True, slots=True)
class DMSToken(GoStruct):
    GO_NAME = "DMSToken"
    act: str = go_field("act", STRING, default="")
    iss: DIDView = go_field("iss", StructOf(DIDView), default_factory=DIDView)
    sub: DIDView = go_field("sub", StructOf(DIDView), default_factory=DIDView)
    aud: DIDView = go_field("aud", StructOf(DIDView), default_factory=DIDView)
    topic: tuple[str, ...] | None = go_field("topic", SliceOf(STRING), omitempty=True, default=None)
    cap: tuple[str, ...] | None = go_field("cap", SliceOf(STRING), default=None)
    nonce: bytes | None = go_field("nonce", BYTES, default=None)
    exp: int = go_field("exp", UINT64, default=0)
    depth: int = go_field("depth", UINT64, omitempty=True, default=0)
    chain: Any = go_field("chain", Ptr(TOKEN), omitempty=True, default=None)
    sig: bytes | None = go_field("sig", BYTES, omitempty=True, default=None)


@dataclasses.dataclass(frozen=True, slots=True)
class Token(GoStruct):
    GO_NAME = "Token"
    dms: DMSToken | None = go_field("dms", Ptr(StructOf(DMSToken)), omitempty=True, default=None)
    ucan: Any = go_field("ucan", Ptr(ANY), omitempty=True, default=None)


@dataclasses.dataclass(frozen=True, slots=True)
class TokenList(GoStruct):
    GO_NAME = "TokenList"
    tok: tuple[Token | None, ...] | None = go_field(
        "tok", SliceOf(Ptr(TOKEN)), omitempty=True, default=None
    )


# The newest DMS hardware CPU type: cores is a Go float32 (types/hardware.go).
@dataclasses.dataclass(frozen=True, slots=True)
class CPU(GoStruct):
    GO_NAME = "CPU"
    cores: float = go_field("cores", FLOAT32, omitempty=True, default=0.0)
    clock_speed: float = go_field("clock_speed", FLOAT64, omitempty=True, default=0.0)


def encode_value(gotype: GoType, value: Any) -> str:
    out: list[str] = []
    gotype.encode(value, out)
    return "".join(out)


# --- golden vectors from the DMS Go code ---------------------------------------------------

ENVELOPES = load_vector("envelopes.json")
TOKENS = load_vector("tokens.json")


@pytest.mark.parametrize("case", ENVELOPES["cases"], ids=lambda c: c["name"])
def test_go_envelope_bytes_survive_decode_and_remarshal(case: dict[str, Any]) -> None:
    wire = case["envelope_json"].encode()
    envelope = unmarshal(Envelope, wire)
    assert marshal(envelope) == wire
    signed = b"dms:msg:" + marshal(dataclasses.replace(envelope, sig=None))
    assert signed == case["signature_data_text"].encode()


@pytest.mark.parametrize(
    "case",
    [c for c in ENVELOPES["receiver_variants"]["cases"] if c.get("go_remarshal")],
    ids=lambda c: c["name"],
)
def test_received_bytes_remarshal_exactly_as_go_remarshals_them(case: dict[str, Any]) -> None:
    envelope = unmarshal(Envelope, case["received_json"].encode())
    assert marshal(envelope) == case["go_remarshal"].encode()


def test_float_expiry_is_go_decode_error_with_go_message() -> None:
    case = next(c for c in ENVELOPES["receiver_variants"]["cases"] if c["name"] == "exp_as_float")
    go_error = case["verify"]["error"].removeprefix("unmarshal: ")
    assert go_error == (
        "json: cannot unmarshal number 4.1024448e+18 into Go struct field Envelope.opt.exp "
        "of type uint64"
    )
    with pytest.raises(GoDecodeError) as info:
        unmarshal(Envelope, case["received_json"])
    assert str(info.value) == go_error


def _token_json_vectors() -> list[tuple[str, str]]:
    found = []
    for name, entry in TOKENS["tokens"].items():
        if "tokens_json" in entry:
            found.append((name, entry["tokens_json"]))
    return found


@pytest.mark.parametrize(("name", "text"), _token_json_vectors(), ids=lambda v: str(v)[:40])
def test_go_token_lists_survive_decode_and_remarshal(name: str, text: str) -> None:
    assert marshal(unmarshal(TokenList, text)) == text.encode(), name


def _token_signature_vectors() -> list[str]:
    found = []
    for entry in TOKENS["tokens"].values():
        found.extend(entry.get("signature_data", []))
    return found


@pytest.mark.parametrize("text", _token_signature_vectors(), ids=lambda t: t[10:40])
def test_go_token_signature_data_survives_decode_and_remarshal(text: str) -> None:
    body = text.removeprefix("dms:token:")
    assert marshal(unmarshal(DMSToken, body)) == body.encode()


def test_revocation_token_keeps_nil_cap_as_null_and_empty_audience_as_empty_object() -> None:
    token = DMSToken(act="revoke", iss=DIDView("did:key:z6Mk"), nonce=b"\x01", exp=1)
    assert marshal(token) == (
        b'{"act":"revoke","iss":{"uri":"did:key:z6Mk"},"sub":{},"aud":{},"cap":null,'
        b'"nonce":"AQ==","exp":1}'
    )


# --- strings -------------------------------------------------------------------------------


def test_html_characters_and_line_separators_are_escaped_like_go() -> None:
    # The string of encoding/json TestHTMLEscape, with the output Go expects there.
    assert encode_string("<html>foo &\u2028 \u2029</html>") == (
        '"\\u003chtml\\u003efoo \\u0026\\u2028 \\u2029\\u003c/html\\u003e"'
    )


@pytest.mark.parametrize("code", range(0x20))
def test_control_characters_are_escaped_like_go_1_22(code: int) -> None:
    short = {0x08: "\\b", 0x09: "\\t", 0x0A: "\\n", 0x0C: "\\f", 0x0D: "\\r"}
    expected = short.get(code, f"\\u{code:04x}")
    assert encode_string(chr(code)) == f'"{expected}"'


def test_quote_backslash_and_slash_are_written_as_go_writes_them() -> None:
    assert encode_string('a"b\\c/d') == '"a\\"b\\\\c/d"'


def test_delete_and_other_non_ascii_characters_are_raw_utf8() -> None:
    text = "\x7f ü é € 中 😀 \U0010ffff \ufeff \u00a0"
    assert encode_string(text) == f'"{text}"'
    assert encode_any(text) == f'"{text}"'.encode()


def test_lone_surrogates_are_written_as_replacement_character_escapes() -> None:
    assert encode_string("a\ud800b\udfffc") == '"a\\ufffdb\\ufffdc"'
    assert encode_string("\ud83d\ude00") == '"\\ufffd\\ufffd"'  # not a pair in a str


def test_html_characters_are_escaped_in_map_keys_and_field_names() -> None:
    assert encode_any({"<k>": "&"}) == b'{"\\u003ck\\u003e":"\\u0026"}'

    @dataclasses.dataclass(frozen=True, slots=True)
    class Tagged(GoStruct):
        v: int = go_field("a<b>&c", UINT64, default=0)

    assert marshal(Tagged(1)) == b'{"a\\u003cb\\u003e\\u0026c":1}'
    assert unmarshal(Tagged, b'{"a<b>&c":7}') == Tagged(7)


def test_envelope_with_html_and_unicode_strings_matches_go_bytes() -> None:
    case = next(c for c in ENVELOPES["cases"] if c["name"] == "envelope_strings_html_unicode")
    wire = case["envelope_json"].encode()
    assert b"<" not in wire and b"\\u003c" in wire and b"\\u2028" in wire
    assert marshal(unmarshal(Envelope, wire)) == wire


def test_control_characters_in_envelope_match_go_bytes() -> None:
    case = next(c for c in ENVELOPES["cases"] if c["name"] == "control_chars_in_strings")
    wire = case["envelope_json"].encode()
    envelope = unmarshal(Envelope, wire)
    assert marshal(envelope) == wire
    assert "\x7f" in envelope.opt.cont + envelope.be + envelope.from_.addr.inbox


# --- numbers -------------------------------------------------------------------------------

GO_FLOAT64 = [
    # value, json.Marshal(value) (encoding/json floatEncoder(64))
    (0.0, "0"),
    (-0.0, "-0"),
    (1.0, "1"),
    (-1.5, "-1.5"),
    (0.1, "0.1"),
    (0.1 + 0.2, "0.30000000000000004"),
    (100.0, "100"),
    (123456789.0, "123456789"),
    (1e20, "100000000000000000000"),
    (12345678901234567890.0, "12345678901234567000"),
    (math.nextafter(1e21, 0), "999999999999999900000"),
    (1e21, "1e+21"),
    (1.23e23, "1.23e+23"),
    (1e100, "1e+100"),
    (1.5e300, "1.5e+300"),
    (1.7976931348623157e308, "1.7976931348623157e+308"),
    (0.000001, "0.000001"),
    (0.0000012345, "0.0000012345"),
    (math.nextafter(1e-6, 0), "9.999999999999997e-7"),
    (9.99e-7, "9.99e-7"),
    (1e-7, "1e-7"),
    (-2.5e-8, "-2.5e-8"),
    (1e-9, "1e-9"),
    (1e-10, "1e-10"),
    (1.5e-10, "1.5e-10"),
    (1e-100, "1e-100"),
    (5e-324, "5e-324"),
    (float(2**53 + 2), "9007199254740994"),
]


@pytest.mark.parametrize(("value", "expected"), GO_FLOAT64, ids=[e for _, e in GO_FLOAT64])
def test_float64_is_formatted_like_go_encoding_json(value: float, expected: str) -> None:
    assert format_float64(value) == expected
    assert encode_value(FLOAT64, value) == expected
    assert encode_any(value) == expected.encode()


def test_negative_two_digit_exponents_lose_their_leading_zero_but_positive_ones_keep_it() -> None:
    # encoding/json: `clean up e-09 to e-9`; strconv 'e' always writes two exponent digits.
    assert format_float64(3e-9) == "3e-9"
    assert format_float64(3e-19) == "3e-19"
    assert format_float64(3e21) == "3e+21"
    assert format_float64(3e-300) == "3e-300"


@pytest.mark.parametrize(
    ("value", "name"), [(math.nan, "NaN"), (math.inf, "+Inf"), (-math.inf, "-Inf")]
)
def test_non_finite_floats_are_go_unsupported_value_errors(value: float, name: str) -> None:
    for encode in (format_float64, format_float32, encode_any):
        with pytest.raises(GoEncodeError, match=f"^json: unsupported value: {re.escape(name)}$"):
            encode(value)


GO_FLOAT32 = [
    # value (rounded to float32 first), json.Marshal(float32(value)) (floatEncoder(32))
    (0.0, "0"),
    (-0.0, "-0"),
    (1.0, "1"),
    (0.1, "0.1"),
    (0.2, "0.2"),
    (1.1, "1.1"),
    (2.5, "2.5"),
    (1 / 3, "0.33333334"),
    (100.5, "100.5"),
    (16777216.0, "16777216"),
    (16777217.0, "16777216"),  # not a float32: rounds to even
    (3.4028234663852886e38, "3.4028235e+38"),
    (1e20, "100000000000000000000"),
    (1e21, "1e+21"),
    (1e-6, "0.000001"),
    (1e-7, "1e-7"),
    (1e-45, "1e-45"),
    (-2.5e-10, "-2.5e-10"),
]


@pytest.mark.parametrize(("value", "expected"), GO_FLOAT32, ids=[e for _, e in GO_FLOAT32])
def test_float32_is_formatted_with_32_bit_shortest_digits(value: float, expected: str) -> None:
    assert format_float32(value) == expected
    assert encode_value(FLOAT32, value) == expected


def test_float32_and_float64_of_the_same_value_differ_as_in_go() -> None:
    value = f32(0.1)
    assert format_float32(value) == "0.1"
    assert format_float64(value) == "0.10000000149011612"


def test_float32_out_of_range_is_unsupported_value_infinity() -> None:
    with pytest.raises(GoEncodeError, match=r"^json: unsupported value: \+Inf$"):
        format_float32(1e39)
    assert format_float32(3.4028235e38) == "3.4028235e+38"


def test_float32_resources_cores_round_trip_and_omitempty() -> None:
    assert marshal(CPU()) == b"{}"
    assert marshal(CPU(cores=1)) == b'{"cores":1}'
    assert marshal(CPU(cores=0.1, clock_speed=3.5e9)) == b'{"cores":0.1,"clock_speed":3500000000}'
    decoded = unmarshal(CPU, b'{"cores":0.1,"clock_speed":3500000000}')
    assert decoded.cores == f32(0.1)
    assert marshal(decoded) == b'{"cores":0.1,"clock_speed":3500000000}'


@pytest.mark.parametrize(
    ("literal", "expected"),
    [
        # exactly halfway between float32(1) and the next float32: ties to even
        ("1.000000059604644775390625", 1.0),
        # a hair above / below the midpoint, though both read as the same float64
        ("1.0000000596046447753906251", 1.0000001192092896),
        ("1.0000000596046447753906249", 1.0),
        ("3.4028235e38", 3.4028234663852886e38),
        ("340282356779733661637539395458142568447", 3.4028234663852886e38),
        ("1e-46", 0.0),
        ("-0", -0.0),
        ("7", 7.0),
    ],
)
def test_float32_decoding_rounds_the_decimal_directly_like_parsefloat_32(
    literal: str, expected: float
) -> None:
    decoded = unmarshal(CPU, f'{{"cores":{literal}}}')
    assert decoded.cores == expected
    assert math.copysign(1, decoded.cores) == math.copysign(1, expected)


@pytest.mark.parametrize(
    "literal", ["3.5e38", "340282356779733661637539395458142568448", "1e400", "-1e39"]
)
def test_float32_overflow_on_decode_is_go_type_error(literal: str) -> None:
    with pytest.raises(GoDecodeError) as info:
        unmarshal(CPU, f'{{"cores":{literal}}}')
    assert str(info.value) == (
        f"json: cannot unmarshal number {literal} into Go struct field CPU.cores of type float32"
    )


@pytest.mark.parametrize("literal", ["1e400", "-1e309", "1" + "0" * 400])
def test_float64_overflow_on_decode_is_go_type_error(literal: str) -> None:
    with pytest.raises(GoDecodeError) as info:
        unmarshal(Everything, f'{{"f":{literal}}}')
    assert str(info.value) == (
        f"json: cannot unmarshal number {literal} into Go struct field Everything.f of type float64"
    )


def test_float64_decoding_keeps_negative_zero_and_underflows_to_zero() -> None:
    decoded = unmarshal(Everything, b'{"f":-0,"f_o":1e-400}')
    assert decoded.f == 0 and math.copysign(1, decoded.f) == -1
    assert decoded.f_o == 0
    assert marshal(decoded).startswith(b'{"s":"","flag":false,"u":0,"i":0,"f":-0,')


def test_uint64_is_exact_over_the_whole_range() -> None:
    for value in (0, 1, 2**53 + 1, 4102444800000000000, UINT64_MAX):
        text = f'{{"u":{value}}}'
        assert unmarshal(Everything, text).u == value
        assert encode_value(UINT64, value) == str(value)


def test_int64_is_exact_over_the_whole_range() -> None:
    for value in (INT64_MIN, -1, 0, INT64_MAX):
        assert unmarshal(Everything, f'{{"i":{value}}}').i == value
        assert encode_value(INT64, value) == str(value)


@pytest.mark.parametrize(
    ("field", "literal", "gotype"),
    [
        ("u", "18446744073709551616", "uint64"),
        ("u", "-1", "uint64"),
        ("u", "-0", "uint64"),  # strconv.ParseUint rejects "-0"
        ("u", "1.0", "uint64"),
        ("u", "1e3", "uint64"),
        ("u", "4.1024448e+18", "uint64"),
        ("i", "9223372036854775808", "int"),
        ("i", "-9223372036854775809", "int"),
        ("i", "0.5", "int"),
    ],
)
def test_integer_fields_reject_what_strconv_rejects(field: str, literal: str, gotype: str) -> None:
    with pytest.raises(GoDecodeError) as info:
        unmarshal(Everything, f'{{"{field}":{literal}}}')
    assert str(info.value) == (
        f"json: cannot unmarshal number {literal} into Go struct field Everything.{field} "
        f"of type {gotype}"
    )


def test_negative_zero_is_a_valid_signed_integer() -> None:
    assert unmarshal(Everything, b'{"i":-0}').i == 0


@pytest.mark.parametrize(
    ("gotype", "value"),
    [(UINT64, -1), (UINT64, UINT64_MAX + 1), (INT64, INT64_MAX + 1), (UINT64, True)],
)
def test_out_of_range_integers_cannot_be_encoded(gotype: GoType, value: int) -> None:
    with pytest.raises(GoEncodeError):
        encode_value(gotype, value)


# --- structs: order, omitempty, nil versus empty -------------------------------------------


def test_zero_struct_keeps_declaration_order_and_omits_only_omitempty_fields() -> None:
    assert marshal(Everything()) == EVERYTHING_ZERO.encode()


def test_every_kind_of_value_is_encoded_in_declaration_order() -> None:
    value = Everything(
        s="s",
        s_o="o",
        flag=True,
        flag_o=True,
        u=UINT64_MAX,
        u_o=1,
        i=INT64_MIN,
        i_o=-1,
        f=1.5,
        f_o=1e21,
        f32=0.1,
        raw=b"\x00\x01",
        raw_o=b"abc",
        list_=("a", "<"),
        list_o=("x",),
        map_={"b": 2, "a": 1},
        map_o={"k": 0},
        ptr=Inner("p"),
        ptr_o=Inner("q", "r"),
        inner=Inner("i"),
        inner_o=Inner("j"),
        any_={"z": [1, "two", None, True]},
        any_o=0,
    )
    expected = (
        '{"s":"s","s_o":"o","flag":true,"flag_o":true,"u":18446744073709551615,"u_o":1,'
        '"i":-9223372036854775808,"i_o":-1,"f":1.5,"f_o":1e+21,"f32":0.1,"raw":"AAE=",'
        '"raw_o":"YWJj","list":["a","\\u003c"],"list_o":["x"],"map":{"a":1,"b":2},'
        '"map_o":{"k":0},"ptr":{"a":"p"},"ptr_o":{"a":"q","b":"r"},"inner":{"a":"i"},'
        '"inner_o":{"a":"j"},"any":{"z":[1,"two",null,true]},"any_o":0}'
    )
    assert marshal(value) == expected.encode()
    assert marshal(unmarshal(Everything, expected)) == expected.encode()


def test_omitempty_drops_empty_slices_maps_and_bytes_but_not_nested_structs() -> None:
    value = Everything(raw_o=b"", list_o=(), map_o={}, ptr_o=None, any_o=None)
    assert marshal(value) == EVERYTHING_ZERO.encode()


def test_nil_and_empty_slices_maps_and_bytes_differ_without_omitempty() -> None:
    empty = Everything(raw=b"", list_=(), map_={})
    assert b'"raw":"","list":[],"map":{}' in marshal(empty)
    assert b'"raw":null,"list":null,"map":null' in marshal(Everything())
    decoded = unmarshal(Everything, marshal(empty))
    assert (decoded.raw, decoded.list_, decoded.map_) == (b"", (), {})
    decoded = unmarshal(Everything, marshal(Everything()))
    assert (decoded.raw, decoded.list_, decoded.map_) == (None, None, None)


@pytest.mark.parametrize(
    ("data", "encoded"),
    [
        (b"", ""),
        (b"\x01", "AQ=="),
        (b"\x01\x02", "AQI="),
        (b"\x01\x02\x03", "AQID"),
        (b"\xfb\xff\xbf", "+/+/"),
    ],
)
def test_bytes_are_padded_standard_base64(data: bytes, encoded: str) -> None:
    assert encode_value(BYTES, data) == f'"{encoded}"'
    assert unmarshal(Everything, f'{{"raw":"{encoded}"}}').raw == data


def test_map_keys_are_sorted_by_code_point_like_go_byte_order() -> None:
    value = {"b": 1, "a": 2, "B": 3, "é": 4, "\u2028": 5, "😀": 6, "aa": 7}
    assert encode_any(value) == ('{"B":3,"a":2,"aa":7,"b":1,"é":4,"\\u2028":5,"😀":6}'.encode())
    assert encode_value(MapOf(UINT64), value) == encode_any(value).decode()


def test_any_encodes_structs_bytes_and_sequences() -> None:
    assert encode_any([Inner("x"), b"\x01", ("a",), None]) == b'[{"a":"x"},"AQ==",["a"],null]'
    with pytest.raises(GoEncodeError, match="unsupported type"):
        encode_any({1, 2})
    with pytest.raises(GoEncodeError, match="map keys must be strings"):
        encode_any({1: "x"})


# --- decoding ------------------------------------------------------------------------------


def test_unknown_fields_are_ignored() -> None:
    assert unmarshal(Inner, b'{"zzz":[1,{"a":2}],"a":"x","b2":"y"}') == Inner("x")


def test_duplicate_keys_last_one_wins() -> None:
    assert unmarshal(Inner, b'{"a":"1","a":"2"}') == Inner("2")
    assert unmarshal(Inner, b'{"a":"1","A":"2"}') == Inner("2")
    assert unmarshal(Inner, b'{"A":"1","a":"2"}') == Inner("2")


def test_null_leaves_non_pointer_fields_unchanged_and_nils_the_others() -> None:
    data = (
        b'{"s":"x","flag":true,"u":1,"f":2,"f32":3,"inner":{"a":"i"},"raw":"AQ==",'
        b'"list":["a"],"map":{"a":1},"ptr":{"a":"p"},"any":1,'
        b'"s":null,"flag":null,"u":null,"f":null,"f32":null,"inner":null,"raw":null,'
        b'"list":null,"map":null,"ptr":null,"any":null}'
    )
    decoded = unmarshal(Everything, data)
    assert (decoded.s, decoded.flag, decoded.u, decoded.f, decoded.f32) == ("x", True, 1, 2, 3)
    assert decoded.inner == Inner("i")
    assert (decoded.raw, decoded.list_, decoded.map_, decoded.ptr, decoded.any_) == (
        None,
        None,
        None,
        None,
        None,
    )


def test_top_level_null_is_the_zero_value() -> None:
    assert unmarshal(Everything, b"null") == unmarshal(Everything, b"{}")
    assert marshal(unmarshal(Everything, b" null ")) == EVERYTHING_ZERO.encode()


def test_a_repeated_struct_key_decodes_into_the_existing_struct() -> None:
    assert unmarshal(Everything, b'{"inner":{"a":"1","b":"2"},"inner":{"a":"3"}}').inner == (
        Inner("3", "2")
    )
    assert unmarshal(Everything, b'{"ptr":{"a":"1","b":"2"},"ptr":{"a":"3"}}').ptr == (
        Inner("3", "2")
    )


def test_a_repeated_slice_key_decodes_into_the_existing_elements() -> None:
    @dataclasses.dataclass(frozen=True, slots=True)
    class Holder(GoStruct):
        items: tuple[Inner, ...] | None = go_field("items", SliceOf(StructOf(Inner)), default=None)

    data = b'{"items":[{"a":"1","b":"2"},{"a":"3"}],"items":[{"a":"4"}]}'
    assert unmarshal(Holder, data).items == (Inner("4", "2"),)
    assert unmarshal(Holder, b'{"items":[{"a":"1"}],"items":[]}').items == ()


def test_a_repeated_map_key_keeps_existing_entries_but_replaces_values() -> None:
    @dataclasses.dataclass(frozen=True, slots=True)
    class Holder(GoStruct):
        m: dict[str, Inner] | None = go_field("m", MapOf(StructOf(Inner)), default=None)

    data = b'{"m":{"x":{"a":"1","b":"2"}},"m":{"y":{"a":"3"},"x":{"a":"4"}}}'
    assert unmarshal(Holder, data).m == {"x": Inner("4"), "y": Inner("3")}


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b'{"s":true}', "bool into Go struct field Everything.s of type string"),
        (b'{"s":[]}', "array into Go struct field Everything.s of type string"),
        (b'{"s":{}}', "object into Go struct field Everything.s of type string"),
        (b'{"u":"1"}', "string into Go struct field Everything.u of type uint64"),
        (b'{"u":false}', "bool into Go struct field Everything.u of type uint64"),
        (b'{"f":"1.5"}', "string into Go struct field Everything.f of type float64"),
        (b'{"raw":true}', "bool into Go struct field Everything.raw of type []uint8"),
        (b'{"list":{}}', "object into Go struct field Everything.list of type []string"),
        (b'{"map":[]}', "array into Go struct field Everything.map of type map[string]uint64"),
        (b'{"map":{"k":"v"}}', "string into Go struct field Everything.map.k of type uint64"),
        (b'{"inner":{"a":{}}}', "object into Go struct field Everything.inner.a of type string"),
    ],
)
def test_wrong_json_types_are_go_unmarshal_type_errors(data: bytes, message: str) -> None:
    # The struct named is the root type and the path runs from it, as in the DMS vector
    # "Envelope.opt.exp" (Go's jsonv2-backed encoding/json; classic v1 names the innermost
    # struct instead).
    with pytest.raises(GoDecodeError) as info:
        unmarshal(Everything, data)
    assert str(info.value) == f"json: cannot unmarshal {message}"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        # Go writes just "number" when the target is not numeric; gojson adds the literal.
        (b'{"s":5}', "number 5 into Go struct field Everything.s of type string"),
        (b'{"flag":1}', "number 1 into Go struct field Everything.flag of type bool"),
        # Go's jsonv2-backed path counts array indices ("Everything.list.0").
        (b'{"list":[1]}', "number 1 into Go struct field Everything.list of type string"),
        (b'{"list":[[]]}', "array into Go struct field Everything.list of type string"),
        # Go names struct types with their package ("main.Inner"); gojson uses GO_NAME.
        (b'{"inner":"x"}', "string into Go struct field Everything.inner of type Inner"),
        (b'{"ptr":[]}', "array into Go struct field Everything.ptr of type Inner"),
        (b"[]", "array into Go value of type Everything"),
        (b'"x"', "string into Go value of type Everything"),
        (b"1", "number 1 into Go value of type Everything"),
    ],
)
def test_type_errors_with_known_message_deviations_from_go(data: bytes, message: str) -> None:
    """Rejected exactly when Go rejects; the wording differs from Go's in the noted details."""
    with pytest.raises(GoDecodeError) as info:
        unmarshal(Everything, data)
    assert str(info.value) == f"json: cannot unmarshal {message}"


# encoding/base64 TestDecodeCorrupt: input, CorruptInputError offset (-1: valid).
GO_BASE64_CORRUPT = [
    ("", -1),
    ("\\n", -1),
    ("AAA=\\n", -1),
    ("AAAA\\n", -1),
    ("!!!!", 0),
    ("====", 0),
    ("x===", 1),
    ("=AAA", 0),
    ("A=AA", 1),
    ("AA=A", 2),
    ("AA==A", 4),
    ("AAA=AAAA", 4),
    ("AAAAA", 4),
    ("AAAAAA", 4),
    ("A=", 1),
    ("A==", 1),
    ("AA=", 3),
    ("AA==", -1),
    ("AAA=", -1),
    ("AAAA", -1),
    ("AAAAAA=", 7),
    ("YWJjZA=====", 8),
    ("A!\\n", 1),
    ("A=\\n", 1),
]


@pytest.mark.parametrize(
    ("text", "offset"), GO_BASE64_CORRUPT, ids=[t for t, _ in GO_BASE64_CORRUPT]
)
def test_bytes_decoding_reports_base64_errors_at_go_offsets(text: str, offset: int) -> None:
    data = f'{{"raw":"{text}"}}'
    if offset < 0:
        unmarshal(Everything, data)
        return
    with pytest.raises(GoDecodeError) as info:
        unmarshal(Everything, data)
    assert str(info.value) == f"illegal base64 data at input byte {offset}"


def test_bytes_decoding_skips_newlines_and_accepts_unused_trailing_bits() -> None:
    assert unmarshal(Everything, b'{"raw":"YW\\r\\nJj\\nZA=\\r\\n=\\n"}').raw == b"abcd"
    assert unmarshal(Everything, b'{"raw":"QR=="}').raw == b"A"  # StdEncoding is not Strict
    with pytest.raises(GoDecodeError, match=r"^illegal base64 data at input byte 2$"):
        unmarshal(Everything, '{"raw":"QQ\u00e9="}')  # offsets count UTF-8 bytes
    with pytest.raises(GoDecodeError, match=r"^illegal base64 data at input byte 2$"):
        unmarshal(Everything, b'{"raw":"QQ= ="}')


def test_bytes_decode_from_a_json_array_of_numbers_like_any_go_slice() -> None:
    assert unmarshal(Everything, b'{"raw":[1,2,255]}').raw == b"\x01\x02\xff"
    assert unmarshal(Everything, b'{"raw":[]}').raw == b""
    with pytest.raises(GoDecodeError) as info:
        unmarshal(Everything, b'{"raw":[256]}')
    assert str(info.value) == (
        "json: cannot unmarshal number 256 into Go struct field Everything.raw of type uint8"
    )


# --- field name matching: exact first, then strings.EqualFold ------------------------------


def test_exact_field_name_match_is_preferred_over_a_case_insensitive_one() -> None:
    @dataclasses.dataclass(frozen=True, slots=True)
    class Twins(GoStruct):
        lower: str = go_field("name", STRING, default="")
        upper: str = go_field("Name", STRING, default="")

    assert unmarshal(Twins, b'{"Name":"U","name":"L"}') == Twins("L", "U")
    # No exact match: the first field in declaration order whose name folds equal.
    assert unmarshal(Twins, b'{"NAME":"x"}') == Twins("x", "")
    assert unmarshal(Twins, b'{"nAmE":"y"}') == Twins("y", "")


EQUAL_FOLD = [
    # field name, JSON key, strings.EqualFold(field, key)
    ("nonce", "NONCE", True),
    ("nonce", "Nonce", True),
    ("nonce", "nonc", False),
    ("key", "\u212aey", True),  # KELVIN SIGN folds to k
    ("sig", "\u017fig", True),  # LATIN SMALL LETTER LONG S folds to s
    ("ß", "ss", False),  # simple folding: no one-to-many mappings
    ("ss", "ß", False),
    ("ß", "\u1e9e", True),  # LATIN CAPITAL LETTER SHARP S
    ("i", "\u0130", False),  # I WITH DOT ABOVE: Turkic-only mapping
    ("i", "\u0131", False),  # DOTLESS I
    ("\u03c3", "\u03c2", True),  # GREEK SMALL SIGMA, FINAL SIGMA
    ("\u03c3", "\u03a3", True),  # GREEK CAPITAL SIGMA
    ("\u00b5", "\u039c", True),  # MICRO SIGN, GREEK CAPITAL MU
    ("ω", "\u2126", True),  # OHM SIGN
    ("å", "\u212b", True),  # ANGSTROM SIGN
    ("ǆ", "ǅ", True),
    ("ǆ", "Ǆ", True),
    ("\u0390", "\u1fd3", True),  # Unicode 15 simple folding (Go >= 1.21)
    ("ﬅ", "ﬆ", True),
    ("ﬀ", "ff", False),
    ("\u13a0", "\uab70", True),  # CHEROKEE LETTER A and its small letter
    ("straße", "STRASSE", False),
    ("straße", "STRAẞE", True),
]


@pytest.mark.parametrize(("name", "key", "equal"), EQUAL_FOLD)
def test_case_insensitive_field_match_follows_go_strings_equalfold(
    name: str, key: str, equal: bool
) -> None:
    @dataclasses.dataclass(frozen=True, slots=True)
    class One(GoStruct):
        v: str = go_field(name, STRING, default="")

    decoded = unmarshal(One, f'{{"{key}":"hit"}}'.encode())
    assert (decoded.v == "hit") is equal


# --- decoding text -------------------------------------------------------------------------


def test_invalid_utf8_in_input_becomes_one_replacement_character_per_byte() -> None:
    assert unmarshal(Inner, b'{"a":"x\xe2\x82y\xffz\xed\xa0\x80"}').a == (
        "x\ufffd\ufffdy\ufffdz\ufffd\ufffd\ufffd"
    )
    assert marshal(Inner("\ufffd")) == '{"a":"\ufffd"}'.encode()


def test_surrogate_escapes_decode_like_go() -> None:
    assert decode_any(b'"\\ud83d\\ude00"') == "😀"
    assert decode_any(b'"a\\ud800b"') == "a\ufffdb"
    assert decode_any(b'"\\udc00\\ud800"') == "\ufffd\ufffd"
    assert decode_any(b'"\\ud800\\ud800\\udc00"') == "\ufffd\U00010000"
    assert decode_any(b'{"\\ud800":1}') == {"\ufffd": 1}


def test_decode_any_reads_every_number_as_float64_like_go() -> None:
    value = decode_any(b'{"a":18446744073709551615,"b":-9223372036854775808,"c":1.5,"d":1e2}')
    assert value == {"a": 18446744073709551616.0, "b": -9223372036854775808.0, "c": 1.5, "d": 100.0}
    assert all(isinstance(v, float) for v in value.values())
    zero = decode_any(b"-0")
    assert zero == 0 and math.copysign(1, zero) == -1
    assert encode_any(decode_any(b"[-0,0,-0.0]")) == b"[-0,0,-0]"


def test_decode_any_rounds_integers_above_2_53_as_go_does() -> None:
    # Go: json.Unmarshal into interface{} then json.Marshal.
    assert encode_any(decode_any(b"[9007199254740993]")) == b"[9007199254740992]"
    assert encode_any(decode_any(b"[9007199254740995]")) == b"[9007199254740996]"  # ties to even
    assert encode_any(decode_any(b"[18446744073709551615]")) == b"[18446744073709552000]"
    assert encode_any(decode_any(b"[100000000000000000000000]")) == b"[1e+23]"


def test_decode_plain_keeps_the_integers_of_a_go_struct_exact() -> None:
    value = decode_plain(b'{"a":18446744073709551615,"b":-9223372036854775808,"c":1.5,"d":1e2}')
    assert value == {"a": UINT64_MAX, "b": INT64_MIN, "c": 1.5, "d": 100.0}
    assert isinstance(value["d"], float)
    assert encode_any(decode_plain(b"[9007199254740993]")) == b"[9007199254740993]"


def test_decode_any_rejects_numbers_beyond_float64_like_go() -> None:
    with pytest.raises(GoDecodeError) as info:
        decode_any(b"[1e309]")
    assert str(info.value) == "json: cannot unmarshal number 1e309 into Go value of type float64"
    big = "1" + "0" * 400
    with pytest.raises(GoDecodeError) as info:
        decode_any(big)
    assert str(info.value) == f"json: cannot unmarshal number {big} into Go value of type float64"
    # Exactly where Go's ParseFloat stops rounding down to MaxFloat64:
    below = (1 << 1024) - (1 << 970) - 1
    assert decode_any(str(below)) == sys.float_info.max
    with pytest.raises(GoDecodeError):
        decode_any(str(below + 1))


def test_an_interface_field_reports_the_number_go_refuses_with_its_path() -> None:
    with pytest.raises(GoDecodeError) as info:
        unmarshal(Everything, b'{"any":{"k":[1e400]}}')
    assert str(info.value) == (
        "json: cannot unmarshal number 1e400 into Go struct field Everything.any.k of type float64"
    )


def test_syntax_errors_are_decode_errors() -> None:
    with pytest.raises(GoDecodeError, match=r"^unexpected end of JSON input$"):
        decode_any(b"  ")
    for bad in (b"NaN", b"[Infinity]", b"{'a':1}", b"[1,]", b"01", b'"\x01"', b"\xef\xbb\xbf{}"):
        with pytest.raises(GoDecodeError):
            decode_any(bad)


# --- json.RawMessage ------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class WithRaw(GoStruct):
    GO_NAME = "WithRaw"
    raw: bytes | None = go_field("raw", RAW, default=None)
    raw_o: bytes | None = go_field("raw_o", RAW, omitempty=True, default=None)


def test_a_raw_message_is_remarshalled_as_go_does() -> None:
    # Go: json.Marshal of a json.RawMessage runs appendCompact(b, escapeHTML=true).
    text = b' {"b" : 1.0, "a":[ 1e2 ,-0, "\\u0041<&>\xe2\x80\xa8\\/"],\n "a" : null ,"bad":"\xff"} '
    assert compact_json(text) == (
        b'{"b":1.0,"a":[1e2,-0,"\\u0041\\u003c\\u0026\\u003e\\u2028\\/"],"a":null,"bad":"\xff"}'
    )
    assert marshal(WithRaw(raw=text)) == b'{"raw":' + compact_json(text) + b"}"
    assert marshal(WithRaw()) == b'{"raw":null}'  # nil is "null"; omitempty leaves out nil


def test_a_raw_message_that_is_not_json_is_gos_marshal_error() -> None:
    for text, error in (
        (b"", "unexpected end of JSON input"),
        (b"{", "unexpected end of JSON input"),
        (b"[1,]", "invalid character ']' looking for beginning of value"),
    ):
        with pytest.raises(GoEncodeError) as info:
            marshal(WithRaw(raw=text))
        assert (
            str(info.value) == f"json: error calling MarshalJSON for type json.RawMessage: {error}"
        )


def test_a_raw_message_decodes_to_its_compact_text_with_key_order_and_literals() -> None:
    decoded = unmarshal(
        WithRaw,
        b'{"raw": {"z": 1.50, "a": [1e400, 123456789012345678901234567890],'
        b' "z": "<"}, "raw_o": null}',
    )
    assert decoded.raw == b'{"z":1.50,"a":[1e400,123456789012345678901234567890],"z":"\\u003c"}'
    assert decoded.raw_o == b"null"  # Go's UnmarshalJSON keeps the text of a null
    assert marshal(decoded) == b'{"raw":' + decoded.raw + b',"raw_o":null}'
