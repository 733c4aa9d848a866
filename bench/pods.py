"""10,000 live pods in one gateway: RSS per pod, create throughput, and ``/status`` latency
under interLink-style polling, against an aiohttp handler that returns a fixed body.

The gateway is the real one (``Gateway``, the plugin backend, pod actors under the supervisor,
``PodStore`` on a temporary SQLite file, the real translator and snapshots) and it calls the
DMS through its own client: envelopes, invoke tokens, REST, reply verification. The DMS is the
stand-in of ``bench/dms_standin.py`` in a process of its own: one devnet node whose receive
path and deployment handlers answer every call (``deployment/list`` scans every deployment it
holds, as a DMS's does, but for a listing by one pod's UID, answered from an index). What it
skips (its docstring says more): its deployments run at once and start no process; each
leaves what a DMS and the started container would have left, a manifest listing every
allocation and, per allocation, a log holding what the gateway's wrapper prints when it starts
the command, so that ``/status`` shows each pod Running once the gateway has read it. The
stand-in's CPU is read from its process, apart from the gateway's. Pods are followed with a
long poll interval, as live pods are once they settle.

1. Create: ``--pods`` pods through ``backend.create``, one pod per call as interLink sends them
   (the ``/create`` body parsed as the server does), from ``--batch`` workers that each send
   the next pod once their last call returned, as the virtual kubelet's pod sync workers do.
   Reported: pods/s, the time until every pod's ``/status`` snapshot says Running, the
   process's CPU and the stand-in's until then, the DMS calls by behavior, and the process
   RSS grown per pod (``/proc/self/statm``, after a GC, over a baseline taken with the
   gateway up and no pod). The floor, measured before the gateway starts: the same pods'
   ensembles sent by ``deployment/new`` alone through the same client, ``--batch`` in flight,
   to a stand-in of its own, then listed until every one shows running (one signed call a pod
   and one a page; it skips the body's parsing, the record and its store, the translation,
   the check that the pod was not deployed already and the follow until ``/status`` says
   Running): wall, process-CPU and the stand-in's CPU ratios.
2. ``/status``: the real ``PluginServer`` app on loopback; a client in another process sends
   ``GET /status`` with one pod per call (every live pod in turn, in a shuffled order, as
   interLink polls them) at ``--rate`` requests/s, open loop (each request leaves at its due
   time whatever the earlier ones do, over a pool of keep-alive connections), for
   ``--seconds``. Each pod's body is first sent once to both servers: interLink has polled
   every live pod before, as often as every 5 s. That first poll is reported apart (the
   process CPU a request): a body never read before, as after a restart or after a pod's
   JSON changed, misses the gateway's memo of bodies and is read for the pods' identities;
   the floor, on a body it never saw, does what a minimal correct handler must: parses the
   JSON, finds each pod by its UID and answers their entries (:func:`_floor` says what it
   skips). Latency runs from the due time to the last byte read. The floor is an aiohttp
   handler on the same event loop (so it shares the live pods' background work) that, for
   a body it has seen, reads it and returns a fixed, equally large body, driven the same
   way. The two alternate in rounds, so that drift in the machine hits both alike.

3. Restart: the gateway is closed and a new one opened on the same store; the time from
   ``Gateway.start`` until every pod's ``/status`` snapshot says Running again, against a
   floor that reads the same SQLite rows and builds one plain record per pod
   (``PodStore.load_all`` + ``PodRecord.from_map``): no restart can do less than know every
   pod again, and what the gateway adds (an actor, a supervisor child, a snapshot per pod) is
   what the ratio shows. What the bench process holds is collected and frozen before the
   window opens, as a fresh ``dmsgw serve`` has collected its own heap before its plugin API
   listens: the gateway's collection before its resume walks only what is new. The longest
   stall is split where ``dmsgw serve`` starts to listen (once ``Gateway.start`` returned):
   the resume's before, which no request meets, and the serving one after.

4. Steady state: the gateway left running with every pod followed as ``dmsgw serve``
   follows them (a gateway resumed on the same store, with the default policy and pace: each
   pod polled every 5 s, or every ``pods / 1,000`` s beyond 5,000 pods), watched, once every
   pod has been asked once, for two such periods (at most ``--steady-seconds``): the DMS
   calls by behavior (a settled pod is parked on the board's one listing a period, decision
   79), the gateway process's CPU and the stand-in's, and the longest stall while nothing but
   the following happens, against the target (in the other phases a pod parks on the board
   after a quiet poll 5 s after it runs, and the board lists every 120 s, so that the
   following is not what they measure; the ``/status`` loads start once every follow has
   parked). No floor: ``follow.py`` measures this load against the same listings alone.

Then a quarter of the pods are deleted (their actors ended) and created again: the deletes'
rate and longest stall, and the cyclic garbage the frozen heap kept meanwhile (none
expected, decision 50), found by the bench's own pass over the thawed heap.

Every load also reports the longest event-loop stall, from a timer probe every 20 ms on the
same loop (so the floor's figure comes from the same probe, in the same run), and the
gateway's own ``dmsgw_event_loop_stall_max_seconds`` gauge over the whole run. The creates
and deletes also report the longest single callback the loop ran (a stall of its own; the
probe also counts callbacks ready together, queueing) and the collector's pauses.

``--profile`` adds where the objects and the CPU go per pod: tracked objects by type per pod
(``gc.get_objects``), the allocation sites holding the most memory (``tracemalloc``, started
before the creates, which it slows), and a ``cProfile`` of the gateway process while it
serves ``/status``. ``--profile-creates`` instead profiles the creates alone (``cProfile``
from the first create until every pod runs, without ``tracemalloc``, which would weigh on
every allocation it profiles): what a pod costs on its way to Running, and how many times
each step runs per pod.

    .venv/bin/python bench/pods.py [--pods 2000] [--rate 2000] [--seconds 4] [--profile]
                                   [--steady-seconds 30]
    .venv/bin/python bench/pods.py [--pods 2000] --profile-creates

The default run takes minutes on 2 shared cores (every create is about six signed DMS calls
received by the stand-in, bench/README.md); issue 13's figures are for ``--pods 10000`` and
``--pods 100000``.

Targets (issue 13, for 100,000 pods): RSS <= 16 KiB per pod, creates >= 1,000/s, /status p99
<= 1.5x the floor's and CPU per request <= 1.2x, a full GC pass <= 50 ms, the longest stall
<= 20 ms; a restart of 10,000 pods <= 3 s.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import cProfile
import dataclasses
import gc
import hashlib
import itertools
import json
import multiprocessing
import os
import pstats
import random
import resource
import socket
import statistics
import tempfile
import time
import tracemalloc
from collections.abc import Awaitable, Callable, Iterable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from dms_process import cpu_of, dms_process
from dms_standin import Counted, gateway_client, serve_dms

import dmsgw
from dmsgw.behaviors.catalog import DEPLOYMENT_LIST, DEPLOYMENT_NEW
from dmsgw.behaviors.deployment import DeploymentListRequest, NewDeploymentRequest
from dmsgw.clock import system_clock
from dmsgw.interlink.capacity.admission import AdmissionPolicy
from dmsgw.interlink.capacity.resource_actor import Capacity, ResourceActor
from dmsgw.interlink.configuration.serve_config import load_config
from dmsgw.interlink.gateway import Gateway, GatewayParts
from dmsgw.interlink.pods.heap import FREEZE_EVERY
from dmsgw.interlink.pods.poll_pace import DEFAULT_POLLS_PER_S
from dmsgw.interlink.records.pod_record import DEFAULT_POLICY, PodPolicy, PodRecord, snapshot_of
from dmsgw.interlink.server import LoopStalls, Metrics, PluginServer
from dmsgw.interlink.server.metrics import STALL_PROBE_S
from dmsgw.interlink.state.pod_store import PodStore
from dmsgw.interlink.translate import TranslationOptions, pod_to_ensemble
from dmsgw.interlink.wire.bodies import RetrievedPodData
from dmsgw.interlink.wire.parsing import parse_create_body, parse_delete_body

RSS_TARGET_KIB = 16
P99_TARGET = 1.5
CPU_TARGET = 1.2  # gateway CPU per /status request over the floor's
CREATE_TARGET = 1000  # pods/s
GC_TARGET_MS = 50
RESTART_TARGET_S = 3.0
STALL_TARGET_MS = 20  # the longest event-loop stall while serving, GC included
PROBE_S = 0.02  # the stall probe's period
LOOKED_AT_ONCE = 2000  # pods whose /status entry the bench looks at per turn of the loop
PACKAGE = str(Path(dmsgw.__file__).resolve().parent)  # the gateway's own code, for --profile
ROUNDS = 2  # floor and project alternate this many times, --seconds / ROUNDS each
CONNECTIONS = 64  # the client's keep-alive pool (interLink's Go client keeps a pool too)
POLICY = PodPolicy(poll_min_s=5.0, poll_max_s=120.0)  # parked after a quiet poll; listed rarely
PAGE = 1000  # deployments a listing of the creates' floor asks for (the board's page)

# --- the pods ----------------------------------------------------------------------------


def uid_of(i: int) -> str:
    return f"00000000-0000-4000-8000-{i:012d}"


def pod_of(i: int) -> dict[str, Any]:
    """A small, typical pod: one container, requests, an env var, the JobID interLink keeps."""
    uid = uid_of(i)
    return {
        "metadata": {
            "name": f"bench-{i}",
            "namespace": "default",
            "uid": uid,
            "annotations": {"JobID": f"dmsgw-{uid}"},
        },
        "spec": {
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "main",
                    "image": "busybox",
                    "command": ["sh", "-c"],
                    "args": ["sleep 3600"],
                    "env": [{"name": "MODE", "value": "bench"}],
                    "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
                }
            ],
        },
    }


def create_body(i: int) -> bytes:
    return json.dumps({"pod": pod_of(i), "container": [{"name": "main"}]}).encode()


def _translate(data: RetrievedPodData, generation: int) -> Any:
    return pod_to_ensemble(data, options=TranslationOptions(generation=generation, gpu_models={}))


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _running(gateway: Gateway, uid: str) -> bool:
    """Whether the pod's published ``/status`` entry shows its container running (read as
    kept, not as a model: the bench asks for every pod, on the gateway's own loop)."""
    shown = gateway.book.snapshots.shown(uid)
    return shown is not None and shown.phase == "Running"


