"""``ShardedDict`` against ``dict`` as the oracle, on random histories (hypothesis)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dmsgw.actors.sharded import SHARDS, ShardedDict

KEYS = st.text(alphabet="abcdef0123456789-", min_size=0, max_size=6)
OPERATIONS = st.lists(
    st.one_of(
        st.tuples(st.just("set"), KEYS, st.integers()),
        st.tuples(st.just("del"), KEYS, st.none()),
        st.tuples(st.just("pop"), KEYS, st.none()),
        st.tuples(st.just("pop_default"), KEYS, st.integers()),
        st.tuples(st.just("clear"), st.none(), st.none()),
    ),
    max_size=200,
)


def _apply(target: dict[str, int] | ShardedDict[str, int], op: str, key: str, value: int) -> object:
    """One operation on either map, with what it answered (or the error it raised)."""
    try:
        if op == "set":
            target[key] = value
        elif op == "del":
            del target[key]
        elif op == "pop":
            return target.pop(key)
        elif op == "pop_default":
            return target.pop(key, value)
        else:
            target.clear()
    except KeyError as exc:
        return ("KeyError", exc.args)
    return None


@given(OPERATIONS, st.booleans())
def test_it_answers_as_a_dict_does(operations: list[tuple[str, str, int]], ordered: bool) -> None:
    oracle: dict[str, int] = {}
    sharded: ShardedDict[str, int] = ShardedDict(ordered=ordered)
    for op, key, value in operations:
        assert _apply(sharded, op, key, value) == _apply(oracle, op, key, value)
        assert len(sharded) == len(oracle)
    assert dict(sharded.items()) == oracle
    assert sorted(sharded.values()) == sorted(oracle.values())
    for key in ["", "a", "0-1", *oracle]:
        assert (key in sharded) == (key in oracle)
        assert sharded.get(key) == oracle.get(key)
        assert sharded.get(key, -1) == oracle.get(key, -1)
    if ordered:
        assert list(sharded) == list(oracle)
        assert list(sharded.items()) == list(oracle.items())
    else:
        assert sorted(sharded) == sorted(oracle)


def test_an_ordered_one_keeps_a_reassigned_key_in_its_place_and_a_readded_one_last() -> None:
    names = [f"pod-{i}" for i in range(1_000)]
    sharded: ShardedDict[str, int] = ShardedDict(((n, 0) for n in names), ordered=True)
    sharded[names[10]] = 1
    del sharded[names[20]]
    sharded[names[20]] = 2
    assert list(sharded) == [*names[:20], *names[21:], names[20]]


def test_its_keys_are_spread_over_the_shards() -> None:
    """What a doubling copies is one shard: 100,000 UIDs leave none with much more than its
    share (~390)."""
    sharded: ShardedDict[str, None] = ShardedDict()
    for i in range(100_000):
        sharded[f"00000000-0000-4000-8000-{i:012d}"] = None
    largest = max(len(shard) for shard in sharded._shards)
    assert largest < 2 * 100_000 / SHARDS


def test_a_missing_key_raises_key_error_naming_it() -> None:
    sharded: ShardedDict[str, int] = ShardedDict()
    with pytest.raises(KeyError, match="absent"):
        sharded["absent"]
    with pytest.raises(KeyError, match="absent"):
        sharded.pop("absent")
