"""A restart the DMS makes in place between two polls shows when a later poll reads the
container's log, not only at the deployment's end (decision 67): the allocation reads
``running`` at both polls, and the wrapper's markers are the only trace of it."""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from dmsgw.behaviors.catalog import DEPLOYMENT_LOGS, DEPLOYMENT_MANIFEST
from dmsgw.behaviors.deployment import (
    DeploymentLogsResponse,
    DeploymentManifestResponse,
    DeploymentStatusResponse,
)
from dmsgw.behaviors.status import AllocationInfo
from dmsgw.interlink.pods.follow_state import MARKER_READ_EVERY
from dmsgw.interlink.pods.pod_follower import PodFollower
from dmsgw.interlink.records.container_runs import Runs
from dmsgw.interlink.records.pod_status import container_statuses
from dmsgw.interlink.translate.run_markers import markers
from dmsgw.interlink.wire.bodies import RetrievedPodData
from tests.support.gateway_fakes import pod, pod_services, uid

START, EXIT = b"dmsgw.io/started\n", b"dmsgw.io/exit-code=%d\n"


async def test_a_restart_in_place_between_two_polls_shows_within_a_few_polls(
    tmp_path: Path,
) -> None:
    (tmp_path / "stdout.log").write_bytes(b"")
    stderr = tmp_path / "stderr.log"
    stderr.write_bytes(START)
    running = {"ens-1_pod.main": AllocationInfo(allocation_id="ens-1_pod.main", status="running")}

    async def invoke(behavior: Any, *_: Any, **__: Any) -> Any:
        if behavior is DEPLOYMENT_MANIFEST:
            return DeploymentManifestResponse()
        if behavior is DEPLOYMENT_LOGS:
            return DeploymentLogsResponse(logs_written_to=str(tmp_path))
        return DeploymentStatusResponse(status="Running", allocation_info=running)

    spec = pod(uid(5), policy="Always", command=["sh", "-c", "sleep 1; exit 1"])
    request = json.dumps({"pod": spec, "container": [{"name": "main"}]}).encode()
    services = pod_services(invoke, rng=random.Random(1))
    follower = PodFollower(uid(5), request, services, report=lambda _: None)
    following = follower.following("ens-1", {})
    await follower.poll(following)
    assert following.runs["main"].started == 1
    stderr.write_bytes(START + EXIT % 1 + START)  # failed, restarted by the DMS unseen
    for _ in range(MARKER_READ_EVERY):
        await follower.poll(following)
    runs = following.runs["main"]
    assert (runs.started, runs.ended, runs.exit_code, runs.restarts) == (2, 1, 1, 1)


def test_while_the_dms_restarts_a_container_its_last_state_is_the_run_that_ended() -> None:
    """The kubelet between two runs: waiting, the run that just ended as ``lastState``, the
    restart not counted before it starts (the first run failed: 0)."""
    spec = pod(uid(6), policy="Always", command=["sh", "-c", "exit 3"])
    parsed = RetrievedPodData.model_validate({"pod": spec}).pod
    ended = Runs().read(markers(START + EXIT % 3), 100)
    info = {"e_pod.main": AllocationInfo(allocation_id="e_pod.main", status="restarting")}
    (main,) = container_statuses(
        parsed,
        "Running",
        now=datetime(2026, 1, 1, tzinfo=UTC),
        allocation_info=info,
        observations={"main": ended.observation()},
    ).containers
    assert main.state.waiting is not None and main.state.waiting.reason == "CrashLoopBackOff"
    last = main.last_state.terminated
    assert last is not None and (last.exit_code, main.restart_count) == (3, 0)
