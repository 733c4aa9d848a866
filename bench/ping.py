"""The ping (``GET /status []``, the node's capacity) against a DMS network of 1,000 peers.

The gateway is the real one (``PluginServer`` over the ``Gateway``, its ``ResourceActor``
with the defaults ``dmsgw serve`` uses: a 20 s cache, 32 peers asked at a time, 5 s each) over
an in-process fake DMS whose ``peers/self`` and ``peers/list`` answer at once and whose
``resources/free`` answers for each peer after ``--peer-latency-ms`` (a round trip through
the DMS to a remote peer; every tenth peer has a GPU). What the fake DMS counts: the calls, and
the most ``resources/free`` calls in flight at once (the bound on concurrency).

1. Cold: the first ping, nothing cached, over HTTP on loopback. The floor asks the same
   peers the same way (the same fake DMS, the same 32 at a time, a plain sum of the answers):
   ``ceil(peers / 32) x latency`` is the least any gateway that bounds its concurrency at 32
   can take.
2. Cold, many at once: ``--burst`` pings sent together when the cache has just expired (the
   readiness probe and interLink can ping together): how long the last one waits, and
   whether the peers were asked once for all of them.
3. Cached: pings from ``--workers`` concurrent clients for ``--seconds``, against an aiohttp
   handler on the same loop answering the same bytes (the floor).

Each load also reports the longest event-loop stall (a 20 ms timer probe on the same loop).
The client runs in this process (the ping is rare: interLink sends one every 30 s).

    .venv/bin/python bench/ping.py [--peers 1000] [--peer-latency-ms 20] [--seconds 3]

Target: a cold ping answered in <= 1 s, concurrency bounded, pings cached.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import math
import os
import socket
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from dmsgw.behaviors.catalog import (
    PEERS_LIST,
    PEERS_SELF,
    RESOURCES_FREE,
    RESOURCES_ONBOARDED,
    Behavior,
)
from dmsgw.behaviors.node_resources import ResourcesResponse
from dmsgw.behaviors.peers import PeerAddrInfoResponse, PeersListResponse
from dmsgw.behaviors.resources import CPU, GPU, RAM, Disk, Resources
from dmsgw.clock import system_clock
from dmsgw.interlink.capacity.resource_actor import PEER_CONCURRENCY, Capacity, ResourceActor
from dmsgw.interlink.configuration.serve_config import load_config
from dmsgw.interlink.gateway import Gateway, GatewayParts
from dmsgw.interlink.records.pod_record import snapshot_of
from dmsgw.interlink.server import Metrics, PluginServer
from dmsgw.interlink.state.pod_store import PodStore
from dmsgw.interlink.translate import TranslationOptions, pod_to_ensemble

COLD_TARGET_S = 1.0
CONCURRENCY = PEER_CONCURRENCY  # ResourceActor's default, as `dmsgw serve` runs it
TTL_S = 20.0  # likewise
PROBE_S = 0.02
GIB = 2**30

# --- the fake DMS network ----------------------------------------------------------------


def _free_of(index: int) -> Resources:
    """A typical provider: 8 cores, 16 GiB, 200 GiB; every tenth has an NVIDIA card."""
    gpus = (
        (GPU(index=0, vendor="NVIDIA", model="RTX 3090", vram=24 * GIB, uuid=f"GPU-{index}"),)
        if index % 10 == 0
        else None
    )
    return Resources(
        cpu=CPU(cores=8.0, clock_speed=3.0e9),
        gpus=gpus,
        ram=RAM(size=16 * GIB),
        disk=Disk(size=200 * GIB),
    )


class FakeNetwork:
    """The local DMS and its ``peers`` peers, each answering ``resources/free`` after
    ``latency_s``; counts the calls and the most in flight at once."""

    def __init__(self, peers: int, latency_s: float) -> None:
        self.peer_ids = tuple(f"12D3KooWPeer{i:06d}" for i in range(peers))
        self._free = {
            p: ResourcesResponse(ok=True, resources=_free_of(i))
            for i, p in enumerate(("self", *self.peer_ids))
        }
        self.latency_s = latency_s
        self.calls = 0
        self.in_flight = 0
        self.most_in_flight = 0

    def reset(self) -> None:
        self.calls = 0
        self.most_in_flight = 0

    async def __call__(
        self,
        behavior: Behavior[Any, Any],
        payload: Any = None,
        *,
        to: str | None = None,
        timeout_s: float | None = None,
    ) -> Any:
        if behavior is PEERS_SELF:
            return PeerAddrInfoResponse(id="self")
        if behavior is PEERS_LIST:
            return PeersListResponse(peers=self.peer_ids)
        if behavior is RESOURCES_FREE:
            return await self._resources_free(to or "self")
        if behavior is RESOURCES_ONBOARDED:  # what a peer offers: asked once per 5 minutes
            await asyncio.sleep(self.latency_s)
            return self._free[to or "self"]
        raise AssertionError(f"the bench's fake DMS does not answer {behavior.name}")

    async def _resources_free(self, peer: str) -> ResourcesResponse:
        self.calls += 1
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            await asyncio.sleep(self.latency_s)
        finally:
            self.in_flight -= 1
        return self._free[peer]


class ShiftedClock:
    """The system clock, which the bench can move forward past the cache's lifetime."""

    def __init__(self) -> None:
        self.offset_ns = 0

    def __call__(self) -> int:
        return time.monotonic_ns() + self.offset_ns

    def expire(self) -> None:
        self.offset_ns += int((TTL_S + 1) * 1e9)


