"""A gateway whose state holds a record it cannot read resumes every other pod, and names the
one it set aside (issue 26, item 11; decision 072)."""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

import pytest

from dmsgw.clock import NS_PER_SECOND, FixedClock
from dmsgw.interlink.state.pod_store import pack
from tests.support.gateway_fakes import FakeDMS, create, gateway_on, pod, uid, until

OWNER = "did:key:the-gateway"


async def test_a_corrupt_record_is_set_aside_and_the_other_pods_resume(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    dms = FakeDMS(tmp_path / "logs")
    clock = FixedClock(1_700_000_000 * NS_PER_SECOND)
    state = tmp_path / "state"
    gateway = await gateway_on(dms, state, owner=OWNER, clock=clock)
    for n in (1, 2, 3):
        await create(gateway, pod(uid(n)))
    await until(lambda: len(dms.live()) == 3, "the pods run")
    await gateway.close()
    db = sqlite3.connect(state)
    db.execute("UPDATE pods SET record = record || x'00' WHERE uid = ?", (uid(2),))
    db.execute("UPDATE pods SET record = ? WHERE uid = ?", (pack({"uid": uid(3)}), uid(3)))
    db.commit()
    db.close()
    with caplog.at_level(logging.ERROR, logger="dmsgw.interlink.state.pod_store"):
        again = await gateway_on(dms, state, owner=OWNER, clock=clock)
    try:
        assert set(again.book.records) == {uid(1)}
        logged = " ".join(r.getMessage() for r in caplog.records)
        assert f"pod {uid(2)}" in logged and "extra data" in logged
        assert f"pod {uid(3)}" in logged and "missing" in logged
    finally:
        await again.close()