async def _until_running(gateway: Gateway, indices: range) -> None:
    """Until every pod of ``indices`` answers Running."""
    await _until_each(lambda uid: _running(gateway, uid), (uid_of(i) for i in indices))


async def _until_gone(gateway: Gateway, uids: list[str]) -> None:
    """Until no pod of ``uids`` has a ``/status`` entry."""
    await _until_each(lambda uid: uid not in gateway.book.snapshots, uids)


async def _until_each(done: Callable[[str], bool], uids: Iterable[str]) -> None:
    """Until ``done`` holds for each of ``uids``, in turn: the first not done yet is looked at
    every 10 ms, the next ones only once it is, and a few thousand a turn of the loop at most.
    Each pod still waiting looked at every 10 ms was much of the bench's own CPU inside the
    window it measures, once pods wait for the DMS client's calls; and a look at every pod at
    once held the loop longer than the stalls it measures (bench/README.md, "The bench's own
    work")."""
    for looked, uid in enumerate(uids, 1):
        while not done(uid):
            await asyncio.sleep(0.01)
        if looked % LOOKED_AT_ONCE == 0:
            await asyncio.sleep(0)


# --- the /status load generator (its own process) -----------------------------------------


def _client(
    conn: Connection, plan: list[tuple[str, str]], pods: int, rate: float, s: float
) -> None:
    """Runs each ``(label, url)`` of the plan for ``s`` seconds at ``rate``; sends back
    ``(label, latencies, errors, achieved rate, wall start, wall end)`` per phase.

    The collector is off here: a full collection in the client holds every request it is
    about to send, and the delay would be charged to whichever server it happened to hit.
    This process is short-lived and keeps its garbage bounded."""
    gc.disable()
    try:
        conn.send(asyncio.run(_drive_all(plan, pods, rate, s)))
    finally:
        conn.close()


async def _drive_all(
    plan: list[tuple[str, str]], pods: int, rate: float, s: float
) -> tuple[list[Any], list[tuple[str, int, float, float]]]:
    """The plan's loads, and before them each server's first poll of every pod (label,
    requests, wall start, wall end): bodies never read before, as after a restart or a
    change of the pods (the body memo misses)."""
    # interLink polls every pod in turn, each every few seconds: one body per pod, shuffled.
    order = list(range(pods))
    random.Random(5).shuffle(order)
    bodies = [json.dumps([pod_of(i)]).encode() for i in order]
    firsts = []
    for url, label in {url: label for label, url in plan}.items():
        start = time.time()
        await _poll_once(url, bodies)
        firsts.append((label, len(bodies), start, time.time()))
    out = []
    for label, url in plan:
        out.append((label, *await _drive(url, bodies, rate, s)))
    return out, firsts


async def _poll_once(url: str, bodies: list[bytes]) -> None:
    """Every pod's body once, unmeasured: by the time anything is measured, interLink has
    polled every live pod before, as it has in a gateway that has been up for a while."""
    connector = aiohttp.TCPConnector(limit=CONNECTIONS)
    headers = {"Content-Type": "application/json"}  # what interLink sends
    async with aiohttp.ClientSession(connector=connector, headers=headers) as session:
        pending = iter(bodies)

        async def worker() -> None:
            for body in pending:
                async with session.get(url, data=body) as resp:
                    await resp.read()

        await asyncio.gather(*(worker() for _ in range(CONNECTIONS)))


async def _drive(
    url: str, bodies: list[bytes], rate: float, s: float
) -> tuple[list[float], int, float]:
    """Open loop: request i is due at start + i / rate, whatever the earlier ones do."""
    loop = asyncio.get_running_loop()
    timeout = aiohttp.ClientTimeout(total=10)
    headers = {"Content-Type": "application/json"}
    latencies: list[float] = []
    errors = 0
    connector = aiohttp.TCPConnector(limit=CONNECTIONS)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:

        async def one(body: bytes, due: float | None) -> None:
            nonlocal errors
            try:
                async with session.get(url, data=body, headers=headers) as resp:
                    await resp.read()
                    if resp.status != 200:
                        errors += 1
                        return
            except (aiohttp.ClientError, TimeoutError):
                errors += 1
                return
            if due is not None:
                latencies.append(loop.time() - due)

        # Warm up: open the pool's connections, then a short burst at the rate.
        await asyncio.gather(*(one(bodies[i % len(bodies)], None) for i in range(CONNECTIONS)))
        total = int(rate * s)
        tasks = []
        start = loop.time() + 0.01
        wall_start = time.time() + 0.01
        for i in range(total):
            due = start + i / rate
            delay = due - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(loop.create_task(one(bodies[i % len(bodies)], due)))
        await asyncio.gather(*tasks)
        achieved = total / (loop.time() - start)
    return latencies, errors, achieved, wall_start, time.time()


