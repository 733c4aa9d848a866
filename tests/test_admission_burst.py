"""A burst of pods beyond the DMS network's free capacity, end to end (issue 26 item 3): the
gateway over the embedded devnet of one small peer. Nothing fails for lack of capacity
alone, every pod runs, and the DMS is asked to deploy them in the order they were created.

Scaled to run quickly: one peer offering one core, six pods of half a core each running for
a second, at most two deployments under way; the devnet gives up placing a deployment after
0.6 s (its test timeouts), so a gateway that sent all six at once would see four fail.
Waiting is bounded polling of the gateway's own state.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from dmsgw.behaviors.resources import CPU, RAM, Disk, Resources
from dmsgw.devnet.devnet import Devnet
from dmsgw.devnet.resource_ledger import NodeProfile
from dmsgw.devnet.timeouts import TEST_TIMEOUTS
from dmsgw.interlink.app import start_backend
from dmsgw.interlink.capacity.admission import AdmissionPolicy
from dmsgw.interlink.configuration.serve_config import load_config
from dmsgw.interlink.gateway import Gateway
from dmsgw.interlink.records.pod_record import POD_UID_KEY
from dmsgw.interlink.server import Metrics
from dmsgw.interlink.wire.parsing import parse_create_body
from tests.support.gateway_fakes import FAST

GIB = 1 << 30
PODS = 6
DEADLINE_S = 60.0
"""How long the burst may take before the test fails (it takes a few seconds)."""


def _machine(cores: float, ram_gib: int, disk_gib: int) -> Resources:
    return Resources(
        cpu=CPU(clock_speed=3e9, cores=cores, architecture="x86_64", vendor="GenuineIntel"),
        ram=RAM(size=ram_gib * GIB),
        disk=Disk(size=disk_gib * GIB),
    )


SMALL = NodeProfile("small", _machine(2, 4, 20), _machine(1, 2, 10))
"""A peer that offers the network one core: two half-core pods at a time."""


def _pod(n: int) -> dict[str, Any]:
    # Created in the order 0..5 with UIDs that sort the other way round: the order seen is
    # the creation's, not the UIDs'.
    uid = f"b0857000-0000-4000-8000-{PODS - n:012d}"
    limits = {"cpu": "500m", "memory": "16Mi", "ephemeral-storage": "64Mi"}
    return {
        "metadata": {"name": f"burst-{n}", "namespace": "default", "uid": uid},
        "spec": {
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "main",
                    "image": "busybox",
                    "command": ["sh", "-c", "sleep 1; echo done"],
                    "resources": {"limits": limits, "requests": limits},
                }
            ],
        },
    }


@pytest.fixture
async def gateway(tmp_path: Path) -> AsyncIterator[tuple[Gateway, Metrics, Devnet]]:
    env = {"DMSGW_DEVNET": "1", "DMSGW_STATE_PATH": str(tmp_path / "state.sqlite3")}
    config = load_config(env=env)
    devnet = Devnet(1, seed=f"burst-{tmp_path.name}", profiles=(SMALL,), timeouts=TEST_TIMEOUTS)
    metrics = Metrics(process=False)
    backend = await start_backend(config, metrics=metrics, devnet=devnet, policy=FAST)
    backend.admission.policy = AdmissionPolicy(max_deploying=2, recheck_s=1.0)
    try:
        yield backend, metrics, devnet
    finally:
        await backend.close()


async def test_a_burst_beyond_capacity_all_runs_in_creation_order(
    gateway: tuple[Gateway, Metrics, Devnet], monkeypatch: pytest.MonkeyPatch
) -> None:
    backend, metrics, devnet = gateway
    admitted: list[str] = []
    wait = backend.admission.wait

    async def noted(uid: str, *args: Any) -> None:
        await wait(uid, *args)
        admitted.append(uid)

    monkeypatch.setattr(backend.admission, "wait", noted)  # the queue its pods wait in
    specs = [_pod(n) for n in range(PODS)]
    for spec in specs:  # one at a time: creation order is the order of these calls
        body = json.dumps({"pod": spec, "container": [{"name": "main"}]}).encode()
        await backend.create(parse_create_body(body))
    uids = [spec["metadata"]["uid"] for spec in specs]
    records = [backend.book.records[u] for u in uids]
    loop = asyncio.get_running_loop()
    deadline = loop.time() + DEADLINE_S
    waited = False
    while not all(_ended(backend, u) for u in uids):
        assert loop.time() < deadline, [(r.name, r.phase, r.reason, r.message) for r in records]
        in_line = set(backend.admission.waiting())
        if not waited and any(r.uid in in_line and r.reason for r in records):
            waited = True  # told why it waits, in line: what /metrics shows
            exported = metrics.render().decode()
            assert 1 <= _gauge(exported, "dmsgw_pods_waiting_for_capacity") <= PODS - 1
        await asyncio.sleep(0.05)
    assert waited, "no pod ever waited: the burst did not exceed the capacity"
    ended = [(r.name, r.reason, r.message) for r in records if r.reason]
    assert ended == [], "a pod failed"
    statuses = [backend.book.snapshots.get(u) for u in uids]
    codes = [s.containers[0].state.terminated.exit_code for s in statuses]  # type: ignore[union-attr]
    assert codes == [0] * PODS
    deployments = devnet.nodes[0].deployments
    assert deployments is not None
    assert admitted == uids, "admitted out of creation order"
    # The devnet's orchestrators, one per deployment/new it took: two deploy at a time, so
    # the DMS may hear the two in either order, but each once.
    asked = [o.config.metadata[POD_UID_KEY] for o in deployments.orchestrators.values()]
    assert sorted(asked) == sorted(uids), "a pod deployed more than once, or never"


def _ended(backend: Gateway, uid: str) -> bool:
    """Whether the pod's published status shows its container ended."""
    shown = backend.book.snapshots.get(uid)
    return shown is not None and shown.containers[0].state.terminated is not None


def _gauge(exported: str, name: str) -> float:
    (line,) = [line for line in exported.splitlines() if line.startswith(f"{name} ")]
    return float(line.split()[1])
