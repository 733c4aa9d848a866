"""``dmsgw.interlink.records.pod_status``: DMS deployment state as the pod's container statuses.

The rules checked are those the virtual kubelet relies on (``interlink-plugin.md`` §3.2):
every container reported, init containers in order, a failed init container terminating the
main containers, RFC 3339 times, ``ready``/``started`` from the health checks.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from dmsgw.behaviors.status import (
    AllocationInfo,
    AllocationManifest,
    DeploymentStatus,
    EnsembleManifest,
)
from dmsgw.errors import DmsgwError
from dmsgw.interlink.records.pod_status import (
    NOT_RUN_EXIT_CODE,
    ContainerObservation,
    container_statuses,
    pod_status,
)
from dmsgw.interlink.wire import bodies as interlink
from dmsgw.interlink.wire import k8s
from dmsgw.interlink.wire.apimachinery import parse_time

DATA = Path(__file__).parent / "data" / "interlink"
NOW = datetime(2026, 7, 14, 10, 5, tzinfo=UTC)
T0 = datetime(2026, 7, 14, 10, 0, tzinfo=UTC)
ENSEMBLE = "ens1"


def at(seconds: int) -> datetime:
    return T0 + timedelta(seconds=seconds)


def make_pod(
    *containers: dict[str, Any], init: list[dict[str, Any]] | None = None, policy: str = "Never"
) -> k8s.Pod:
    return k8s.Pod.model_validate(
        {
            "metadata": {"name": "demo", "namespace": "default", "uid": "u-1"},
            "spec": {
                "containers": list(containers) or [{"name": "main", "image": "busybox"}],
                "initContainers": init or [],
                "restartPolicy": policy,
            },
        }
    )


def c(name: str, **fields: Any) -> dict[str, Any]:
    return {"name": name, "image": "busybox", **fields}


def manifest(**statuses: str) -> EnsembleManifest:
    """A manifest as the DMS keys it: ``pod.<allocation>`` with full allocation IDs."""
    return EnsembleManifest(
        id=ENSEMBLE,
        allocations={
            f"pod.{name}": AllocationManifest(id=f"{ENSEMBLE}_pod.{name}", status=status)
            for name, status in statuses.items()
        },
    )


def info(name: str, status: str, health: str = "") -> tuple[str, AllocationInfo]:
    ident = f"{ENSEMBLE}_pod.{name}"
    return ident, AllocationInfo(
        allocation_id=ident, status=status, has_health_check=bool(health), health=health
    )


def states(statuses: list[k8s.ContainerStatus]) -> list[tuple[str, str, str | int]]:
    """``(name, kind, reason or exit code)`` per container."""
    out: list[tuple[str, str, str | int]] = []
    for s in statuses:
        if s.state.waiting is not None:
            out.append((s.name, "waiting", s.state.waiting.reason))
        elif s.state.running is not None:
            out.append((s.name, "running", ""))
        else:
            assert s.state.terminated is not None
            out.append((s.name, "terminated", s.state.terminated.exit_code))
    return out


# --- before and while running ------------------------------------------------------------


@pytest.mark.parametrize(
    "status", ["Preparing", "Generating", "Committing", "Provisioning", "Unknown", "Bogus"]
)
def test_before_the_allocations_run_containers_are_creating(status: str) -> None:
    result = container_statuses(make_pod(), status, None, now=NOW)
    assert result.init_containers == []
    assert states(result.containers) == [("main", "waiting", "ContainerCreating")]
    assert result.containers[0].image == "busybox"
    assert (result.containers[0].ready, result.containers[0].started) == (False, False)


def test_a_running_allocation_is_a_running_container() -> None:
    result = container_statuses(
        make_pod(),
        DeploymentStatus.RUNNING,
        manifest(main="running"),
        now=NOW,
        observations={"main": ContainerObservation(started_at=at(3), restart_count=2)},
    )
    [main] = result.containers
    assert main.state.running == k8s.ContainerStateRunning(started_at=at(3))
    assert (main.ready, main.started, main.restart_count) == (True, True, 2)
    assert main.container_id == f"dms://{ENSEMBLE}_pod.main"


def test_live_allocation_info_wins_over_the_manifest() -> None:
    ident, live = info("main", "completed")
    result = container_statuses(
        make_pod(), "Running", manifest(main="running"), now=NOW, allocation_info={ident: live}
    )
    assert states(result.containers) == [("main", "terminated", 0)]


def test_allocations_are_found_without_a_manifest() -> None:
    ident, live = info("main", "running")
    result = container_statuses(make_pod(), 4, None, now=NOW, allocation_info={ident: live})
    assert states(result.containers) == [("main", "running", "")]
    assert result.containers[0].state.running == k8s.ContainerStateRunning(started_at=NOW)


@pytest.mark.parametrize(
    ("probes", "health", "ready", "started"),
    [
        ({}, "unhealthy", True, True),  # no probe: ready as soon as it runs
        ({"livenessProbe": {"exec": {"command": ["true"]}}}, "unhealthy", True, True),
        ({"readinessProbe": {"exec": {"command": ["true"]}}}, "unhealthy", False, True),
        ({"readinessProbe": {"exec": {"command": ["true"]}}}, "healthy", True, True),
        ({"readinessProbe": {"exec": {"command": ["true"]}}}, "", False, True),  # not checked yet
        ({"startupProbe": {"exec": {"command": ["true"]}}}, "unhealthy", False, False),
        ({"startupProbe": {"exec": {"command": ["true"]}}}, "healthy", True, True),
    ],
)
def test_ready_and_started_follow_the_health_check(
    probes: dict[str, Any], health: str, ready: bool, started: bool
) -> None:
    ident, live = info("main", "running", health)
    pod = make_pod(c("main", **probes))
    result = container_statuses(pod, "Running", None, now=NOW, allocation_info={ident: live})
    assert (result.containers[0].ready, result.containers[0].started) == (ready, started)


def test_a_restarting_allocation_waits_in_crash_loop_back_off() -> None:
    result = container_statuses(
        make_pod(),
        "Running",
        manifest(main="restarting"),
        now=NOW,
        observations={"main": ContainerObservation(restart_count=1)},
    )
    assert states(result.containers) == [("main", "waiting", "CrashLoopBackOff")]


# --- ending ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "seen", "code", "reason"),
    [
        ("completed", ContainerObservation(started_at=at(1), finished_at=at(9)), 0, "Completed"),
        ("failed", ContainerObservation(exit_code=3), 3, "Error"),
        ("failed", ContainerObservation(), 1, "Error"),  # the DMS does not say which code
        ("failed", ContainerObservation(exit_code=137, oom_killed=True), 137, "OOMKilled"),
        ("terminated", ContainerObservation(), 143, "Error"),
        ("stopped", ContainerObservation(exit_code=0), 0, "Completed"),
    ],
)
def test_ended_allocations_are_terminated_containers(
    status: str, seen: ContainerObservation, code: int, reason: str
) -> None:
    result = container_statuses(
        make_pod(), "Running", manifest(main=status), now=NOW, observations={"main": seen}
    )
    terminated = result.containers[0].state.terminated
    assert terminated is not None
    assert (terminated.exit_code, terminated.reason) == (code, reason)
    assert terminated.started_at == seen.started_at
    assert terminated.finished_at == (seen.finished_at or NOW)
    assert result.containers[0].ready is False


def test_a_failed_deployment_terminates_every_container_with_its_reason() -> None:
    pod = make_pod(c("a"), c("b"), init=[c("init")])
    result = container_statuses(pod, "Failed", None, now=NOW, error="failed to create deployment")
    assert states(result.init_containers) == [("init", "terminated", 1)]
    assert states(result.containers) == [("a", "terminated", 1), ("b", "terminated", 1)]
    for s in (*result.init_containers, *result.containers):
        assert s.state.terminated is not None
        assert "failed to create deployment" in s.state.terminated.message
    for s in result.containers:  # they never ran: no times are made up for them
        assert s.state.terminated is not None
        assert s.state.terminated.message.startswith("not run: init container 'init' failed")
        assert (s.state.terminated.started_at, s.state.terminated.finished_at) == (None, None)


def test_a_completed_deployment_leaves_nothing_running() -> None:
    pod = make_pod(c("task"), c("service"))
    result = container_statuses(
        pod, "Completed", manifest(task="completed", service="running"), now=NOW
    )
    assert states(result.containers) == [("task", "terminated", 0), ("service", "terminated", 0)]


def test_a_failed_deployment_with_a_completed_container_keeps_its_success() -> None:
    pod = make_pod(c("a"), c("b"))
    result = container_statuses(pod, "Failed", manifest(a="completed", b="running"), now=NOW)
    assert states(result.containers) == [("a", "terminated", 0), ("b", "terminated", 1)]


# --- init containers ---------------------------------------------------------------------------


def test_init_containers_gate_each_other_and_the_main_containers() -> None:
    pod = make_pod(c("app"), init=[c("first"), c("second")])
    # The DMS starts every allocation; the gateway's gate keeps later ones waiting.
    running = manifest(first="running", second="running", app="running")
    result = container_statuses(pod, "Running", running, now=NOW)
    assert states(result.init_containers) == [
        ("first", "running", ""),
        ("second", "waiting", "PodInitializing"),
    ]
    assert states(result.containers) == [("app", "waiting", "PodInitializing")]

    halfway = manifest(first="completed", second="running", app="running")
    result = container_statuses(pod, "Running", halfway, now=NOW)
    assert states(result.init_containers) == [
        ("first", "terminated", 0),
        ("second", "running", ""),
    ]
    assert states(result.containers) == [("app", "waiting", "PodInitializing")]

    done = manifest(first="completed", second="completed", app="running")
    result = container_statuses(pod, "Running", done, now=NOW)
    assert states(result.containers) == [("app", "running", "")]
    assert result.containers[0].ready is True


def test_a_failed_init_container_keeps_the_rest_waiting_under_never_until_the_pod_ends() -> None:
    """As the kubelet reports them: the containers after a failed init container never ran
    (waiting, PodInitializing); only once the pod has ended are they reported terminated,
    which the virtual kubelet needs to fail the pod."""
    pod = make_pod(c("app"), c("side"), init=[c("first"), c("second")], policy="Never")
    failed = manifest(first="failed", second="running", app="running", side="pending")
    seen = {"first": ContainerObservation(exit_code=2, started_at=at(0), finished_at=at(1))}
    result = container_statuses(pod, "Running", failed, now=NOW, observations=seen)
    assert states(result.init_containers) == [
        ("first", "terminated", 2),
        ("second", "waiting", "PodInitializing"),
    ]
    assert states(result.containers) == [
        ("app", "waiting", "PodInitializing"),
        ("side", "waiting", "PodInitializing"),
    ]
    waiting = result.containers[0].state.waiting
    assert waiting is not None and waiting.message == "not run: init container 'first' failed"
    ended = container_statuses(pod, "Failed", failed, now=NOW, observations=seen, final=True)
    assert states(ended.containers) == [
        ("app", "terminated", NOT_RUN_EXIT_CODE),
        ("side", "terminated", NOT_RUN_EXIT_CODE),
    ]


@pytest.mark.parametrize("policy", ["OnFailure", "Always"])
def test_a_failed_init_container_that_will_be_retried_keeps_the_pod_initialising(
    policy: str,
) -> None:
    pod = make_pod(c("app"), init=[c("first")], policy=policy)
    failed = manifest(first="failed", app="running")
    result = container_statuses(pod, "Running", failed, now=NOW)
    assert states(result.init_containers) == [("first", "waiting", "CrashLoopBackOff")]
    assert states(result.containers) == [("app", "waiting", "PodInitializing")]
    # ... until the caller gives up on it
    final = container_statuses(pod, "Running", failed, now=NOW, final=True)
    assert states(final.containers) == [("app", "terminated", NOT_RUN_EXIT_CODE)]


# --- containers that run again -------------------------------------------------------------


@pytest.mark.parametrize(
    ("policy", "final", "wanted"),
    [
        ("OnFailure", False, [("bad", "waiting", "CrashLoopBackOff"), ("good", "terminated", 0)]),
        (
            "Always",
            False,
            [("bad", "waiting", "CrashLoopBackOff"), ("good", "waiting", "CrashLoopBackOff")],
        ),
        ("Never", False, [("bad", "terminated", 3), ("good", "terminated", 0)]),
        ("Always", True, [("bad", "terminated", 3), ("good", "terminated", 0)]),
    ],
)
@pytest.mark.parametrize("status", ["Running", "Completed"])
def test_a_container_its_restart_policy_runs_again_waits_in_crash_loop_back_off(
    policy: str, final: bool, wanted: list[tuple[str, str, str | int]], status: str
) -> None:
    """The virtual kubelet ends a pod whose containers are all reported terminated (Failed,
    or Succeeded when all exited 0) and never asks about it again: a container that will run
    again waits, with the run that ended as its last state, whatever its exit code."""
    pod = make_pod(c("bad"), c("good"), policy=policy)
    ended = manifest(bad="failed", good="completed")
    seen = {"bad": ContainerObservation(exit_code=3, restart_count=1)}
    result = container_statuses(pod, status, ended, now=NOW, observations=seen, final=final)
    assert states(result.containers) == wanted
    for s, (_, kind, _) in zip(result.containers, wanted, strict=True):
        if kind == "waiting":
            last = s.last_state.terminated
            assert last is not None
            assert (last.exit_code, last.reason) == (
                (3, "Error") if s.name == "bad" else (0, "Completed")
            )
    assert result.containers[0].restart_count == 1


def test_a_running_container_keeps_running_beside_one_that_runs_again() -> None:
    pod = make_pod(c("done"), c("serving"), policy="Always")
    running = manifest(done="completed", serving="running")
    result = container_statuses(pod, "Running", running, now=NOW)
    assert states(result.containers) == [
        ("done", "waiting", "CrashLoopBackOff"),
        ("serving", "running", ""),
    ]


def test_a_failed_init_container_runs_again_and_keeps_the_pod_initialising() -> None:
    pod = make_pod(c("app"), init=[c("ok"), c("setup")], policy="OnFailure")
    ended = manifest(ok="completed", setup="failed", app="pending")
    seen = {"setup": ContainerObservation(exit_code=2)}
    result = container_statuses(pod, "Completed", ended, now=NOW, observations=seen)
    assert states(result.init_containers) == [
        ("ok", "terminated", 0),
        ("setup", "waiting", "CrashLoopBackOff"),
    ]
    assert states(result.containers) == [("app", "waiting", "PodInitializing")]
    terminated = result.init_containers[1].last_state.terminated
    assert terminated is not None and terminated.exit_code == 2


def test_every_container_is_always_reported() -> None:
    pod = make_pod(c("a"), c("b"), c("c"), init=[c("i1"), c("i2")])
    for status in DeploymentStatus:
        result = container_statuses(pod, status, None, now=NOW)
        assert [s.name for s in result.init_containers] == ["i1", "i2"]
        assert [s.name for s in result.containers] == ["a", "b", "c"]
        for s in (*result.init_containers, *result.containers):
            assert (
                sum(x is not None for x in (s.state.waiting, s.state.running, s.state.terminated))
                == 1
            )


def test_a_pod_without_containers_cannot_be_reported() -> None:
    pod = k8s.Pod.model_validate({"metadata": {"name": "p", "uid": "u"}})
    with pytest.raises(DmsgwError):
        container_statuses(pod, "Running", None, now=NOW)


# --- the interLink reply ---------------------------------------------------------------------


def test_the_pod_status_is_the_spec_example() -> None:
    """The spec's ``/status`` example is what an init container that completed and a main
    container that runs look like."""
    body = json.loads((DATA / "create_v05_example.json").read_text())
    pod = k8s.Pod.model_validate(body["pod"])
    seen = {
        "init": ContainerObservation(started_at=at(0), finished_at=at(2)),
        "main": ContainerObservation(started_at=at(3)),
    }
    statuses = container_statuses(
        pod, "Running", manifest(init="completed", main="running"), now=NOW, observations=seen
    )
    reply = pod_status(pod, "job-42", statuses)
    expected = interlink.PodStatus.model_validate(
        json.loads((DATA / "status_response_example.json").read_text())[0]
    )
    assert (reply.name, reply.uid, reply.namespace, reply.jid) == (
        expected.name,
        expected.uid,
        expected.namespace,
        expected.jid,
    )

    def essentials(s: k8s.ContainerStatus) -> tuple[object, ...]:
        return (s.name, s.image, s.ready, s.restart_count, s.state)

    for mine, theirs in (
        (reply.init_containers, expected.init_containers),
        (reply.containers, expected.containers),
    ):
        assert [essentials(s) for s in mine] == [
            essentials(s.model_copy(update={"state": _with_message(s.state)})) for s in theirs
        ]
    wire = json.loads(interlink.encode_pod_statuses([reply]))
    assert wire[0]["initContainers"][0]["state"]["terminated"]["finishedAt"] == (
        "2026-07-14T10:00:02Z"
    )
    assert "startedAt" in wire[0]["containers"][0]["state"]["running"]


def _with_message(state: k8s.ContainerState) -> k8s.ContainerState:
    """The example's terminated state carries no message; ours an empty one."""
    if state.terminated is None:
        return state
    return k8s.ContainerState(terminated=state.terminated.model_copy(update={"message": ""}))


def _times(value: Any) -> list[object]:
    """Every ``…At`` value in a JSON document."""
    if isinstance(value, dict):
        found = [v for k, v in value.items() if k.endswith("At")]
        return found + [t for v in value.values() for t in _times(v)]
    if isinstance(value, list):
        return [t for v in value for t in _times(v)]
    return []


def test_times_are_never_empty_or_null_on_the_wire() -> None:
    """Go's ``metav1.Time`` refuses ``""``, and a null would be read as no time at all."""
    pod = make_pod(c("a"), c("b"), init=[c("i")], policy="Never")
    for status in DeploymentStatus:
        for alloc in ("pending", "running", "completed", "failed", "terminated"):
            statuses = container_statuses(
                pod, status, manifest(i=alloc, a=alloc, b="running"), now=NOW
            )
            wire = json.loads(interlink.encode_pod_statuses([pod_status(pod, "j", statuses)]))
            times = _times(wire)
            assert all(isinstance(t, str) and parse_time(t) for t in times)
            assert "null" not in json.dumps(wire)