# --- the run -----------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _serve(app: web.Application) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    port = _free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner, f"http://127.0.0.1:{port}/status"


@dataclasses.dataclass(frozen=True)
class _DMS:
    """The gateway's way to the DMS stand-in: its own client's ``invoke`` (the calls counted
    by behavior), the DID it signs as (the owner of its deployments), the stand-in's process."""

    invoke: Counted
    owner: str
    pid: int

    def cpu(self) -> float:
        """The stand-in's CPU seconds so far."""
        return cpu_of(self.pid)


def _gateway(
    tmp: Path,
    dms: _DMS,
    loop: asyncio.AbstractEventLoop,
    pods: int,
    policy: PodPolicy = POLICY,
) -> Gateway:
    """The real gateway on the store under ``tmp`` (the same file each time: a restart),
    calling the DMS stand-in through its own client; the gateway is the plugin server's
    backend."""
    parts = GatewayParts(
        invoke=dms.invoke,
        store=PodStore(tmp / "state.sqlite3"),
        translate=_translate,
        snapshot=lambda record: snapshot_of(record, now_ns=system_clock()),
        capacity=Capacity(ResourceActor.start(dms.invoke, loop=loop), pods_capacity=pods * 2),
        loop=loop,
        owner=dms.owner,
        policy=policy,
        freeze_every=FREEZE_EVERY,  # as `dmsgw serve` runs it
        # The stand-in takes every deployment at once and runs it: no DMS to shield from a
        # flood, so every pod is admitted as it comes.
        admission=AdmissionPolicy(max_deploying=pods),
    )
    return Gateway(parts)


def _calls(calls: collections.Counter[str]) -> str:
    """DMS calls by behavior, in one line."""
    return ", ".join(f"{name} {n:,}" for name, n in sorted(calls.items())) or "none"


@dataclasses.dataclass(frozen=True)
class _CreatesFloor:
    """The least the creates can take through the same client: each pod's ensemble (translated
    before the clock starts) sent by ``deployment/new`` alone, ``batch`` in flight, to a fresh
    stand-in of its own (its deployments weigh on no listing of the gateway's), then listed
    in pages of :data:`PAGE` until every deployment shows running: one signed call a pod, one
    a page. What a create does beyond that, the floor skips: parsing the body, the pod's record
    and its store, the translation, the check that the pod was not deployed already (a
    listing), and the follow until ``/status`` says Running (``deployment/status``, the
    manifest, the log with the wrapper's start marker)."""

    wall_s: float
    cpu_s: float  # this process's: the client's work
    dms_cpu_s: float  # the stand-in's
    pages: int

    def report(self, pods: int, wall_s: float, cpu_s: float, dms_cpu_s: float) -> None:
        """The floor's line, and the creates' ratios to it."""
        print(
            f"  floor:       {pods / self.wall_s:8,.0f} pods/s ({self.wall_s:.1f} s: "
            f"deployment/new alone through the same client, then {self.pages} listing pages); "
            f"wall ratio {wall_s / self.wall_s:.2f}x, the process's CPU "
            f"{_ratio(cpu_s, self.cpu_s)} ({cpu_s / pods * 1e6:.0f} against "
            f"{self.cpu_s / pods * 1e6:.0f} µs a pod), the DMS stand-in's CPU "
            f"{_ratio(dms_cpu_s, self.dms_cpu_s)}"
        )


def _ratio(project: float, floor: float) -> str:
    return f"{project / floor:.2f}x" if floor > 0 else "n/a (the floor took no measurable CPU)"


async def _creates_floor(pods: int, batch: int) -> _CreatesFloor:
    """:class:`_CreatesFloor`, measured."""
    ensembles = [_translate(parse_create_body(create_body(i))[0], 1) for i in range(pods)]
    async with dms_process(serve_dms) as (url, pid):
        client = gateway_client(url)
        try:
            invoke = client._runtime.client.invoke
            await invoke(DEPLOYMENT_LIST, DeploymentListRequest(limit=1))  # the connection, warm
            pending = iter(ensembles)

            async def worker() -> None:
                for ensemble in pending:
                    await invoke(
                        DEPLOYMENT_NEW,
                        NewDeploymentRequest(ensemble),
                        timeout_s=DEFAULT_POLICY.deploy_timeout_s,
                    )

            started, cpu, dms_cpu = time.perf_counter(), time.process_time(), cpu_of(pid)
            await asyncio.gather(*(worker() for _ in range(batch)))
            running, pages, has_more = 0, 0, True
            while has_more:
                request = DeploymentListRequest(limit=PAGE, offset=pages * PAGE)
                page = await invoke(DEPLOYMENT_LIST, request)
                running += sum(d.status == "Running" for d in page.deployments or ())
                pages, has_more = pages + 1, page.has_more
            wall, cpu, dms_cpu = (
                time.perf_counter() - started,
                time.process_time() - cpu,
                cpu_of(pid) - dms_cpu,
            )
        finally:
            await client.aclose()
    if running != pods:
        raise SystemExit(f"the creates' floor listed {running} running deployments of {pods}")
    return _CreatesFloor(wall, cpu, dms_cpu, pages)


@dataclasses.dataclass(frozen=True)
class Run:
    """What one run measures (the command line's options)."""

    pods: int = 2_000
    rate: float = 2000.0  # /status requests a second
    seconds: float = 4.0  # of /status load, per side (floor, project)
    batch: int = 50  # create calls in flight
    profile: bool = False
    profile_creates: bool = False
    steady_s: float = 30.0  # the steady state is watched at most this long


async def main(run: Run) -> None:
    print(f"load average before the run: {_load_average()} (2 cores shared: figures are noisy)")
    floor = await _creates_floor(run.pods, run.batch)
    async with dms_process(serve_dms) as (url, pid):
        client = gateway_client(url)
        try:
            node = client._runtime.client  # the NodeClient the gateway calls the DMS through
            await _phases(run, _DMS(Counted(node.invoke), node.security.did.uri, pid), floor)
        finally:
            await client.aclose()
    print(f"load average after the run: {_load_average()}")


async def _phases(run: Run, dms: _DMS, floor: _CreatesFloor) -> None:
    """Every phase, on gateways calling ``dms``."""
    loop = asyncio.get_running_loop()
    pods = run.pods
    metrics = Metrics()
    gauge = _StallGauge(metrics)
    probe = _Probe()
    sampler = loop.create_task(probe.run())
    with tempfile.TemporaryDirectory(prefix="dmsgw-bench-pods-") as name:
        tmp = Path(name)
        gateway = backend = _gateway(tmp, dms, loop, pods)
        await gateway.start()
        config = load_config(
            env={"DMSGW_DEVNET": "1", "DMSGW_STATE_PATH": str(tmp / "unused.sqlite3")}
        )
        runners: list[web.AppRunner] = []
        try:
            load = _Load(backend, gateway, dms, metrics, config, runners, probe, gauge)
            await load.run(run, floor)
        finally:
            for runner in runners:
                await runner.cleanup()
            await _close(backend, gateway, "first")
        # A restarted process holds nothing of the first gateway (its servers' runners held
        # their apps, and with them the plugin server and the gateway with every pod).
        del load, gateway, backend
        runners.clear()
        _forget_handlers()
        rig = _Rig(tmp, dms, loop, probe, gauge)
        await _restart(rig, pods, run.profile)
        await _steady(rig, pods, run.steady_s)
    gauge.watch.cancel()
    sampler.cancel()


