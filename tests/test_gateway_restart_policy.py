"""``restartPolicy`` once the DMS gives up on a container: the DMS restarts a failed allocation
in place only up to its own limit, then leaves it down while the ensemble runs on. The kubelet
restarts such a container forever, with back-off; so does the gateway, by deploying the pod
again (decision 67).

Over the in-memory DMS of :mod:`tests.gateway_fakes` (an injected clock, bounded waits on the
gateway's own state).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from dmsgw.clock import NS_PER_SECOND, FixedClock
from dmsgw.interlink.gateway import Gateway
from dmsgw.interlink.pod_record import Phase
from tests.gateway_fakes import FakeDMS, create, gateway_on, pod, poll, uid, until

OWNER = "did:key:the-gateway"


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
    await until(lambda: gateway._records[uid(1)].dms_status == "Running", "running")
    (first,) = dms.live(uid(1))
    first.allocations["main"] = left  # the DMS stays down, the ensemble runs
    await until(lambda: len(dms.deployments) == 2, "deployed again")
    await until(lambda: gateway._records[uid(1)].phase == Phase.RUNNING, "running again")
    record = gateway._records[uid(1)]
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
        lambda: all(gateway._records[u].dms_status == "Running" for u in (uid(1), uid(2))),
        "running",
    )
    (first,) = dms.live(uid(1))
    first.allocations["main"] = left
    dms.live(uid(2))[0].allocations["main"] = "failed"
    await until(lambda: gateway._records[uid(2)].restarts == 1, "the other pod restarted")
    await until(lambda: gateway._records[uid(2)].phase == Phase.RUNNING, "running again")
    assert [d.id for d in dms.live(uid(1))] == [first.id]
    assert gateway._records[uid(1)].restarts == 0
