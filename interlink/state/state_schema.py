"""The state file's schema version, its forward migrations, and the refusal of a newer one.

The version is SQLite's ``user_version`` in the file's header. Each release reads the
versions up to :data:`STATE_SCHEMA` and brings an older file forward in one transaction when
it opens it (a gateway killed half-way leaves the file as it was). A file written by a newer
release is refused, naming its version: an older gateway would misread what it does not know,
and the operator may go back to the newer release with nothing lost. Pod records themselves
need no migration (msgpack maps whose readers default what is missing); the versions count
changes of the tables.

Versions: 0, the first file (``pods`` only; also a new, empty file); 1, ``state_meta`` added,
which records the DMS the state was made with (:mod:`.state_binding`); 2, ``set_aside`` added,
where the records that could not be read at a start are kept for the operator.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

from ...errors import DmsgwError

__all__ = ["STATE_SCHEMA", "NewerStateError", "migrate", "schema_version"]


class NewerStateError(DmsgwError):
    """The state file was written by a newer release of the gateway."""


def _to_1(db: sqlite3.Connection) -> None:
    db.execute(
        "CREATE TABLE IF NOT EXISTS pods (uid TEXT PRIMARY KEY, record BLOB NOT NULL) WITHOUT ROWID"
    )
    db.execute(
        "CREATE TABLE IF NOT EXISTS state_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) "
        "WITHOUT ROWID"
    )


def _to_2(db: sqlite3.Connection) -> None:
    db.execute(
        "CREATE TABLE IF NOT EXISTS set_aside "
        "(uid TEXT PRIMARY KEY, record BLOB NOT NULL, reason TEXT NOT NULL) WITHOUT ROWID"
    )


_MIGRATIONS: tuple[Callable[[sqlite3.Connection], None], ...] = (_to_1, _to_2)
"""``_MIGRATIONS[n]`` brings a file from version ``n`` to ``n + 1``."""
STATE_SCHEMA = len(_MIGRATIONS)
"""The version this release writes."""


def schema_version(db: sqlite3.Connection) -> int:
    row = db.execute("PRAGMA user_version").fetchone()
    return int(row[0])


def migrate(db: sqlite3.Connection, path: Path) -> int:
    """Bring the file open in ``db`` (autocommit) to :data:`STATE_SCHEMA`, in one
    transaction; return the version it had. A newer file is refused and left untouched."""
    found = schema_version(db)
    _refuse_newer(found, path)
    if found == STATE_SCHEMA:
        return found  # the usual start: no write lock taken
    db.execute("BEGIN IMMEDIATE")  # two gateways opening one file migrate it once
    try:
        found = schema_version(db)
        _refuse_newer(found, path)
        for step in _MIGRATIONS[found:]:
            step(db)
        db.execute(f"PRAGMA user_version = {STATE_SCHEMA}")
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise
    return found


def _refuse_newer(found: int, path: Path) -> None:
    if found > STATE_SCHEMA:
        raise NewerStateError(
            f"the state file {path} was written by a newer dmsgw (state schema {found}; "
            f"this release reads up to {STATE_SCHEMA}): run that release or a newer one, "
            "or give this one another state_path; the file is left as it is"
        )