def _forget_handlers() -> None:
    """aiohttp keeps each request handler it built middlewares for (up to 1,024, in a cache
    of its module), and with the plugin server's handlers the first gateway and every pod it
    had: the restart ran beside 100,000 dead pods, and its first collection walked them all
    (bench/README.md, "The bench's own work"). A restarted process holds none of them."""
    cache = getattr(aiohttp.web_app, "_cached_build_middleware", None)
    if cache is not None:
        cache.cache_clear()


async def _close(backend: Gateway, gateway: Gateway, which: str) -> None:
    closing = time.perf_counter()
    await backend.close()
    took = time.perf_counter() - closing
    print(f"shutdown of the {which} gateway, {len(gateway.book.snapshots):,} pods: {took:.1f} s")


class _Stolen:
    """The share of the machine's CPU time that its hypervisor took while in a ``with``
    block (``steal`` in ``/proc/stat``): on a shared virtual machine a single callback can
    last tens of milliseconds for no reason of its own, and the stalls with it."""

    def __enter__(self) -> _Stolen:
        self._before = _cpu_times()
        return self

    def __exit__(self, *exc: object) -> None:
        after = _cpu_times()
        total = sum(after) - sum(self._before)
        self.share = (after[7] - self._before[7]) / total if total else 0.0

    def line(self) -> str:
        return f"  CPU stolen by the hypervisor meanwhile: {self.share:.0%} of the machine's time"


def _cpu_times() -> list[int]:
    with open("/proc/stat") as f:
        return [int(x) for x in f.readline().split()[1:9]]


def _load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


class _StallGauge:
    """The gateway's own stall gauge, run as ``dmsgw serve`` runs it, read as ``/metrics``
    shows it for each load. It is set back to 0 after the bench's own full collections (the
    RSS and GC figures), which would otherwise be the longest stall of every load."""

    NAME = "dmsgw_event_loop_stall_max_seconds"

    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics
        self._stalls = LoopStalls(metrics)
        self.watch = asyncio.get_running_loop().create_task(self._stalls.watch())

    async def reset(self) -> None:
        """Back to 0, once the gauge's probe has run since whatever held the loop last (the
        bench's own collection just before, say): that stall belongs to no load."""
        await asyncio.sleep(2 * STALL_PROBE_S)
        self._stalls.longest_s = 0.0

    def read(self, what: str) -> str:
        """The gauge's line for the load ``what`` (read now, printed where it belongs)."""
        for family in self._metrics.registry.collect():
            for sample in family.samples:
                if sample.name == self.NAME:
                    return f"  {self.NAME} over {what}: {sample.value * 1e3:.0f} ms"
        raise SystemExit(f"/metrics has no {self.NAME}")


