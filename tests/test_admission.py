"""Pods wait for DMS capacity, in order (issue 26 item 3, decisions 073-075): the admission
queue over the in-memory DMS (whose free resources are what it offers less what its running
deployments hold), and its rules as pure functions.

Waiting is bounded polling of the gateway's own state (:func:`until`); the clock is injected
and ticks a microsecond each time it is read, so that "before" and "after" are never equal.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import random
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dmsgw.behaviors.resources import CPU, GPU, RAM, Disk, Resources
from dmsgw.behaviors.status import AllocationManifest, EnsembleManifest
from dmsgw.cli.pods import table
from dmsgw.clock import NS_PER_SECOND, FixedClock
from dmsgw.errors import DmsgwError
from dmsgw.interlink.capacity.admission import (
    UNSCHEDULABLE,
    WAITING_FOR_CAPACITY,
    Wait,
    minus,
    minus_all,
    never_fits,
    placement,
    refused_for_capacity,
    shortfall,
)
from dmsgw.interlink.capacity.admission_queue import TOLD_PER_TURN, AdmissionQueue
from dmsgw.interlink.capacity.resource_actor import Gathering, PeerResources
from dmsgw.interlink.configuration.serve_config import load_config
from dmsgw.interlink.gateway import Gateway
from dmsgw.interlink.records.pod_record import POD_UID_KEY, Phase
from dmsgw.interlink.reports.pod_report import PodReport
from dmsgw.interlink.reports.pod_usage import UsageBook
from tests.support.gateway_fakes import FakeDMS, create, gateway_on, pod, poll, uid, until

GIB = 1 << 30
OWNER = "did:key:the-gateway"
ONE_CORE = Resources(cpu=CPU(cores=1.0), ram=RAM(size=8 * GIB), disk=Disk(size=100 * GIB))
WHOLE_CORE = {"resources": {"limits": {"cpu": "1", "memory": "16Mi"}}}


class TickingClock(FixedClock):
    """A clock that moves a microsecond every time it is read."""

    def __call__(self) -> int:
        self.now_ns += 1_000
        return self.now_ns


@pytest.fixture
def clock() -> TickingClock:
    return TickingClock(1_700_000_000 * NS_PER_SECOND)


@pytest.fixture
def dms(tmp_path: Path) -> FakeDMS:
    """A DMS of one peer offering one core: one whole-core pod at a time."""
    fake = FakeDMS(tmp_path / "logs")
    fake.onboarded = ONE_CORE
    return fake


async def _gateway(dms: FakeDMS, tmp_path: Path, clock: FixedClock) -> Gateway:
    return await gateway_on(dms, tmp_path / "state", owner=OWNER, clock=clock)


def _spec(n: int, *, priority: int | None = None, **container: Any) -> dict[str, Any]:
    spec = pod(uid(n), **(container or WHOLE_CORE))
    if priority is not None:
        spec["spec"]["priority"] = priority
    return spec


def _deployed(dms: FakeDMS) -> list[str]:
    """The pods in the order the DMS was asked to deploy them."""
    return [d.metadata[POD_UID_KEY] for d in dms.deployments.values()]


def _finish(dms: FakeDMS, n: int) -> None:
    """Pod ``n``'s deployment completes: its core is free again."""
    (deployment,) = dms.live(uid(n))
    deployment.status = "Completed"


async def _told(gateway: Gateway, *numbers: int) -> None:
    await until(
        lambda: all(gateway.book.records[uid(n)].reason for n in numbers), f"{numbers} told to wait"
    )


async def _one_runs_two_wait(gateway: Gateway, dms: FakeDMS, *waiting: int) -> None:
    """Pod 1 runs on the one core; the pods ``waiting``, created in that order, wait."""
    await create(gateway, _spec(1))
    await until(lambda: len(dms.live(uid(1))) == 1, "pod 1 runs")
    for n in waiting:
        await create(gateway, _spec(n))
    await _told(gateway, *waiting)


def _shown_running(gateway: Gateway, n: int) -> bool:
    shown = gateway.book.snapshots.get(uid(n))
    return shown is not None and shown.containers[0].state.running is not None


async def _waiting_entry(gateway: Gateway, n: int) -> dict[str, Any]:
    (status,) = await poll(gateway, pod(uid(n)))
    state = status.containers[0].state
    assert state.waiting is not None, state
    return {"reason": state.waiting.reason, "message": state.waiting.message}


# --- through the gateway ---------------------------------------------------------------------


