"""The gateway's durable state: one record per pod, in embedded SQLite.

Crash-only: a pod's record is written (and fsynced) before the gateway acts on it, so a
gateway killed at any instant resumes every pod from here plus what the DMS knows. Writes are
group-committed on a writer thread — many pods changing at once cost one transaction, and the
event loop never waits on the disk. Records are msgpack blobs: compact, fast, and their changes
need no migration (unknown keys are ignored, missing ones defaulted by the reader); the tables'
do (:mod:`.state_schema`, run when the file is opened).

The records hold whole pod specs, Kubernetes Secret data included, so the state is private as
the key files are: the database and SQLite's side files 0600, in a directory of its own 0700.
A state written by an older gateway is tightened when it is opened, and the log says so.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import os
import sqlite3
import stat
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import msgpack

from ...actors.turns import wake_in_turns
from ...errors import DmsgwError
from .state_schema import STATE_SCHEMA, migrate

_MAX_RECORD_BYTES = 16 * 1024 * 1024
_SIDE_FILE_SUFFIXES = ("-wal", "-shm", "-journal")
"""SQLite's companions of a database file; each holds pages of the records."""
_GROUP_OTHER = 0o077

log = logging.getLogger(__name__)
T = TypeVar("T")


class StoreError(DmsgwError):
    """The state file cannot be opened, read or written."""


def pack(record: dict[str, Any]) -> bytes:
    packed = msgpack.packb(record, use_bin_type=True)
    if not isinstance(packed, bytes):  # msgpack ships no type hints of its own
        raise StoreError("msgpack did not produce bytes")
    return packed


def unpack(blob: bytes) -> dict[str, Any]:
    if len(blob) > _MAX_RECORD_BYTES:
        raise StoreError(f"a pod record is corrupt: {len(blob)} bytes is more than any record")
    try:
        value = msgpack.unpackb(blob, raw=False)
    except (
        msgpack.ExtraData,
        msgpack.FormatError,
        msgpack.StackError,
        ValueError,
        TypeError,
    ) as exc:
        raise StoreError(f"a pod record is corrupt: {exc}") from None
    if not isinstance(value, dict):
        raise StoreError("a pod record is corrupt: not a map")
    return value