class _Load:
    """Creates, then ``/status`` under polling, on one gateway."""

    def __init__(
        self,
        backend: Gateway,
        gateway: Gateway,
        dms: _DMS,
        metrics: Metrics,
        config: Any,
        runners: list[web.AppRunner],
        probe: _Probe,
        gauge: _StallGauge,
    ) -> None:
        self.gauge = gauge
        self.backend = backend
        self.gateway = gateway
        self.dms = dms
        self.metrics = metrics
        self.config = config
        self.runners = runners
        self.probe = probe

    async def run(self, run: Run, floor: _CreatesFloor) -> None:
        gateway = self.gateway
        pods, batch, profile = run.pods, run.batch, run.profile
        # Warm the code paths (imports, caches) with a throwaway pod, then take the baseline.
        warm = pods  # an index outside 0..pods-1
        await self.backend.create(parse_create_body(create_body(warm)))
        while not _running(gateway, uid_of(warm)):
            await asyncio.sleep(0.01)
        gc.collect()
        baseline = _rss_bytes()
        objects_before = _tracked_by_type() if profile else None
        if profile:
            tracemalloc.start()
        profiler = cProfile.Profile() if run.profile_creates else None
        await self._create(pods, batch, baseline, profiler, floor)
        if objects_before is not None:
            _print_objects_per_pod(objects_before, pods)
            _print_allocations(pods)
        # The follows' own work once their pods run (a quiet poll, then parked on the board)
        # is not the /status loads': they start once every follow has parked.
        parked_s = await _until_parked(
            gateway.board, len(gateway.book.snapshots), 120 + pods / 10, listings=0
        )
        print(f"every follow parked on the board {parked_s:.1f} s later")
        project_url, floor_url, size = await self._servers()
        plan = [("floor", floor_url), ("project", project_url)] * ROUNDS
        await self.gauge.reset()
        results, firsts = await _drive_in_child(plan, pods, run.rate, run.seconds / ROUNDS)
        _report_first_polls(firsts, self.probe.samples)
        _report(results, run.rate, size, self.probe.samples)
        print(self.gauge.read("the /status loads (the floor's and the gateway's)"))
        if profile:
            await _profile_status(project_url, pods, run.rate, run.seconds / ROUNDS)
        gc.collect()
        after = (_rss_bytes() - baseline) / 2**20
        print(f"  RSS after the /status load: +{after:.0f} MiB over the baseline")
        await self._delete_a_quarter(pods, batch)

    async def _create(
        self,
        pods: int,
        batch: int,
        baseline: int,
        profiler: cProfile.Profile | None,
        floor: _CreatesFloor,
    ) -> None:
        bodies = [create_body(i) for i in range(pods)]
        await self.gauge.reset()  # and the bench's probe has caught up with the bodies' making
        started = time.perf_counter()
        wall_started = time.time()
        cpu_started, dms_cpu_started = time.process_time(), self.dms.cpu()
        self.dms.invoke.calls.clear()
        if profiler is not None:
            profiler.enable()
        with _GCPauses() as pauses, _LongestCallback() as callbacks, _Stolen() as stolen:
            await self._create_all(bodies, batch)
            created_s = time.perf_counter() - started
            await _until_running(self.gateway, range(pods))
        all_running_s = time.perf_counter() - started
        cpu_s, dms_cpu_s = time.process_time() - cpu_started, self.dms.cpu() - dms_cpu_started
        calls = dict(self.dms.invoke.calls)
        if profiler is not None:
            profiler.disable()
        stall = _stall_between(self.probe.samples, wall_started, time.time())
        # Not in the RSS per pod; let go once the window has closed (freeing 100,000 bodies
        # is the bench's own work on the loop: bench/README.md, "The bench's own work").
        del bodies
        gauge_line = self.gauge.read("the creates")
        gc.collect()
        # What the cyclic collector costs when it does run in full: a stall of the event loop.
        collecting = time.perf_counter()
        gc.collect()
        full_gc_s = time.perf_counter() - collecting
        tracked = len(gc.get_objects())
        grown = _rss_bytes() - baseline
        per_pod_kib = grown / pods / 1024
        peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"{pods:,} pods, one per backend.create call, {batch} calls in flight")
        rate = pods / created_s
        print(
            f"  create:      {rate:8,.0f} pods/s ({created_s:.1f} s; target >= "
            f"{CREATE_TARGET:,}/s: {'met' if rate >= CREATE_TARGET else 'NOT met'})"
        )
        print(f"  all Running: {all_running_s:8.1f} s after the first create")
        print(
            f"  CPU/pod:     {cpu_s / pods * 1e6:8.0f} µs of the process (all threads) until "
            f"every pod runs; the DMS stand-in's {dms_cpu_s / pods * 1e6:.0f} µs"
        )
        floor.report(pods, all_running_s, cpu_s, dms_cpu_s)
        print(
            f"  stall:       {stall * 1e3:8.0f} ms, the longest while creating ({callbacks.line()})"
        )
        print(pauses.line())
        print(stolen.line())
        print(gauge_line)
        print(
            f"  RSS/pod:     {per_pod_kib:8.1f} KiB (RSS +{grown / 2**20:.0f} MiB, peak "
            f"{peak_mib:.0f} MiB; target <= {RSS_TARGET_KIB} KiB): "
            f"{'met' if per_pod_kib <= RSS_TARGET_KIB else 'NOT met'}"
        )
        # The target is judged on the full collections that ran during the creates (the
        # gateway's own before each freeze, and Python's): one right after a freeze walks
        # only what is younger, and says little of them.
        longest_full_ms = max(pauses.full, default=full_gc_s) * 1e3
        print(
            f"  full GC:     {longest_full_ms:8.0f} ms, the longest of {len(pauses.full)} during "
            f"the creates, {max(pauses.full_cpu, default=0.0) * 1e3:.0f} ms of CPU at most "
            f"(target <= {GC_TARGET_MS} ms: "
            f"{'met' if longest_full_ms <= GC_TARGET_MS else 'NOT met'}); one after a "
            f"collect-and-freeze {full_gc_s * 1e3:.0f} ms ({tracked:,} objects tracked, "
            f"{tracked / pods:.1f} per pod, the rest frozen)"
        )
        print(f"  DMS calls until every pod runs: {_calls(calls)}")
        if profiler is not None:
            print("  cProfile of the creates until every pod runs (this thread only), per pod:")
            _print_profile(profiler, pods, "pod")

    async def _create_all(self, bodies: list[bytes], batch: int) -> None:
        """One ``backend.create`` call per ``/create`` body, each parsing its own body as the
        server's handler of its request does, from ``batch`` workers that each send the next
        pod once their last call returned: the virtual kubelet's pod sync workers, each
        creating one pod at a time. The callers write the bodies before they start the
        clock: that is the client's work."""
        pending = iter(bodies)

        async def worker() -> None:
            for body in pending:
                await self.backend.create(parse_create_body(body))

        await asyncio.gather(*(worker() for _ in range(batch)))

    async def _delete_a_quarter(self, pods: int, batch: int) -> None:
        """Delete a quarter of the pods, ``batch`` calls in flight, until their actors have
        ended; then create them again (the restart finds every pod). What the frozen heap
        kept of them, and of all the work in flight at each freeze, is what one pass over the
        thawed heap then finds (the bench's own pass: the gateway never thaws while serving)."""
        quarter = range(pods // 4)
        # The bodies as interLink sends them, each parsed by its own call as the server's
        # handler does: 25,000 parsed pods held for the whole phase were a million objects,
        # walked by the gateway's first collection.
        pending = iter([json.dumps(pod_of(i)).encode() for i in quarter])
        gone = [uid_of(i) for i in quarter]
        await self.gauge.reset()  # and the bench's probe has caught up with the bodies' making

        async def worker() -> None:
            for body in pending:
                await self.backend.delete(parse_delete_body(body))

        started = time.perf_counter()
        wall_started = time.time()
        with _GCPauses() as pauses, _LongestCallback() as callbacks, _Stolen() as stolen:
            await asyncio.gather(*(worker() for _ in range(batch)))
            await _until_gone(self.gateway, gone)
        deleted_s = time.perf_counter() - started
        stall = _stall_between(self.probe.samples, wall_started, time.time())
        print(f"delete a quarter of the pods ({quarter.stop:,}), {batch} calls in flight")
        print(
            f"  deleted:     {quarter.stop / deleted_s:8,.0f} pods/s ({deleted_s:.1f} s until "
            f"their actors ended); longest stall {stall * 1e3:.0f} ms ({callbacks.line()})"
        )
        print(pauses.line())
        print(stolen.line())
        print(self.gauge.read("the deletes"))
        with _GCPauses() as freezes:
            await self._create_all([create_body(i) for i in quarter], batch)
            await _until_running(self.gateway, quarter)
        kept = _frozen_garbage()
        print(
            f"  cyclic garbage the frozen heap kept: {sum(kept.values()):,} objects, after the "
            f"deletes and {len(freezes.full)} more freezes (the quarter created again): "
            f"{_modules(kept)}"
        )

    async def _servers(self) -> tuple[str, str, int]:
        """The real ``PluginServer`` and the floor's handler (:func:`_floor`), on this loop."""
        server = PluginServer(self.backend, self.config.server_options(), self.metrics)
        runner, project_url = await _serve(server.app())
        self.runners.append(runner)
        one = json.dumps([pod_of(0)]).encode()
        async with (
            aiohttp.ClientSession(headers={"Content-Type": "application/json"}) as session,
            session.get(project_url, data=one) as resp,
        ):
            fixed = await resp.read()  # the floor answers as large a body
            assert resp.status == 200, fixed
        snapshots = self.gateway.book.snapshots
        statuses = {uid: shown.wire for uid in snapshots if (shown := snapshots.shown(uid))}
        floor_app = web.Application()
        floor_app.router.add_route("GET", "/status", _floor(fixed, statuses))
        runner, floor_url = await _serve(floor_app)
        self.runners.append(runner)
        # The floor's first poll answers what the gateway does (a body the load never sends).
        async with (
            aiohttp.ClientSession() as session,
            session.get(floor_url, data=json.dumps([pod_of(0)], indent=1)) as resp,
        ):
            assert resp.status == 200 and await resp.read() == fixed, await resp.text()
        return project_url, floor_url, len(fixed)


def _floor(fixed: bytes, statuses: dict[str, bytes]) -> Callable[[web.Request], Awaitable[Any]]:
    """The floor's ``/status`` handler. A body it has seen before (a poll of a pod whose
    JSON has not changed: the body memo hits) gets ``fixed``, a body as large as the
    gateway's answer: a loose lower bound that neither parses nor looks anything up. A body
    never seen (the first poll of a pod: the memo misses) gets what a minimal correct
    handler must do: parse the JSON, find each pod by its UID (``statuses``: each pod's
    entry as the gateway keeps it, copied into a plain dict before the load), answer the
    entries joined, and remember the body's digest. It skips what the gateway adds on a
    miss: the body's checks (Go's JSON rules, the depth and pod-count limits, each pod an
    object with a name and a UID, one readable error naming the field), the turns of the
    loop it gives a big body, the deadline, and the whole read of a pod it does not know."""
    seen: set[bytes] = set()

    async def floor(request: web.Request) -> web.Response:
        raw = await request.read()
        digest = hashlib.blake2b(raw, digest_size=16).digest()
        if digest in seen:
            return web.Response(body=fixed, content_type="application/json")
        try:
            found = [statuses[pod["metadata"]["uid"]] for pod in json.loads(raw)]
        except (ValueError, LookupError, TypeError):
            return web.Response(status=400, text="body: not the pods this floor knows")
        seen.add(digest)
        return web.Response(body=b"[" + b",".join(found) + b"]", content_type="application/json")

    return floor


async def _drive_in_child(
    plan: list[tuple[str, str]], pods: int, rate: float, s: float
) -> tuple[list[Any], list[tuple[str, int, float, float]]]:
    """Runs the plan from the client process; reports the full collections meanwhile."""
    mine, theirs = multiprocessing.get_context("spawn").Pipe(duplex=False)
    child = multiprocessing.get_context("spawn").Process(
        target=_client, args=(theirs, plan, pods, rate, s), daemon=True
    )
    child.start()
    theirs.close()
    try:
        # Every pod's body goes once to each server first, at a few thousand a second.
        wait_s = 60 + 4 * s * len(plan) + pods * len(dict.fromkeys(u for _, u in plan)) / 250
        with _GCPauses() as pauses:
            results = await asyncio.to_thread(_receive, mine, wait_s)
    finally:
        child.join(5)
        if child.is_alive():
            child.terminate()
            child.join()
        mine.close()
    print(pauses.line())
    loads, firsts = results
    return list(loads), list(firsts)


@dataclasses.dataclass(frozen=True)
class _Rig:
    """What the phases after the first gateway run on: its store's directory, the way to the DMS,
    the loop, the stall probe and the gateway's own stall gauge."""

    tmp: Path
    dms: _DMS
    loop: asyncio.AbstractEventLoop
    probe: _Probe
    gauge: _StallGauge


async def _restart(rig: _Rig, pods: int, profile: bool) -> None:
    """A new gateway on the same store, until every pod answers Running; then the floor."""
    tmp, dms, loop, probe, gauge = rig.tmp, rig.dms, rig.loop, rig.probe, rig.gauge
    # What the process holds is settled before the window, as a fresh `dmsgw serve` has
    # collected its own before its plugin API listens: the gateway's collection before its
    # resume would otherwise walk the bench's heap (bench/README.md, "The bench's own work").
    gc.collect()
    gc.freeze()
    await gauge.reset()
    wall_started = time.time()
    started, cpu_started = time.perf_counter(), time.process_time()
    profiler = cProfile.Profile() if profile else None
    if profiler is not None:
        profiler.enable()
    gateway = backend = _gateway(tmp, dms, loop, pods)
    with _LongestCallback() as callbacks:
        await gateway.start()
        resumed_s, wall_resumed = time.perf_counter() - started, time.time()
        await _until_running(gateway, range(pods))
    answering_s, cpu_s = time.perf_counter() - started, time.process_time() - cpu_started
    # `dmsgw serve` listens once Gateway.start has returned: the stall before is the resume's,
    # which no request meets; the one after is while serving.
    resuming_stall = _stall_between(probe.samples, wall_started, wall_resumed)
    serving_stall = _stall_between(probe.samples, wall_resumed, time.time())
    gauge_line = gauge.read("the restart")
    frozen_garbage = _frozen_garbage()  # what the resume froze without a pass (none expected)
    if profiler is not None:
        profiler.disable()
        print("  cProfile of the restart (this thread only; the profiler slows it), per pod:")
        _print_profile(profiler, pods, "pod")
    await _close(backend, gateway, "restarted")

    gc.collect()
    store = PodStore(tmp / "state.sqlite3")
    try:
        reading, floor_cpu = time.perf_counter(), time.process_time()
        rows = store.load_all()
        read_s = time.perf_counter() - reading
        records = [PodRecord.from_map(row) for row in rows]
        floor_s, floor_cpu = time.perf_counter() - reading, time.process_time() - floor_cpu
        building = time.perf_counter()
        for record in records:
            snapshot_of(record, now_ns=system_clock())
        snapshots_s = time.perf_counter() - building
    finally:
        await store.close()
    ratio = answering_s / floor_s
    print(f"restart with {len(rows):,} pods in the store (the {pods:,} live ones, and the warm-up)")
    print(
        f"  gateway:  {answering_s:6.2f} s until every pod answers Running on /status "
        f"(Gateway.start returned after {resumed_s:.2f} s)"
    )
    print(
        f"  stall:    {serving_stall * 1e3:6.0f} ms, the longest once Gateway.start returned (when "
        f"`dmsgw serve` listens); {resuming_stall * 1e3:.0f} ms while resuming, before it "
        f"listens ({callbacks.line()})"
    )
    print(gauge_line)
    print(
        f"  cyclic garbage the resume froze: {sum(frozen_garbage.values()):,} objects: "
        f"{_modules(frozen_garbage)}"
    )
    print(
        f"  floor:    {floor_s:6.3f} s (read the rows {read_s:.3f} s, one PodRecord each "
        f"{floor_s - read_s:.3f} s); the gateway's snapshot_of alone: {snapshots_s:.3f} s"
    )
    print(
        f"  restart ratio {ratio:.1f}x the floor's wall time, {_ratio(cpu_s, floor_cpu)} its "
        f"process CPU ({cpu_s:.2f} against {floor_cpu:.2f} s); target <= {RESTART_TARGET_S:g} s: "
        f"{'met' if answering_s <= RESTART_TARGET_S else 'NOT met'}"
    )


async def _until_parked(board: Any, followed: int, limit_s: float, *, listings: int = 2) -> float:
    """Until every follow is parked on ``board`` and stays parked while it asks ``listings``
    more (one asked and answered, for 2), bounded by ``limit_s``: the time it took."""
    started = time.perf_counter()
    mark: int | None = None  # the listings asked for when all were first seen parked
    while mark is None or board.listings < mark + listings:
        if board.parked < followed:
            mark = None
        elif mark is None:
            mark = board.listings
        if time.perf_counter() - started > limit_s:
            raise SystemExit(f"{board.parked:,} of {followed:,} follows parked in {limit_s:.0f} s")
        await asyncio.sleep(0.2)
    return time.perf_counter() - started


async def _steady(rig: _Rig, pods: int, most_s: float) -> None:
    """The gateway left running, every pod followed as ``dmsgw serve`` follows them: a
    gateway resumed on the same store with the default policy and pace (each pod known every
    5 s, or every ``pods / 1,000`` s when more than 5,000 are followed), watched, once every
    resumed follow has settled and parked on the board (decision 79) and stayed parked over a
    listing, for two such periods (at most ``most_s``) while nothing but the following
    happens. In the other phases the board lists every 120 s, so that what they measure is
    not the following; here the following is the load, and the longest stall (the collector's pauses
    included) is measured."""
    dms, gauge = rig.dms, rig.gauge
    period = max(DEFAULT_POLICY.poll_max_s, pods / DEFAULT_POLLS_PER_S)
    gateway = _gateway(rig.tmp, dms, rig.loop, pods, DEFAULT_POLICY)
    await gateway.start()
    await _until_running(gateway, range(pods))
    # A resumed follow reads its pod again (status, manifest, logs) before it parks; what is
    # left once all have parked, and stayed parked over a listing, is the steady state.
    board, followed = gateway.board, len(gateway.book.snapshots)
    settled_s = await _until_parked(board, followed, 120 + pods / 10)
    print(f"steady state: every follow parked {settled_s:.1f} s after the resumed pods ran")
    await gauge.reset()
    watched_s = min(2 * period, most_s)
    dms.invoke.calls.clear()
    wall_started = time.time()
    cpu_started, dms_cpu_started = time.process_time(), dms.cpu()
    with _GCPauses() as pauses, _LongestCallback() as callbacks, _Stolen() as stolen:
        await asyncio.sleep(watched_s)
    cpu_s, dms_cpu_s = time.process_time() - cpu_started, dms.cpu() - dms_cpu_started
    stall = _stall_between(rig.probe.samples, wall_started, time.time())
    print(
        f"  {pods:,} pods followed, each known every {period:.0f} s at most (parked on the "
        f"board's listing), watched for {watched_s:.0f} s"
    )
    print(f"  DMS calls:   {_calls(dms.invoke.calls)}")
    print(
        f"  CPU:         {cpu_s / watched_s * 100:8.2f}% of one core, the gateway's process (the "
        f"bench's probes included; {cpu_s / watched_s / pods * 1e6:.2f} µs a second a pod); "
        f"the DMS stand-in's {dms_cpu_s / watched_s * 100:.2f}%"
    )
    verdict = "met" if stall * 1e3 <= STALL_TARGET_MS else "NOT met"
    print(
        f"  stall:       {stall * 1e3:8.0f} ms, the longest (target <= {STALL_TARGET_MS} ms: "
        f"{verdict}; {callbacks.line()})"
    )
    print(pauses.line())
    print(stolen.line())
    print(gauge.read("the steady state"))
    await _close(gateway, gateway, "steady")


# --- where the objects and the CPU go (--profile) ---------------------------------------


def _frozen_garbage() -> collections.Counter[str]:
    """The cyclic garbage the frozen heap kept, by the module of its objects' types, found by
    one pass of the bench's own over the thawed heap; then the heap is frozen again."""
    gc.unfreeze()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        gc.collect()
        found = collections.Counter(type(o).__module__ for o in gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    gc.freeze()
    return found


def _modules(found: collections.Counter[str]) -> str:
    """The modules whose objects ``found`` holds the most of."""
    return ", ".join(f"{module} {count:,}" for module, count in found.most_common(6)) or "none"


def _tracked_by_type() -> collections.Counter[str]:
    return collections.Counter(type(o).__qualname__ for o in gc.get_objects())


def _print_objects_per_pod(before: collections.Counter[str], pods: int) -> None:
    """The tracked objects the pods added, by type: what a full collection walks per pod."""
    gc.collect()
    grown = _tracked_by_type()
    grown.subtract(before)
    total = sum(v for v in grown.values() if v > 0)
    print(f"  tracked objects added per pod: {total / pods:.1f}; by type (per pod):")
    for name, count in grown.most_common(15):
        print(f"    {count / pods:7.2f}  {name}")


def _print_allocations(pods: int) -> None:
    """The allocation sites holding the most memory since the creates began, per pod."""
    snapshot = tracemalloc.take_snapshot()
    tracemalloc.stop()
    stats = snapshot.statistics("lineno")
    total = sum(s.size for s in stats)
    print(f"  memory allocated since the creates began, still held: {total / pods:.0f} B/pod")
    for stat in stats[:15]:
        frame = stat.traceback[0]
        where = f"{Path(frame.filename).name}:{frame.lineno}"
        print(f"    {stat.size / pods:7.0f} B/pod {stat.count / pods:6.2f} blocks/pod  {where}")


async def _profile_status(url: str, pods: int, rate: float, s: float) -> None:
    """cProfile of the gateway process while the client polls ``/status`` at ``rate``."""
    profiler = cProfile.Profile()
    before = time.process_time()
    profiler.enable()
    try:
        results, _ = await _drive_in_child([("project", url)], pods, rate, s)
    finally:
        profiler.disable()
    # Every request served counts: the unmeasured first poll of each pod, the warm-up, the load.
    answers = pods + CONNECTIONS + len(results[0][1]) + results[0][2]
    cpu = time.process_time() - before
    print(
        f"  cProfile of /status ({answers:,} requests, {cpu / answers * 1e6:.0f} µs CPU each "
        "with the profiler on); the functions taking the most time of their own (waiting in "
        "epoll left out):"
    )
    _print_profile(profiler, answers, "answer")


def _print_profile(profiler: cProfile.Profile, per: int, unit: str) -> None:
    """The 20 functions taking the most time of their own (waiting in epoll left out), then
    the gateway's own functions by the time spent in them and below."""
    rows = [row for row in _profile_rows(profiler) if "poll' of 'select" not in row[3]]
    ours = sorted((r for r in rows if _ours(r[4])), key=lambda r: -r[1])
    for title, chosen in (("most own time", rows[:20]), ("the gateway's, cumulative", ours[:15])):
        print(f"    {title}:")
        for own, total, calls, where, _ in chosen:
            print(
                f"    {own / per * 1e6:7.1f} µs own {total / per * 1e6:8.1f} µs total per "
                f"{unit} {calls / per:6.2f} calls  {where}"
            )


def _ours(filename: str) -> bool:
    """The gateway's own code: the package, not the bench nor the environment inside it."""
    inside = filename.startswith(PACKAGE)
    return inside and not any(f"/{d}/" in filename for d in (".venv", "bench"))


def _profile_rows(profiler: cProfile.Profile) -> list[tuple[float, float, int, str, str]]:
    """(own time, cumulative time, calls, where, file) per function, the most own time first."""
    rows = []
    for (filename, line, name), (_, calls, own, total, _) in pstats.Stats(profiler).stats.items():  # type: ignore[attr-defined]
        rows.append((own, total, calls, f"{name} ({Path(filename).name}:{line})", filename))
    return sorted(rows, reverse=True)


class _GCPauses:
    """How long the collector stops the gateway's loop while in a ``with`` block: its young
    collections, and its full ones (the gateway's own, each just before it freezes the heap,
    walk what is younger than the last freeze)."""

    def __init__(self) -> None:
        self.young = 0
        self.longest_young = 0.0
        self.full: list[float] = []
        self.full_cpu: list[float] = []  # the same collections in the thread's CPU time
        self.collected = 0  # cyclic garbage: what reference counting could not free
        self._started = self._cpu_started = 0.0

    def __enter__(self) -> _GCPauses:
        gc.callbacks.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self)

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started, self._cpu_started = time.perf_counter(), time.thread_time()
            return
        self.collected += info["collected"]
        if info["generation"] == 2:
            self.full.append(time.perf_counter() - self._started)
            self.full_cpu.append(time.thread_time() - self._cpu_started)
        else:
            self.young += 1
            self.longest_young = max(self.longest_young, time.perf_counter() - self._started)

    def line(self) -> str:
        """What the collector did meanwhile, in one line."""
        return (
            f"  GC meanwhile: {self.young} young collections (longest "
            f"{self.longest_young * 1e3:.0f} ms), {len(self.full)} full ones (longest "
            f"{max(self.full, default=0.0) * 1e3:.0f} ms, "
            f"{max(self.full_cpu, default=0.0) * 1e3:.0f} ms of the thread's CPU at most); "
            f"{self.collected:,} objects of "
            "cyclic garbage collected"
        )


class _LongestCallback:
    """The longest single callback the event loop ran while in a ``with`` block, and what it
    was (a stall no other callback caused). The probe's stall also counts callbacks that were
    ready together (50 requests arriving at once each run a step before the timer's turn
    comes): queueing."""

    def __init__(self) -> None:
        self.longest_s = 0.0
        self.longest = ""
        self._run = asyncio.events.Handle._run
        self._open = False  # the callback that leaves the block runs on: it is not counted

    def __enter__(self) -> _LongestCallback:
        run = self._run

        def timed(handle: asyncio.Handle) -> None:
            started = time.perf_counter()
            run(handle)
            took = time.perf_counter() - started
            if self._open and took > self.longest_s:
                self.longest_s, self.longest = took, _callback_name(handle)

        self._open = True
        asyncio.events.Handle._run = timed  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: object) -> None:
        self._open = False
        asyncio.events.Handle._run = self._run  # type: ignore[method-assign]

    def line(self) -> str:
        return f"the longest single callback: {self.longest_s * 1e3:.0f} ms, {self.longest}"