async def test_pods_beyond_capacity_wait_and_run_in_priority_then_creation_order(
    dms: FakeDMS, tmp_path: Path, clock: TickingClock
) -> None:
    """One core, four one-core pods: the first runs; the others wait Pending with a reason,
    and run as the core frees, the one of higher priority first, then in creation order
    (pod 3 was created before pod 2). Nothing fails; each is deployed once."""
    gateway = await _gateway(dms, tmp_path, clock)
    try:
        await create(gateway, _spec(1))
        await until(lambda: len(dms.live(uid(1))) == 1, "pod 1 runs")
        for spec in (_spec(3), _spec(2), _spec(4, priority=100)):
            await create(gateway, spec)
        await _told(gateway, 2, 3, 4)
        head = await _waiting_entry(gateway, 4)
        assert head == {
            "reason": WAITING_FOR_CAPACITY,
            "message": "waiting for DMS capacity: 1 core requested, 0 free on the best of 1 peer",
        }
        assert await _waiting_entry(gateway, 3) == {
            "reason": WAITING_FOR_CAPACITY,
            "message": "waiting for DMS capacity: earlier pods go first",
        }
        places = {u: w.position for u, w in gateway.admission.waiting().items()}
        assert places == {uid(4): 1, uid(3): 2, uid(2): 3}
        for running, following in ((1, 4), (4, 3), (3, 2)):
            _finish(dms, running)
            await until(lambda f=following: len(dms.live(uid(f))) == 1, f"pod {following} runs")
        assert _deployed(dms) == [uid(1), uid(4), uid(3), uid(2)]
        phases = {gateway.book.records[uid(n)].phase for n in (1, 2, 3, 4)}
        assert phases <= {Phase.RUNNING, Phase.TERMINAL}
        assert all(gateway.book.records[uid(n)].reason != "ProviderFailed" for n in (1, 2, 3, 4))
    finally:
        await gateway.close()


async def test_the_wait_shows_on_the_operator_view_and_in_dmsgw_pods(
    dms: FakeDMS, tmp_path: Path, clock: TickingClock
) -> None:
    """``/pods`` gives a waiting pod its place in line, since when and why; ``dmsgw pods``
    lists the waiting pods under its table in that order; the queue's length and oldest wait
    are what ``/metrics`` exports."""
    gateway = await _gateway(dms, tmp_path, clock)
    try:
        await _one_runs_two_wait(gateway, dms, 2, 3)
        clock.advance(30)
        assert (len(gateway.admission), gateway.admission.deploying()) == (2, 0)
        assert 30 <= gateway.admission.oldest_wait_s() < 31
        report = PodReport(
            gateway.pods, UsageBook(dms), clock=clock, waiting=gateway.admission.waiting
        )
        views = {v["uid"]: v for v in report.views()}
        assert "waiting" not in views[uid(1)]
        assert views[uid(2)]["waiting"]["position"] == 1
        assert views[uid(3)]["waiting"]["position"] == 2
        assert views[uid(3)]["phase"] == "Pending"
        assert views[uid(2)]["gatewayPhase"] == Phase.QUEUED
        text = table(list(views.values()))
        under = text.split("Waiting for DMS capacity, in order:\n")[1].splitlines()
        assert [line.split()[:2] for line in under] == [
            ["1", "default/p-0002"],
            ["2", "default/p-0003"],
        ]
        assert "WaitingForCapacity" in text
    finally:
        await gateway.close()


async def test_a_pod_no_peer_could_ever_hold_says_so_at_once_and_blocks_nobody(
    dms: FakeDMS, tmp_path: Path, clock: TickingClock
) -> None:
    """500 cores where the one peer offers 1: the pod is ``Unschedulable`` at once, saying
    what it asks and what the peers offer, is never deployed, and the pod created after it
    runs."""
    gateway = await _gateway(dms, tmp_path, clock)
    try:
        await create(gateway, _spec(1, resources={"limits": {"cpu": "500"}}))
        await create(gateway, _spec(2))
        await until(lambda: len(dms.live(uid(2))) == 1, "pod 2 runs")
        await _told(gateway, 1)
        assert await _waiting_entry(gateway, 1) == {
            "reason": UNSCHEDULABLE,
            "message": "no DMS peer can ever run it: 500 cores requested, "
            "1 offered on the best of 1 peer",
        }
        assert _deployed(dms) == [uid(2)]
        assert gateway.book.records[uid(1)].phase == Phase.QUEUED
    finally:
        await gateway.close()


async def test_a_dms_refusal_for_lack_of_room_sends_the_pod_back_to_wait(
    dms: FakeDMS, tmp_path: Path, clock: TickingClock
) -> None:
    """The DMS fails the first deployment before placing it (no allocation ever started; its
    status gives no reason): the pod waits again, in its place, and its next attempt runs.
    It never shows Failed, and this is no restart."""
    dms.refuse = 1
    gateway = await _gateway(dms, tmp_path, clock)
    try:
        await create(gateway, _spec(1))
        await until(lambda: _shown_running(gateway, 1), "pod 1 shown running")
        record = gateway.book.records[uid(1)]
        assert (record.phase, record.attempt, record.restarts) == (Phase.RUNNING, 2, 0)
        assert [d.status for d in dms.deployments.values()] == ["Failed", "Running"]
    finally:
        await gateway.close()


