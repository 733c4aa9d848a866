"""Client cost of one DMS call, against an honest floor of the same work, measured in one run.

Both sides talk to the same DMS stand-in: the embedded devnet's node in its own process (as a
DMS would be), which receives each envelope as a DMS does (decode, verify the signature,
consume and require the capability tokens, dispatch, sign the reply) over its REST API on
loopback, one keep-alive connection. The wall time of a round trip is mostly that receive
work, the same for both; what tells the client's cost apart is the CPU of this process
(``time.process_time``: the bench's own client, nothing of the DMS's).

The floor does per call what any client must, as cheaply as Python can: a fresh nonce, inbox
and expiry written into the envelope's bytes (a template made once, invoke token attached),
one Ed25519 signature with the bare key, the POST and the read of the reply, the reply parsed
(``json.loads``), its signed bytes written back (``json.dumps``, which gives the DMS's Go
encoding of that reply field for field), its expiry and one signature checked with the bare
key, its payload parsed as plain JSON. It attaches one invoke token made beforehand (the
client keeps its tokens until they near their end, so signing one per call would be work the
project does not do). It skips what only the project does: the facade, the actor that holds
the nonce counter and token cache, encoding through the Go-JSON struct encoder, the checks of
the reply's addressing, the typed reply. The project is ``NodeClient.invoke(PEERS_SELF)``,
the one way the gateway calls the DMS; the REPL's facade (``dms.peers.self()``) adds a task a
call on top, reported apart.

    .venv/bin/python bench/invoke.py [--rounds 2000] [--concurrency 32] [--profile]

Target (issue 28): the project's CPU per call <= 1.3x the floor's.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import cProfile
import dataclasses
import json
import os
import pstats
import statistics
import time
from typing import Any

import aiohttp
from dms_process import dms_process

import dmsgw
from dmsgw.behaviors.catalog import PEERS_SELF
from dmsgw.devnet.devnet import Devnet, node_key
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


_MARK = 987654321987654321  # stands for the nonce in the floor's template
_EXP = 123456789123456789  # and for the expiry


class _Floor:
    """One call's unavoidable client work (see the module docstring), on ``session``: the
    request's bytes from a template made once (a nonce and an expiry written in), signed with
    the bare key; the reply parsed with ``json.loads``, its signed bytes written back with
    ``json.dumps`` (the DMS's Go encoding, field for field) and checked with the bare key."""

    def __init__(self, url: str, dms: env.Handle, ctx: CapabilityContext, session: Any) -> None:
        self.url = url + "/api/v1/actor/invoke"
        self.session = session
        security = SecurityContext(KEY, ctx)
        self.security = security
        expire = time.time_ns() + 3600 * 10**9
        token = ctx.provide(dms.did, security.id, dms.id, expire, [BEHAVIOR])
        self.token = token
        source = env.Handle(security.id, security.did, env.Address(dms.addr.host, f"user-{_MARK}"))
        msg = env.message(
            source, dms, BEHAVIOR, reply_to=f"/private/user/{_MARK}", expire=_EXP, nonce=_MARK
        )
        self.template = dataclasses.replace(msg, cap=token).signature_data()
        self.last = b""  # the last reply's bytes
        self.raw_key = KEY._key  # the bare cryptography key
        self.dms_pub = dms_public_key(dms)

    async def __call__(self) -> None:
        nonce = str(self.security.nonce()).encode()
        exp = str(time.time_ns() + 30 * 10**9).encode()
        signed = self.template.replace(b"987654321987654321", nonce).replace(
            b"123456789123456789", exp
        )
        sig = base64.b64encode(self.raw_key.sign(signed))
        body = signed[len(env.SIGNATURE_PREFIX) : -1] + b',"sig":"' + sig + b'"}'
        headers = {"Content-Type": "application/json"}
        async with self.session.post(self.url, data=body, headers=headers) as resp:
            data = await resp.read()
        self.last = data
        reply = json.loads(data)
        sig = base64.b64decode(reply.pop("sig"))
        if reply["opt"]["exp"] < time.time_ns():
            raise SystemExit("the floor's reply expired")
        signed = env.SIGNATURE_PREFIX + json.dumps(reply, separators=(",", ":")).encode()
        self.dms_pub.verify(sig, signed)  # raises when it does not verify
        json.loads(base64.b64decode(reply["msg"]))


def dms_public_key(dms: env.Handle) -> Any:
    """The bare key behind the DMS's actor ID (a receiver decodes it once and keeps it)."""
    return dms.id.public_key_obj()._key  # type: ignore[attr-defined]


async def _timed(rounds: int, call: Any) -> tuple[list[float], float]:
    """Each call's wall time, and the process CPU time of them all."""
    samples = []
    cpu = time.process_time()
    for _ in range(rounds):
        start = time.perf_counter()
        await call()
        samples.append(time.perf_counter() - start)
    return samples, time.process_time() - cpu


def _serve_devnet(port: int) -> None:
    """The child process: one simulated DMS until killed."""

    async def forever() -> None:
        await Devnet(1, seed=SEED, base_port=port).start()
        await asyncio.Event().wait()

    asyncio.run(forever())


async def main(rounds: int, concurrency: int, profile: bool) -> None:
    async with dms_process(_serve_devnet) as (url, _):
        await _measure(url, rounds, concurrency, profile)


async def _measure(url: str, rounds: int, concurrency: int, profile: bool) -> None:
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
    transport = RestTransport(url, max_concurrency=concurrency)
    dms = dmsgw.connect(
        url, key=KEY, context=ctx, transport=transport, loop=asyncio.get_running_loop()
    )
    connector = aiohttp.TCPConnector(limit=1)
    async with aiohttp.ClientSession(connector=connector) as session:
        floor = _Floor(url, env.Handle.from_public_key(dms_key.public_key()), ctx, session)

        client = dms._runtime.client  # the NodeClient behind the facade, as the gateway's

        async def project() -> None:
            await client.invoke(PEERS_SELF)

        await _timed(200, floor)  # warm up both paths (connections, caches)
        await _timed(200, project)
        if profile:
            await _profiled(project, rounds)
        floor_s: list[float] = []
        project_s: list[float] = []
        cpu = {"floor": 0.0, "project": 0.0}
        block = 20
        for _ in range(rounds // block):  # alternate, so drift in the machine hits both alike
            samples, used = await _timed(block, floor)
            floor_s += samples
            cpu["floor"] += used
            samples, used = await _timed(block, project)
            project_s += samples
            cpu["project"] += used

        start = time.perf_counter()
        await asyncio.gather(*(project() for _ in range(rounds)))
        concurrent_rate = rounds / (time.perf_counter() - start)
    hop = await _hop_cpu(client)
    layers = await _layers_cpu(client, dms)
    await dms.aclose()

    calls = len(floor_s)
    f50, p50 = statistics.median(floor_s), statistics.median(project_s)
    f_cpu, p_cpu = cpu["floor"] / calls, cpu["project"] / calls
    print(f"load average at the end: {os.getloadavg()[0]:.2f} (2 cores shared)")
    print(f"sequential round trips, {calls} each, one keep-alive connection")
    print(f"  floor  : wall p50 {f50 * 1e6:6.0f} µs   client CPU {f_cpu * 1e6:6.0f} µs a call")
    print(f"  project: wall p50 {p50 * 1e6:6.0f} µs   client CPU {p_cpu * 1e6:6.0f} µs a call")
    ratio = p_cpu / f_cpu
    print(
        f"  ratio: client CPU {ratio:.2f}x (target <= 1.3x: {'met' if ratio <= 1.3 else 'NOT met'})"
        f", wall p50 {p50 / f50:.2f}x"
    )
    print(
        f"sequential: {1 / statistics.fmean(project_s):,.0f} calls/s; {rounds} concurrent "
        f"({concurrency} connections at most): {concurrent_rate:,.0f} calls/s"
    )
    _breakdown(floor, f_cpu, p_cpu, client, hop)
    print(
        "by layer, process CPU a call (measured apart, after the run): the facade "
        f"{layers['facade'] * 1e6:.0f} µs, NodeClient.invoke {layers['client'] * 1e6:.0f} µs, "
        f"the transport alone (POST, read, decode the envelope) {layers['transport'] * 1e6:.0f} µs"
    )


def _per_call(step: Any, rounds: int = 2000) -> float:
    """A step's CPU time (this thread's), seconds a call."""
    start = time.thread_time()
    for _ in range(rounds):
        step()
    return (time.thread_time() - start) / rounds


async def _layers_cpu(client: Any, dms: Any, rounds: int = 400) -> dict[str, float]:
    """The process CPU a call of each layer from the top down: the facade, the client
    (``NodeClient.invoke``), the transport alone (``RestTransport.invoke`` of envelopes the
    client's actor signed beforehand), seconds a call."""
    used = {}
    start = time.process_time()
    for _ in range(rounds):
        await dms.peers.self()
    used["facade"] = (time.process_time() - start) / rounds
    start = time.process_time()
    for _ in range(rounds):
        await client.invoke(PEERS_SELF)
    used["client"] = (time.process_time() - start) / rounds
    requests = [await client.actor.proxy().prepare_invoke(PEERS_SELF) for _ in range(rounds)]
    start = time.process_time()
    for request in requests:
        await client.transport.invoke(request)
    used["transport"] = (time.process_time() - start) / rounds
    return used


async def _hop_cpu(client: Any, rounds: int = 1000) -> float:
    """The process CPU of one trivial ask of the client's actor (a task and two turns of the
    loop), seconds a call."""
    start = time.process_time()
    for _ in range(rounds):
        await client.actor.proxy().dms_handle()
    return (time.process_time() - start) / rounds


def _breakdown(floor: _Floor, f_cpu: float, p_cpu: float, client: Any, hop: float) -> None:
    """Where one call's client CPU goes: each step of the project's path timed alone (this
    thread's CPU), the floor's own steps, and the rest by difference."""
    security, dms = floor.security, env.Handle.from_public_key(node_key(SEED, 0).public_key())
    token = floor.token
    box: dict[str, Any] = {}

    def build() -> None:
        nonce = security.nonce()
        source = env.Handle(security.id, security.did, env.Address(dms.addr.host, f"user-{nonce}"))
        msg = env.message(source, dms, BEHAVIOR, reply_to=f"/private/user/{nonce}", nonce=nonce)
        box["msg"] = dataclasses.replace(msg, cap=token)

    build()
    encode = _per_call(lambda: box["msg"].signature_data())
    sign_only = _per_call(lambda: KEY.sign(box["msg"].signature_data())) - encode
    signed = env.signed(box["msg"], KEY)
    wire = _per_call(lambda: env.wire(signed))  # the entry used once: then a full encoding
    reply = env.decode(floor.last)
    now = time.time_ns()
    rows = {
        "build (nonce, handles, message, token attached)": _per_call(build),
        "encode the signed bytes (Go JSON)": encode,
        "sign (Ed25519)": sign_only,
        "the POST body (from the signed bytes)": _per_call(
            lambda: env.wire(env.signed(box["msg"], KEY))
        )
        - encode
        - sign_only,
        "decode the reply envelope": _per_call(lambda: env.decode(floor.last)),
        "re-encode the reply's signed bytes": _per_call(reply.signature_data),
        "verify the reply (expiry + Ed25519)": _per_call(lambda: env.verify(reply, now))
        - _per_call(reply.signature_data),
        "decode the typed reply": _per_call(lambda: PEERS_SELF.decode_reply(reply.msg or b"null")),
    }
    del wire
    rows["the grant check before sending (refuse what no grant covers)"] = _per_call(
        lambda: client._refuse_ungranted(PEERS_SELF)
    )
    # Not in the path while the actor is idle (it signs in the caller's turn), as here:
    print(f"(an ask of the client's actor, when it is busy: {hop * 1e6:.1f} µs more a call)")
    steps = sum(rows.values())
    floor_steps = _per_call(lambda: _floor_steps(floor, floor.last))
    post = f_cpu - floor_steps
    rows["POST + read (aiohttp, the event loop; the floor's CPU less its own steps)"] = post
    rows["the rest: the client's other steps, the loop's turns, cold caches (difference)"] = (
        p_cpu - steps - post
    )
    print("where one call's client CPU goes (project path):")
    for what, seconds in rows.items():
        print(f"  {what:74} {seconds * 1e6:7.1f} µs")
    print(f"  {'total (the measured client CPU a call)':74} {p_cpu * 1e6:7.1f} µs")


def _floor_steps(floor: _Floor, data: bytes) -> None:
    """The floor's own work but the POST: the template, the signature, the reply's checks."""
    nonce = str(floor.security.nonce()).encode()
    signed = floor.template.replace(b"987654321987654321", nonce)
    floor.raw_key.sign(signed)
    reply = json.loads(data)
    sig = base64.b64decode(reply.pop("sig"))
    signed = env.SIGNATURE_PREFIX + json.dumps(reply, separators=(",", ":")).encode()
    floor.dms_pub.verify(sig, signed)
    json.loads(base64.b64decode(reply["msg"]))


async def _profiled(project: Any, rounds: int) -> None:
    """Where the project's client CPU goes (``cProfile``, this process only)."""
    profiler = cProfile.Profile(time.process_time)
    profiler.enable()
    await _timed(rounds, project)
    profiler.disable()
    stats = pstats.Stats(profiler)
    stats.sort_stats(os.environ.get("SORT", "tottime")).print_stats(
        int(os.environ.get("ROWS", "40"))
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--profile", action="store_true", help="profile the project's calls")
    args = parser.parse_args()
    asyncio.run(main(args.rounds, args.concurrency, args.profile))
