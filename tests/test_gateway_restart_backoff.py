"""``restartPolicy: OnFailure`` and ``Always`` over the embedded devnet: a container that fails
keeps failing with its own exit code, is restarted again and again, and waits between two
deployments in ``CrashLoopBackOff``, with the restart delay of the kubelet's back-off.

The end-to-end test polls ``/status`` as interLink does (bounded, never a fixed sleep); the
back-off's timing is checked with an injected clock.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from dmsgw.clock import NS_PER_SECOND
from dmsgw.devnet.timeouts import DEVNET_TIMEOUTS
from dmsgw.interlink.pods.follow_reports import BackedOff
from dmsgw.interlink.pods.pod_actor import PodActor
from dmsgw.interlink.records.container_runs import Runs, latest_runs
from dmsgw.interlink.records.pod_record import Phase, PodPolicy, PodRecord, snapshot_of
from dmsgw.interlink.translate import allocation_key
from tests.support.gateway_fakes import pod_services
from tests.support.plugin_api import create_pod, pod_of, shell_container

RUNS_PER_DEPLOYMENT = 1 + DEVNET_TIMEOUTS.max_restarts
"""The first run and the DMS's restarts in place (``one_for_one``) before the ensemble ends."""


async def test_a_container_failing_under_on_failure_keeps_failing_and_restarting(
    plugin: Any,
) -> None:
    client, _ = plugin
    spec = pod_of([shell_container("main", "echo run; sleep 0.1; exit 1")], policy="OnFailure")
    await create_pod(client, spec)
    seen: list[dict[str, Any]] = []
    for _ in range(600):
        resp = await client.get("/status", data=json.dumps([spec]))
        assert resp.status == 200, await resp.text()
        (status,) = await resp.json()
        main = status["containers"][0]
        seen.append(main)
        if main["restartCount"] >= 2 * RUNS_PER_DEPLOYMENT:
            break
        await asyncio.sleep(0.05)
    else:
        raise AssertionError(f"the container stopped restarting: {seen[-1]}")
    ended = [s["state"]["terminated"] for s in seen if "terminated" in s["state"]]
    # Reported terminated, the virtual kubelet would end the pod (Failed, or Succeeded for a
    # code 0) and never ask about it again: between two runs it waits for its restart.
    assert ended == [], ended
    backing_off = [
        s for s in seen if s["state"].get("waiting", {}).get("reason") == "CrashLoopBackOff"
    ]
    assert backing_off, "never seen backing off"
    for s in [*backing_off, seen[-1]]:
        assert s["lastState"]["terminated"]["exitCode"] == 1
        assert s["lastState"]["terminated"]["reason"] == "Error"
    await client.post("/delete", data=json.dumps(spec))


class _Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now_ns = 1_000 * NS_PER_SECOND

    def __call__(self) -> int:
        return self.now_ns

    def advance(self, seconds: float) -> None:
        self.now_ns += int(seconds * NS_PER_SECOND)


def _pod_actor(clock: _Clock) -> PodActor:
    """A PodActor that is never started: only its restart bookkeeping is exercised (through
    its private ``_count_restart``: from outside, the delays show only as the real 10 s to
    300 s the follower waits before it deploys again)."""

    def unused(*_: Any, **__: Any) -> Any:
        raise AssertionError("not reached")

    record = PodRecord(uid="u", namespace="default", name="p", jid="j", request=b"{}")
    return PodActor(record, pod_services(unused, policy=PodPolicy(), clock=clock))


def _restart_after(actor: PodActor, clock: _Clock, ran_s: float) -> float:
    """The delay before the next deployment, once the current one ran ``ran_s`` and ended."""
    actor.record.running_ns = clock()
    clock.advance(ran_s)
    return actor._count_restart()


@pytest.mark.parametrize("ran_s", [0.0, 5.0, 599.0])
def test_restarts_in_a_row_back_off_as_the_kubelet_does(ran_s: float) -> None:
    clock = _Clock()
    actor = _pod_actor(clock)
    delays = [_restart_after(actor, clock, ran_s) for _ in range(8)]
    assert delays == [10.0, 20.0, 40.0, 80.0, 160.0, 300.0, 300.0, 300.0]
    assert actor.record.restarts == 8


def test_a_deployment_that_ran_ten_minutes_resets_the_back_off() -> None:
    clock = _Clock()
    actor = _pod_actor(clock)
    assert [_restart_after(actor, clock, 1.0) for _ in range(4)] == [10.0, 20.0, 40.0, 80.0]
    assert _restart_after(actor, clock, 600.0) == 10.0
    assert _restart_after(actor, clock, 1.0) == 20.0
    # A deployment that never ran (it failed to deploy) does not reset it.
    actor.record.running_ns = 0
    clock.advance(3600.0)
    assert actor._count_restart() == 40.0
    assert actor.record.restarts == 7


@pytest.mark.parametrize(
    ("phase", "attempt"),
    [
        (Phase.DELETING, 3),  # deleted while its follower was reporting the back-off's end
        (Phase.BACKOFF, 4),  # the report of an earlier back-off
    ],
)
async def test_the_end_of_a_back_off_deploys_only_the_pod_still_backing_off_from_it(
    phase: str, attempt: int
) -> None:
    actor = _pod_actor(_Clock())  # any store write or DMS call fails the test
    actor.record.phase, actor.record.attempt = phase, attempt
    await actor.on_receive(BackedOff(3))
    assert (actor.record.phase, actor.record.attempt) == (phase, attempt)


RECORD_UID = "5c0ffee0-1d2e-4f3a-9b4c-5d6e7f809112"


def _waiting_record(ledger: Runs) -> PodRecord:
    """An ``Always`` pod redeployed once, its new ensemble Running, the allocation not yet."""
    spec = {
        "metadata": {"name": "p", "namespace": "default", "uid": RECORD_UID},
        "spec": {
            "restartPolicy": "Always",
            "containers": [{"name": "main", "image": "busybox", "command": ["sleep", "1"]}],
        },
    }
    key = f"e2_{allocation_key('main')}"
    return PodRecord(
        uid=RECORD_UID,
        namespace="default",
        name="p",
        jid="j",
        request=json.dumps({"pod": spec, "container": [{"name": "main"}]}).encode(),
        phase=Phase.RUNNING,
        restarts=1,
        ensemble_id="e2",
        dms_status="Running",
        observed={
            "status": "Running",
            "allocation_info": {key: {"allocation_id": key, "status": "pending"}},
        },
        runs={"main": ledger.to_map()},
    )


def test_a_fresh_ensemble_is_not_stopped_for_the_run_its_redeployment_answered() -> None:
    """After a service exited 0 and the pod was redeployed, the new ensemble's container waits
    with that run as its last state: it must not read as the service ending again."""
    ended = Runs(started=1, ended=1, exit_code=0)
    record = _waiting_record(ended.next_ensemble())
    assert latest_runs(snapshot_of(record, now_ns=1), record.runs) == []


def test_a_run_that_ended_in_the_current_ensemble_still_counts() -> None:
    ended_twice = Runs(started=2, ended=2, exit_code=0, previous_exit_code=0)
    record = _waiting_record(ended_twice)
    assert [r.exit_code for r in latest_runs(snapshot_of(record, now_ns=1), record.runs)] == [0]
