"""A pod's phases: the table of moves is whole and consistent, and a ``PodActor`` makes every
move of it, on the event it names, followed by the step it names."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import pytest

from dmsgw.behaviors.deployment import DeploymentStatusResponse
from dmsgw.behaviors.status import DeploymentStatus
from dmsgw.clock import FixedClock
from dmsgw.interlink.pods.follow_reports import (
    Admitted,
    BackedOff,
    Deployed,
    DeployFailed,
    Ended,
    Lost,
    Observed,
    ShutDown,
)
from dmsgw.interlink.pods.pod_actor import PodActor
from dmsgw.interlink.pods.pod_phases import (
    BORN_IN,
    GONE,
    MOVES,
    RESUMES,
    Event,
    Move,
    PhaseError,
    Step,
    move,
)
from dmsgw.interlink.pods.pod_services import PodServices
from dmsgw.interlink.records.pod_record import Phase, PodRecord, snapshot_of
from dmsgw.interlink.wire.bodies import PodStatus
from tests.support.gateway_fakes import pod, pod_services, uid

STORED = frozenset(RESUMES)
CLOCK = FixedClock(1_700_000_000 * 10**9)


def test_every_stored_phase_resumes_and_every_move_lands_on_a_known_phase() -> None:
    assert {m.start for m in MOVES} | {m.end for m in MOVES} == STORED | {GONE}
    assert BORN_IN <= STORED


def test_a_move_into_a_phase_is_followed_by_what_a_restart_in_it_resumes() -> None:
    """A restarted actor carries on with the step the move into its stored phase began."""
    assert [m for m in MOVES if m.end != GONE and RESUMES[m.end] != m.step] == []


def test_every_phase_is_reached_from_birth_and_every_pod_can_be_deleted_and_go() -> None:
    reached, frontier = set(BORN_IN), list(BORN_IN)
    while frontier:
        phase = frontier.pop()
        for m in MOVES:
            if m.start == phase and m.end not in reached:
                reached.add(m.end)
                frontier.append(m.end)
    assert reached == STORED | {GONE}
    assert {m.start for m in MOVES if m.event is Event.DELETE} == STORED - {Phase.DELETING}


def test_an_ended_pod_only_waits_to_be_deleted() -> None:
    assert [m.event for m in MOVES if m.start == Phase.TERMINAL] == [Event.DELETE]


def test_a_move_the_table_does_not_have_is_refused_naming_it() -> None:
    known = {(m.start, m.event) for m in MOVES}
    for phase in STORED:
        for event in Event:
            if (phase, event) in known:
                assert move(phase, event).start == phase
            else:
                with pytest.raises(PhaseError, match=f"{phase!r} has no move on {event.name}"):
                    move(phase, event)


# --- every move, made by an actor -----------------------------------------------------------


class _Follower:
    """Notes the steps the actor asks for, and does nothing."""

    def __init__(self) -> None:
        self.steps: list[str] = []

    def __getattr__(self, step: str) -> Callable[..., Any]:
        async def nothing() -> None:
            return None

        def asked(*_: Any, **__: Any) -> Any:
            self.steps.append(step)
            return nothing()

        return asked


class _Ref:
    def __init__(self) -> None:
        self.stopped = False

    def tell(self, message: Any) -> None:
        raise AssertionError(f"the follower's work failed: {message!r}")

    def stop(self) -> None:
        self.stopped = True


class _Store:
    async def put(self, uid: str, value: Any) -> None:
        pass

    async def delete(self, uid: str) -> None:
        pass


class _WalkedActor(PodActor):
    """A pod actor whose follower only notes what it is asked."""

    def __init__(self, record: PodRecord, services: Any) -> None:
        super().__init__(record, services)
        self.follower = self._follower = _Follower()  # type: ignore[assignment]

    def _new_follower(self) -> Any:
        return self.follower


def _failed_init(record: PodRecord) -> PodStatus:
    """The pod's entry with its init container ended in failure."""
    entry = snapshot_of(record, now_ns=CLOCK()).model_dump(by_alias=True)
    entry["initContainers"] = [
        {"name": "init", "state": {"terminated": {"exitCode": 1}}, "image": "busybox"}
    ]
    return PodStatus.model_validate(entry)


def _request(policy: str, init: bool) -> bytes:
    spec = pod(uid(1), policy=policy)
    containers = [{"name": "main"}]
    if init:
        spec["spec"]["initContainers"] = [{"name": "init", "image": "busybox", "command": ["x"]}]
        containers.append({"name": "init"})
    return json.dumps({"pod": spec, "container": containers}).encode()


def _observed(status: DeploymentStatus, error: str = "") -> Observed:
    return Observed(status, DeploymentStatusResponse(status=status.go_name, error=error))


