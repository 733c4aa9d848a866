"""The pod store: durable before acknowledged, group-committed, corrupt records reported."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import stat
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from dmsgw.actors.turns import PER_TURN
from dmsgw.interlink.state.pod_store import PodStore, StoreError, pack, unpack


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


async def test_every_commit_runs_on_the_store_s_one_thread_which_ends_with_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The loop's default executor started threads as it went, each start a wait on the
    loop; the store has one thread of its own."""
    store = PodStore(tmp_path / "state.sqlite3")
    threads: list[threading.Thread] = []
    commit = store._commit

    def recorded(batch: list[tuple[str, bytes | None]]) -> None:
        threads.append(threading.current_thread())
        commit(batch)

    monkeypatch.setattr(store, "_commit", recorded)
    for round_ in range(3):
        await asyncio.gather(*(store.put(f"pod-{i}", {"round": round_}) for i in range(20)))
    assert len(threads) >= 3 and len(set(threads)) == 1
    assert threads[0].name.startswith("dmsgw-store")
    await store.close()
    threads[0].join(timeout=5)
    assert not threads[0].is_alive()


async def test_the_writers_of_one_commit_wake_a_few_per_turn_of_the_loop(
    tmp_path: Path, turn: Callable[[], int]
) -> None:
    """What each writer does next runs before the next ones wake: 50 woken in one turn held
    the loop's timers as long as all their next steps took."""
    store = PodStore(tmp_path / "gw.sqlite3")

    async def write(i: int) -> int:
        await store.put(f"p{i}", {"uid": f"p{i}"})
        return turn()

    try:
        woken = await asyncio.gather(*(write(i) for i in range(4 * PER_TURN)))
    finally:
        await store.close()
    assert max(woken.count(t) for t in woken) == PER_TURN
    assert len(set(woken)) == 4


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
    assert PodStore(path).load_all() == []  # set aside (see below), not served
    with pytest.raises(StoreError, match="not a map"):
        unpack(pack([1, 2]))  # type: ignore[arg-type]


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


async def test_a_new_state_is_private_side_files_included(tmp_path: Path) -> None:
    """The records hold pod specs with Secret data: 0600 files in a 0700 directory."""
    path = tmp_path / "state" / "gw.sqlite3"
    store = PodStore(path)
    await store.put("a", {"uid": "a", "secret": "hunter2"})
    wal, shm = path.with_name("gw.sqlite3-wal"), path.with_name("gw.sqlite3-shm")
    assert wal.exists() and shm.exists()  # WAL mode: both live while the store is open
    assert {p.name: _mode(p) for p in (path, wal, shm)} == dict.fromkeys(
        ("gw.sqlite3", "gw.sqlite3-wal", "gw.sqlite3-shm"), 0o600
    )
    assert _mode(path.parent) == 0o700
    await store.close()


async def test_an_older_world_readable_state_is_tightened_on_open(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    directory = tmp_path / "state"
    directory.mkdir(mode=0o755)
    directory.chmod(0o755)
    path = directory / "gw.sqlite3"
    old = sqlite3.connect(path)  # as an older gateway left it: 0644 (the umask's default)
    old.execute("CREATE TABLE pods (uid TEXT PRIMARY KEY, record BLOB NOT NULL) WITHOUT ROWID")
    old.execute("INSERT INTO pods VALUES ('a', ?)", (pack({"uid": "a"}),))
    old.commit()
    old.close()
    wal = path.with_name("gw.sqlite3-wal")  # left by a gateway that was killed
    wal.write_bytes(b"")
    for file in (path, wal):
        file.chmod(0o644)
    with caplog.at_level(logging.WARNING, logger="dmsgw.interlink.state.pod_store"):
        store = PodStore(path)
    assert store.load_all() == [{"uid": "a"}]
    assert (_mode(directory), _mode(path), _mode(wal)) == (0o700, 0o600, 0o600)
    logged = " ".join(r.getMessage() for r in caplog.records)
    assert f"state file {path} was readable by others (mode 0644): now 0600" in logged
    assert f"state directory {directory} was readable by others (mode 0755)" in logged
    await store.close()


async def test_a_shared_directory_is_left_alone_but_the_state_is_private(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A state put in a directory that holds other files (a home directory) keeps its files
    private without changing the operator's directory."""
    tmp_path.chmod(0o755)
    (tmp_path / "notes.txt").write_text("not the gateway's")
    with caplog.at_level(logging.WARNING, logger="dmsgw.interlink.state.pod_store"):
        store = PodStore(tmp_path / "gw.sqlite3")
    await store.put("a", {"uid": "a"})
    assert _mode(tmp_path) == 0o755
    assert _mode(tmp_path / "gw.sqlite3") == 0o600
    assert "holds other files, so it is left as it is" in caplog.text
    await store.close()


async def test_a_corrupt_record_is_set_aside_by_uid_and_the_others_are_served(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "gw.sqlite3"
    store = PodStore(path)
    await store.put("good", {"uid": "good"})
    await store.put("unreadable", {"uid": "unreadable"})
    await store.put("refused", {"uid": "refused", "phase": 42})
    await store.close()
    db = sqlite3.connect(path)
    db.execute("UPDATE pods SET record = ? WHERE uid = 'unreadable'", (pack({}) + b"\x00",))
    db.commit()
    db.close()

    def read(value: dict[str, object]) -> object:
        if not isinstance(value.get("phase", ""), str):
            raise ValueError(f"unknown phase {value['phase']!r}")
        return value["uid"]

    again = PodStore(path)
    with caplog.at_level(logging.ERROR, logger="dmsgw.interlink.state.pod_store"):
        assert again.load_each(read) == ["good"]
    logged = " ".join(r.getMessage() for r in caplog.records)
    assert "pod unreadable" in logged and "extra data" in logged
    assert "pod refused" in logged and "unknown phase 42" in logged
    assert again.load_each(read) == ["good"]  # set aside for good: not reported twice
    await again.close()
    db = sqlite3.connect(path)
    aside = dict(db.execute("SELECT uid, reason FROM set_aside").fetchall())
    db.close()
    assert aside == {
        "unreadable": "a pod record is corrupt: unpack(b) received extra data.",
        "refused": "unknown phase 42",
    }


def test_an_empty_state_file_is_refused_and_a_new_one_is_never_empty(tmp_path: Path) -> None:
    """A state file of 0 bytes is not taken for a fresh state (its records may have been
    lost); the gateway never leaves one empty itself: a new state is made whole first."""
    path = tmp_path / "gw.sqlite3"
    PodStore(path)
    assert path.stat().st_size > 0
    assert not path.with_name("gw.sqlite3.new").exists()
    path.write_bytes(b"")
    with pytest.raises(StoreError, match=f"the state file {path} is empty \\(0 bytes\\)"):
        PodStore(path)
