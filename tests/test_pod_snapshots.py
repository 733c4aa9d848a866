"""A pod's ``/status`` entry is read from its record only when what the entry shows changed.

Over the in-memory DMS of :mod:`tests.gateway_fakes` (an injected clock, bounded waits on the
gateway's own state).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from dmsgw.clock import NS_PER_SECOND, FixedClock
from dmsgw.interlink.bodies import PodStatus
from dmsgw.interlink.pod_record import Phase, PodRecord, shown_by, snapshot_of
from tests.gateway_fakes import FakeDMS, create, gateway_on, pod, uid, until

OWNER = "did:key:the-gateway"
CLOCK = FixedClock(1_700_000_000 * NS_PER_SECOND)


async def test_a_pod_on_its_way_to_running_is_read_once_per_entry_it_shows(
    tmp_path: Path,
) -> None:
    """Pending, deploying and deployed-but-not-yet-heard read as one entry: the pod's actor
    reads it once (a snapshot is most of a create's time), and every entry it publishes
    differs from the one before."""
    dms = FakeDMS(tmp_path / "logs")
    gateway = await gateway_on(dms, tmp_path / "state", owner=OWNER, clock=CLOCK)
    read: list[bytes] = []
    snapshot = gateway.parts.snapshot

    def reading(record: PodRecord) -> PodStatus:
        status = snapshot(record)
        read.append(status.wire())
        return status

    gateway.parts.snapshot = reading
    try:
        await create(gateway, pod(uid(1)))
        await until(lambda: gateway._records[uid(1)].started_ns > 0, "running")
    finally:
        await gateway.close()
    assert len(read) == 2  # waiting, then running
    assert read[0] != read[1]
    assert json.loads(read[-1])["containers"][0]["state"].get("running")


RECORD = PodRecord(
    uid=uid(2),
    namespace="default",
    name="p",
    jid="dmsgw-" + uid(2),
    request=json.dumps({"pod": pod(uid(2))}).encode(),
    phase=Phase.RUNNING,
    dms_status="Running",
    observed={"status": "Running"},
    runs={"main": {"started": 1}},
)


@pytest.mark.parametrize(
    "change",
    [
        {"request": json.dumps({"pod": pod(uid(2), image="alpine")}).encode()},
        {"jid": "dmsgw-other"},
        {"dms_status": "Completed"},
        {"observed": {"status": "Running", "error": "boom"}},
        {"runs": {"main": {"started": 2}}},
        {"restarts": 1},
        {"message": "why"},
        {"phase": Phase.TERMINAL},
        {"phase": Phase.TERMINAL, "reason": "ProviderFailed"},
    ],
)
def test_what_a_snapshot_reads_changes_its_digest(change: dict[str, Any]) -> None:
    """Each part of the record that :func:`snapshot_of` reads (some show only in some
    states: an observed error, once the pod has failed)."""
    changed = dataclasses.replace(RECORD, **change)
    assert shown_by(changed) != shown_by(RECORD)


@pytest.mark.parametrize(
    "change",
    [
        {"attempt": 3, "ensemble_id": "e2", "previous_ensemble_id": "e1"},
        {"phase": Phase.DELETING},
        {"dms_status": "", "observed": {}, "runs": {}, "phase": Phase.PENDING},
    ],
)
def test_what_a_snapshot_does_not_read_leaves_its_digest(change: dict[str, Any]) -> None:
    """The last: a pending pod and one whose deployment the DMS has not reported yet (its
    status "Preparing") read alike."""
    base = dataclasses.replace(
        RECORD,
        **({"dms_status": "Preparing", "observed": {}, "runs": {}} if "runs" in change else {}),
    )
    changed = dataclasses.replace(base, **change)
    assert snapshot_of(changed, now_ns=CLOCK()).wire() == snapshot_of(base, now_ns=CLOCK()).wire()
    assert shown_by(changed) == shown_by(base)
