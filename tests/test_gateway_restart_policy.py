"""``restartPolicy`` once the DMS gives up on a container: the DMS restarts a failed allocation
in place only up to its own limit, then leaves it down while the ensemble runs on. The kubelet
restarts such a container forever, with back-off; so does the gateway, by deploying the pod
again (decision 67).

Over the in-memory DMS of :mod:`tests.support.gateway_fakes` (an injected clock, bounded waits
on the gateway's own state).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from dmsgw.behaviors.deployment import DeploymentLogsResponse
from dmsgw.behaviors.status import AllocationManifest, EnsembleManifest, NodeManifest
from dmsgw.clock import NS_PER_SECOND, FixedClock
from dmsgw.interlink.gateway import Gateway
from dmsgw.interlink.records.container_runs import Runs
from dmsgw.interlink.records.endpoints import ENDPOINTS_KEY
from dmsgw.interlink.records.pod_record import Phase
from dmsgw.interlink.wire.parsing import parse_create_body, parse_logs_body
from tests.support.gateway_fakes import (
    FAST,
    PEER,
    FakeDMS,
    create,
    gateway_on,
    pod,
    poll,
    uid,
    until,
)
from tests.support.plugin_api import log_request

OWNER = "did:key:the-gateway"
START, EXIT = b"dmsgw.io/started\n", b"dmsgw.io/exit-code=%d\n"


@pytest.fixture
async def gateway_and_dms(tmp_path: Path) -> AsyncIterator[tuple[Gateway, FakeDMS]]:
    dms = FakeDMS(tmp_path / "logs")
    clock = FixedClock(1_700_000_000 * NS_PER_SECOND)
    gateway = await gateway_on(dms, tmp_path / "state", owner=OWNER, clock=clock)
    yield gateway, dms
    await gateway.close()


@pytest.mark.parametrize(
    ("policy", "left"),
    [("Always", "failed"), ("Always", "completed"), ("OnFailure", "failed")],
)
async def test_a_container_the_dms_left_down_is_restarted_by_deploying_the_pod_again(
    gateway_and_dms: tuple[Gateway, FakeDMS], policy: str, left: str
) -> None:
    gateway, dms = gateway_and_dms
    spec = pod(uid(1), policy=policy)
    await create(gateway, spec)
    await until(lambda: gateway.book.records[uid(1)].dms_status == "Running", "running")
    (first,) = dms.live(uid(1))
    first.allocations["main"] = left  # the DMS stays down, the ensemble runs
    await until(lambda: len(dms.deployments) == 2, "deployed again")
    await until(lambda: gateway.book.records[uid(1)].phase == Phase.RUNNING, "running again")
    record = gateway.book.records[uid(1)]
    assert (record.restarts, record.previous_ensemble_id) == (1, first.id)
    assert first.status != "Running"  # the ensemble left running without it was stopped
    (status,) = await poll(gateway, spec)
    assert "terminated" not in status.containers[0].state.model_dump(exclude_none=True)


@pytest.mark.parametrize(("policy", "left"), [("OnFailure", "completed"), ("Never", "failed")])
async def test_a_container_its_policy_does_not_run_again_is_left_down(
    gateway_and_dms: tuple[Gateway, FakeDMS], policy: str, left: str
) -> None:
    gateway, dms = gateway_and_dms
    other = pod(uid(2), policy="Always")  # a second pod whose redeployment paces the test
    spec = pod(uid(1), policy=policy)
    await create(gateway, spec)
    await create(gateway, other)
    await until(
        lambda: all(gateway.book.records[u].dms_status == "Running" for u in (uid(1), uid(2))),
        "running",
    )
    (first,) = dms.live(uid(1))
    first.allocations["main"] = left
    dms.live(uid(2))[0].allocations["main"] = "failed"
    await until(lambda: gateway.book.records[uid(2)].restarts == 1, "the other pod restarted")
    await until(lambda: gateway.book.records[uid(2)].phase == Phase.RUNNING, "running again")
    assert [d.id for d in dms.live(uid(1))] == [first.id]
    assert gateway.book.records[uid(1)].restarts == 0


def _published(public: str) -> EnsembleManifest:
    """A manifest publishing the container's port 8080 as ``public`` on one peer."""
    allocation = AllocationManifest(node_id="pod", ports={public: 8080})
    node = NodeManifest(peer=PEER, pub_address=("192.0.2.7",), allocations=("pod.main",))
    return EnsembleManifest(allocations={"pod.main": allocation}, nodes={"pod": node})


