"""The ping (``GET /status []``, the node's capacity) against a DMS network of 1,000 peers,
through the gateway's own DMS client, to a DMS stand-in in its own process.

The gateway is the real one (``PluginServer`` over the ``Gateway``, its ``ResourceActor``
with the defaults ``dmsgw serve`` uses: a 20 s cache, 32 peers asked at a time, 5 s each)
and it calls the DMS through its own client (``NodeClient``: envelopes, invoke tokens, REST,
reply verification, each ``resources/*`` reply's signature checked against the peer it
addressed). The stand-in (``peer_network.py``, its own process) is the local DMS, which
names its peers in ``peers/list``, and ``--peers`` peers under keys made there, each
receiving as a DMS does (decode, verify, consume and require the tokens), answering
``resources/free`` and ``resources/onboarded`` after ``--peer-latency-ms`` (its round trip
through the DMS network) and signing its reply; every tenth peer has a GPU. Its peers'
receive work runs on this machine's CPU, where a real network's runs on each peer's own:
the stand-in's CPU is printed beside each load, and when it nears one core it, not the
gateway, sets the wall time.

1. Cold, the first ping: nothing cached, over HTTP on loopback; the gateway makes an invoke
   token per peer and asks each peer ``resources/free`` and what it offers
   (``resources/onboarded``, kept 5 minutes).
2. Cold again, ``--burst`` pings at once when the cache has just expired (the readiness
   probe and interLink can ping together): ``resources/free`` of every peer, tokens and
   offers cached. As interLink pings every 30 s and the cache lives 20 s, this is the ping
   interLink gets. How long the last one waits, and whether the peers were asked once.
3. Cached: pings from ``--workers`` concurrent clients for ``--seconds``, against an aiohttp
   handler on the same loop answering the same bytes (the floor).

The floor of 1 and 2 asks the same peers the same way through a client of its own (a fresh
``NodeClient`` under the same key: it makes its tokens too): ``peers/self``, ``peers/list``,
then every peer, 32 at a time, ``resources/free`` (and ``resources/onboarded`` when the
gateway asked it), each peer's handle parsed once, the answers' cores summed. It skips what
only the gateway does: the HTTP ping and its server, the resource actor's ask, the failure
handling of each peer, the consolidation into interLink's capacity and taints, the GPU
catalog. The gateway's ping runs first: what it warms (the stand-in, the process's memos of
peer handles and encodings) serves the floor too. ``ceil(peers / 32) x latency`` is the
least any client bounded at 32 can take. Each
load reports wall time, this process's CPU (``time.process_time``: the gateway or the
floor, and the bench's idle HTTP client; nothing of the stand-in's) and the stand-in's (its
``/proc`` times), and the longest event-loop stall (a 20 ms timer probe on the same loop).

    .venv/bin/python bench/ping.py [--peers 1000] [--peer-latency-ms 20] [--seconds 3] [--profile]

``--profile`` prints a ``cProfile`` (process CPU as its clock) of the gateway's second cold
ping.

Target: a cold ping answered in <= 1 s, concurrency bounded, pings cached (a cached ping's
p99 <= its floor's).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import cProfile
import functools
import itertools
import math
import os
import pstats
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from dms_process import dms_process, free_port, process_cpu
from peer_network import gateway_client, serve_network

from dmsgw.behaviors.catalog import PEERS_LIST, PEERS_SELF, RESOURCES_FREE, RESOURCES_ONBOARDED
from dmsgw.behaviors.node_resources import ResourcesResponse
from dmsgw.clock import system_clock
from dmsgw.interlink.capacity.resource_actor import PEER_CONCURRENCY, Capacity, ResourceActor
from dmsgw.interlink.configuration.serve_config import load_config
from dmsgw.interlink.gateway import Gateway, GatewayParts
from dmsgw.interlink.pods.heap import FREEZE_EVERY
from dmsgw.interlink.records.pod_record import snapshot_of
from dmsgw.interlink.server import Metrics, PluginServer
from dmsgw.interlink.state.pod_store import PodStore
from dmsgw.interlink.translate import TranslationOptions, pod_to_ensemble
from dmsgw.keys.crypto import Ed25519PrivKey
from dmsgw.transport.envelope import Handle

COLD_TARGET_S = 1.0
CONCURRENCY = PEER_CONCURRENCY  # ResourceActor's default, as `dmsgw serve` runs it
GATHERING_WAIT_S = 600.0  # the pings wait for the gathering they time (see _backend)
TTL_S = 20.0  # likewise
PEER_TIMEOUT_S = 5.0  # likewise
PROBE_S = 0.02
KEY = Ed25519PrivKey(bytes(range(40, 72)))


class Counted:
    """A client's ``invoke``, counting the calls by behavior and the most ``resources/free``
    calls in flight at once (the bound on concurrency)."""

    def __init__(self, invoke: Any) -> None:
        self.invoke = invoke
        self.calls: collections.Counter[str] = collections.Counter()
        self.in_flight = 0
        self.most_in_flight = 0

    def reset(self) -> None:
        self.calls.clear()
        self.most_in_flight = 0

    async def __call__(self, behavior: Any, payload: Any = None, **options: Any) -> Any:
        self.calls[behavior.name.removeprefix("/dms/node/")] += 1
        if behavior is not RESOURCES_FREE:
            return await self.invoke(behavior, payload, **options)
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            return await self.invoke(behavior, payload, **options)
        finally:
            self.in_flight -= 1

    def said(self) -> str:
        free = self.calls["resources/free"]
        return (
            f"{free:,} resources/free, {self.calls['resources/onboarded']:,} "
            f"resources/onboarded calls, at most {self.most_in_flight} in flight"
        )


class ShiftedClock:
    """The system clock, which the bench can move forward past the cache's lifetime, or stop
    (so that the cached pings are all answered from the cache however slow the machine)."""

    def __init__(self) -> None:
        self.offset_ns = 0
        self.stopped_at: int | None = None

    def __call__(self) -> int:
        if self.stopped_at is not None:
            return self.stopped_at
        return time.monotonic_ns() + self.offset_ns

    def expire(self) -> None:
        self.offset_ns += int((TTL_S + 1) * 1e9)

    def stop(self) -> None:
        self.stopped_at = self()


def _backend(tmp: Path, invoke: Counted, clock: ShiftedClock) -> Gateway:
    """The real backend, with no pod; its resource actor and heap as ``dmsgw serve`` has
    them, but for the ping's wait: ``dmsgw serve``'s ping waits for a gathering at most
    ``PING_WAIT_S`` and then answers from the last one (decision 141), where this bench times
    the whole gathering through the ping, so its pings wait for it."""
    loop = asyncio.get_running_loop()
    resources = ResourceActor.start(
        invoke,
        ttl_s=TTL_S,
        concurrency=CONCURRENCY,
        ping_wait_s=GATHERING_WAIT_S,
        clock=clock,
        loop=loop,
    )
    parts = GatewayParts(
        invoke=invoke,
        store=PodStore(tmp / "state.sqlite3"),
        translate=lambda data, generation: pod_to_ensemble(
            data, options=TranslationOptions(generation=generation, gpu_models={})
        ),
        snapshot=lambda record: snapshot_of(record, now_ns=system_clock()),
        capacity=Capacity(resources, pods_capacity=110),
        loop=loop,
        freeze_every=FREEZE_EVERY,  # the heap kept out of the collector's sight, as by serve
    )
    return Gateway(parts)


# --- the floor ---------------------------------------------------------------------------


class Floor:
    """The same peers asked the same way through a client of its own, nothing else (see the
    module docstring): the least a gathering bounded at 32 does."""

    def __init__(self, invoke: Counted) -> None:
        self.invoke = invoke
        self.handles: dict[str, Handle] = {}

    async def gather(self, offered: bool) -> float:
        slots = asyncio.Semaphore(CONCURRENCY)
        me = await self.invoke(PEERS_SELF, timeout_s=PEER_TIMEOUT_S)
        listing = await self.invoke(PEERS_LIST, timeout_s=PEER_TIMEOUT_S)
        others = [p for p in listing.peers or () if p != me.id]
        handles = self.handles
        for peer in others:
            if peer not in handles:
                handles[peer] = Handle.parse(peer)

        async def one(to: Handle | None) -> float:
            async with slots:
                asks = [self.invoke(RESOURCES_FREE, to=to, timeout_s=PEER_TIMEOUT_S)]
                if offered:
                    asks.append(self.invoke(RESOURCES_ONBOARDED, to=to, timeout_s=PEER_TIMEOUT_S))
                replies: list[ResourcesResponse] = await asyncio.gather(*asks)
                cores: float = replies[0].resources.cpu.cores
                return cores

        cores = await asyncio.gather(one(None), *(one(handles[p]) for p in others))
        return sum(cores)


# --- the run ----------------------------------------------------------------------------


class _Probe:
    """Wall times of a 20 ms timer on the loop: a gap longer than the period is a stall."""

    def __init__(self) -> None:
        self.samples: list[float] = []

    async def run(self) -> None:
        while True:
            self.samples.append(time.perf_counter())
            await asyncio.sleep(PROBE_S)

    def stall_since(self, start: float) -> float:
        inside = [t for t in self.samples if t >= start] + [time.perf_counter()]
        gaps = (b - a for a, b in itertools.pairwise(inside))
        return max(max(gaps, default=0.0) - PROBE_S, 0.0)


async def _serve(app: web.Application, runners: list[web.AppRunner]) -> str:
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    runners.append(runner)
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return f"http://127.0.0.1:{port}/status"


async def _ping(session: aiohttp.ClientSession, url: str) -> tuple[float, bytes]:
    started = time.perf_counter()
    async with session.get(url, data=b"[]") as resp:
        body = await resp.read()
        if resp.status != 200:
            raise SystemExit(f"the ping answered {resp.status}: {body[:200]!r}")
    return time.perf_counter() - started, body


class Load:
    """One load's wall time, this process's CPU, the stand-in's CPU and the longest stall."""

    def __init__(self, probe: _Probe, dms_pid: int, profile: bool = False) -> None:
        self.probe, self.dms_pid, self.profile = probe, dms_pid, profile
        self.wall = self.cpu = self.dms_cpu = self.stall = 0.0

    async def run(self, work: Any) -> Any:
        """``work`` awaited and measured (with ``profile``, its ``cProfile`` printed)."""
        started, cpu, dms_cpu = time.perf_counter(), time.process_time(), process_cpu(self.dms_pid)
        profiler = cProfile.Profile(time.process_time)
        if self.profile:
            profiler.enable()
        result = await work
        if self.profile:
            profiler.disable()
            stats = pstats.Stats(profiler)
            stats.sort_stats(os.environ.get("SORT", "tottime")).print_stats(
                int(os.environ.get("ROWS", "40"))
            )
        self.wall = time.perf_counter() - started
        self.cpu = time.process_time() - cpu
        self.dms_cpu = process_cpu(self.dms_pid) - dms_cpu
        self.stall = self.probe.stall_since(started)
        return result

    def said(self, calls: int) -> str:
        return (
            f"{self.wall:5.2f} s wall; CPU {self.cpu:5.2f} s here "
            f"({self.cpu / max(calls, 1) * 1e6:4.0f} µs a DMS call), the stand-in's "
            f"{self.dms_cpu:5.2f} s; longest stall {self.stall * 1e3:.0f} ms"
        )

    def ratios(self, floor: Load) -> str:
        return f"wall {self.wall / floor.wall:.2f}x, CPU {self.cpu / floor.cpu:.2f}x the floor's"


