"""The fast struct decoder against the generic one: the same result on every input.

``unmarshal`` decodes through ``fast_struct`` and falls back to ``decode_struct`` (the reference:
Go's key folding, merging of repeated keys, type errors) whenever the fast one declines. So the
fast decoder may decline anything, but whatever it returns must be exactly what the reference
returns. The inputs are Go's own bytes for envelopes, token lists, ensembles, deployment lists
(a custom Go type) and the gojson test structs, then the same documents with keys re-cased,
repeated or unknown, values nulled or swapped for other JSON values (odd numbers, lone
surrogate escapes, bad base64, ...), random documents over the structs' key names, and random
bytes changed.
"""

from __future__ import annotations

import dataclasses
import json
import random
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dmsgw.behaviors.deployment import DeploymentListResponse
from dmsgw.behaviors.ensemble import EnsembleConfig
from dmsgw.gojson import (
    ANY,
    BYTES,
    FLOAT64,
    STRING,
    DecodeContext,
    GoDecodeError,
    GoStruct,
    GoType,
    MapOf,
    NotPlainError,
    Ptr,
    SliceOf,
    StructOf,
    decode_any,
    go_field,
    marshal,
    marshal_without,
    unmarshal,
)
from dmsgw.gojson.parse import json_kind, parse
from dmsgw.gojson.structs import decode_struct, fast_struct, zero_struct
from dmsgw.keys.ucan import TokenList
from dmsgw.transport.envelope import Envelope
from tests.support.go_values import EVERYTHING_ZERO, FULL_JSON, Everything, Inner, Leaf, Record
from tests.support.vectors import load_vector

