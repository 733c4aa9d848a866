"""Client overhead of a behavior round trip, against posting a pre-signed envelope.

Both sides talk to the same simulated DMS (its REST API on loopback, in its own process as a
DMS would be) over one keep-alive connection. The floor posts envelopes that were built and
signed beforehand and reads the reply bytes; the project goes through the whole client:
facade, NodeActor, fresh nonce and inbox, cached invoke tokens, signing, reply decoding and
signature check.

Each pre-signed envelope has its own nonce and inbox, as every real request must: the DMS
sets up a reply inbox per request, and posting one envelope over and over would measure a
cheaper path through the DMS (its inbox already known) rather than the client's overhead.

    .venv/bin/python bench/invoke.py [--rounds 2000] [--concurrency 32]

Target: project / floor <= 1.3 for sequential round trips.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import socket
import statistics
import time

import aiohttp

import dmsgw
from dmsgw.devnet.devnet import Devnet, node_key
from dmsgw.gojson import marshal
from dmsgw.keys.crypto import Ed25519PrivKey
from dmsgw.keys.did import DID
from dmsgw.keys.trust import provider_from_private_key
from dmsgw.keys.ucan import Action, CapabilityContext
from dmsgw.transport import envelope as env
from dmsgw.transport.rest import RestTransport
from dmsgw.transport.security import SecurityContext

BEHAVIOR = "/dms/node/peers/self"
SEED = "bench-invoke"
KEY = Ed25519PrivKey(bytes(range(200, 232)))


def _presigned(dms: env.Handle, ctx: CapabilityContext, count: int) -> list[bytes]:
    """Envelopes exactly like the client's, each with its own nonce and inbox, signed
    beforehand (they stay valid for an hour)."""
    security = SecurityContext(KEY, ctx)
    expire = time.time_ns() + 3600 * 10**9
    bodies = []
    for _ in range(count):
        nonce = security.nonce()
        source = env.Handle(security.id, security.did, env.Address(dms.addr.host, f"user-{nonce}"))
        msg = env.message(
            source, dms, BEHAVIOR, reply_to=f"/private/user/{nonce}", expire=expire, nonce=nonce
        )
        bodies.append(marshal(security.provide(msg, [BEHAVIOR])))
    return bodies


async def _timed(rounds: int, call: object) -> list[float]:
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        await call()  # type: ignore[operator]
        samples.append(time.perf_counter() - start)
    return samples


def _serve_devnet(port: int) -> None:
    """The child process: one simulated DMS until killed."""

    async def forever() -> None:
        await Devnet(1, seed=SEED, base_port=port).start()
        await asyncio.Event().wait()

    asyncio.run(forever())


async def _wait_healthy(url: str) -> None:
    async with aiohttp.ClientSession() as session:
        for _ in range(200):
            try:
                async with session.get(url + "/health") as resp:
                    if resp.status == 200:
                        return
            except aiohttp.ClientError:
                await asyncio.sleep(0.05)  # the child is still starting
    raise SystemExit(f"the devnet at {url} did not come up")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def main(rounds: int, concurrency: int) -> None:
    port = _free_port()
    child = multiprocessing.get_context("spawn").Process(target=_serve_devnet, args=(port,))
    child.start()
    url = f"http://127.0.0.1:{port}"
    try:
        await _wait_healthy(url)
        await _measure(url, rounds, concurrency)
    finally:
        child.terminate()
        child.join()


async def _measure(url: str, rounds: int, concurrency: int) -> None:
    # The node's key follows from the devnet seed, so its grant can be made here.
    dms_key = node_key(SEED, 0)
    dms_ctx = CapabilityContext(provider_from_private_key(dms_key))
    expire = time.time_ns() + 30 * 24 * 3600 * 10**9  # outlives the run (no renewal warning)
    grant = dms_ctx.grant(
        Action.DELEGATE,
        DID.from_public_key(KEY.public_key()),
        DID(),
        None,
        expire,
        0,
        ["/dms/node"],
    )
    ctx = CapabilityContext(provider_from_private_key(KEY), provide=grant)
    bodies = iter(_presigned(env.Handle.from_public_key(dms_key.public_key()), ctx, rounds + 200))
    transport = RestTransport(url, max_concurrency=concurrency)
    dms = dmsgw.connect(
        url, key=KEY, context=ctx, transport=transport, loop=asyncio.get_running_loop()
    )
    connector = aiohttp.TCPConnector(limit=1)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def floor() -> None:
            async with session.post(
                url + "/api/v1/actor/invoke",
                data=next(bodies),
                headers={"Content-Type": "application/json"},
            ) as resp:
                await resp.read()
                assert resp.status == 200, resp.status

        async def project() -> None:
            await dms.peers.self()

        await _timed(200, floor)  # warm up both paths (connections, caches)
        await _timed(200, project)
        floor_s, project_s = [], []
        for _ in range(rounds):  # alternate, so drift in the machine hits both alike
            floor_s += await _timed(1, floor)
            project_s += await _timed(1, project)

        start = time.perf_counter()
        await asyncio.gather(*(project() for _ in range(rounds)))
        concurrent_rate = rounds / (time.perf_counter() - start)
    await dms.aclose()

    f50, p50 = statistics.median(floor_s), statistics.median(project_s)
    f_mean, p_mean = statistics.fmean(floor_s), statistics.fmean(project_s)
    print(f"sequential round trips, {rounds} each, one keep-alive connection")
    print(f"  floor   (pre-signed POSTs): p50 {f50 * 1e6:7.0f} µs  mean {f_mean * 1e6:7.0f} µs")
    print(f"  project (dms.peers.self()): p50 {p50 * 1e6:7.0f} µs  mean {p_mean * 1e6:7.0f} µs")
    ratio = p50 / f50
    print(
        f"  ratio p50 {ratio:.2f}x, mean {p_mean / f_mean:.2f}x (target <= 1.3x): "
        f"{'met' if ratio <= 1.3 else 'NOT met'}"
    )
    print(
        f"sequential: {1 / p_mean:,.0f} invocations/s; {rounds} concurrent "
        f"({concurrency} connections at most): {concurrent_rate:,.0f} invocations/s"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=32)
    args = parser.parse_args()
    asyncio.run(main(args.rounds, args.concurrency))
