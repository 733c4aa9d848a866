"""Chaos: the gateway SIGKILLed at random points across hundreds of pod operations.

Three processes, as in production: a DMS devnet (``dmsgw devnet up``), the gateway (``dmsgw
serve``, key from ``dmsgw key new``, grant from ``dmsgw devnet grant``) and this test, which
plays interLink: it sends creates, duplicate creates of one UID and deletes through the plugin
API as interLink sends them (JSON, its own ``Host``, no ``Origin``), and retries an operation
the kill cut short on the restarted gateway, as the virtual kubelet requeues a failed one. A
seeded plan of operations runs in batches; during a batch the gateway may be SIGKILLed after a
random delay (and again while it recovers) and is started again at once on the same state
file. Its link to the DMS loses a few replies (the DMS acted, the gateway never heard): the
window a kill opens between a DMS acting and the gateway recording it, made common. At the
end the gateway is killed and restarted once more, and then every pod must converge:

* no pod is lost: every pod created and not deleted is known to the gateway, and Running, or
  (a few) ended with its own exit code;
* no pod is duplicated: the devnet's ``deployment/list`` for the pod's UID label holds at most
  one ensemble, live or ended (a pod under ``restartPolicy: Never`` is deployed once);
* every deleted pod has no live ensemble left, and the gateway tracks exactly the live pods;
* the host runs one process for each long-lived pod, and none once the devnet has stopped.

The seed comes from ``$DMSGW_CHAOS_SEED`` (``random`` for a fresh one each run, to hunt),
else a fixed one, so that the suite's verdict does not change from run to run;
a failure prints it with the journal of operations and kills. Kill delays are seeded too, but
where a kill lands also depends on scheduling, so a seed reproduces a run's plan, not its
exact interleaving. Select it alone with ``pytest -m chaos``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import random
import re
import signal
import sys
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any, TextIO

import aiohttp
import pytest

import dmsgw
from dmsgw.behaviors.status import DeploymentStatus
from dmsgw.clock import NS_PER_SECOND, system_clock
from dmsgw.devnet.devnet import grant_token, node_key
from dmsgw.interlink.translate import METADATA_GENERATION, METADATA_POD_UID
from dmsgw.keys.crypto import Ed25519PrivKey
from dmsgw.keys.did import DID
from dmsgw.keys.trust import provider_from_private_key
from dmsgw.keys.ucan import CapabilityContext

pytestmark = pytest.mark.chaos

SEED_ENV = "DMSGW_CHAOS_SEED"
DEFAULT_SEED = 3897349780
"""The seed that found the unanswered-listing duplicate (see tests/test_crash_recovery.py)."""


def _seed(text: str) -> int:
    """The run's seed: a number, ``random`` for a fresh one, or the default."""
    if text == "random":
        return random.SystemRandom().getrandbits(32)
    return int(text) if text else DEFAULT_SEED


OPERATIONS = 210
"""At least this many plugin requests that change pods (creates, duplicates, deletes)."""
BATCH = (4, 12)
"""How many operations run concurrently in one batch (a pod appears once per batch)."""
KILLS = 10
"""How many batches the gateway is SIGKILLed during (the last restart comes on top)."""
KILL_DELAY_S = (0.0003, 0.4)
"""When in a batch the kill lands (log-uniform: as many in the first milliseconds, while the
requests are answered and recorded, as later, while pod actors deploy, follow and shut
down)."""
RECOVERY_KILL_CHANCE = 0.25
"""The chance that the restart after a kill is killed too, while it recovers."""
RECOVERY_KILL_S = (0.3, 1.5)
"""When, after its spawn, a recovering gateway is killed (log-uniform: from its imports to
its first requests, through resuming the stored pods, which starts their actors)."""
POLL_EVERY = 3
"""Every this many batches, an interLink status poll of the live pods runs with the batch."""
REPLY_LOSS = 0.03
"""The share of the DMS's replies the link to the gateway loses (the DMS acted on the request;
the gateway never hears of it, as when a connection resets)."""
OBSERVER_KEY = Ed25519PrivKey(bytes(range(60, 92)))
"""The test's own DMS identity, to list deployments without sharing the gateway's nonces."""

