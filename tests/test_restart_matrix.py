"""Every ``restartPolicy`` against containers that fail in each way, over the embedded devnet,
for longer than every back-off and timer, checked against the kubelet's rules (issue 26).

The failures: an exit code, a crash loop (a run that lasts, then fails), a failing init
container, an OOM kill (the command killed by SIGKILL: 137), a command that never starts
(not found: 127). Under ``Never`` each pod ends, its containers terminated with the code, no
restart, no previous run, its run's logs served. Under ``OnFailure`` and ``Always`` each is
restarted forever, also after the DMS gave up on its own restarts in place (it stops after
``max_restarts``): never reported terminated (the virtual kubelet would end the pod), waiting
in ``CrashLoopBackOff`` between runs with the run that ended as its ``lastState``, a restart
count that only grows, ``Previous`` logs of one run only, the kubelet's pod phase; the
back-off grows to its longest and a deployment that ran ``restart_reset_s`` (the injected
clock moved) starts it again.

The back-off's delays are the policy's, shrunk; the reset is decided by the injected clock.
Waiting is bounded polling of ``/status`` (as interLink polls), never a fixed sleep.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from dmsgw.clock import NS_PER_SECOND, FixedClock
from dmsgw.devnet.timeouts import DEVNET_TIMEOUTS
from dmsgw.interlink.gateway import Gateway
from dmsgw.interlink.records.pod_record import ENDED_PHASES, Phase, PodPolicy
from dmsgw.interlink.records.snapshots import containers_phase
from dmsgw.interlink.reports.pod_view import pod_phase
from tests.support.plugin_api import create_pod, log_request, open_plugin, pod_of

POLICY = PodPolicy(
    poll_min_s=0.05,
    poll_max_s=0.2,
    retry_min_s=0.05,
    restart_min_s=0.5,
    restart_max_s=1.0,
    restart_reset_s=30.0,
)
"""The clock the gateway runs on jumps by ``restart_reset_s`` once per pod that restarts: six
jumps stay within the orphan grace, so a pod polled just before them is not taken for one
that interLink forgot."""
LONGEST_BACKOFF = 2
"""Restarts in a row after which the delay is the longest: 0.5, then 1 (the kubelet's 10 s
doubling to 300 s, shrunk). A pod shows CrashLoopBackOff only while it backs off, and the
polls of every pod must catch it there on a loaded machine: a 0.2 s back-off went unseen."""
RUNS_PER_DEPLOYMENT = 1 + DEVNET_TIMEOUTS.max_restarts
"""The first run and the DMS's restarts in place before it leaves the container down."""
WANTED_RESTARTS = RUNS_PER_DEPLOYMENT + 1
"""Restarts that prove the pod is restarted after the DMS gave up on its own restarts."""
DEADLINE_S = 300.0
"""How long the matrix may take before it fails, naming the pods that never got there (some
30 deployments, each bids, starts processes and stops them: a loaded machine takes twice a
quiet one's time; bench/README.md, "The restart matrix's time"). pytest's own timeout comes
later, so that this names the late pods."""


@dataclasses.dataclass(frozen=True)
class Kind:
    """A way to fail: the failing container's command, its exit code and terminated reason,
    and what one run writes to the log."""

    script: str
    code: int
    reason: str
    output: str
    init: bool = False

    def spec(self, policy: str) -> dict[str, Any]:
        main = {"name": "main", "image": "busybox", "command": ["/bin/sh", "-c", self.script]}
        if self.init:
            failing = {**main, "name": "init"}
            main = {**main, "command": ["/bin/sh", "-c", "echo main; sleep 60"]}
            return pod_of([main], init=[failing], policy=policy)
        if self.script.startswith("/"):  # a command to run as it is
            main["command"] = [self.script]
        return pod_of([main], policy=policy)

    @property
    def container(self) -> str:
        return "init" if self.init else "main"


KINDS = {
    "exit-code": Kind("echo run; exit 3", 3, "Error", "run\n"),
    "crash-loop": Kind("echo run; sleep 0.2; exit 1", 1, "Error", "run\n"),
    "init-failure": Kind("echo init; exit 1", 1, "Error", "init\n", init=True),
    # $$ is Kubernetes' escape of $ in a command: the shell gets $$, its own PID.
    "oom": Kind("echo run; kill -9 $$$$", 137, "OOMKilled", "run\n"),
    "never-starts": Kind("/no/such/command", 127, "Error", "not found"),
}


def _one_run(kind: Kind, text: str) -> bool:
    """Whether ``text`` is the log of one run of ``kind`` (not of every run)."""
    if kind.output.endswith("\n"):
        return text == kind.output
    return text.count(kind.output) == 1


async def _status(client: Any, spec: dict[str, Any]) -> dict[str, Any]:
    resp = await client.get("/status", data=json.dumps([spec]))
    assert resp.status == 200, await resp.text()
    (status,) = await resp.json()
    return dict(status)


def _container(status: dict[str, Any], kind: Kind) -> dict[str, Any]:
    listed = status["initContainers"] if kind.init else status["containers"]
    return dict(next(c for c in listed if c["name"] == kind.container))


async def _logs(client: Any, spec: dict[str, Any], kind: Kind, **opts: Any) -> tuple[int, str]:
    resp = await client.get("/getLogs", data=log_request(spec, kind.container, **opts))
    return resp.status, await resp.text()