def _callback_name(handle: asyncio.Handle) -> str:
    """What a callback ran: the coroutine a task stepped, else the function."""
    callback = getattr(handle, "_callback", None)
    task = getattr(callback, "__self__", None)
    if isinstance(task, asyncio.Task):
        return task.get_coro().__qualname__  # type: ignore[union-attr]
    return getattr(callback, "__qualname__", repr(callback))


def _receive(conn: Connection, timeout_s: float) -> Any:
    if not conn.poll(timeout_s):
        raise SystemExit(f"the /status client sent nothing within {timeout_s:.0f} s")
    return conn.recv()


class _Probe:
    """(wall time, this process's CPU time) every 20 ms on the gateway's loop: the CPU per
    request, and how long the loop went without running this timer (a stall), for whichever
    load ran meanwhile: the floor's and the gateway's alike."""

    def __init__(self) -> None:
        self.samples: list[tuple[float, float]] = []

    async def run(self) -> None:
        while True:
            self.samples.append((time.time(), time.process_time()))
            await asyncio.sleep(PROBE_S)


def _cpu_between(samples: list[tuple[float, float]], start: float, end: float) -> float:
    inside = [c for t, c in samples if start <= t <= end]
    return inside[-1] - inside[0] if len(inside) > 1 else 0.0