async def test_the_queue_survives_a_restart_in_its_order_and_nothing_deploys_twice(
    dms: FakeDMS, tmp_path: Path, clock: TickingClock
) -> None:
    """A gateway stops with pod 1 running and pods 3 and 2 waiting (3 created first). The
    next one resumes them as they were: the waiting pods wait, told why again, and run in
    their order as the core frees; each pod is deployed once in all."""
    first = await _gateway(dms, tmp_path, clock)
    try:
        await _one_runs_two_wait(first, dms, 3, 2)
    finally:
        await first.close()
    second = await _gateway(dms, tmp_path, clock)
    try:
        await _told(second, 2, 3)
        assert {u: w.position for u, w in second.admission.waiting().items()} == {
            uid(3): 1,
            uid(2): 2,
        }
        assert (await _waiting_entry(second, 3))["reason"] == WAITING_FOR_CAPACITY
        _finish(dms, 1)
        await until(lambda: len(dms.live(uid(3))) == 1, "pod 3 runs")
        assert not dms.live(uid(2))
        _finish(dms, 3)
        await until(lambda: len(dms.live(uid(2))) == 1, "pod 2 runs")
    finally:
        await second.close()
    assert Counter(_deployed(dms)) == {uid(1): 1, uid(3): 1, uid(2): 1}
    assert _deployed(dms) == [uid(1), uid(3), uid(2)]


async def test_deployments_under_way_are_bounded(tmp_path: Path, clock: TickingClock) -> None:
    """Room for all, but at most two deployments under way: the third waits for one of them
    to run, saying so."""
    dms = FakeDMS(tmp_path / "logs")
    gateway = await _gateway(dms, tmp_path, clock)
    gateway.admission.policy = dataclasses.replace(gateway.admission.policy, max_deploying=2)
    gateway.admission.hold("elsewhere-1", ())  # two deployments under way already
    gateway.admission.hold("elsewhere-2", ())
    try:
        await create(gateway, _spec(1))
        await _told(gateway, 1)
        assert await _waiting_entry(gateway, 1) == {
            "reason": WAITING_FOR_CAPACITY,
            "message": "waiting for DMS capacity: 2 deployments under way (at most 2 at once)",
        }
        assert _deployed(dms) == []
        gateway.admission.settled("elsewhere-1")
        await until(lambda: len(dms.live(uid(1))) == 1, "pod 1 runs")
    finally:
        await gateway.close()


# --- the rules -------------------------------------------------------------------------------


def _free(cores: float, ram_gib: int = 8, gpus: tuple[GPU, ...] = ()) -> Resources:
    return Resources(
        cpu=CPU(cores=cores), ram=RAM(size=ram_gib * GIB), disk=Disk(size=GIB), gpus=gpus or None
    )


def test_the_reason_names_what_is_lacking_against_the_best_peer() -> None:
    want = Resources(cpu=CPU(cores=0.5), ram=RAM(size=GIB))
    assert shortfall(want, [_free(0), _free(0.25), _free(0)], "free") == (
        "0.5 cores requested, 0.25 free on the best of 3 peers"
    )
    big = Resources(cpu=CPU(cores=2), ram=RAM(size=16 * GIB))
    assert shortfall(big, [_free(4, 4), _free(1, 32)], "free") == (
        "no single one of 2 peers has 2 cores, 16 GiB RAM free"
    )
    assert shortfall(want, [], "free") == "no DMS peer reports its resources"


def test_each_ensemble_node_needs_a_peer_of_its_own() -> None:
    node = Resources(cpu=CPU(cores=1))
    assert placement((node, node), [_free(4)]) is None
    assert placement((node, node), [_free(4), _free(1)]) == [0, 1]


def test_never_fits_only_when_every_peer_says_what_it_offers() -> None:
    huge = (Resources(cpu=CPU(cores=500)),)
    assert never_fits(huge, [_free(24), None]) == ""
    assert never_fits(huge, [_free(24), _free(12)]).startswith(
        "no DMS peer can ever run it: 500 cores requested, 24 offered"
    )
    assert never_fits((Resources(cpu=CPU(cores=2)),), [_free(24)]) == ""