async def main(
    peers: int, latency_ms: float, seconds: float, burst: int, workers: int, profile: bool
) -> None:
    print(f"load average before the run: {_load_average()} (2 cores shared: figures are noisy)")
    serve = functools.partial(serve_network, peers=peers, latency_s=latency_ms / 1e3)
    async with dms_process(serve) as (url, dms_pid):
        waves = math.ceil((peers + 1) / CONCURRENCY)
        print(
            f"{peers:,} peers + the local DMS (stand-in pid {dms_pid}), each answering after "
            f"{latency_ms:g} ms, {CONCURRENCY} asked at a time ({waves} waves: "
            f"{waves * latency_ms / 1e3:.2f} s at least)"
        )
        await _run(url, dms_pid, seconds, burst, workers, profile)
    print(f"load average after the run: {_load_average()}")


async def _run(
    url: str, dms_pid: int, seconds: float, burst: int, workers: int, profile: bool
) -> None:
    gateway_dms, floor_dms = gateway_client(url, KEY), gateway_client(url, KEY)
    invoke = Counted(gateway_dms._runtime.client.invoke)  # the NodeClient, as the gateway's
    floor = Floor(Counted(floor_dms._runtime.client.invoke))
    clock = ShiftedClock()
    probe = _Probe()
    sampler = asyncio.get_running_loop().create_task(probe.run())
    runners: list[web.AppRunner] = []
    with tempfile.TemporaryDirectory(prefix="dmsgw-bench-ping-") as name:
        backend = _backend(Path(name), invoke, clock)
        await backend.start()
        config = load_config(
            env={"DMSGW_DEVNET": "1", "DMSGW_STATE_PATH": str(Path(name) / "unused.sqlite3")}
        )
        server = PluginServer(backend, config.server_options(), Metrics())
        ping_url = await _serve(server.app(), runners)
        headers = {"Content-Type": "application/json"}
        try:
            async with aiohttp.ClientSession(headers=headers) as session:
                cold, again = Load(probe, dms_pid), Load(probe, dms_pid, profile)
                body = await _cold(session, ping_url, invoke, floor, cold)
                await _burst(session, ping_url, invoke, floor, clock, again, burst)
                floor_url = await _serve(_fixed(body), runners)
                await _cached(session, ping_url, floor_url, probe, seconds, workers)
        finally:
            for runner in runners:
                await runner.cleanup()
            await backend.close()
            sampler.cancel()
            await gateway_dms.aclose()
            await floor_dms.aclose()