def _stall_between(samples: list[tuple[float, float]], start: float, end: float) -> float:
    """The longest the gateway's event loop went without running the 20 ms sampler, from
    ``start`` (a load that holds the loop as it begins stalls too) to the last sample."""
    inside = [start, *(t for t, _ in samples if start <= t <= end)]
    return max(max((b - a for a, b in itertools.pairwise(inside)), default=0.0) - PROBE_S, 0.0)


def _report_first_polls(
    firsts: list[tuple[str, int, float, float]], cpu: list[tuple[float, float]]
) -> None:
    """The first poll of every pod (a body the gateway never read: after a restart, or after
    a pod's JSON changed), :data:`CONNECTIONS` in flight, as fast as answered. The floor
    parses each body, finds its pod by UID and answers its entry (:func:`_floor`), where the
    gateway also checks the pods' identities, gives the loop turns and remembers the pods."""
    used = {label: _cpu_between(cpu, start, end) / n for label, n, start, end in firsts}
    print(f"/status, the first poll of every pod (the body memo misses), {CONNECTIONS} in flight")
    for label, n, start, end in firsts:
        print(
            f"  {label:8}: gateway process CPU {used[label] * 1e6:5.0f} µs/request, "
            f"{n / (end - start):,.0f} req/s"
        )
    if used.get("floor"):
        print(f"  CPU ratio {used['project'] / used['floor']:.2f}x (no target: a lower bound)")