START_S = 30.0
"""Bound on a process announcing it serves (does not hang, not a timing assertion)."""
RESTART_WAIT_S = 30.0
"""Bound on waiting for a restart after a request failed."""
CONVERGE_S = 60.0
"""Bound on the pods converging after the last restart."""
WHOLE_S = 240.0
"""Bound on the whole scenario: it fails, with its seed, rather than hang the suite."""
LOG_TAIL = 60
INTERLINK_HEADERS = {"Content-Type": "application/json", "User-Agent": "Go-http-client/1.1"}
"""What interLink's Go client sends with each request (aiohttp adds ``Host``; no ``Origin``)."""
TERMINAL = {DeploymentStatus.COMPLETED, DeploymentStatus.FAILED}


# --- the plan ------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Op:
    """One plugin request: ``create`` (a new pod), ``duplicate`` (a create of a UID already
    sent) or ``delete``."""

    kind: str
    uid: str


@dataclasses.dataclass(frozen=True)
class Kill:
    """A SIGKILL ``after_s`` into a batch and, if ``recovering_s``, another that long after
    the restarted gateway's spawn."""

    after_s: float
    recovering_s: float | None

    @classmethod
    def drawn(cls, rng: random.Random) -> Kill:
        recovering = _log_uniform(rng, *RECOVERY_KILL_S)
        return cls(
            _log_uniform(rng, *KILL_DELAY_S),
            recovering if rng.random() < RECOVERY_KILL_CHANCE else None,
        )


@dataclasses.dataclass(frozen=True)
class Batch:
    """Operations sent at once; the kill that may land among them; whether interLink polls
    the status of the live pods meanwhile."""

    ops: tuple[Op, ...]
    kill: Kill | None
    poll: bool


def plan(rng: random.Random, operations: int = OPERATIONS) -> list[Batch]:
    """Batches of operations on distinct pods, except twin creates (one UID sent twice at
    once, as a retry racing the original may be); each pod is created before it is duplicated
    or deleted, and deleted at most once. :data:`KILLS` of them, drawn at random, have a
    kill."""
    batches: list[tuple[Op, ...]] = []
    created: list[str] = []  # created in an earlier batch and not deleted
    total = 0
    while total < operations:
        ops: list[Op] = []
        busy: set[str] = set()
        for _ in range(rng.randint(*BATCH)):
            free = [uid for uid in created if uid not in busy]
            roll = rng.random()
            if roll < 0.25 and free:
                uid = rng.choice(free)
                ops.append(Op("delete", uid))
                created.remove(uid)
            elif roll < 0.45 and free:
                uid = rng.choice(free)
                ops.append(Op("duplicate", uid))
            else:
                uid = str(uuid.UUID(int=rng.getrandbits(128), version=4))
                ops.append(Op("create", uid))
                if roll > 0.9:
                    ops.append(Op("duplicate", uid))  # twin: the same create, concurrently
                created.append(uid)
            busy.add(uid)
        batches.append(tuple(ops))
        total += len(ops)
    killed = set(rng.sample(range(len(batches)), KILLS))
    return [
        Batch(ops, Kill.drawn(rng) if i in killed else None, poll=i % POLL_EVERY == 0)
        for i, ops in enumerate(batches)
    ]


def _log_uniform(rng: random.Random, low: float, high: float) -> float:
    return float(low * (high / low) ** rng.random())


def exit_code(uid: str) -> int | None:
    """How the pod's container ends: most run until deleted (``None``), some end at once with
    0 or 3, whose code must survive the kills (it is read from the log once they end)."""
    kind = int(uid[-2:], 16) % 10
    return None if kind < 7 else 0 if kind < 9 else 3


def pod(uid: str, *, job_id: bool = False) -> dict[str, Any]:
    """A cheap pod, as :func:`exit_code` says, with a tiny reservation. ``job_id``: as
    interLink sends it once the gateway answered its create (the ``JobID`` annotation)."""
    meta: dict[str, Any] = {"name": f"chaos-{uid[:8]}", "namespace": "chaos", "uid": uid}
    if job_id:
        meta["annotations"] = {"JobID": f"dmsgw-{uid}"}
    small = {"cpu": "10m", "memory": "16Mi"}
    code = exit_code(uid)
    script = "sleep 3600" if code is None else f"sleep 0.2; exit {code}"
    container = {
        "name": "main",
        "image": "busybox",
        "command": ["sh", "-c", script],
        "resources": {"requests": small, "limits": small},
    }
    return {"metadata": meta, "spec": {"restartPolicy": "Never", "containers": [container]}}