def _fixed(body: bytes) -> web.Application:
    """The floor's server: the same bytes, at once."""

    async def floor(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(body=body, content_type="application/json")

    app = web.Application()
    app.router.add_route("GET", "/status", floor)
    return app


async def _cold(
    session: aiohttp.ClientSession, url: str, invoke: Counted, floor: Floor, load: Load
) -> bytes:
    """The first ping (tokens made, offers asked), then the floor doing the same."""
    answered: tuple[float, bytes] = await load.run(_ping(session, url))
    body = answered[1]
    asked, calls = invoke.said(), sum(invoke.calls.values())
    invoke.reset()
    floor_load = Load(load.probe, load.dms_pid)
    await floor_load.run(floor.gather(offered=True))
    floor_said, floor_calls = floor.invoke.said(), sum(floor.invoke.calls.values())
    floor.invoke.reset()
    print(f"  first cold ping: {load.said(calls)}")
    print(f"    {len(body):,}-byte answer; {asked}")
    print(f"  floor:           {floor_load.said(floor_calls)}")
    print(f"    {floor_said}")
    print(
        f"  first cold ping {load.ratios(floor_load)}; target <= {COLD_TARGET_S:g} s: "
        f"{'met' if load.wall <= COLD_TARGET_S else 'NOT met'}"
    )
    return body


async def _burst(
    session: aiohttp.ClientSession,
    url: str,
    invoke: Counted,
    floor: Floor,
    clock: ShiftedClock,
    load: Load,
    burst: int,
) -> None:
    """``burst`` pings at once once the cache expired, then the floor asking every peer's
    ``resources/free`` again."""
    clock.expire()
    answers = await load.run(asyncio.gather(*(_ping(session, url) for _ in range(burst))))
    clock.stop()  # the cache stays fresh for the cached pings, however long the floor takes
    times = sorted(t for t, _ in answers)
    asked, calls = invoke.said(), sum(invoke.calls.values())
    once = invoke.calls["peers/list"] == 1  # one listing: one gathering
    invoke.reset()
    floor_load = Load(load.probe, load.dms_pid)
    await floor_load.run(floor.gather(offered=False))
    floor_calls = sum(floor.invoke.calls.values())
    floor.invoke.reset()
    print(
        f"  {burst} pings at once, cache expired: first answered {times[0]:.2f} s, last "
        f"{times[-1]:.2f} s; {load.said(calls)}"
    )
    print(f"    {asked}; one gathering for all: {'yes' if once else 'NO'}")
    print(f"  floor:           {floor_load.said(floor_calls)}")
    print(
        f"  cold ping {load.ratios(floor_load)}; target <= {COLD_TARGET_S:g} s: "
        f"{'met' if times[-1] <= COLD_TARGET_S else 'NOT met'}"
    )


async def _cached(
    session: aiohttp.ClientSession,
    url: str,
    floor_url: str,
    probe: _Probe,
    seconds: float,
    workers: int,
) -> None:
    print(f"  cached pings, {workers} clients in this process, {seconds:g} s each side:")
    p99s, cpus = {}, {}
    for label, target in (("floor", floor_url), ("gateway", url)):
        started = time.perf_counter()
        cpu = time.process_time()
        latencies = await _closed_loop(session, target, seconds, workers)
        cpu_per = cpus[label] = (time.process_time() - cpu) / len(latencies)
        stall = probe.stall_since(started)
        samples = sorted(latencies)
        p99s[label] = samples[int(len(samples) * 0.99)]
        print(
            f"    {label:8} p50 {statistics.median(samples) * 1e6:6.0f} µs  p99 "
            f"{p99s[label] * 1e6:6.0f} µs  p99.9 {samples[int(len(samples) * 0.999)] * 1e3:5.1f} "
            f"ms  max {samples[-1] * 1e3:5.1f} ms  {len(samples) / seconds:,.0f} pings/s, "
            f"{cpu_per * 1e6:.0f} µs CPU each (client included); stall {stall * 1e3:.0f} ms"
        )
    ratio = p99s["gateway"] / p99s["floor"]
    print(
        f"  cached p99 ratio {ratio:.2f}x the floor (target <= 1x: "
        f"{'met' if ratio <= 1 else 'NOT met'}), CPU {cpus['gateway'] / cpus['floor']:.2f}x"
    )


async def _closed_loop(
    session: aiohttp.ClientSession, url: str, seconds: float, workers: int
) -> list[float]:
    latencies: list[float] = []
    until = time.perf_counter() + seconds

    async def worker() -> None:
        while time.perf_counter() < until:
            took, _ = await _ping(session, url)
            latencies.append(took)

    await asyncio.gather(*(worker() for _ in range(workers)))
    return latencies


def _load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--peers", type=int, default=1000)
    parser.add_argument("--peer-latency-ms", type=float, default=20.0)
    parser.add_argument("--seconds", type=float, default=3.0, help="cached pings, per side")
    parser.add_argument("--burst", type=int, default=20, help="pings at once, cache expired")
    parser.add_argument("--workers", type=int, default=8, help="clients of the cached pings")
    parser.add_argument(
        "--profile", action="store_true", help="profile the gateway's cold ping after the first"
    )
    args = parser.parse_args()
    asyncio.run(
        main(
            args.peers,
            args.peer_latency_ms,
            args.seconds,
            args.burst,
            args.workers,
            args.profile,
        )
    )