@pytest.fixture
async def backing_off_and_dms(tmp_path: Path) -> AsyncIterator[tuple[Gateway, FakeDMS]]:
    """A gateway whose back-off is long enough to be seen (the bounded wait polls every
    10 ms)."""
    dms = FakeDMS(tmp_path / "logs")
    clock = FixedClock(1_700_000_000 * NS_PER_SECOND)
    policy = dataclasses.replace(FAST, restart_min_s=0.5)
    gateway = await gateway_on(dms, tmp_path / "state", owner=OWNER, clock=clock, policy=policy)
    yield gateway, dms
    await gateway.close()


async def test_after_a_restart_the_endpoint_shown_is_the_new_ones(
    backing_off_and_dms: tuple[Gateway, FakeDMS],
) -> None:
    gateway, dms = backing_off_and_dms
    spec = pod(uid(3), policy="Always", ports=[{"containerPort": 8080}])
    dms.manifest = _published("30001")
    await create(gateway, spec)

    def shown() -> list[Any]:
        return [e["port"] for e in gateway.book.records[uid(3)].observed.get(ENDPOINTS_KEY) or ()]

    await until(lambda: shown() == [30001], "the first endpoint shown")
    dms.manifest = _published("30002")  # the next deployment publishes another port
    dms.live(uid(3))[0].allocations["main"] = "failed"
    await until(lambda: gateway.book.records[uid(3)].phase == Phase.BACKOFF, "backing off")
    assert shown() == []  # the stopped ensemble's port is not shown while it backs off
    await until(lambda: shown() == [30002], "the new endpoint shown")


class _ForgetfulDMS(FakeDMS):
    """A DMS whose answer for the logs of a deployment it dropped is the one users saw
    (``node not found for allocation``), not a plain not-found."""

    def about_one(self, name: str, payload: Any) -> Any:
        ident = getattr(payload, "id", "") or getattr(payload, "ensemble_id", "")
        if name == "deployment/logs" and ident not in self.deployments:
            return DeploymentLogsResponse(error=f"node not found for allocation {ident}_pod.main")
        return super().about_one(name, payload)


async def test_the_logs_of_a_run_outlive_the_deployment_the_dms_dropped(tmp_path: Path) -> None:
    """The run's end was seen (its markers read), so its logs were kept: once the DMS has
    dropped the deployment, /getLogs serves them instead of a 500."""
    dms = _ForgetfulDMS(tmp_path / "logs")
    (tmp_path / "logs" / "stdout.log").write_bytes(START + b"the job's last words\n")
    (tmp_path / "logs" / "stderr.log").write_bytes(START + b"oops\n" + EXIT % 3)
    clock = FixedClock(1_700_000_000 * NS_PER_SECOND)
    gateway = await gateway_on(dms, tmp_path / "state", owner=OWNER, clock=clock)
    try:
        spec = pod(uid(4), command=["sh", "-c", "exit 3"])
        await create(gateway, spec)
        ended = Runs(started=1, ended=1, exit_code=3, read_to=0)
        await until(
            lambda: Runs.from_map(gateway.book.records[uid(4)].runs.get("main"))[1:4] == ended[1:4],
            "the run seen to end",
        )
        (deployment,) = dms.live(uid(4))
        dms.forget(deployment.id)
        await until(lambda: gateway.book.records[uid(4)].phase == Phase.TERMINAL, "lost, failed")
        request = parse_logs_body(log_request(spec, "main").encode())
        logs = b"".join([chunk async for chunk in gateway.logs(request)])
        assert logs == b"the job's last words\noops\n"
        await gateway.delete(parse_create_body(json.dumps({"pod": spec}).encode())[0].pod)
        await until(
            lambda: gateway.kept_logs.directory(uid(4), "main", 1) is None, "gone with the pod"
        )
    finally:
        await gateway.close()
