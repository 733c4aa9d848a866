"""The pod store: durable before acknowledged, group-committed, corrupt records reported."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from dmsgw.actors.store import PodStore, StoreError, pack, unpack


async def test_records_survive_a_reopen(tmp_path: Path) -> None:
    path = tmp_path / "state" / "gw.sqlite3"
    store = PodStore(path)
    await store.put("a", {"uid": "a", "phase": "running", "blob": b"\x00\x01"})
    await store.put("b", {"uid": "b", "phase": "pending"})
    await store.put("a", {"uid": "a", "phase": "deleting", "blob": b"\x00\x01"})
    await store.delete("b")
    await store.close()
    again = PodStore(path)
    assert again.load_all() == [{"uid": "a", "phase": "deleting", "blob": b"\x00\x01"}]
    await again.close()


async def test_many_concurrent_writes_are_all_durable(tmp_path: Path) -> None:
    store = PodStore(tmp_path / "gw.sqlite3")
    await asyncio.gather(*(store.put(f"p{i}", {"uid": f"p{i}", "n": i}) for i in range(500)))
    assert sorted(r["n"] for r in store.load_all()) == list(range(500))
    await store.close()


async def test_a_closed_store_refuses_writes(tmp_path: Path) -> None:
    store = PodStore(tmp_path / "gw.sqlite3")
    await store.close()
    with pytest.raises(StoreError, match="closed"):
        await store.put("a", {})


def test_unopenable_and_corrupt_state_is_named(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(StoreError, match="cannot open the state file"):
        PodStore(blocker / "gw.sqlite3")
    path = tmp_path / "gw.sqlite3"
    PodStore(path)
    db = sqlite3.connect(path)
    db.execute("INSERT INTO pods VALUES ('x', ?)", (b"\xc1garbage",))
    db.commit()
    db.close()
    with pytest.raises(StoreError, match="a pod record is corrupt"):
        PodStore(path).load_all()
    with pytest.raises(StoreError, match="not a map"):
        unpack(pack([1, 2]))  # type: ignore[arg-type]