PROPERTY = settings(
    max_examples=100,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

_TOKENS = load_vector("tokens.json")
SEEDS: dict[type[GoStruct], list[str]] = {
    Envelope: [c["envelope_json"] for c in load_vector("envelopes.json")["cases"]],
    TokenList: [t["tokens_json"] for t in _TOKENS["tokens"].values() if "tokens_json" in t]
    + [c["cap_text"] for c in _TOKENS["require_cases"] if c["cap_text"].startswith("{")],
    EnsembleConfig: [FULL_JSON],
    DeploymentListResponse: [
        '{"deployments":[{"orchestrator_id":"o1","status":"Running",'
        '"created_at":"2026-01-01T00:00:00.5Z","updated_at":"0001-01-01T00:00:00Z",'
        '"completed_at":"2026-01-02T00:00:00+01:00","metadata":{"a":"b"}}],'
        '"total":1,"has_more":false}'
    ],
    Everything: [
        EVERYTHING_ZERO,
        marshal(
            Everything(
                s="x<y",
                flag=True,
                u=(1 << 64) - 1,
                i=-(1 << 63),
                f=-0.0,
                f32=0.1,
                raw=b"\x00\xff",
                list_=("a", ""),
                map_={"k": 1},
                ptr=Inner("p", "q"),
                inner=Inner("i"),
                any_={"n": [1, 2.5, None, "\u2028"]},
            )
        ).decode(),
    ],
    Record: [
        marshal(
            Record(
                text="t",
                nonce=7,
                ratio=1e21,
                cores=1.5,
                blob=b"",
                names=(),
                counts={"a": 0},
                leaf=Leaf("n", "t"),
                parent=Leaf(),
                leaves=(Leaf("a"),),
                extra=[{"x": -1}],
            )
        ).decode()
    ],
}


# --- the two decoders ----------------------------------------------------------------------


def _generic(cls: type[GoStruct], raw: Any) -> GoStruct:
    """What ``unmarshal`` returns when the fast decoder declines."""
    if isinstance(raw, tuple):
        return decode_struct(cls, raw, None, DecodeContext(cls.go_type_name()))
    if raw is None:
        return zero_struct(cls)
    name = cls.go_type_name()
    raise GoDecodeError(f"json: cannot unmarshal {json_kind(raw)} into Go value of type {name}")


def _outcome(decode: Callable[[], Any]) -> tuple[str, str]:
    """The value or the error, comparably: ``repr`` tells ``-0.0`` from ``0.0``, a tuple
    from a list and dict orders apart, which ``==`` does not."""
    try:
        value = decode()
    except GoDecodeError as exc:
        return "error", str(exc)
    return "value", repr(value)


def check(cls: type[GoStruct], data: bytes) -> None:
    try:
        raw = parse(data)
    except GoDecodeError as exc:  # both decoders read the same parse
        with pytest.raises(GoDecodeError) as info:
            unmarshal(cls, data)
        assert str(info.value) == str(exc)
        return
    generic = _outcome(lambda: _generic(cls, raw))
    if isinstance(raw, tuple):
        try:
            fast = fast_struct(cls, raw)
        except NotPlainError:
            pass
        else:
            assert generic == ("value", repr(fast))
            assert _generic(cls, raw) == fast
    assert _outcome(lambda: unmarshal(cls, data)) == generic


# --- JSON documents to mutate --------------------------------------------------------------


class Obj(list[tuple[str, Any]]):
    """A JSON object as its pairs, so that keys can repeat."""


class Num(str):
    """A number literal, written as it is."""


def _load(text: str) -> Any:
    return json.loads(text, object_pairs_hook=Obj, parse_float=Num, parse_int=Num)


def dump(value: Any) -> str:
    if isinstance(value, Obj):
        return "{" + ",".join(f"{json.dumps(k)}:{dump(v)}" for k, v in value) + "}"
    if isinstance(value, list):
        return "[" + ",".join(dump(v) for v in value) + "]"
    if isinstance(value, Num):
        return str(value)
    return json.dumps(value)  # non-ASCII and lone surrogates as \u escapes


ODD_VALUES = [
    None,
    True,
    False,
    Num("0"),
    Num("-0"),
    Num("-1"),
    Num("255"),
    Num("256"),
    Num("18446744073709551615"),
    Num("18446744073709551616"),
    Num("-9223372036854775809"),
    Num("1.5"),
    Num("1e2"),
    Num("-0.0"),
    Num("1e400"),
    Num("3.4028235e38"),
    "",
    "x",
    "\ud800",
    "\udc00\ud800",
    "é<&>\u2028",
    "QQ==",
    "QR==",
    "Q\nQ==",
    "not base64!",
    "BAAREIADUED3746OCC7B24G5DDTUXQEZM7SNMME3UUGV6HO4QZSBEVJRXA======",
    "did:key:z6MkehRgf7yJbgaGfYsdoAsKdBPE3dj2CYhowQdcjqSJgvVd",
    "2026-01-01T00:00:00Z",
    "yesterday",
    [],
    [None],
    [Num("1"), Num("2")],
    ["a", Num("1")],
    Obj(),
    Obj([("uri", "did:key:x")]),
    Obj([("pub", "")]),
    Obj([("a", "1"), ("b", Obj([("c", None)]))]),
]
odd_values = st.sampled_from(ODD_VALUES)


def _recase(key: str, how: int) -> str:
    if how == 0:
        return key.upper()
    if how == 1:
        return key.capitalize()
    return key.replace("k", "\u212a").replace("s", "\u017f")  # Kelvin sign, long s


def _size(value: Any) -> int:
    if isinstance(value, Obj):
        return 1 + sum(_size(item) for _, item in value)
    if isinstance(value, list):
        return 1 + sum(_size(item) for item in value)
    return 1


def mutate(value: Any, rng: random.Random, rate: int) -> Any:
    """``value`` with about one change in ``rate`` places: few changes, so that the fast
    decoder does not decline a document for one change while another goes unchecked."""

    def roll() -> bool:
        return rng.randrange(rate) == 0

    if roll():
        return rng.choice(ODD_VALUES)
    if isinstance(value, Obj):
        pairs = Obj()
        for key, item in value:
            if roll():
                continue  # dropped
            new_key = _recase(key, rng.randrange(3)) if roll() else key
            pairs.append((new_key, mutate(item, rng, rate)))
            if roll():  # repeated: Go merges into the value decoded so far (null keeps it)
                again = rng.choice([None, item, mutate(item, rng, 4), rng.choice(ODD_VALUES)])
                pairs.append((rng.choice([key, key.upper()]), again))
        if roll():
            pairs.insert(rng.randrange(len(pairs) + 1), ("zzz", rng.choice(ODD_VALUES)))
        return pairs
    if isinstance(value, list):
        items = [mutate(item, rng, rate) for item in value]
        if roll():
            items.append(rng.choice(ODD_VALUES))
        return items
    return value


def _key_names(gotype: GoType, seen: set[type[GoStruct]], names: set[str]) -> None:
    if isinstance(gotype, StructOf):
        if gotype.cls in seen:
            return
        seen.add(gotype.cls)
        for spec in gotype.cls.go_specs():
            names.add(spec.json)
            _key_names(spec.type, seen, names)
    elif isinstance(gotype, (SliceOf, MapOf, Ptr)):
        _key_names(gotype.elem, seen, names)


def key_names(cls: type[GoStruct]) -> list[str]:
    names = {"pub"}  # the custom crypto.ID type's JSON view
    _key_names(StructOf(cls), set(), names)
    return sorted(names)


def documents(cls: type[GoStruct]) -> st.SearchStrategy[Any]:
    """Random documents whose keys are the structs' own (or re-cased), values anything."""
    keys = st.sampled_from(key_names(cls)) | st.sampled_from(key_names(cls)).map(str.upper)
    return st.recursive(
        odd_values,
        lambda inner: (
            st.lists(inner, max_size=3) | st.lists(st.tuples(keys, inner), max_size=6).map(Obj)
        ),
        max_leaves=25,
    )


TARGETS = list(SEEDS)


@pytest.mark.parametrize("cls", TARGETS, ids=lambda c: c.__name__)
def test_seeds_decode_the_same_both_ways(cls: type[GoStruct]) -> None:
    for seed in SEEDS[cls]:
        check(cls, seed.encode())
        # Go's own bytes are what the fast decoder is for: it must not decline them.
        assert isinstance(fast_struct(cls, parse(seed)), cls)


@pytest.mark.parametrize("cls", TARGETS, ids=lambda c: c.__name__)
@PROPERTY
@given(data=st.data())
def test_mutated_documents_decode_the_same_both_ways(
    cls: type[GoStruct], data: st.DataObject
) -> None:
    seed = _load(data.draw(st.sampled_from(SEEDS[cls])))
    rng = data.draw(st.randoms(use_true_random=False))
    changes = rng.choice([1, 1, 2, 4])  # about this many, in the ~4 chances each node has
    check(cls, dump(mutate(seed, rng, max(2, 4 * _size(seed) // changes))).encode())


@pytest.mark.parametrize("cls", TARGETS, ids=lambda c: c.__name__)
@PROPERTY
@given(data=st.data())
def test_random_documents_decode_the_same_both_ways(
    cls: type[GoStruct], data: st.DataObject
) -> None:
    document = data.draw(documents(cls))
    if data.draw(st.booleans()):  # mostly an object at the top, as a struct needs
        document = Obj([(k, document) for k in data.draw(st.sets(st.sampled_from(key_names(cls))))])
    check(cls, dump(document).encode())


@pytest.mark.parametrize("cls", TARGETS, ids=lambda c: c.__name__)
@PROPERTY
@given(data=st.data())
def test_byte_mutations_decode_the_same_both_ways(cls: type[GoStruct], data: st.DataObject) -> None:
    seed = bytearray(data.draw(st.sampled_from(SEEDS[cls])).encode())
    for _ in range(data.draw(st.integers(1, 3))):
        seed[data.draw(st.integers(0, len(seed) - 1))] = data.draw(st.integers(0, 255))
    check(cls, bytes(seed))


@PROPERTY
@given(data=st.data())
def test_interface_values_decode_the_same_both_ways(data: st.DataObject) -> None:
    text = dump(data.draw(documents(Everything))).encode()
    try:
        raw = parse(text)
    except GoDecodeError:
        return
    generic = _outcome(lambda: ANY.decode(raw, None, DecodeContext("")))
    try:
        fast = ANY.fast(raw)
    except NotPlainError:
        pass
    else:
        assert generic == ("value", repr(fast))
    assert _outcome(lambda: decode_any(text)) == generic


@dataclasses.dataclass(frozen=True, slots=True)
class Defaults(GoStruct):
    """Dataclass defaults that are not the Go zero values."""

    b: bytes | None = go_field("b", BYTES, default=b"")
    s: str = go_field("s", STRING, default="x")
    f: float = go_field("f", FLOAT64, default=-0.0)
    inner: Inner = go_field("inner", StructOf(Inner), default=Inner("d"))


@pytest.mark.parametrize("data", [b"{}", b"null", b'{"B":null}'], ids=["fast", "null", "generic"])
def test_missing_fields_are_go_zero_values_not_dataclass_defaults(data: bytes) -> None:
    assert repr(unmarshal(Defaults, data)) == repr(Defaults(None, "", 0.0, Inner()))


@pytest.mark.parametrize("cls", TARGETS, ids=lambda c: c.__name__)
def test_marshal_without_a_field_is_marshal_of_the_struct_with_that_field_zero(
    cls: type[GoStruct],
) -> None:
    for seed in SEEDS[cls]:
        value = unmarshal(cls, seed)
        for spec in cls.go_specs():
            zeroed = dataclasses.replace(value, **{spec.attr: spec.type.zero()})
            assert marshal_without(value, spec.attr) == marshal(zeroed)
    with pytest.raises(ValueError, match="no Go field"):
        marshal_without(cls(), "no_such_field")