def _backend(tmp: Path, network: FakeNetwork, clock: ShiftedClock) -> Gateway:
    """The real backend, with no pod; its resource actor as ``dmsgw serve`` starts it."""
    loop = asyncio.get_running_loop()
    resources = ResourceActor.start(
        network, ttl_s=TTL_S, concurrency=CONCURRENCY, clock=clock, loop=loop
    )
    parts = GatewayParts(
        invoke=network,
        store=PodStore(tmp / "state.sqlite3"),
        translate=lambda data, generation: pod_to_ensemble(
            data, options=TranslationOptions(generation=generation, gpu_models={})
        ),
        snapshot=lambda record: snapshot_of(record, now_ns=system_clock()),
        capacity=Capacity(resources, pods_capacity=110),
        loop=loop,
    )
    return Gateway(parts)


# --- the floor ---------------------------------------------------------------------------


async def _floor_gather(network: FakeNetwork) -> float:
    """The same peers asked the same way, nothing else: the least a bounded gather takes."""
    slots = asyncio.Semaphore(CONCURRENCY)
    me = await network(PEERS_SELF)
    listing = await network(PEERS_LIST)

    async def one(peer: str | None) -> ResourcesResponse:
        async with slots:
            reply: ResourcesResponse = await network(RESOURCES_FREE, to=peer)
            return reply

    replies = await asyncio.gather(one(None), *(one(p) for p in listing.peers if p != me.id))
    return sum(r.resources.cpu.cores for r in replies)


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


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _serve(app: web.Application, runners: list[web.AppRunner]) -> str:
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    runners.append(runner)
    port = _free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return f"http://127.0.0.1:{port}/status"


async def _ping(session: aiohttp.ClientSession, url: str) -> tuple[float, bytes]:
    started = time.perf_counter()
    async with session.get(url, data=b"[]") as resp:
        body = await resp.read()
        if resp.status != 200:
            raise SystemExit(f"the ping answered {resp.status}: {body[:200]!r}")
    return time.perf_counter() - started, body


async def main(peers: int, latency_ms: float, seconds: float, burst: int, workers: int) -> None:
    print(f"load average before the run: {_load_average()} (2 cores shared: figures are noisy)")
    network = FakeNetwork(peers, latency_ms / 1e3)
    clock = ShiftedClock()
    probe = _Probe()
    sampler = asyncio.get_running_loop().create_task(probe.run())
    runners: list[web.AppRunner] = []
    with tempfile.TemporaryDirectory(prefix="dmsgw-bench-ping-") as name:
        backend = _backend(Path(name), network, clock)
        await backend.start()
        config = load_config(
            env={"DMSGW_DEVNET": "1", "DMSGW_STATE_PATH": str(Path(name) / "unused.sqlite3")}
        )
        server = PluginServer(backend, config.server_options(), Metrics())
        url = await _serve(server.app(), runners)
        headers = {"Content-Type": "application/json"}
        try:
            async with aiohttp.ClientSession(headers=headers) as session:
                body = await _cold(session, url, network, probe, peers, latency_ms)
                await _burst(session, url, network, clock, probe, burst)
                floor_url = await _serve(_fixed(body), runners)
                await _cached(session, url, floor_url, probe, seconds, workers)
        finally:
            for runner in runners:
                await runner.cleanup()
            await backend.close()
    sampler.cancel()
    print(f"load average after the run: {_load_average()}")