# --- the processes -------------------------------------------------------------------------


def _env(tmp: Path) -> dict[str, str]:
    return dict(
        os.environ,
        DMS_PASSPHRASE="chaos",
        DMSGW_TEST_SCRYPT_N="1024",
        DMSGW_KEY_DIR=str(tmp / "key"),
        DMSGW_CAP_DIR=str(tmp / "cap"),
    )


async def _dmsgw(env: dict[str, str], *args: str) -> str:
    """Run a ``dmsgw`` command to its end; its stdout."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "dmsgw",
        *args,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate()
    assert proc.returncode == 0, f"dmsgw {' '.join(args)}: {err.decode()}"
    return out.decode()


async def _announced(proc: asyncio.subprocess.Process, pattern: str) -> re.Match[str]:
    """Read ``proc``'s stdout until a line matches ``pattern`` (it serves from then on)."""
    assert proc.stdout is not None
    seen = []
    async with asyncio.timeout(START_S):
        while line := (await proc.stdout.readline()).decode():
            seen.append(line)
            if found := re.search(pattern, line):
                return found
    raise AssertionError(f"{proc.pid} exited ({await proc.wait()}) without {pattern!r}: {seen}")


@dataclasses.dataclass
class Devnet:
    """``dmsgw devnet up`` in its own process."""

    proc: asyncio.subprocess.Process
    urls: list[str]
    seed: str
    work_dir: str
    """Where it runs its allocations (their sandboxes)."""

    @classmethod
    async def start(cls, env: dict[str, str], seed: str, log: Path) -> Devnet:
        with log.open("w") as stderr:
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                *("-m", "dmsgw", "devnet", "up", "--nodes", "2", "--base-port", "0"),
                *("--seed", seed),
                env=env,
                stdout=asyncio.subprocess.PIPE,
                stderr=stderr,
            )
        try:
            work_dir = (await _announced(proc, r"^work dir (\S+)")).group(1)
            urls = []
            while len(urls) < 2:
                urls.append((await _announced(proc, r"^node\d+\s+(http://\S+)")).group(1))
        except AssertionError as exc:
            raise AssertionError(f"dmsgw devnet up: {exc}; its log: {log.read_text()}") from None
        return cls(proc, urls, seed, work_dir)

    async def stop(self) -> str:
        """SIGTERM: the devnet ends every allocation and removes its work directory. How it
        went, if not as it should."""
        if self.proc.returncode is not None:
            return f"the devnet had exited ({self.proc.returncode})"
        self.proc.terminate()
        try:
            async with asyncio.timeout(START_S):
                await self.proc.wait()
        except TimeoutError:
            self.proc.kill()
            await self.proc.wait()
            return f"the devnet did not stop within {START_S:g} s of SIGTERM (SIGKILLed)"
        return ""


