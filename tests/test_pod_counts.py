"""Counts that agree with kubectl (decision 68): the pod phase the kubelet gives a pod's
containers (``dmsgw_pods_by_phase``, ``dmsgw pods``) and kubectl's RESTARTS."""

from __future__ import annotations

import pytest

from dmsgw.interlink.records.snapshots import containers_phase
from dmsgw.interlink.reports.pod_view import pod_restarts
from dmsgw.interlink.wire import k8s
from dmsgw.interlink.wire.bodies import PodStatus

_RUNNING = k8s.ContainerState(running=k8s.ContainerStateRunning())
_CREATING = k8s.ContainerState(waiting=k8s.ContainerStateWaiting(reason="ContainerCreating"))
_BACKOFF = k8s.ContainerState(waiting=k8s.ContainerStateWaiting(reason="CrashLoopBackOff"))


def _ended(code: int) -> k8s.ContainerState:
    return k8s.ContainerState(terminated=k8s.ContainerStateTerminated(exit_code=code))


def _status(
    state: k8s.ContainerState, *, last: int | None = None, restarts: int = 0, name: str = "c"
) -> k8s.ContainerStatus:
    return k8s.ContainerStatus(
        name=name,
        state=state,
        last_state=k8s.ContainerState() if last is None else _ended(last),
        ready=False,
        restart_count=restarts,
        image="busybox",
        image_id="",
    )


def _pod(*containers: k8s.ContainerStatus) -> PodStatus:
    return PodStatus(name="p", uid="u", namespace="ns", containers=list(containers))


@pytest.mark.parametrize(
    ("containers", "phase"),
    [
        ((_status(_BACKOFF, last=3, restarts=3),), "Running"),  # a crash loop is not Pending
        ((_status(_BACKOFF, last=0, restarts=1),), "Running"),  # a service that completed
        ((_status(_RUNNING), _status(_BACKOFF, last=1, name="d")), "Running"),
        ((_status(_RUNNING), _status(_CREATING, name="d")), ""),  # one not started: Pending
        ((_status(_CREATING),), ""),
        ((_status(_ended(0)), _status(_ended(0), name="d")), "Succeeded"),
        ((_status(_ended(0)), _status(_ended(2), name="d")), "Failed"),
        ((_status(_RUNNING), _status(_ended(0), name="d")), "Running"),
    ],
)
def test_the_phase_is_the_one_the_kubelet_gives_the_containers(
    containers: tuple[k8s.ContainerStatus, ...], phase: str
) -> None:
    assert containers_phase(_pod(*containers)) == phase
    assert containers_phase(None) == ""  # before the first snapshot


def test_restarts_are_the_init_containers_while_they_run_then_the_main_ones() -> None:
    done = _status(_ended(0), restarts=2, name="i1")
    looping = _status(_BACKOFF, last=1, restarts=5, name="i2")
    mains = [_status(_CREATING, restarts=0), _status(_CREATING, restarts=0, name="d")]
    assert pod_restarts([done, looping], mains) == 7
    ran = [_status(_RUNNING, last=1, restarts=4), _status(_RUNNING, restarts=1, name="d")]
    assert pod_restarts([done], ran) == 5
    assert pod_restarts([], ran) == 5
