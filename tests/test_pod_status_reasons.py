"""A pod's status says all the DMS's replies tell of why a container ended, and what they do
not: no exit code for a failed allocation, no reason for a failed deployment (decision 117)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from dmsgw.behaviors.status import AllocationManifest, EnsembleManifest
from dmsgw.interlink.records.pod_status import ContainerObservation, container_statuses
from dmsgw.interlink.wire import k8s

NOW = datetime(2026, 7, 14, 10, 5, tzinfo=UTC)


def make_pod(*containers: dict[str, Any]) -> k8s.Pod:
    main = {"name": "main", "image": "busybox"}
    spec = {"containers": list(containers) or [main], "restartPolicy": "Never"}
    return k8s.Pod.model_validate({"metadata": {"name": "p", "uid": "u-1"}, "spec": spec})


def c(name: str) -> dict[str, Any]:
    return {"name": name, "image": "busybox"}


def manifest(**statuses: str) -> EnsembleManifest:
    """As the DMS keys it: ``pod.<container>``, with full allocation IDs."""
    allocations = {
        f"pod.{n}": AllocationManifest(id=f"e1_pod.{n}", status=s) for n, s in statuses.items()
    }
    return EnsembleManifest(id="e1", allocations=allocations)


def _message(result: object, index: int = 0) -> str:
    terminated = result.containers[index].state.terminated  # type: ignore[attr-defined]
    assert terminated is not None
    message: str = terminated.message
    return message


def test_a_failed_allocation_without_an_exit_code_says_the_code_shown_stands_in() -> None:
    unknown = container_statuses(make_pod(), "Running", manifest(main="failed"), now=NOW)
    assert _message(unknown) == (
        "the DMS reports the allocation failed, and no exit code (1 stands in)"
    )
    seen = {"main": ContainerObservation(exit_code=3)}  # the wrapper's marker told it
    known = container_statuses(
        make_pod(), "Running", manifest(main="failed"), now=NOW, observations=seen
    )
    assert _message(known) == ""


def test_a_failed_deployment_says_how_far_each_container_got() -> None:
    pod = make_pod(c("placed"), c("unplaced"))
    result = container_statuses(pod, "Failed", manifest(placed="pending"), now=NOW)
    no_reason = " (the DMS's replies give no reason; its own log does)"
    assert _message(result, 0) == "the DMS deployment failed before this container started" + (
        no_reason
    )
    assert _message(result, 1) == "the DMS deployment failed before this container was placed" + (
        no_reason
    )


def test_a_run_of_a_new_deployment_counts_as_a_restart_before_its_marker_is_read() -> None:
    """The DMS lost the deployment whose run was the first; the next deployment's container
    runs, its start marker not read yet: kubectl shows 1 restart, the earlier run as last."""
    from dmsgw.interlink.records.container_runs import Runs

    seen = Runs(started=1).next_ensemble().observation()
    running = container_statuses(
        make_pod(), "Running", manifest(main="running"), now=NOW, observations={"main": seen}
    )
    assert running.containers[0].restart_count == 1
    assert running.containers[0].last_state.terminated is not None
    creating = container_statuses(
        make_pod(), "Provisioning", manifest(main="pending"), now=NOW, observations={"main": seen}
    )
    assert creating.containers[0].restart_count == 0  # it has not run again yet
    marker_read = Runs(started=1).next_ensemble().read([], 0)._start(0).observation()
    after = container_statuses(
        make_pod(), "Running", manifest(main="running"), now=NOW, observations={"main": marker_read}
    )
    assert after.containers[0].restart_count == 1  # the same run, now seen: counted once