class LossyLink:
    """A TCP relay between the gateway and the DMS that loses a reply now and then: the
    connection closes where the reply would have gone back."""

    def __init__(self, target: str, rng: random.Random) -> None:
        found = re.fullmatch(r"http://([\d.]+):(\d+)", target)
        assert found, target
        self._target = (found.group(1), int(found.group(2)))
        self._rng = rng
        self._server: asyncio.Server | None = None
        self.lost = 0

    async def start(self) -> str:
        self._server = await asyncio.start_server(self._relay, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _relay(
        self, client_in: asyncio.StreamReader, client_out: asyncio.StreamWriter
    ) -> None:
        try:
            dms_in, dms_out = await asyncio.open_connection(*self._target)
        except OSError:
            client_out.close()
            return
        await asyncio.gather(
            self._pump(client_in, dms_out, lossy=False),
            self._pump(dms_in, client_out, lossy=True),
            return_exceptions=True,
        )
        for writer in (client_out, dms_out):
            writer.close()

    async def _pump(
        self, source: asyncio.StreamReader, sink: asyncio.StreamWriter, *, lossy: bool
    ) -> None:
        try:
            while chunk := await source.read(65536):
                if lossy and self._rng.random() < REPLY_LOSS:
                    self.lost += 1
                    break
                sink.write(chunk)
                await sink.drain()
        finally:
            sink.close()


class Gateway:
    """``dmsgw serve`` on one state file, killed and restarted; each start is a generation."""

    def __init__(self, env: dict[str, str], log: TextIO) -> None:
        self.env = env
        self.log = log
        self.proc: asyncio.subprocess.Process | None = None
        self.url = ""
        self.metrics = ""
        self.generation = 0
        self.kills = 0
        self.starting_s = 0.0  # spent starting, in all
        self._spawned = 0.0
        self._changed = asyncio.Condition()

    async def start(self) -> None:
        await self._serving(await self._spawn())

    async def start_and_kill(self, after_s: float) -> None:
        """Start, and SIGKILL ``after_s`` after the spawn, whether it serves by then or not."""
        serving = asyncio.ensure_future(self._serving(await self._spawn()))
        await asyncio.sleep(after_s)  # where the kill lands: the chaos, not a synchronisation
        serving.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await serving
        await self.kill()

    async def _spawn(self) -> asyncio.subprocess.Process:
        self._spawned = time.monotonic()
        self.log.write("--- start\n")
        self.log.flush()
        self.proc = await asyncio.create_subprocess_exec(
            *(sys.executable, "-m", "dmsgw", "serve"),
            env=self.env,
            stdout=asyncio.subprocess.PIPE,
            stderr=self.log,
        )
        return self.proc

    async def _serving(self, proc: asyncio.subprocess.Process) -> None:
        url = (await _announced(proc, r"listening on (http://\S+)")).group(1)
        self.metrics = (await _announced(proc, r"metrics (http://\S+)")).group(1)
        self.starting_s += time.monotonic() - self._spawned
        async with self._changed:
            self.url = url
            self.generation += 1
            self._changed.notify_all()

    async def kill(self) -> None:
        assert self.proc is not None
        with contextlib.suppress(ProcessLookupError):  # reaped already: it exited by itself
            self.proc.send_signal(signal.SIGKILL)
        code = await self.proc.wait()
        if code != -signal.SIGKILL:  # crash-only is no excuse for crashing
            raise AssertionError(f"the gateway exited by itself (status {code})")
        self.kills += 1
        self.log.write(f"--- SIGKILL {self.kills}\n")
        self.log.flush()

    async def restarted_after(self, generation: int) -> None:
        """Wait for a generation newer than ``generation``; a gateway that went away without
        being killed is a failure (crash-only needs someone to restart it: not here)."""
        try:
            async with asyncio.timeout(RESTART_WAIT_S), self._changed:
                await self._changed.wait_for(lambda: self.generation > generation)
        except TimeoutError:
            code = self.proc.returncode if self.proc else None
            raise AssertionError(
                f"the gateway stopped answering without a kill (exit status {code})"
            ) from None

    async def stop(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.terminate()
            try:
                async with asyncio.timeout(START_S):
                    await self.proc.wait()
            except TimeoutError:
                self.proc.kill()
                await self.proc.wait()


async def _gateway_identity(env: dict[str, str], devnet: Devnet) -> None:
    """The gateway's key and its grant, made with the commands an operator uses."""
    did = (await _dmsgw(env, "key", "new", "gw")).split()[0]
    await _dmsgw(
        env,
        *("devnet", "grant", "--seed", devnet.seed, "--cap", "/dms/node", "--anchor", "gw", did),
    )


def _observer(devnet: Devnet) -> dmsgw.Node:
    """A DMS client of the test's own, granted ``/dms/node`` by node 0 as the gateway is."""
    issuer = CapabilityContext(provider_from_private_key(node_key(devnet.seed, 0)))
    subject = DID.from_public_key(OBSERVER_KEY.public_key())
    expire = system_clock() + 3600 * NS_PER_SECOND
    grant = grant_token(issuer, subject, ["/dms/node"], expire=expire)
    context = CapabilityContext(provider_from_private_key(OBSERVER_KEY), provide=grant)
    return dmsgw.connect(devnet.urls[0], key=OBSERVER_KEY, context=context)


# --- interLink's side ----------------------------------------------------------------------


class InterLink:
    """Sends the plugin requests as interLink does; retries one the kill cut short."""

    def __init__(self, gateway: Gateway, session: aiohttp.ClientSession) -> None:
        self.gateway = gateway
        self.session = session
        self.journal: list[str] = []

    async def request(self, method: str, route: str, body: Any) -> tuple[int, bytes]:
        """The gateway's answer, from whichever generation gives one."""
        data = json.dumps(body).encode()
        while True:
            generation = self.gateway.generation
            try:
                async with self.session.request(
                    method, self.gateway.url + route, data=data, headers=INTERLINK_HEADERS
                ) as response:
                    return response.status, await response.read()
            except (aiohttp.ClientError, ConnectionError):
                await self.gateway.restarted_after(generation)

    async def run(self, op: Op) -> None:
        if op.kind == "delete":
            status, text = await self.request("POST", "/delete", pod(op.uid, job_id=True))
        else:
            body = {"pod": pod(op.uid), "container": [{"name": "main"}]}
            status, text = await self.request("POST", "/create", body)
            if status == 200:
                answer = json.loads(text)
                assert answer == {"PodUID": op.uid, "PodJID": f"dmsgw-{op.uid}"}, answer
        self.journal.append(f"{op.kind} {op.uid[:8]} -> {status} (gen {self.gateway.generation})")
        assert status == 200, f"{op.kind} {op.uid}: {status} {text[:300]!r}"

    async def statuses(self, uids: Sequence[str]) -> dict[str, dict[str, Any]]:
        """One status poll of ``uids`` (with their ``JobID``), by UID."""
        status, text = await self.request("GET", "/status", [pod(u, job_id=True) for u in uids])
        assert status == 200, f"status: {status} {text[:300]!r}"
        return {entry["UID"]: entry for entry in json.loads(text)}


def _lost(entry: dict[str, Any]) -> bool:
    """The gateway's answer for a pod it has no record of."""
    return any(
        (c["state"].get("terminated") or {}).get("reason") == "NotFound"
        for c in entry["containers"]
    )


def _at_its_end(uid: str, entry: dict[str, Any]) -> bool:
    """Running and ready, or ended with the pod's exit code."""
    code = exit_code(uid)
    (container,) = entry["containers"]
    if code is None:
        return "running" in container["state"] and bool(container["ready"])
    return (container["state"].get("terminated") or {}).get("exitCode") == code


# --- what the DMS says ---------------------------------------------------------------------


@dataclasses.dataclass
class Verdict:
    """Everything wrong with the pods at one moment (empty lists: converged)."""

    lost: list[str] = dataclasses.field(default_factory=list)
    not_at_end: list[str] = dataclasses.field(default_factory=list)
    duplicated: list[str] = dataclasses.field(default_factory=list)
    deleted_alive: list[str] = dataclasses.field(default_factory=list)
    tracked: str = ""
    host: str = ""

    def ok(self) -> bool:
        return not (
            self.lost
            or self.not_at_end
            or self.duplicated
            or self.deleted_alive
            or self.tracked
            or self.host
        )

    def __str__(self) -> str:
        parts = [
            f"{len(uids)} {what}: {', '.join(u[:8] for u in uids[:12])}"
            for what, uids in (
                ("lost", self.lost),
                ("not running or ended as they should", self.not_at_end),
                ("duplicated", self.duplicated),
                ("deleted but alive", self.deleted_alive),
            )
            if uids
        ]
        return "; ".join([*parts, *(t for t in (self.tracked, self.host) if t)])


async def _deployments(dms: dmsgw.Node, uid: str) -> list[Any]:
    """Every ensemble the DMS holds for the pod (its UID label), live or ended."""
    listing = await dms.deployment.list(metadata={METADATA_POD_UID: uid})
    return list(listing.deployments or ())


async def _pods_tracked(session: aiohttp.ClientSession, metrics_url: str) -> int:
    async with session.get(metrics_url) as response:
        text = await response.text()
    found = re.search(r"^dmsgw_pods (\S+)$", text, re.MULTILINE)
    assert found, "no dmsgw_pods gauge on /metrics"
    return int(float(found.group(1)))


def sleepers(root: str) -> list[int]:
    """The devnet's host processes that run a long-lived pod's ``sleep 3600`` under ``root``
    (Linux: from ``/proc``)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            argv = (entry / "cmdline").read_bytes()
            cwd = os.readlink(entry / "cwd")
        except OSError:  # not a process, gone, or not ours to read
            continue
        if argv == b"sleep\x003600\x00" and cwd.startswith(root.rstrip("/") + "/"):
            found.append(int(entry.name))
    return found


async def judge(
    interlink: InterLink,
    dms: dmsgw.Node,
    live: Sequence[str],
    deleted: Sequence[str],
    host: str,
) -> tuple[Verdict, dict[str, Any]]:
    """The pods as interLink, the DMS and the host see them, and the evidence."""
    verdict = Verdict()
    seen = await interlink.statuses(live) if live else {}
    listings = await asyncio.gather(*(_deployments(dms, uid) for uid in (*live, *deleted)))
    ensembles = dict(zip((*live, *deleted), listings, strict=True))
    for uid in live:
        entry = seen[uid]
        if _lost(entry):
            verdict.lost.append(uid)
        elif not _at_its_end(uid, entry):
            verdict.not_at_end.append(uid)
    for uid, found in ensembles.items():
        alive = [d for d in found if DeploymentStatus.parse(d.status) not in TERMINAL]
        if len(found) > 1:  # restartPolicy Never: one deployment, ever
            verdict.duplicated.append(uid)
        if uid in deleted and alive:
            verdict.deleted_alive.append(uid)
    tracked = await _pods_tracked(interlink.session, interlink.gateway.metrics)
    if tracked != len(live):
        verdict.tracked = f"the gateway tracks {tracked} pods, {len(live)} are live"
    running = len(sleepers(host))
    services = sum(exit_code(uid) is None for uid in live)
    if running != services:
        verdict.host = f"the host runs {running} pod processes for {services} long-lived pods"
    evidence = {
        uid: {
            "status": seen.get(uid, {}).get("containers"),
            "ensembles": [
                (d.orchestrator_id[:8], d.status, (d.metadata or {}).get(METADATA_GENERATION))
                for d in found
            ],
        }
        for uid, found in ensembles.items()
    }
    return verdict, evidence


# --- the scenario --------------------------------------------------------------------------


async def _chaos_batch(interlink: InterLink, batch: Batch, live: Sequence[str]) -> None:
    """The batch's operations (and a status poll of live pods it does not touch) while the
    gateway may be killed and restarted."""
    gateway = interlink.gateway
    touched = {op.uid for op in batch.ops}
    work = [interlink.run(op) for op in batch.ops]
    if batch.poll:
        work.append(_poll_nothing_lost(interlink, [u for u in live if u not in touched]))
    if batch.kill is not None:
        work.append(_kill_and_restart(gateway, batch.kill, interlink.journal))
    await asyncio.gather(*work)


async def _kill_and_restart(gateway: Gateway, kill: Kill, journal: list[str]) -> None:
    await asyncio.sleep(kill.after_s)  # where the kill lands: the chaos, not a synchronisation
    await gateway.kill()
    journal.append(f"SIGKILL at +{kill.after_s * 1000:.1f} ms (gen {gateway.generation})")
    if kill.recovering_s is not None:
        await gateway.start_and_kill(kill.recovering_s)
        journal.append(f"SIGKILL {kill.recovering_s * 1000:.0f} ms after the restart's spawn")
    await gateway.start()


async def _poll_nothing_lost(interlink: InterLink, uids: Sequence[str]) -> None:
    """An acknowledged pod is never reported as unknown, whenever interLink asks."""
    if not uids:
        return
    seen = await interlink.statuses(uids)
    lost = [uid for uid in uids if _lost(seen[uid])]
    assert not lost, f"pods acknowledged, then unknown to the gateway: {lost}"


async def _converged(
    interlink: InterLink,
    dms: dmsgw.Node,
    live: Sequence[str],
    deleted: Sequence[str],
    host: str,
) -> None:
    """Poll until every pod has converged, or fail with what has not."""
    deadline = time.monotonic() + CONVERGE_S
    while True:
        verdict, evidence = await judge(interlink, dms, live, deleted, host)
        if verdict.ok():
            return
        if verdict.lost or verdict.duplicated:  # cannot heal: no need to wait for the rest
            verdict = Verdict(lost=verdict.lost, duplicated=verdict.duplicated)
        elif time.monotonic() < deadline:
            await asyncio.sleep(0.2)  # polling for a condition, bounded by the deadline
            continue
        broken = {*verdict.lost, *verdict.duplicated, *verdict.not_at_end}
        broken |= set(verdict.deleted_alive)
        details = {uid[:8]: evidence[uid] for uid in sorted(broken)[:10]}
        raise AssertionError(f"{verdict}\n{json.dumps(details, indent=1)}")


@dataclasses.dataclass
class Rig:
    """One run's processes and seed."""

    seed: int
    devnet: Devnet
    link: LossyLink
    gateway: Gateway
    log_path: Path


@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[Rig]:
    """The devnet, the lossy link to it, and the gateway (not started), for one seed."""
    seed = _seed(os.environ.get(SEED_ENV, ""))
    env = _env(tmp_path)
    devnet = await Devnet.start(env, f"chaos-{seed}", tmp_path / "devnet.log")
    link = LossyLink(devnet.urls[0], random.Random(f"{seed}/link"))
    log_path = tmp_path / "gateway.log"
    try:
        with log_path.open("a") as log:
            await _gateway_identity(env, devnet)
            gateway_env = dict(
                env,
                DMSGW_DMS_URL=await link.start(),
                DMSGW_KEY_NAME="gw",
                DMSGW_CAP_CONTEXT="gw",
                DMSGW_STATE_PATH=str(tmp_path / "state" / "gateway.sqlite3"),
                DMSGW_LISTEN="127.0.0.1:0",
                DMSGW_OPERATOR_LISTEN="127.0.0.1:0",
                DMSGW_LOG_FORMAT="text",
            )
            gateway = Gateway(gateway_env, log)
            try:
                yield Rig(seed, devnet, link, gateway, log_path)
            finally:
                await gateway.stop()
    finally:
        await link.stop()
        stopped = await devnet.stop()
        left = sleepers(devnet.work_dir)
        for pid in left:  # the test's own processes: they must not outlive it
            os.kill(pid, signal.SIGKILL)
        assert not left, f"{len(left)} pod processes outlived the devnet. {stopped}"


@pytest.mark.timeout(600)  # ~80 s on a loaded machine: many kills, each a restart
async def test_sigkill_at_random_points_loses_and_duplicates_no_pod(rig: Rig) -> None:
    seed, gateway, log_path = rig.seed, rig.gateway, rig.log_path
    rng = random.Random(seed)
    batches = plan(rng)
    began = time.monotonic()
    dms = _observer(rig.devnet)
    interlink: InterLink | None = None
    try:
        async with aiohttp.ClientSession() as session, asyncio.timeout(WHOLE_S):
            interlink = InterLink(gateway, session)
            await gateway.start()
            live: list[str] = []
            deleted: list[str] = []
            for number, batch in enumerate(batches):
                interlink.journal.append(f"batch {number}")
                await _chaos_batch(interlink, batch, live)
                for op in batch.ops:
                    if op.kind == "create":
                        live.append(op.uid)
                    elif op.kind == "delete":
                        live.remove(op.uid)
                        deleted.append(op.uid)
            # the last kill lands while the last batch's pods deploy and shut down
            await _kill_and_restart(gateway, Kill.drawn(rng), interlink.journal)
            converging_s = time.monotonic()
            await _converged(interlink, dms, live, deleted, rig.devnet.work_dir)
            converging_s = time.monotonic() - converging_s
    except Exception as exc:
        journal = "\n".join(interlink.journal[-80:] if interlink else [])
        log_tail = "".join(log_path.read_text().splitlines(keepends=True)[-LOG_TAIL:])
        what = str(exc) if isinstance(exc, AssertionError) else repr(exc)
        raise AssertionError(
            f"chaos failed with {SEED_ENV}={seed} after {gateway.kills} kills and "
            f"{rig.link.lost} lost DMS replies, "
            f"{time.monotonic() - began:.1f} s: {what}\n--- journal (last 80)\n{journal}\n"
            f"--- gateway log (last {LOG_TAIL} lines)\n{log_tail}"
        ) from (None if isinstance(exc, AssertionError) else exc)
    finally:
        dms.close()
    operations = sum(len(b.ops) for b in batches)
    print(
        f"chaos seed {seed}: {operations} operations, {gateway.kills} kills, "
        f"{rig.link.lost} DMS replies lost, {len(live)} live "
        f"and {len(deleted)} deleted pods converged in {time.monotonic() - began:.1f} s "
        f"({gateway.starting_s:.1f} s starting, {converging_s:.1f} s converging)"
    )
    assert operations >= OPERATIONS and gateway.kills > KILLS
