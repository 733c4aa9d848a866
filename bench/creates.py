"""Pods created at once: each pod's time from ``/create`` to Running through the gateway,
against the embedded devnet's own time for the same ensembles deployed directly, in one run.

The devnet is the real embedded devnet (three nodes: bidding, placement, each allocation a
process), in its own process as a DMS would be. The gateway is the real one (pod actors,
store, translator, snapshots, the default policy) calling the devnet through its own client.

1. The floor: the ensembles the gateway would deploy for ``--pods`` pods (the same translator,
   the same pods) sent with ``deployment/new`` at once through the same client, their states
   then read with one ``deployment/list`` every 20 ms (one call for all, so the floor adds no
   load of its own): each deployment's time from its ``new`` to the first listing that shows
   it Running. It skips what only the gateway does: parsing the pod, recording it, following
   it and making its ``/status`` entry.
2. The project: ``--pods`` pods created at once through ``Gateway.create`` (the ``/create``
   body parsed as the server does); each pod's time from its create to its record showing
   Running (looked at every 20 ms).

Between the two, the floor's deployments are shut down and the devnet given time to free
their resources.

    .venv/bin/python bench/creates.py [--pods 50]

Target (issue 28): the project's p50 <= 1.2x the floor's.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from dms_process import dms_process
from dms_standin import SEED, gateway_client
from follow import _body, _translate  # the same pods

from dmsgw.behaviors.catalog import DEPLOYMENT_LIST, DEPLOYMENT_NEW, DEPLOYMENT_SHUTDOWN
from dmsgw.behaviors.deployment import (
    DeploymentListRequest,
    DeploymentShutdownRequest,
    NewDeploymentRequest,
)
from dmsgw.clock import system_clock
from dmsgw.devnet.devnet import Devnet
from dmsgw.devnet.times import parse_rfc3339
from dmsgw.interlink.capacity.resource_actor import Capacity, ResourceActor
from dmsgw.interlink.gateway import Gateway, GatewayParts
from dmsgw.interlink.records.pod_record import POD_UID_KEY, snapshot_of
from dmsgw.interlink.state.pod_store import PodStore
from dmsgw.interlink.wire.parsing import parse_create_body

LOOK_S = 0.02


def _serve_devnet(port: int) -> None:
    """The child process: the embedded devnet (three nodes; node 0 answers), until killed."""

    async def forever() -> None:
        await Devnet(3, seed=SEED, base_port=port).start()
        await asyncio.Event().wait()

    asyncio.run(forever())


async def _floor(invoke: Any, pods: int) -> tuple[list[float], list[str]]:
    """Each ensemble's time from ``new`` to Running, as the devnet's listing shows it."""
    ensembles = [_translate(parse_create_body(_body(100_000 + n))[0], 0) for n in range(pods)]
    sent = time.perf_counter()
    replies = await asyncio.gather(
        *(invoke(DEPLOYMENT_NEW, NewDeploymentRequest(e), timeout_s=120) for e in ensembles)
    )
    ids = {r.ensemble_id for r in replies}
    running: dict[str, float] = {}
    deadline = sent + 120
    while len(running) < len(ids) and time.perf_counter() < deadline:
        listing = await invoke(DEPLOYMENT_LIST, DeploymentListRequest())
        now = time.perf_counter()
        for d in listing.deployments or ():
            if d.orchestrator_id in ids and d.status == "Running":
                running.setdefault(d.orchestrator_id, now - sent)
        await asyncio.sleep(LOOK_S)
    return list(running.values()), sorted(ids)


async def _project(gateway: Gateway, pods: int) -> tuple[list[float], list[float]]:
    """Each pod's time from its create to its record showing Running, and to the DMS's
    having made its deployment (its ``created_at``, the same machine's clock)."""
    bodies = [parse_create_body(_body(n)) for n in range(pods)]
    uids = {b[0].pod.metadata.uid for b in bodies}
    started_ns = time.time_ns()
    start = time.perf_counter()
    await asyncio.gather(*(gateway.create(b) for b in bodies))
    running: dict[str, float] = {}
    deadline = start + 120
    while len(running) < pods and time.perf_counter() < deadline:
        now = time.perf_counter()
        for record, _ in gateway.pods():
            if record.uid in uids and record.dms_status == "Running":
                running.setdefault(record.uid, now - start)
        await asyncio.sleep(LOOK_S)
    listing = await gateway.parts.invoke(DEPLOYMENT_LIST, DeploymentListRequest())
    made = [
        (parse_rfc3339(d.created_at) - started_ns) / 1e9
        for d in listing.deployments or ()
        if (d.metadata or {}).get(POD_UID_KEY) in uids
    ]
    listing = await gateway.parts.invoke(DEPLOYMENT_LIST, DeploymentListRequest())
    made = [
        (parse_rfc3339(d.created_at) - started_ns) / 1e9
        for d in listing.deployments or ()
        if (d.metadata or {}).get(POD_UID_KEY) in uids
    ]
    return list(running.values()), made


async def _run(url: str, pods: int) -> None:
    loop = asyncio.get_running_loop()
    dms = gateway_client(url)
    client = dms._runtime.client
    print(f"load average at the start: {os.getloadavg()[0]:.2f} (2 cores shared)")
    floor, ids = await _floor(client.invoke, pods)
    for ident in ids:
        await client.invoke(DEPLOYMENT_SHUTDOWN, DeploymentShutdownRequest(ident))
    await asyncio.sleep(2.0)  # the devnet frees the allocations' resources
    with tempfile.TemporaryDirectory(prefix="dmsgw-creates-") as tmp:
        gateway = Gateway(
            GatewayParts(
                invoke=client.invoke,
                store=PodStore(Path(tmp) / "state.sqlite3"),
                translate=_translate,
                snapshot=lambda record: snapshot_of(record, now_ns=system_clock()),
                capacity=Capacity(ResourceActor.start(client.invoke, loop=loop), pods_capacity=100),
                loop=loop,
                owner=client.security.did.uri,
            )
        )
        await gateway.start()
        try:
            project, made = await _project(gateway, pods)
        finally:
            await gateway.close()
    await dms.aclose()
    _report(floor, project, pods)
    if made:
        print(
            f"  where a create's time goes: to the DMS's deployment made p50 "
            f"{statistics.median(made):.2f} s (parse, record, translate, the check that it was "
            f"not deployed already, deployment/new, queued behind the other creates), then "
            f"{statistics.median(project) - statistics.median(made):.2f} s to Running seen "
            f"(p50s' difference: the DMS deploying, the board's listing)"
        )


def _report(floor: list[float], project: list[float], pods: int) -> None:
    if len(floor) < pods or len(project) < pods:
        print(f"not every pod ran within 120 s: floor {len(floor)}, project {len(project)}")
        return
    f50, p50 = statistics.median(floor), statistics.median(project)
    print(f"{pods} pods created at once, create -> Running:")
    print(f"  floor  (deployment/new, the devnet's listing): p50 {f50:.2f} s, max {max(floor):.2f}")
    print(
        f"  project (Gateway.create, the pod's record):    p50 {p50:.2f} s, max {max(project):.2f}"
    )
    ratio = p50 / f50
    print(f"  p50 ratio {ratio:.2f}x (target <= 1.2x): {'met' if ratio <= 1.2 else 'NOT met'}")
    print(f"load average at the end: {os.getloadavg()[0]:.2f}")


async def main(pods: int) -> None:
    async with dms_process(_serve_devnet) as (url, _):
        await _run(url, pods)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pods", type=int, default=50)
    asyncio.run(main(parser.parse_args().pods))