@pytest.mark.parametrize(
    ("error", "refused"),
    [
        ("deploying ensemble: failed to create deployment", True),
        (
            "deploying ensemble: failed to bid: request bids: not enough time for deployment: "
            "failed to create deployment",
            True,
        ),
        (
            "failed to commit resources: error committing for n1: commit resources for "
            "ensemble allocID: x: insufficient resources: cpu.cores: 1 core requested, "
            "0 cores available: failed to create deployment",
            True,
        ),
        (
            "deploying ensemble: provisioning allocations: error starting allocation: "
            "exit 1: failed to create deployment",
            False,
        ),
    ],
)
def test_a_refusal_for_lack_of_room_is_told_from_the_pods_own_failure(
    error: str, refused: bool
) -> None:
    assert refused_for_capacity(error) is refused


def test_without_a_reason_an_unplaced_deployment_is_a_refusal() -> None:
    """DMS 0.5's ``deployment/status`` gives no reason for a failed deployment: one whose
    allocations never started was not placed; one whose allocation failed is the pod's."""
    pending = AllocationManifest(status="pending")
    failed = AllocationManifest(status="failed")
    assert refused_for_capacity("", EnsembleManifest(allocations={"a": pending}))
    assert not refused_for_capacity("", EnsembleManifest(allocations={"a": failed}))
    assert not refused_for_capacity("", None)


def test_a_wait_is_its_reason_and_message() -> None:
    assert json.dumps(Wait(WAITING_FOR_CAPACITY, "m")) == '["WaitingForCapacity", "m"]'


def test_the_bound_on_deployments_under_way_is_configured() -> None:
    assert load_config(env={"DMSGW_DEVNET": "1", "DMSGW_MAX_DEPLOYING": "3"}).max_deploying == 3
    with pytest.raises(DmsgwError, match=r"max_deploying .*greater than or equal to 1"):
        load_config(env={"DMSGW_DEVNET": "1", "DMSGW_MAX_DEPLOYING": "0"})


async def test_a_long_line_is_told_why_it_waits_a_few_pods_a_turn(
    turn: Callable[[], int],
) -> None:
    """Each pod told publishes its status: a burst of thousands told in one callback held the
    event loop; the loop turns between every :data:`TOLD_PER_TURN` of them, and every pod is
    told once."""
    full = PeerResources("peer-1", Resources(cpu=CPU(cores=0.0), ram=RAM(size=1 << 30)))

    async def gathering(since_ns: int | None) -> Gathering:
        return (0, [full])

    queue = AdmissionQueue(gathering, clock=FixedClock(0))
    told: list[tuple[str, str]] = []
    turns: set[int] = set()

    def tell(uid: str) -> Callable[[Wait], None]:
        def heard(wait: Wait) -> None:
            told.append((uid, wait.reason))
            turns.add(turn())

        return heard

    demand = (Resources(cpu=CPU(cores=0.5), ram=RAM(size=1 << 20)),)
    count = 3 * TOLD_PER_TURN + 1
    loop = asyncio.get_running_loop()
    waits = [
        loop.create_task(queue.wait(f"u{n}", (0, n, f"u{n}"), demand, tell(f"u{n}")))
        for n in range(count)
    ]
    try:
        await until(lambda: len(told) == count, "every pod told")
        assert sorted(told) == sorted((f"u{n}", WAITING_FOR_CAPACITY) for n in range(count))
        assert len(turns) >= count // TOLD_PER_TURN  # the loop turned between the groups
    finally:
        for wait in waits:
            wait.cancel()
        await asyncio.gather(*waits, return_exceptions=True)
        await queue.close()


@pytest.mark.parametrize("seed", range(20))
def test_minus_all_leaves_what_minus_one_after_another_leaves(seed: int) -> None:
    """The queue subtracts its holds from a peer's free resources in one pass: the same as
    subtracting them one by one, cards and the floor at zero included."""
    rng = random.Random(seed)
    cards = tuple(GPU(vram=rng.choice((8, 16, 24)) << 30, index=i) for i in range(3))
    free = Resources(
        cpu=CPU(cores=float(rng.randint(0, 8)), clock_speed=3e9),
        ram=RAM(size=rng.randint(0, 16) << 30),
        disk=Disk(size=rng.randint(0, 64) << 30),
        gpus=cards if seed % 2 else None,
    )
    wants = [
        Resources(
            cpu=CPU(cores=rng.choice((0.25, 0.5, 1.0, 2.0))),
            ram=RAM(size=rng.randint(0, 4) << 30),
            disk=Disk(size=rng.randint(0, 8) << 30),
            gpus=(GPU(vram=8 << 30),) if seed % 4 == 1 and rng.random() < 0.5 else None,
        )
        for _ in range(rng.randint(0, 12))
    ]
    one_by_one = free
    for want in wants:
        one_by_one = minus(one_by_one, want)
    assert minus_all(free, wants) == one_by_one
