"""A pod's ``/status`` entry is read from its record only when what the entry shows changed.

Over the in-memory DMS of :mod:`tests.support.gateway_fakes` (an injected clock, bounded waits
on the gateway's own state).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import math
import random
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dmsgw.actors.wheel import wheel_of
from dmsgw.behaviors.catalog import DEPLOYMENT_MANIFEST
from dmsgw.behaviors.deployment import DeploymentManifestResponse, DeploymentStatusResponse
from dmsgw.behaviors.resources import CPU, Resources
from dmsgw.behaviors.status import AllocationInfo, AllocationStatus
from dmsgw.clock import NS_PER_SECOND, FixedClock
from dmsgw.errors import DmsgwError
from dmsgw.interlink.pods import follow_state as poll_rules
from dmsgw.interlink.pods.heap import HeapFreezer
from dmsgw.interlink.pods.pod_follower import PodFollower
from dmsgw.interlink.pods.poll_pace import PollPace
from dmsgw.interlink.records import pod_record
from dmsgw.interlink.records.pod_record import (
    Phase,
    PodPolicy,
    PodRecord,
    kept_reply,
    plain_reply,
    shown_by,
    snapshot_of,
)
from dmsgw.interlink.state.pod_store import pack, unpack
from dmsgw.interlink.wire import k8s
from dmsgw.interlink.wire.bodies import PodStatus, RetrievedPodData
from tests.support.gateway_fakes import (
    ClosedTurns,
    FakeDMS,
    create,
    gateway_on,
    plain_translation,
    pod,
    pod_services,
    poll,
    uid,
    until,
)

OWNER = "did:key:the-gateway"
CLOCK = FixedClock(1_700_000_000 * NS_PER_SECOND)


async def test_a_pod_on_its_way_to_running_is_read_once_per_entry_it_shows(
    tmp_path: Path,
) -> None:
    """Pending, deploying and deployed-but-not-yet-heard read as one entry: the pod's actor
    reads it once (a snapshot is most of a create's time), and every entry it publishes
    differs from the one before."""
    dms = FakeDMS(tmp_path / "logs")
    read: list[bytes] = []

    def reading(record: PodRecord) -> PodStatus:
        status = snapshot_of(record, now_ns=CLOCK())
        read.append(status.wire())
        return status

    gateway = await gateway_on(dms, tmp_path / "state", owner=OWNER, clock=CLOCK, snapshot=reading)
    try:
        await create(gateway, pod(uid(1)))
        await until(lambda: gateway.book.records[uid(1)].started_ns > 0, "running")
    finally:
        await gateway.close()
    assert len(read) == 2  # waiting, then running
    assert read[0] != read[1]
    assert json.loads(read[-1])["containers"][0]["state"].get("running")


async def test_a_created_pod_has_its_entry_before_its_actor_starts(tmp_path: Path) -> None:
    """Creates are answered before their actors start (pod actors take turns of the loop):
    interLink may poll a pod at once, and must find it waiting, not unknown."""
    dms = FakeDMS(tmp_path / "logs")
    gate = ClosedTurns()
    gateway = await gateway_on(dms, tmp_path / "state", owner=OWNER, clock=CLOCK, turns=gate)
    try:
        await create(gateway, pod(uid(1)))
        [status] = await poll(gateway, pod(uid(1)))
        assert status.containers[0].state.waiting.reason == "ContainerCreating"
        assert dms.asked == {}  # known: no re-adoption asked the DMS
        with contextlib.closing(sqlite3.connect(tmp_path / "state")) as db:
            [(blob,)] = db.execute("SELECT record FROM pods").fetchall()
        assert unpack(blob)[pod_record.SHOWN_KEY][0] == shown_by(gateway.book.records[uid(1)])
    finally:
        gate.open.set()
        await gateway.close()


RECORD = PodRecord(
    uid=uid(2),
    namespace="default",
    name="p",
    jid="dmsgw-" + uid(2),
    request=json.dumps({"pod": pod(uid(2))}).encode(),
    phase=Phase.RUNNING,
    dms_status="Running",
    observed={"status": "Running"},
    runs={"main": {"started": 1}},
)


@pytest.mark.parametrize(
    "change",
    [
        {"request": json.dumps({"pod": pod(uid(2), image="alpine")}).encode()},
        {"jid": "dmsgw-other"},
        {"dms_status": "Completed"},
        {"observed": {"status": "Running", "error": "boom"}},
        {"runs": {"main": {"started": 2}}},
        {"message": "why"},
        {"phase": Phase.TERMINAL},
        {"phase": Phase.ENDING},  # final too: a failed init container's pod ends at once
        {"phase": Phase.TERMINAL, "reason": "ProviderFailed"},
    ],
)
def test_what_a_snapshot_reads_changes_its_digest(change: dict[str, Any]) -> None:
    """Each part of the record that :func:`snapshot_of` reads (some show only in some
    states: an observed error, once the pod has failed)."""
    changed = dataclasses.replace(RECORD, **change)
    assert shown_by(changed) != shown_by(RECORD)


@pytest.mark.parametrize(
    "change",
    [
        {"attempt": 3, "ensemble_id": "e2", "previous_ensemble_id": "e1"},
        {"phase": Phase.DELETING},
        {"dms_status": "", "observed": {}, "runs": {}, "phase": Phase.PENDING},
    ],
)
def test_what_a_snapshot_does_not_read_leaves_its_digest(change: dict[str, Any]) -> None:
    """The last: a pending pod and one whose deployment the DMS has not reported yet (its
    status "Preparing") read alike."""
    base = dataclasses.replace(
        RECORD,
        **({"dms_status": "Preparing", "observed": {}, "runs": {}} if "runs" in change else {}),
    )
    changed = dataclasses.replace(base, **change)
    assert snapshot_of(changed, now_ns=CLOCK()).wire() == snapshot_of(base, now_ns=CLOCK()).wire()
    assert shown_by(changed) == shown_by(base)


def _decoded_allocations(observed: dict[str, Any]) -> Any:
    """The reference: the stored reply decoded whole, as the DMS's own struct."""
    return DeploymentStatusResponse.from_json(json.dumps(observed)).allocation_info


@pytest.mark.parametrize("kept", [kept_reply, plain_reply], ids=["kept", "whole"])
@pytest.mark.parametrize("health", ["", "healthy", "unhealthy"])
@pytest.mark.parametrize("status", [*AllocationStatus, ""])
def test_a_snapshot_reads_a_stored_reply_as_the_reply_itself(
    status: str, health: str, kept: Callable[[Any], dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The snapshot reads three fields of each stored allocation, not the whole struct: it
    shows what the decoded struct shows, whether the record kept those fields only (as a
    record does now) or the whole reply (as an earlier gateway's did)."""
    info = AllocationInfo(
        allocation_id="e1_pod.main",
        status=status,
        health=health,
        heartbeat_seq=7,
        resource_limit=Resources(cpu=CPU(cores=2.0)),
    )
    reply = DeploymentStatusResponse(
        status="Running", error="e", allocation_info={"e1_pod.main": info}
    )
    record = dataclasses.replace(RECORD, observed=kept(reply))
    read = snapshot_of(record, now_ns=CLOCK()).wire()
    monkeypatch.setattr(pod_record, "live_allocations", _decoded_allocations)
    assert read == snapshot_of(record, now_ns=CLOCK()).wire()


def test_a_garbled_stored_reply_reads_as_nothing_listed() -> None:
    garbled = {"allocation_info": {"a": 5, "e1_pod.main": {"status": 7}}, "error": ["x"]}
    record = dataclasses.replace(RECORD, observed=garbled)
    [main] = snapshot_of(record, now_ns=CLOCK()).containers
    assert main.state.running is not None  # its wrapper saw it start; the DMS listed nothing


# --- the snapshot stored with the record -----------------------------------------------------


async def _stored_pods(tmp_path: Path, dms: FakeDMS) -> None:
    """A gateway that leaves a running pod and an ended one in its store."""
    gateway = await gateway_on(dms, tmp_path / "state", owner=OWNER, clock=CLOCK)
    try:
        await create(gateway, pod(uid(1)))
        await create(gateway, pod(uid(2)))
        await until(lambda: len(dms.live()) == 2, "deployed")
        dms.live(uid(2))[0].status = "Completed"
        await until(lambda: gateway.book.records[uid(2)].phase == Phase.TERMINAL, "ended")
        await until(lambda: gateway.book.records[uid(1)].started_ns > 0, "running")
    finally:
        await gateway.close()


async def _resumed(
    tmp_path: Path, dms: FakeDMS, monkeypatch: pytest.MonkeyPatch
) -> tuple[dict[str, bytes], list[str]]:
    """What a restarted gateway answers for each pod at once, and the pods it made a
    snapshot of again."""
    made: list[str] = []

    def making(record: PodRecord, *, now_ns: int) -> PodStatus:
        made.append(record.uid)
        return snapshot_of(record, now_ns=now_ns)

    monkeypatch.setattr("tests.support.gateway_fakes.snapshot_of", making)
    gateway = await gateway_on(dms, tmp_path / "state", owner=OWNER, clock=CLOCK)
    try:
        await until(lambda: len(gateway.book.snapshots) == 2, "both answering")
        answers = {u: gateway.book.snapshots[u].wire() for u in (uid(1), uid(2))}
        again = {u: snapshot_of(gateway.book.records[u], now_ns=CLOCK()).wire() for u in answers}
    finally:
        await gateway.close()
    assert answers == again  # what this gateway would make of the records
    return answers, made


async def test_a_restart_answers_with_the_snapshots_stored_with_the_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dms = FakeDMS(tmp_path / "logs")
    await _stored_pods(tmp_path, dms)
    answers, made = await _resumed(tmp_path, dms, monkeypatch)
    assert made == []
    assert json.loads(answers[uid(1)])["containers"][0]["state"].get("running")
    assert json.loads(answers[uid(2)])["containers"][0]["state"].get("terminated")


@pytest.mark.parametrize(
    "stored", ["another build", "garbled", "not a status", "not an entry", "another pod's"]
)
async def test_a_snapshot_another_gateway_stored_is_made_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stored: str
) -> None:
    """A gateway whose code differs (another version, a patch) makes each snapshot again
    from the record; so does a gateway reading a stored snapshot that is not one."""
    dms = FakeDMS(tmp_path / "logs")
    if stored == "another build":
        monkeypatch.setattr(pod_record, "_build", lambda: b"an older gateway")
    await _stored_pods(tmp_path, dms)
    monkeypatch.undo()
    if stored != "another build":
        _rewrite_stored(tmp_path / "state", stored)
    _, made = await _resumed(tmp_path, dms, monkeypatch)
    assert sorted(made) == [uid(1), uid(2)]


def _rewrite_stored(state: Path, how: str) -> None:
    """Spoil the snapshots stored in ``state`` (their digest still right, for ``not a
    status``)."""
    db = sqlite3.connect(state)
    try:
        for pod_uid, blob in db.execute("SELECT uid, record FROM pods").fetchall():
            value = unpack(blob)
            shown = value[pod_record.SHOWN_KEY]
            value[pod_record.SHOWN_KEY] = {
                "garbled": "garbage",
                "not an entry": [shown[0], b"{}"],
                "not a status": [shown[0], b"{}", "", ["main"]],
                "another pod's": [shown[0], shown[1].replace(pod_uid.encode(), b"x"), *shown[2:]],
            }[how]
            db.execute("UPDATE pods SET record = ? WHERE uid = ?", (pack(value), pod_uid))
        db.commit()
    finally:
        db.close()


@pytest.mark.parametrize("stored_entry", ["kept", "garbled"])
async def test_a_resumed_pod_answers_before_its_actor_starts(
    tmp_path: Path, stored_entry: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A restart's pods are known before their actors start (they take turns of the loop):
    a poll meanwhile answers the stored entry, or one read from the record when the stored
    one cannot be used, and never asks the DMS to re-adopt a pod it knows."""
    dms = FakeDMS(tmp_path / "logs")
    await _stored_pods(tmp_path, dms)
    if stored_entry == "garbled":
        _rewrite_stored(tmp_path / "state", "garbled")
    gate = ClosedTurns()  # no pod actor starts until it opens
    asked = dict(dms.asked)
    gateway = await gateway_on(dms, tmp_path / "state", owner=OWNER, clock=CLOCK, turns=gate)
    try:
        [running, ended] = await poll(gateway, pod(uid(1)), pod(uid(2)))
        assert running.containers[0].state.running is not None
        assert ended.containers[0].state.terminated is not None
        assert dms.asked == asked  # nothing asked of the DMS: no actor started, no re-adoption
    finally:
        gate.open.set()
        await gateway.close()


# --- a resumed pod's first poll ---------------------------------------------------------------


class _PollCounter(HeapFreezer):
    """The heap's keeper that tells ``on_poll`` of each status poll (and never freezes)."""

    def __init__(self, on_poll: Callable[[], None]) -> None:
        super().__init__(every=0)
        self._on_poll = on_poll

    def polled(self) -> None:
        self._on_poll()


def _follower(
    invoke: Any,
    *,
    policy: PodPolicy | None = None,
    rng: random.Random | None = None,
    on_poll: Callable[[], None] = lambda: None,
    pace: PollPace | None = None,
) -> PodFollower:
    """The follower of ``RECORD``'s pod over ``invoke``, reporting to nobody."""
    services = pod_services(
        invoke,
        policy=policy or PodPolicy(),
        rng=rng or random.Random(),
        heap=_PollCounter(on_poll),
        pace=pace,
    )
    return PodFollower(RECORD.uid, RECORD.request, services, report=lambda _: None)


class _StoppedError(Exception):
    """Ends the follower at its first DMS call."""


def _timers_into(monkeypatch: pytest.MonkeyPatch, delays: list[float]) -> asyncio.Future[None]:
    """The running loop's wheel timers noted in ``delays`` and never fired: the follower's
    waits between polls, seen without waiting them out. The future is settled at the first."""
    loop = asyncio.get_running_loop()
    waiting: asyncio.Future[None] = loop.create_future()

    def call_later(delay: float, *_: Any) -> asyncio.Handle:
        delays.append(delay)
        if not waiting.done():
            waiting.set_result(None)
        return loop.call_soon(lambda: None)  # a handle to cancel; the callback never runs

    monkeypatch.setattr(wheel_of(loop), "call_later", call_later)
    return waiting


async def _cancelled(steps: asyncio.Future[None]) -> None:
    steps.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await steps


@pytest.mark.parametrize("resumed", [True, False])
async def test_a_resumed_deployment_is_first_asked_after_a_random_part_of_the_longest_poll(
    monkeypatch: pytest.MonkeyPatch, resumed: bool
) -> None:
    """10,000 resumed pods asked the DMS all at once; a deployment just deployed is asked at
    once."""
    asked: list[str] = []

    async def invoke(*_: Any, **__: Any) -> Any:
        asked.append("ask")
        raise _StoppedError

    rng = random.Random()
    monkeypatch.setattr(rng, "uniform", lambda low, high: (low + high) / 4)
    waits: list[float] = []
    _timers_into(monkeypatch, waits)
    follower = _follower(invoke, policy=PodPolicy(poll_max_s=8.0), rng=rng)
    steps = follower.follow("ens-1", {}, resumed=resumed)
    if resumed:
        assert waits == [2.0]
        await _cancelled(steps)
    else:
        with pytest.raises(_StoppedError):
            await steps
    assert (waits, asked) == (([2.0], []) if resumed else ([], ["ask"]))


async def test_a_translation_and_a_poll_s_reading_of_its_reply_wait_for_a_turn_with_room() -> None:
    """Pods created together translated and polled together, past their actors' gate: 16
    translations and 26 polls ran in one 20 ms turn of the loop at 100,000 pods."""
    done: list[str] = []

    async def invoke(behavior: Any, *_: Any, **__: Any) -> Any:
        name = behavior.name
        done.append(name.rsplit("/", 1)[1])
        if name.endswith("/status"):
            return DeploymentStatusResponse(status="Running")
        if name.endswith("/list"):  # the deploy's next step, after its translation
            raise _StoppedError
        raise DmsgwError(f"{name}: not here")  # the poll's manifest and logs

    def translate(data: RetrievedPodData, generation: int) -> Any:
        done.append("translated")
        return plain_translation(data, generation)

    gate = ClosedTurns()
    reported: list[object] = []
    services = pod_services(invoke, translate=translate, turns=gate)
    follower = PodFollower(RECORD.uid, RECORD.request, services, report=reported.append)
    deploying = asyncio.ensure_future(follower.deploy(1))
    polling = asyncio.ensure_future(follower.poll(follower.following("ens-1", {})))
    for _ in range(5):
        await asyncio.sleep(0)
    assert (done, reported) == (["status"], [])  # asked, but its reply not read yet
    gate.open.set()
    with pytest.raises(_StoppedError):
        await deploying
    assert await polling == PodPolicy().poll_min_s
    assert "translated" in done and len(reported) == 1


async def test_a_resumed_follow_reads_its_pod_at_its_first_poll_not_at_its_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A gateway resuming 10,000 pods parsed every pod's request as it started their actors
    (1.4 s of its restart); the first polls, spread over the longest wait, parse them."""
    parsed: list[bytes] = []
    real = poll_rules.parsed_request

    def parse(request: bytes) -> Any:
        parsed.append(request)
        return real(request)

    monkeypatch.setattr(poll_rules, "parsed_request", parse)
    _timers_into(monkeypatch, [])
    steps = _follower(_running_deployment).follow("ens-1", {}, resumed=True)
    assert parsed == []
    await _cancelled(steps)


async def test_a_follower_between_polls_holds_no_task_and_no_parsed_pod(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each followed pod kept its parsed pod (~8 KiB) as long as it lived, and a task: what
    the follower needs of the pod is read once, and the rest again (cached) when needed; it
    waits for its next poll on a timer (asyncio's set of live tasks doubled at 157,285 tasks,
    inside one create, decision 58)."""

    async def invoke(behavior: Any, *_: Any, **__: Any) -> Any:
        if behavior is DEPLOYMENT_MANIFEST:  # read once it runs: where it runs, its ports
            return DeploymentManifestResponse()
        return DeploymentStatusResponse(status="Running")

    waits: list[float] = []
    waiting = _timers_into(monkeypatch, waits)
    follower = _follower(invoke)
    following = follower.following("ens-1", {})
    steps = follower.follow("ens-1", {})
    try:
        await waiting
        assert asyncio.all_tasks() == {asyncio.current_task()}
        assert (waits, steps.done()) == ([PodPolicy().poll_min_s], False)
    finally:
        await _cancelled(steps)
    await follower.poll(following)
    kept = [
        f.name for f in dataclasses.fields(following) if _holds_a_pod(getattr(following, f.name))
    ]
    assert kept == []


def _holds_a_pod(value: Any) -> bool:
    if isinstance(value, dict):
        return any(_holds_a_pod(v) for v in (*value.keys(), *value.values()))
    if isinstance(value, (tuple, list, frozenset)):
        return any(_holds_a_pod(v) for v in value)
    return isinstance(value, k8s.Pod)


async def test_a_follower_counts_each_status_poll_answered_or_not() -> None:
    """Each poll renews what the follower holds until the next: the gateway's heap freezer
    counts them (``HeapFreezer.polled``), a poll the DMS did not answer too."""
    events: list[str] = []

    async def invoke(behavior: Any, *_: Any, **__: Any) -> Any:
        if behavior is DEPLOYMENT_MANIFEST:
            return DeploymentManifestResponse()
        if events.count("poll") == 2:
            raise DmsgwError("the DMS is restarting")
        return DeploymentStatusResponse(status="Running")

    follower = _follower(invoke, on_poll=lambda: events.append("poll"))
    following = follower.following("ens-1", {})
    for _ in range(3):
        if await follower.poll(following) is not None:
            events.append("wait")
    assert events == ["poll", "wait", "poll", "wait", "poll", "wait"]


# --- how often all followed pods poll together ---------------------------------------------


async def _running_deployment(behavior: Any, *_: Any, **__: Any) -> Any:
    """A DMS whose deployment runs, and stays as it is."""
    if behavior is DEPLOYMENT_MANIFEST:
        return DeploymentManifestResponse()
    return DeploymentStatusResponse(status="Running")


async def _waits(follower: PodFollower, following: poll_rules.Following, polls: int) -> list[float]:
    """The wait after each of ``polls`` polls of ``following``."""
    waits = []
    for _ in range(polls):
        wait = await follower.poll(following)
        assert wait is not None
        waits.append(wait)
    return waits


def test_the_longest_wait_stretches_with_the_pods_followed() -> None:
    pace = PollPace(per_s=1000.0)
    assert pace.stretched(5.0) == 5.0
    for _ in range(10_000):
        pace.join()
    assert (pace.followed, pace.stretched(5.0), pace.stretched(20.0)) == (10_000, 10.0, 20.0)
    for _ in range(10_000):
        pace.leave()
    assert (pace.followed, pace.stretched(5.0)) == (0, 5.0)
    for wrong in (0.0, -1.0, math.nan):
        with pytest.raises(ValueError, match="polls a second must be more than 0"):
            PollPace(per_s=wrong)


@pytest.mark.parametrize("others", [0, 99])
async def test_a_follower_waits_as_long_as_the_pace_says(
    monkeypatch: pytest.MonkeyPatch, others: int
) -> None:
    """Alone, a followed pod waits up to the policy's ``poll_max_s`` between polls; with 99
    other pods followed and 10 polls a second for all, up to 10 s. It is counted while it
    follows, and no longer once it stops."""
    pace = PollPace(per_s=10.0)
    for _ in range(others):
        pace.join()
    policy = PodPolicy(poll_min_s=4.0, poll_max_s=5.0)
    follower = _follower(_running_deployment, policy=policy, pace=pace)
    waiting = _timers_into(monkeypatch, [])
    steps = follower.follow("ens-1", {})
    await waiting
    assert pace.followed == others + 1
    await _cancelled(steps)
    assert pace.followed == others
    pace.join()  # as the follow did: the pace counts the pod while it polls
    waits = await _waits(follower, follower.following("ens-1", {}), 5)
    # The first poll heard news (it runs): the next in poll_min_s, then 1.5 times longer.
    assert waits == ([4.0, 5.0, 5.0, 5.0, 5.0] if not others else [4.0, 6.0, 9.0, 10.0, 10.0])


async def test_a_resumed_pods_first_poll_is_not_news(monkeypatch: pytest.MonkeyPatch) -> None:
    """A resumed pod's first poll reports what its stored snapshot shows: it is followed on
    at the longest wait, not from the shortest up (a restart of 100,000 pods polled the DMS
    twice as often as due while each ramped up again)."""
    rng = random.Random()
    monkeypatch.setattr(rng, "uniform", lambda low, high: (low + high) / 5)
    policy = PodPolicy(poll_min_s=0.5, poll_max_s=5.0)
    follower = _follower(_running_deployment, policy=policy, rng=rng)
    first: list[float] = []
    _timers_into(monkeypatch, first)
    await _cancelled(follower.follow("ens-1", {}, resumed=True))
    waits = await _waits(follower, follower.following("ens-1", {}, resumed=True), 3)
    assert first + waits == [1.0, 5.0, 5.0, 5.0]