@dataclasses.dataclass
class Watched:
    """One pod of the matrix and what its polls showed."""

    policy: str
    kind: Kind
    spec: dict[str, Any]
    seen: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    longest: bool = False  # the back-off reached its longest delay
    ready: bool = False  # restarted enough, its back-off at its longest
    reset_at: int | None = None  # the pod's restarts when the clock jumped past the reset
    done: bool = False

    @property
    def uid(self) -> str:
        return str(self.spec["metadata"]["uid"])


@pytest.mark.timeout(DEADLINE_S + 60)
async def test_every_restart_policy_against_every_way_to_fail(tmp_path: Path) -> None:
    clock = FixedClock(1_800_000_000 * NS_PER_SECOND)
    async with open_plugin(tmp_path, policy=POLICY, clock=clock) as (client, backend):
        await _play_the_matrix(client, backend, clock)


async def _play_the_matrix(client: Any, backend: Gateway, clock: FixedClock) -> None:
    pods = [
        Watched(policy, kind, kind.spec(policy))
        for policy in ("Never", "OnFailure", "Always")
        for kind in KINDS.values()
    ]
    for watched in pods:
        await create_pod(client, watched.spec)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + DEADLINE_S
    while not all(w.done for w in pods):
        if loop.time() > deadline:
            raise AssertionError(f"pods that never got there: {_late(backend, pods)}")
        # The clock jumps only once every pod backed off to its longest: a jump resets the
        # back-off of every pod whose deployment runs then.
        jumping = all(w.ready for w in pods if w.policy != "Never")
        for watched in (w for w in pods if not w.done):
            status = await _status(client, watched.spec)
            _observe(backend, clock, watched, status, jumping=jumping)
        await asyncio.sleep(0.05)  # interLink's poll interval, shortened
    for watched in pods:
        if watched.policy == "Never":
            await _check_ended(client, watched)
        else:
            await _check_restarting(client, backend, watched)


def _late(backend: Any, pods: list[Watched]) -> list[Any]:
    late = []
    for w in pods:
        if not w.done:
            r = backend.book.records[w.uid]
            last = w.seen[-1] if w.seen else None
            late.append((w.policy, w.kind.script, r.phase, r.restarts, r.backoff, w.reset_at, last))
    return late


def _observe(
    backend: Any, clock: FixedClock, w: Watched, status: dict[str, Any], *, jumping: bool
) -> None:
    """Record a poll; a pod is done once it ended (``Never``) or once it restarted enough
    times and the back-off reached its longest (``ready``), and then (``jumping``) a
    deployment that ran past the reset by the clock started the back-off again."""
    c = _container(status, w.kind)
    w.seen.append(c)
    record = backend.book.records[w.uid]
    if w.policy == "Never":
        w.done = record.phase in ENDED_PHASES  # ending: its snapshot is final already
        return
    w.longest = w.longest or record.backoff >= LONGEST_BACKOFF
    w.ready = w.ready or (c["restartCount"] >= WANTED_RESTARTS and w.longest)
    if w.kind.init and w.ready:
        w.done = True  # its deployments never run: no run lasts long enough to reset
    if not jumping or w.done:
        return
    if w.reset_at is None and record.phase == Phase.RUNNING and record.running_ns:
        w.reset_at = record.restarts  # this deployment has run past the reset by the clock
        clock.advance(POLICY.restart_reset_s)
    elif w.reset_at is not None and record.restarts > w.reset_at:
        assert record.backoff == 1, "the back-off did not start again after a long run"
        w.done = True


async def _check_ended(client: Any, w: Watched) -> None:
    """``Never``: the pod failed with the container's code, nothing restarted, no previous
    run, and the run's log is served."""
    status = _container(await _status(client, w.spec), w.kind)
    ended = status["state"]["terminated"]
    assert (ended["exitCode"], ended["reason"]) == (w.kind.code, w.kind.reason), (w.kind, status)
    assert all(s["restartCount"] == 0 for s in w.seen), w.kind
    assert await _logs(client, w.spec, w.kind, Previous=True) == (
        400,
        f"Opts.Previous: pod default/{w.spec['metadata']['name']} has no previous run",
    )
    code, text = await _logs(client, w.spec, w.kind)
    assert code == 200 and _one_run(w.kind, text), (w.kind, text)


async def _check_restarting(client: Any, backend: Any, w: Watched) -> None:
    """``OnFailure`` and ``Always``: restarted forever, as the kubelet does."""
    terminated = [s for s in w.seen if "terminated" in s["state"]]
    assert terminated == [], (w.policy, w.kind, terminated[:1])
    counts = [s["restartCount"] for s in w.seen]
    assert counts == sorted(counts), (w.policy, w.kind, counts)
    backing_off = [
        s for s in w.seen if s["state"].get("waiting", {}).get("reason") == "CrashLoopBackOff"
    ]
    assert backing_off, (w.policy, w.kind)
    for s in backing_off:
        last = s["lastState"]["terminated"]
        assert (last["exitCode"], last["reason"]) == (w.kind.code, w.kind.reason), (w.kind, s)
    # The phase the kubelet gives: a crash loop runs; a pod whose init container loops waits.
    snapshot = backend.book.snapshots.get(w.uid)
    phase = pod_phase(backend.book.records[w.uid], containers_phase(snapshot))
    assert phase == ("Pending" if w.kind.init else "Running"), (w.policy, w.kind, phase)
    code, text = await _logs(client, w.spec, w.kind, Previous=True)
    assert code == 200 and _one_run(w.kind, text), (w.policy, w.kind, code, text)
    code, text = await _logs(client, w.spec, w.kind)
    assert code == 200 and (text == "" or _one_run(w.kind, text)), (w.policy, w.kind, text)
    assert (await client.post("/delete", data=json.dumps(w.spec))).status == 200
