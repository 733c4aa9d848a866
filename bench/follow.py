"""Following live pods as ``dmsgw serve`` does: the gateway's CPU while ``--pods`` pods run and
nothing changes, through the gateway's own DMS client, against a DMS stand-in in its own process.

The gateway is the real one (``Gateway``, pod actors under the supervisor, the store on a
temporary SQLite file, the real translator and snapshots, the default policy and pace) and it
calls the DMS through its own client: envelopes, invoke tokens, REST, reply verification. The
DMS stand-in is one embedded-devnet node in its own process: every request goes through the
devnet's receive path (the REST API, the envelope decoded and its signature verified, the
capability tokens consumed and required, the behavior dispatched, the reply signed), and the
deployment behaviors are the devnet's own handlers (``list``, ``status``, ``manifest``,
``logs``, ``shutdown``), whose ``list`` filters, sorts and writes every deployment it holds,
as a DMS's does. What the stand-in does and skips (its deployments run at once, start no
process, and leave the manifest and the wrapper's start in each allocation's log that a DMS and
the started container would; a listing by one pod's UID is answered from an index): the
docstring of ``bench/dms_standin.py``, which ``pods.py`` shares.

1. ``--pods`` pods are created (``--batch`` creates in flight, as interLink's workers send
   them) and followed until every follow has settled and parked on the gateway's board
   (decision 79): pods/s and the time until then.
2. The steady state, ``--seconds`` long: the gateway process's CPU (``time.process_time``:
   the gateway and this bench's idle driver, nothing of the DMS's), the DMS's (its process's
   ``/proc`` times), the DMS calls made by behavior, the longest ``deployment/list`` round
   trip, and so how old a status can be (the listing period plus one listing). The floor is
   the least a gateway can do to know every pod's status that often: one ``deployment/list``
   a period (its pages, as the board asks them) through the same client, measured alone
   over the same window (its CPU); it decodes what the client decodes (a page whose bytes
   came before is not decoded again, for the floor as for the board: decision 128). Then,
   over another ``--seconds``, the longest event-loop stall (a timer probe, whose own turns
   are kept out of the CPU above) and the longest single callback.

    .venv/bin/python bench/follow.py [--pods 2000] [--seconds 20] [--batch 32]

Targets (issue 28): 10,000 pods Running and unchanging, every status no older than 10 s:
the gateway uses <= 5% of one core.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from dms_process import cpu_of, dms_process
from dms_standin import Counted, gateway_client, serve_dms
from pods import _LongestCallback  # pods.py's probe of the longest callback

from dmsgw.behaviors.catalog import DEPLOYMENT_LIST
from dmsgw.behaviors.deployment import DeploymentListRequest
from dmsgw.clock import system_clock
from dmsgw.interlink.capacity.resource_actor import Capacity, ResourceActor
from dmsgw.interlink.gateway import Gateway, GatewayParts, job_id
from dmsgw.interlink.pods.deployment_board import ORDER, PAGE
from dmsgw.interlink.pods.heap import FREEZE_EVERY
from dmsgw.interlink.records.pod_record import DEFAULT_POLICY, PodPolicy, snapshot_of
from dmsgw.interlink.state.pod_store import PodStore
from dmsgw.interlink.state.recovery import OWNER_KEY
from dmsgw.interlink.translate import TranslationOptions, pod_to_ensemble
from dmsgw.interlink.wire.parsing import parse_create_body

PROBE_S = 0.02  # the stall probe's period (as pods.py's)

# --- the gateway ---------------------------------------------------------------------------


def _translate(data: Any, generation: int) -> Any:
    return pod_to_ensemble(data, options=TranslationOptions(generation=generation))


def _body(n: int) -> bytes:
    uid = str(uuid.UUID(int=n + 1))
    pod = {
        "metadata": {
            "name": f"follow-{n}",
            "namespace": "default",
            "uid": uid,
            "annotations": {"JobID": job_id(uid)},
        },
        "spec": {
            "restartPolicy": "Always",
            "containers": [{"name": "main", "image": "busybox", "command": ["sleep", "inf"]}],
        },
    }
    return json.dumps({"pod": pod, "container": [{"name": "main"}]}).encode()


async def _until(done: Any, what: str, limit_s: float) -> float:
    start = time.perf_counter()
    while not done():
        if time.perf_counter() - start > limit_s:
            raise SystemExit(f"not within {limit_s:.0f} s: {what}")
        await asyncio.sleep(0.2)
    return time.perf_counter() - start


async def _run(
    url: str, dms_pid: int, pods: int, seconds: float, batch: int, policy: PodPolicy
) -> None:
    loop = asyncio.get_running_loop()
    dms = gateway_client(url)
    client = dms._runtime.client  # the NodeClient the gateway calls the DMS through
    invoke = Counted(client.invoke)
    with tempfile.TemporaryDirectory(prefix="dmsgw-follow-") as tmp:
        gateway = Gateway(
            GatewayParts(
                invoke=invoke,
                store=PodStore(Path(tmp) / "state.sqlite3"),
                translate=_translate,
                snapshot=lambda record: snapshot_of(record, now_ns=system_clock()),
                capacity=Capacity(ResourceActor.start(invoke, loop=loop), pods_capacity=pods * 2),
                loop=loop,
                owner=client.security.did.uri,
                policy=policy,
                freeze_every=FREEZE_EVERY,
            )
        )
        await gateway.start()
        try:
            await _measure(gateway, invoke, dms_pid, pods, seconds, batch)
        finally:
            await gateway.close()
    await dms.aclose()


async def _longest_stall(seconds: float) -> float:
    """Wait ``seconds``, with a timer probe every :data:`PROBE_S`: the longest it ran late
    (the loop held by one callback, or by the machine's other processes)."""
    loop = asyncio.get_running_loop()
    longest, end = 0.0, loop.time() + seconds
    while (due := loop.time() + PROBE_S) < end:
        await asyncio.sleep(PROBE_S)
        longest = max(longest, loop.time() - due)
    return longest


async def _list_all(invoke: Counted, owner: str) -> None:
    """Every page of the gateway's deployments, asked as its board asks them."""
    request = DeploymentListRequest(metadata={OWNER_KEY: owner}, limit=PAGE, sort_by=ORDER)
    while True:
        page = await invoke.invoke(DEPLOYMENT_LIST, request)
        if not page.has_more or page.next_offset <= request.offset:
            return
        request = dataclasses.replace(request, offset=page.next_offset)


async def _measure(
    gateway: Gateway, invoke: Counted, dms_pid: int, pods: int, seconds: float, batch: int
) -> None:
    print(f"load average at the start: {os.getloadavg()[0]:.2f} (2 cores shared)")
    bodies = iter(range(pods))

    async def worker() -> None:
        for n in bodies:
            await gateway.create(parse_create_body(_body(n)))

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(batch)))
    created_s = time.perf_counter() - start
    print(f"creates: {pods} pods in {created_s:.1f} s ({pods / created_s:,.0f}/s)")
    board = gateway.board
    limit = 120 + pods / 10
    settled_s = await _until(lambda: board.parked == pods, "every follow parked", limit)
    listings = board.listings  # parked once before any listing: told, asked once, parked again
    await _until(lambda: board.listings > listings + 1 and board.parked == pods, "re-park", limit)
    print(f"every follow parked on the board {created_s + settled_s:.1f} s after the first create")

    invoke.calls.clear()
    listed_before, checked_before = board.listings, board.checked
    cpu, dms_cpu, wall = time.process_time(), cpu_of(dms_pid), time.perf_counter()
    await asyncio.sleep(seconds)
    cpu, dms_cpu = time.process_time() - cpu, cpu_of(dms_pid) - dms_cpu
    wall = time.perf_counter() - wall
    listed, checked = board.listings - listed_before, board.checked - checked_before
    calls = dict(invoke.calls)
    # The stalls in a window of their own: the probe's own turns would count as the gateway's.
    with _LongestCallback() as callbacks:
        stall_s = await _longest_stall(seconds)

    # The floor: one deployment/list a period (its pages), through the same client, alone.
    longest, floor_cpu = 0.0, 0.0
    for _ in range(max(1, listed)):
        one_cpu, one_wall = time.process_time(), time.perf_counter()
        await _list_all(invoke, gateway.parts.owner)
        floor_cpu += time.process_time() - one_cpu
        longest = max(longest, time.perf_counter() - one_wall)
    period = gateway.parts.policy.poll_max_s
    share, floor_share = cpu / wall, floor_cpu / wall
    print(f"steady state, {wall:.1f} s, {pods} pods Running and unchanging:")
    print(
        f"  DMS calls: {calls} ({listed} listings by the board, one each {period:g} s; "
        f"parked follows checked against them: {checked})"
    )
    print(
        f"  gateway CPU {share * 100:.2f}% of one core ({cpu / wall / pods * 1e6:.2f} µs/s a pod)"
        f"; the floor (the same listings alone) {floor_share * 100:.2f}%: "
        f"{share / floor_share if floor_share else float('inf'):.2f}x"
    )
    print(f"  the DMS stand-in's CPU {dms_cpu / wall * 100:.2f}% of one core")
    print(
        f"  a status is at most {period + longest:.1f} s old (the period, plus the longest "
        f"listing, {longest * 1e3:.0f} ms)"
    )
    print(
        f"  the longest event-loop stall {stall_s * 1e3:.0f} ms (a timer probe every "
        f"{PROBE_S * 1e3:.0f} ms over another {seconds:g} s; target <= 20 ms); "
        f"{callbacks.line()}"
    )
    met = share <= 0.05 and period + longest <= 10
    print(f"  target <= 5% of one core, statuses <= 10 s old: {'met' if met else 'NOT met'}")
    print(f"load average at the end: {os.getloadavg()[0]:.2f}")


async def main(pods: int, seconds: float, batch: int, policy: PodPolicy) -> None:
    async with dms_process(serve_dms) as (url, pid):
        await _run(url, pid, pods, seconds, batch, policy)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pods", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=20.0, help="of steady state")
    parser.add_argument("--batch", type=int, default=32, help="creates in flight")
    parser.add_argument(
        "--poll-max-s",
        type=float,
        default=DEFAULT_POLICY.poll_max_s,
        help="the policy's longest wait, and so the listing period (shorter: a quick trial)",
    )
    args = parser.parse_args()
    wait = args.poll_max_s
    policy = dataclasses.replace(
        DEFAULT_POLICY, poll_max_s=wait, poll_min_s=min(DEFAULT_POLICY.poll_min_s, wait)
    )
    asyncio.run(main(args.pods, args.seconds, args.batch, policy))
