"""A pod's status says all the DMS's replies tell of why a container ended, and what they do
not: no exit code for a failed allocation, no reason for a failed deployment (decision 117)."""

from __future__ import annotations

from dmsgw.interlink.pod_status import ContainerObservation, container_statuses
from tests.test_pod_status import NOW, c, make_pod, manifest


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