_TRIGGERS: dict[tuple[str, Event], tuple[str, Any]] = {
    (Phase.PENDING, Event.ATTEMPT): ("Never", None),  # its start records the first attempt
    (Phase.QUEUED, Event.ADMITTED): ("Never", Admitted(1)),
    (Phase.QUEUED, Event.DEPLOY_FAILED): ("Never", DeployFailed(1, "invalid ensemble")),
    (Phase.DEPLOYING, Event.DEPLOYED): ("Never", Deployed(1, "ens-1")),
    (Phase.DEPLOYING, Event.DEPLOY_FAILED): ("Never", DeployFailed(1, "invalid ensemble")),
    (Phase.DEPLOYING, Event.ATTEMPT): ("Never", DeployFailed(1, "failed to create deployment")),
    (Phase.RUNNING, Event.ATTEMPT): (
        "Never",
        _observed(DeploymentStatus.FAILED, "failed to create deployment"),
    ),
    (Phase.RUNNING, Event.RESTART): ("Always", _observed(DeploymentStatus.COMPLETED)),
    (Phase.RUNNING, Event.INIT_FAILED): ("Never", _observed(DeploymentStatus.RUNNING)),
    (Phase.RUNNING, Event.ENDED): ("Never", _observed(DeploymentStatus.COMPLETED)),
    (Phase.RUNNING, Event.LOST): ("Never", Lost("ens-1", "not found")),
    (Phase.BACKOFF, Event.ATTEMPT): ("Always", BackedOff(1)),
    (Phase.ENDING, Event.STOPPED): ("Never", Ended("ens-1")),
    (Phase.DELETING, Event.SHUT_DOWN): ("Never", ShutDown()),
}
"""For each move but the deletes: the pod's restartPolicy, and the follower's report that makes
the event happen (``None``: the actor's start)."""


def _trigger(m: Move) -> tuple[str, Any]:
    return ("Never", "delete") if m.event is Event.DELETE else _TRIGGERS[(m.start, m.event)]


def test_every_move_but_the_deletes_has_its_trigger_here() -> None:
    assert set(_TRIGGERS) == {(m.start, m.event) for m in MOVES if m.event is not Event.DELETE}


@pytest.mark.parametrize("m", MOVES, ids=lambda m: f"{m.start}-{m.event.name}")
async def test_the_actor_makes_the_move_and_takes_its_step(m: Move) -> None:
    policy, report = _trigger(m)
    init = m.event is Event.INIT_FAILED
    record = PodRecord(
        uid=uid(1),
        namespace="default",
        name="p",
        jid="j",
        request=_request(policy, init),
        phase=m.start,
        attempt=1,
        ensemble_id="" if m.start in (Phase.QUEUED, Phase.DEPLOYING) else "ens-1",
    )
    status_of = _failed_init if init else (lambda r: snapshot_of(r, now_ns=CLOCK()))
    services = pod_services(None, store=_Store(), status_of=status_of, clock=CLOCK)
    services.book.take_on(record)
    actor = _WalkedActor(record, services)
    actor.actor_ref = ref = _Ref()  # type: ignore[assignment]
    if m.start != Phase.PENDING or report is None:  # a pending pod moves on as it starts
        await actor.on_start()
        resumed = actor.follower.steps
        assert resumed == ([] if RESUMES[m.start] is Step.NOTHING else [RESUMES[m.start].value])
    if report is not None:
        actor.follower.steps = []
        await (actor.delete() if report == "delete" else actor.on_receive(report))
    await asyncio.sleep(0)  # the step's work starts
    assert record.phase == m.end
    if m.step is Step.FORGET:
        assert (ref.stopped, uid(1) in services.book.records) == (True, False)
    else:
        expected = [] if m.step is Step.NOTHING else [m.step.value]
        assert actor.follower.steps == expected


class _FullStore(_Store):
    async def delete(self, uid: str) -> None:
        raise OSError("disk full")


def _deleting(store: _Store) -> tuple[PodRecord, PodServices, _WalkedActor, _Ref]:
    """A pod deleting, its actor walked by hand over ``store``: its record, services, actor and
    the actor's ref."""
    record = PodRecord(
        uid=uid(1),
        namespace="default",
        name="p",
        jid="j",
        request=_request("Never", False),
        phase=Phase.DELETING,
        attempt=1,
        ensemble_id="ens-1",
    )
    services = pod_services(None, store=store, status_of=lambda r: snapshot_of(r, now_ns=0))
    services.book.take_on(record)
    actor = _WalkedActor(record, services)
    actor.actor_ref = ref = _Ref()  # type: ignore[assignment]
    return record, services, actor, ref


async def test_a_shut_down_pod_whose_record_cannot_be_deleted_stays_deleting() -> None:
    """The store refuses to drop the record: the actor fails (its supervisor restarts it) and
    the record it resumes from still says ``deleting``, so the restart shuts down again."""
    _, services, actor, _ = _deleting(_FullStore())
    with pytest.raises(OSError, match="disk full"):
        await actor.on_receive(ShutDown())
    assert services.book.records[uid(1)].phase == Phase.DELETING
    assert RESUMES[Phase.DELETING] is Step.SHUT_DOWN


async def test_a_delete_that_comes_once_the_pod_is_gone_is_done_already() -> None:
    """A delete arriving between the record's removal and the actor's end (interLink sends
    its delete again; the chaos test's seed 3897349780 did): the pod is deleted, so it is a
    no-op, not the phase table's refusal (a 500)."""
    record, services, actor, ref = _deleting(_Store())
    await actor.on_receive(ShutDown())
    assert (record.phase, ref.stopped) == (GONE, True)
    await actor.delete()
    assert record.phase == GONE and uid(1) not in services.book.records
