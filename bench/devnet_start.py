"""How long a 3-node embedded devnet takes to start, and to answer its first request.

The floor is starting as many bare aiohttp servers on loopback as the devnet has nodes (the
least any simulation serving a DMS REST API per node must do), measured in the same run.
The devnet figure covers everything: node keys, capability contexts and the grants between
nodes, the isolation probe, the working directory, the REST servers. The first request goes
through the gateway's client (``dmsgw.connect``, handle discovery, a signed
``/dms/node/peers/list`` and its verified reply).

    .venv/bin/python bench/devnet_start.py [--rounds 10] [--nodes 3]

Target: a 3-node devnet starts in about a second (it takes a few tens of milliseconds).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from aiohttp import web

import dmsgw
from dmsgw.devnet.devnet import BackgroundDevnet, Devnet
from dmsgw.keys.crypto import Ed25519PrivKey
from dmsgw.keys.did import DID
from dmsgw.keys.trust import provider_from_private_key
from dmsgw.keys.ucan import CapabilityContext

KEY = Ed25519PrivKey(bytes(range(44, 76)))


async def _bare_servers(count: int) -> float:
    async def ok(request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    start = time.perf_counter()
    runners = []
    for _ in range(count):
        app = web.Application()
        app.router.add_get("/health", ok)
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        runners.append(runner)
    elapsed = time.perf_counter() - start
    for runner in runners:
        await runner.cleanup()
    return elapsed


async def _devnet(nodes: int) -> float:
    devnet = Devnet(nodes, seed="bench-start")
    start = time.perf_counter()
    await devnet.start()
    elapsed = time.perf_counter() - start
    await devnet.stop()
    return elapsed


def _first_request(nodes: int) -> tuple[float, float]:
    """Seconds to start a devnet on its own thread, then to the first client reply."""
    start = time.perf_counter()
    background = BackgroundDevnet(Devnet(nodes, seed="bench-first"))
    devnet = background.start()
    started = time.perf_counter() - start
    try:
        grant = devnet.grant(DID.from_public_key(KEY.public_key()), ["/dms/node"])
        context = CapabilityContext(provider_from_private_key(KEY), provide=grant)
        with dmsgw.connect(devnet.urls[0], key=KEY, context=context) as dms:
            peers = dms.peers.list()
        assert len(peers.peers or ()) == nodes - 1
        first = time.perf_counter() - start
    finally:
        background.stop()
    return started, first


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--nodes", type=int, default=3)
    args = parser.parse_args()

    floor = statistics.median(asyncio.run(_bare_servers(args.nodes)) for _ in range(args.rounds))
    start = statistics.median(asyncio.run(_devnet(args.nodes)) for _ in range(args.rounds))
    firsts = [_first_request(args.nodes) for _ in range(args.rounds)]
    threaded = statistics.median(s for s, _ in firsts)
    first = statistics.median(f for _, f in firsts)
    print(f"{'measurement (median of ' + str(args.rounds) + ')':44} {'seconds':>9} {'x floor':>8}")
    rows = [
        (f"floor: {args.nodes} bare aiohttp servers on loopback", floor),
        (f"{args.nodes}-node devnet start (on the caller's loop)", start),
        (f"{args.nodes}-node devnet start on its own thread", threaded),
        ("... and the first reply through dmsgw.connect", first),
    ]
    for name, seconds in rows:
        print(f"{name:44} {seconds:9.4f} {seconds / floor:7.1f}x")
    print(f"\ntarget: start in about a second: {'met' if first <= 1.0 else 'NOT met'}")


if __name__ == "__main__":
    main()
