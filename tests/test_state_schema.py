"""The state file's schema version, its migration forward, and its binding to one DMS."""

from __future__ import annotations

import asyncio
import functools
import hashlib
import logging
import sqlite3
from pathlib import Path

import pytest

from dmsgw.behaviors.catalog import ONBOARDING_STATUS
from dmsgw.interlink.app import DmsConnection, _give_up_on_another_dms
from dmsgw.interlink.state.pod_store import PodStore, pack
from dmsgw.interlink.state.state_binding import (
    EMBEDDED_DEVNET,
    DmsIdentity,
    StateBinding,
    StateFromAnotherDmsError,
)
from dmsgw.interlink.state.state_schema import STATE_SCHEMA, NewerStateError
from dmsgw.keys.crypto import Ed25519PrivKey
from dmsgw.transport.envelope import Handle
from dmsgw.transport.rest import TransportError

KEY = Ed25519PrivKey(bytes(range(100, 132)))
REAL = DmsIdentity.of(
    Handle.from_public_key(Ed25519PrivKey(bytes(range(32))).public_key()), "http://dms:9999"
)


def first_release_state(path: Path, pods: int) -> None:
    """A state file as the gateway wrote it before schema versions (version 0)."""
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE pods (uid TEXT PRIMARY KEY, record BLOB NOT NULL) WITHOUT ROWID")
    for i in range(pods):
        db.execute("INSERT INTO pods VALUES (?, ?)", (f"p{i}", pack({"uid": f"p{i}", "n": i})))
    db.commit()
    db.close()


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def version_of(path: Path) -> int:
    db = sqlite3.connect(path)
    try:
        return int(db.execute("PRAGMA user_version").fetchone()[0])
    finally:
        db.close()


async def test_a_new_file_is_written_at_the_current_version(tmp_path: Path) -> None:
    store = PodStore(tmp_path / "gw.sqlite3")
    assert store.count() == 0 and store.meta("dms") is None
    await store.close()
    assert version_of(tmp_path / "gw.sqlite3") == STATE_SCHEMA == 2


async def test_a_first_release_file_is_brought_forward_with_every_pod(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "gw.sqlite3"
    first_release_state(path, pods=3)
    caplog.set_level(logging.INFO)
    store = PodStore(path)
    assert sorted(r["n"] for r in store.load_all()) == [0, 1, 2]
    assert store.meta("dms") is None
    await store.close()
    assert version_of(path) == STATE_SCHEMA
    assert f"the state file {path} was brought from schema 0 to {STATE_SCHEMA}" in caplog.text


async def test_a_file_from_a_newer_release_is_refused_naming_its_version(tmp_path: Path) -> None:
    path = tmp_path / "gw.sqlite3"
    first_release_state(path, pods=2)
    db = sqlite3.connect(path)
    db.execute("PRAGMA user_version = 7")
    db.commit()
    db.close()
    before = digest(path)
    with pytest.raises(NewerStateError) as caught:
        PodStore(path)
    assert str(caught.value) == (
        f"the state file {path} was written by a newer dmsgw (state schema 7; this release "
        f"reads up to {STATE_SCHEMA}): run that release or a newer one, or give this one another "
        "state_path; the file is left as it is"
    )
    assert digest(path) == before and version_of(path) == 7


async def test_the_state_records_its_dms_and_refuses_another(tmp_path: Path) -> None:
    path = tmp_path / "gw.sqlite3"
    store = PodStore(path)
    await store.put("p0", {"uid": "p0"})
    binding = StateBinding(store)
    binding.check(EMBEDDED_DEVNET)
    binding.check(EMBEDDED_DEVNET)  # the same one again: fine
    with pytest.raises(StateFromAnotherDmsError) as caught:
        binding.check(REAL)
    assert str(caught.value) == (
        f"the state file {path} (1 pods) was made with the embedded devnet, not with {REAL}: "
        "point the gateway back at that DMS, or give this one its own state_path (the file "
        "is left as it is)"
    )
    assert str(REAL).startswith("DMS peer 12D3KooW") and "(did:key:z6Mk" in str(REAL)
    assert store.meta("dms") == "the embedded devnet"
    assert store.load_all() == [{"uid": "p0"}]
    await store.close()


async def test_a_dms_that_cannot_answer_is_taken_only_at_the_url_it_was_reached(
    tmp_path: Path,
) -> None:
    store = PodStore(tmp_path / "gw.sqlite3")
    binding = StateBinding(store)
    binding.check_unreachable("http://anywhere:1")  # nothing recorded, nothing to resume
    binding.check(REAL)
    binding.check_unreachable("http://elsewhere:1")  # no pods: nothing to redeploy anywhere
    await store.put("p0", {"uid": "p0"})
    binding.check_unreachable(REAL.url)
    with pytest.raises(StateFromAnotherDmsError) as caught:
        binding.check_unreachable("http://elsewhere:1")
    assert f"was made with {REAL}, not with the DMS at http://elsewhere:1, which" in str(
        caught.value
    )
    moved = DmsIdentity(REAL.name, "http://moved:9999")
    binding.check(moved)  # the same DMS at a new address: the address is remembered
    assert store.meta("dms_url") == "http://moved:9999"
    await store.close()


async def test_a_first_release_state_is_bound_to_its_first_dms_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "gw.sqlite3"
    first_release_state(path, pods=2)
    store = PodStore(path)
    StateBinding(store).check(REAL)
    assert (
        f"the state file {path} (2 pods) did not record its DMS (written before 0.1.0): "
        f"taking it as made with {REAL}"
    ) in caplog.text
    assert store.meta("dms") == REAL.name
    await store.close()


class _Transport:
    """Answers ``GET /actor/handle`` as whichever DMS is at the URL now."""

    def __init__(self) -> None:
        self.handle_of = Handle.from_public_key(Ed25519PrivKey(bytes(range(32))).public_key())
        self.reachable = True

    async def handle(self, *, refresh: bool = False) -> Handle:
        if not self.reachable:
            raise TransportError("GET /actor/handle: connection refused")
        return self.handle_of


class _Client:
    """A node client whose DMS went away; it counts the calls that reached it."""

    def __init__(self) -> None:
        self.transport = _Transport()
        self.calls = 0

    async def invoke(self, *args: object, **kwargs: object) -> None:
        self.calls += 1


async def test_a_dms_that_comes_back_as_another_gets_no_call_and_the_gateway_gives_up(
    tmp_path: Path,
) -> None:
    """Started while its DMS was unreachable, the gateway learns who answers at the first
    call: another DMS gets nothing, and the gateway stops (its service manager restarts it
    into the refusal), the state kept."""
    store = PodStore(tmp_path / "gw.sqlite3")
    await store.put("p0", {"uid": "p0"})
    binding = StateBinding(store)
    binding.check(DmsIdentity.of(Handle.from_public_key(KEY.public_key()), "http://dms:9999"))
    client = _Client()
    dms = DmsConnection(client, where="http://dms:9999")  # type: ignore[arg-type]
    gave_up: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    dms.on_identity = functools.partial(_give_up_on_another_dms, binding, gave_up)
    client.transport.reachable = False
    assert not await dms.learn_version_or_defer()  # started while its DMS was unreachable
    client.transport.reachable = True  # and another DMS answers at its URL now
    with pytest.raises(StateFromAnotherDmsError):
        await dms.invoke(ONBOARDING_STATUS)
    assert client.calls == 0
    assert gave_up.result().startswith(f"the state file {store.path} (1 pods) was made with DMS")
    assert store.load_all() == [{"uid": "p0"}]
    await store.close()