def _report(results: list[Any], rate: float, size: int, cpu: list[tuple[float, float]]) -> None:
    merged: dict[str, list[float]] = {"floor": [], "project": []}
    errors = {"floor": 0, "project": 0}
    achieved: dict[str, list[float]] = {"floor": [], "project": []}
    cpu_s = {"floor": 0.0, "project": 0.0}
    stall = {"floor": 0.0, "project": 0.0}
    for label, latencies, failed, got, start, end in results:
        merged[label] += latencies
        errors[label] += failed
        achieved[label].append(got)
        cpu_s[label] += _cpu_between(cpu, start, end)
        stall[label] = max(stall[label], _stall_between(cpu, start, end))
    print(f"/status, one pod per call, {rate:,.0f} requests/s offered, {CONNECTIONS} connections")
    p99s = {}
    for label, what in (("floor", "fixed body"), ("project", "PluginServer")):
        samples = sorted(merged[label])
        if not samples:
            print(f"  {label:8} no answer ({errors[label]} errors)")
            return
        p50 = statistics.median(samples)
        p99 = samples[min(len(samples) - 1, int(len(samples) * 0.99))]
        p999 = samples[min(len(samples) - 1, int(len(samples) * 0.999))]
        p99s[label] = p99
        print(
            f"  {label:8}({what:12}): p50 {p50 * 1e6:7.0f} µs  p99 {p99 * 1e6:7.0f} µs  "
            f"p99.9 {p999 * 1e3:6.1f} ms  max {samples[-1] * 1e3:6.1f} ms\n"
            f"  {'':22}{len(samples):,} answers, {errors[label]} errors, "
            f"{min(achieved[label]):,.0f} req/s sent\n"
            f"  {'':22}gateway process CPU {cpu_s[label] / len(samples) * 1e6:.0f} µs/request, "
            f"longest event-loop stall {stall[label] * 1e3:.0f} ms"
        )
    ratio = p99s["project"] / p99s["floor"]
    # A latency measured below the offered load says nothing of that load: "met" only once
    # both sides sent at least 95% of the rate offered (the client's own pace on a busy host).
    reached = min(min(achieved["floor"]), min(achieved["project"])) >= 0.95 * rate
    verdict = ("met" if ratio <= P99_TARGET else "NOT met") if reached else "NOT measured"
    print(
        f"  p99 ratio {ratio:.2f}x (target <= {P99_TARGET:g}x at {rate:,.0f} req/s): {verdict}"
        f"{'' if reached else ' (the offered rate was not reached)'}  ({size}-byte answers)"
    )
    per = {label: cpu_s[label] / len(merged[label]) for label in cpu_s}
    cpu_ratio = per["project"] / per["floor"]
    print(
        f"  CPU ratio {cpu_ratio:.2f}x (target <= {CPU_TARGET:g}x): "
        f"{'met' if cpu_ratio <= CPU_TARGET else 'NOT met'}"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pods", type=int, default=Run.pods, help="10000, 100000: the issue's")
    parser.add_argument("--rate", type=float, default=Run.rate)
    parser.add_argument("--seconds", type=float, default=Run.seconds, help="per side")
    parser.add_argument("--batch", type=int, default=Run.batch, help="create calls in flight")
    parser.add_argument(
        "--profile", action="store_true", help="where the objects and the CPU go per pod"
    )
    parser.add_argument(
        "--profile-creates", action="store_true", help="where the CPU of a create goes per pod"
    )
    parser.add_argument(
        "--steady-seconds", type=float, default=Run.steady_s, help="the steady state, at most"
    )

    args = parser.parse_args()
    asyncio.run(
        main(
            Run(
                args.pods,
                args.rate,
                args.seconds,
                args.batch,
                args.profile,
                args.profile_creates,
                args.steady_seconds,
            )
        )
    )