class PodStore:
    """``put``/``delete`` are awaited until durable; ``load_all`` reads at start-up."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        try:
            if str(path) != ":memory:":
                _make_private(self.path)  # an empty file is refused before anything opens it
            self._db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        except (sqlite3.Error, OSError) as exc:
            raise StoreError(f"cannot open the state file {self.path}: {exc}") from None
        try:
            migrated_from = migrate(self._db, self.path)  # first: a newer file stays as it is
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
        except (sqlite3.Error, DmsgwError) as exc:
            self._db.close()
            if isinstance(exc, DmsgwError):
                raise
            raise StoreError(f"cannot open the state file {self.path}: {exc}") from None
        if migrated_from < STATE_SCHEMA and self.count():
            log.info(
                "the state file %s was brought from schema %d to %d",
                self.path,
                migrated_from,
                STATE_SCHEMA,
            )
        self._pending: list[tuple[str, bytes | None, asyncio.Future[None]]] = []
        self._wakeup: asyncio.Event | None = None
        self._writer: asyncio.Task[None] | None = None
        self._writer_thread = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="dmsgw-store"
        )
        """The commits' own thread, started at the first. The loop's default executor started
        threads as it went (a commit handed on before the last one's thread was idle again
        spawned another), each start a wait on the loop for the new thread to run."""
        self._closed = False

    def count(self) -> int:
        """How many pods the state holds."""
        with self._lock:
            return int(self._db.execute("SELECT count(*) FROM pods").fetchone()[0])

    def meta(self, key: str) -> str | None:
        """A fact about the state itself (:mod:`.state_binding`'s), or ``None``."""
        with self._lock:
            row = self._db.execute("SELECT value FROM state_meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def set_meta(self, values: dict[str, str]) -> None:
        """Record facts about the state, durably, at once (start-up only: it blocks)."""
        with self._lock, self._transaction():
            self._db.executemany(
                "INSERT INTO state_meta (key, value) VALUES (?, ?) "
                "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                list(values.items()),
            )

    def load_all(self) -> list[dict[str, Any]]:
        """Every record, as written (see :meth:`load_each`)."""
        return self.load_each(_as_it_is)

    def load_each(self, read: Callable[[dict[str, Any]], T]) -> list[T]:
        """Every record, as ``read`` reads it. One that does not unpack, or that ``read``
        refuses (``TypeError``, ``ValueError``, ``KeyError``), is set aside: moved to the
        table ``set_aside`` with the reason, and logged with its UID; the others are served
        (one bad row stopped the whole gateway, naming nobody)."""
        with self._lock:
            rows = self._db.execute("SELECT uid, CAST(record AS BLOB) FROM pods").fetchall()
        out, bad = [], []
        for uid, blob in rows:
            try:
                out.append(read(unpack(blob)))
            except (StoreError, TypeError, ValueError, KeyError) as exc:
                bad.append((uid, blob, str(exc) or type(exc).__name__))
        if bad:
            self._set_aside(bad)
        return out

    def _set_aside(self, bad: list[tuple[str, bytes, str]]) -> None:
        with self._lock, self._transaction():
            for uid, blob, reason in bad:
                self._db.execute(
                    "INSERT OR REPLACE INTO set_aside (uid, record, reason) VALUES (?, ?, ?)",
                    (uid, blob, reason),
                )
                self._db.execute("DELETE FROM pods WHERE uid = ?", (uid,))
        for uid, _, reason in bad:
            log.error(
                "the record of pod %s in %s cannot be read (%s): set aside in its table "
                "set_aside, and the pod is not resumed; the other pods are",
                uid,
                self.path,
                reason,
            )

    async def put(self, uid: str, record: dict[str, Any]) -> None:
        await self._enqueue(uid, pack(record))

    async def delete(self, uid: str) -> None:
        await self._enqueue(uid, None)

    async def _enqueue(self, uid: str, blob: bytes | None) -> None:
        if self._closed:
            raise StoreError("the state store is closed")
        if self._writer is None or self._writer.done():
            self._wakeup = asyncio.Event()
            self._writer = asyncio.get_running_loop().create_task(self._write_loop())
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._pending.append((uid, blob, done))
        assert self._wakeup is not None
        self._wakeup.set()
        await done

    async def _write_loop(self) -> None:
        assert self._wakeup is not None
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            batch, self._pending = self._pending, []
            if not batch:
                if self._closed:
                    return
                continue
            try:
                rows = [(u, b) for u, b, _ in batch]
                loop = asyncio.get_running_loop()
                await loop.run_in_executor(self._writer_thread, self._commit, rows)
            except StoreError as exc:
                for _, _, done in batch:
                    if not done.done():
                        done.set_exception(exc)
            else:
                # Each writer goes on at once with its next step (a pod actor saves, then starts its
                # follower): the 50 writers of one commit, woken together, ran in one turn, and
                # the loop's timers waited for all of them (bench/README.md, "Steps per turn of
                # the loop").
                await wake_in_turns([done for _, _, done in batch])

    def _commit(self, batch: list[tuple[str, bytes | None]]) -> None:
        with self._lock, self._transaction():
            for uid, blob in batch:
                if blob is None:
                    self._db.execute("DELETE FROM pods WHERE uid = ?", (uid,))
                else:
                    self._db.execute(
                        "INSERT INTO pods (uid, record) VALUES (?, ?) "
                        "ON CONFLICT(uid) DO UPDATE SET record = excluded.record",
                        (uid, blob),
                    )

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[None]:
        try:
            self._db.execute("BEGIN IMMEDIATE")
            yield
            self._db.execute("COMMIT")
        except sqlite3.Error as exc:
            with contextlib.suppress(sqlite3.Error):
                self._db.execute("ROLLBACK")
            raise StoreError(f"cannot write the state file {self.path}: {exc}") from None

    async def close(self) -> None:
        self._closed = True
        if self._writer is not None and self._wakeup is not None:
            self._wakeup.set()
            with contextlib.suppress(Exception):
                await self._writer
        self._writer_thread.shutdown()  # idle by now: the writer has ended
        with self._lock:
            self._db.close()


def _as_it_is(value: dict[str, Any]) -> dict[str, Any]:
    return value


def _make_private(path: Path) -> None:
    """Create the state file 0600 in a 0700 directory, or tighten what an older gateway left.

    The file is created here, before SQLite opens it, because SQLite would create it 0644 (less
    the umask); SQLite gives its -wal, -shm and -journal files the database's own mode.
    """
    directory = path.parent
    if not directory.exists():
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    else:
        _tighten_directory(directory, path)
    if not path.exists():
        _create_whole(path)
    elif path.stat().st_size == 0 and not _has_log(path):
        raise StoreError(
            f"the state file {path} is empty (0 bytes), and this gateway never leaves one "
            "empty: its pods' records may have been lost. Restore it from a backup, or "
            "remove it to start with no pods"
        )
    for file in (path, *(path.with_name(path.name + s) for s in _SIDE_FILE_SUFFIXES)):
        _tighten(file, "state file")


def _create_whole(path: Path) -> None:
    """A new state file, made whole under a temporary name (0600, its tables written at this
    release's schema through SQLite's rollback journal into the file itself) and renamed into
    place: an empty file at ``path`` is then never one this gateway made, and is refused
    rather than taken for a fresh state (decision 072)."""
    new = path.with_name(path.name + ".new")
    new.unlink(missing_ok=True)  # left by a gateway killed while it made one
    os.close(os.open(new, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600))
    db = sqlite3.connect(str(new), isolation_level=None)
    try:
        db.execute("PRAGMA synchronous=FULL")
        migrate(db, new)  # the tables, at this release's schema
    finally:
        db.close()
    os.replace(new, path)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def _has_log(path: Path) -> bool:
    """Whether SQLite's write-ahead log beside ``path`` holds pages (a database whose every
    write is still in its log has an empty main file)."""
    wal = path.with_name(path.name + "-wal")
    return wal.exists() and wal.stat().st_size > 0


def _tighten(path: Path, what: str) -> None:
    """Take group and other permissions away from ``path`` (if it exists), saying so."""
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        return
    if mode & _GROUP_OTHER:
        path.chmod(mode & ~_GROUP_OTHER)
        log.warning(
            "the %s %s was readable by others (mode %04o): now %04o, as it holds pod specs, "
            "Kubernetes Secret data included",
            what,
            path,
            mode,
            mode & ~_GROUP_OTHER,
        )


def _tighten_directory(directory: Path, path: Path) -> None:
    """Tighten the state's directory when it is the state's own (it holds nothing else and is
    ours); a directory shared with other files (a home directory, ``/tmp``) is the operator's
    to decide, so it is only reported — the files in it are private either way."""
    mode = stat.S_IMODE(directory.stat().st_mode)
    if not mode & _GROUP_OTHER:
        return
    own_names = {path.name, *(path.name + s for s in _SIDE_FILE_SUFFIXES)}
    dedicated = directory.stat().st_uid == os.geteuid() and all(
        entry.name in own_names for entry in directory.iterdir()
    )
    if dedicated:
        _tighten(directory, "state directory")
    else:
        log.warning(
            "the state directory %s is open to others (mode %04o) and holds other files, so "
            "it is left as it is; the state files in it are 0600 (give the state a directory "
            "of its own to keep even their names private)",
            directory,
            mode,
        )
