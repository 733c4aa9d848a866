"""A map of one entry per pod that grows without stopping the event loop.

A ``dict`` grows by doubling: the insert that crosses its threshold copies every entry into a
table twice the size, in one step. At 100,000 pods that step is milliseconds a map, and the
maps that hold one entry per pod (its record, its newest record, its ``/status`` entry, its
poll ledger, its actor's name, its supervisor's spec, ref and restart type) all cross it at the
same pod: one create held the loop for all of them at once (bench/README.md, "Maps and sets
that double"). A :class:`ShardedDict` spreads its keys over :data:`SHARDS` small dicts, so
that a doubling copies a shard's entries only, 1/:data:`SHARDS` of them (microseconds), and
keeps the rest of ``dict``'s contract but its order: it iterates shard by
shard, unless made ``ordered`` (a supervisor's children, whose start order is its contract).
"""

from __future__ import annotations

import itertools
from collections.abc import ItemsView, Iterable, Iterator, MutableMapping, ValuesView
from operator import itemgetter
from typing import TypeVar, overload

__all__ = ["SHARDS", "ShardedDict"]

K = TypeVar("K")
V = TypeVar("V")
T = TypeVar("T")

SHARDS = 256
"""Dicts a :class:`ShardedDict` spreads its keys over (a power of two: a key's shard is the low
bits of its hash)."""

_SECOND = itemgetter(1)
_MISSING = object()


class ShardedDict(MutableMapping[K, V]):
    """A ``dict`` made of :data:`SHARDS` dicts, each key in the one its hash picks. Iterates
    shard by shard, about as fast as a ``dict``; an ``ordered`` one in insertion order, as a
    ``dict`` does (a key assigned again keeps its place), from the insertion stamps it keeps
    beside its keys (a sort, many times slower: for the rare readers that need the order;
    bench/README.md, "Maps and sets that double"). Not
    thread-safe beyond what a ``dict`` is: whoever shares one across threads locks around it."""

    __slots__ = ("_len", "_shards", "_stamp", "_stamps")

    def __init__(self, items: Iterable[tuple[K, V]] = (), *, ordered: bool = False) -> None:
        self._shards: tuple[dict[K, V], ...] = tuple({} for _ in range(SHARDS))
        self._stamps: tuple[dict[K, int], ...] | None = (
            tuple({} for _ in range(SHARDS)) if ordered else None
        )
        self._stamp = itertools.count()
        self._len = 0
        for key, value in items:
            self[key] = value

    def __getitem__(self, key: K) -> V:
        return self._shards[hash(key) & (SHARDS - 1)][key]

    @overload
    def get(self, key: K, /) -> V | None: ...

    @overload
    def get(self, key: K, default: V | T, /) -> V | T: ...

    def get(self, key: K, default: object = None, /) -> object:
        return self._shards[hash(key) & (SHARDS - 1)].get(key, default)

    def __contains__(self, key: object) -> bool:
        return key in self._shards[hash(key) & (SHARDS - 1)]

    def __setitem__(self, key: K, value: V) -> None:
        at = hash(key) & (SHARDS - 1)
        shard = self._shards[at]
        if key not in shard:
            self._len += 1
            if self._stamps is not None:
                self._stamps[at][key] = next(self._stamp)
        shard[key] = value

    def __delitem__(self, key: K) -> None:
        at = hash(key) & (SHARDS - 1)
        del self._shards[at][key]
        self._len -= 1
        if self._stamps is not None:
            del self._stamps[at][key]

    @overload
    def pop(self, key: K, /) -> V: ...

    @overload
    def pop(self, key: K, default: V | T, /) -> V | T: ...

    def pop(self, key: K, default: object = _MISSING, /) -> object:
        """``dict.pop``: the value, else ``default`` when given, else :class:`KeyError`."""
        at = hash(key) & (SHARDS - 1)
        value = self._shards[at].pop(key, _MISSING)
        if value is _MISSING:
            if default is _MISSING:
                raise KeyError(key)
            return default
        self._len -= 1
        if self._stamps is not None:
            del self._stamps[at][key]
        return value

    def __len__(self) -> int:
        return self._len

    def __iter__(self) -> Iterator[K]:
        if self._stamps is None:
            return itertools.chain.from_iterable(self._shards)
        stamped = itertools.chain.from_iterable(stamps.items() for stamps in self._stamps)
        return (key for key, _ in sorted(stamped, key=_SECOND))

    def items(self) -> ItemsView[K, V]:
        return _Items(self)

    def values(self) -> ValuesView[V]:
        return _Values(self)

    def _items(self) -> Iterator[tuple[K, V]]:
        """The entries, read from the shards as they are (not looked up again one by one:
        a third of a pass's time)."""
        if self._stamps is None:
            return itertools.chain.from_iterable(shard.items() for shard in self._shards)
        return ((key, self[key]) for key in self)

    def clear(self) -> None:
        for shard in self._shards:
            shard.clear()
        for stamps in self._stamps or ():
            stamps.clear()
        self._len = 0


class _Items(ItemsView[K, V]):
    _mapping: ShardedDict[K, V]

    def __iter__(self) -> Iterator[tuple[K, V]]:
        return self._mapping._items()


class _Values(ValuesView[V]):
    _mapping: ShardedDict[object, V]

    def __iter__(self) -> Iterator[V]:
        return (value for _, value in self._mapping._items())