def _fixed(body: bytes) -> web.Application:
    """The floor's server: the same bytes, at once."""

    async def floor(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(body=body, content_type="application/json")

    app = web.Application()
    app.router.add_route("GET", "/status", floor)
    return app


async def _cold(
    session: aiohttp.ClientSession,
    url: str,
    network: FakeNetwork,
    probe: _Probe,
    peers: int,
    latency_ms: float,
) -> bytes:
    started = time.perf_counter()
    took, body = await _ping(session, url)
    stall = probe.stall_since(started)
    asked, most = network.calls, network.most_in_flight
    network.reset()
    started = time.perf_counter()
    await _floor_gather(network)
    floor_s = time.perf_counter() - started
    floor_stall = probe.stall_since(started)
    network.reset()
    waves = math.ceil((peers + 1) / CONCURRENCY)
    print(
        f"{peers:,} peers + the local DMS, resources/free answered after {latency_ms:g} ms, "
        f"{CONCURRENCY} asked at a time ({waves} waves: {waves * latency_ms / 1e3:.2f} s at least)"
    )
    print(
        f"  cold ping: {took:6.2f} s ({len(body):,}-byte answer; {asked:,} resources/free "
        f"calls, at most {most} in flight); longest stall {stall * 1e3:.0f} ms"
    )
    print(
        f"  floor:     {floor_s:6.2f} s (the same calls, {CONCURRENCY} at a time, summed); "
        f"longest stall {floor_stall * 1e3:.0f} ms"
    )
    print(
        f"  cold ratio {took / floor_s:.2f}x the floor; target <= {COLD_TARGET_S:g} s: "
        f"{'met' if took <= COLD_TARGET_S else 'NOT met'}"
    )
    return body


async def _burst(
    session: aiohttp.ClientSession,
    url: str,
    network: FakeNetwork,
    clock: ShiftedClock,
    probe: _Probe,
    burst: int,
) -> None:
    clock.expire()
    started = time.perf_counter()
    answers = await asyncio.gather(*(_ping(session, url) for _ in range(burst)))
    times = sorted(t for t, _ in answers)
    stall = probe.stall_since(started)
    print(
        f"  {burst} pings at once, cache expired: first {times[0]:.2f} s, last "
        f"{times[-1]:.2f} s; {network.calls:,} resources/free calls (one gather for all: "
        f"{'yes' if network.calls <= len(network.peer_ids) + 1 else 'NO'}), at most "
        f"{network.most_in_flight} in flight; longest stall {stall * 1e3:.0f} ms"
    )
    network.reset()


async def _cached(
    session: aiohttp.ClientSession,
    url: str,
    floor_url: str,
    probe: _Probe,
    seconds: float,
    workers: int,
) -> None:
    print(f"  cached pings, {workers} clients in this process, {seconds:g} s each side:")
    p99s = {}
    for label, target in (("floor", floor_url), ("gateway", url)):
        started = time.perf_counter()
        cpu = time.process_time()
        latencies = await _closed_loop(session, target, seconds, workers)
        cpu_per = (time.process_time() - cpu) / len(latencies)
        stall = probe.stall_since(started)
        samples = sorted(latencies)
        p99s[label] = samples[int(len(samples) * 0.99)]
        print(
            f"    {label:8} p50 {statistics.median(samples) * 1e6:6.0f} µs  p99 "
            f"{p99s[label] * 1e6:6.0f} µs  p99.9 {samples[int(len(samples) * 0.999)] * 1e3:5.1f} "
            f"ms  max {samples[-1] * 1e3:5.1f} ms  {len(samples) / seconds:,.0f} pings/s, "
            f"{cpu_per * 1e6:.0f} µs CPU each (client included); stall {stall * 1e3:.0f} ms"
        )
    print(f"  cached p99 ratio {p99s['gateway'] / p99s['floor']:.2f}x the floor")


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
    args = parser.parse_args()
    asyncio.run(main(args.peers, args.peer_latency_ms, args.seconds, args.burst, args.workers))
