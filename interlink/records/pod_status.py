"""A DMS deployment's state as the Kubernetes container statuses interLink reports for a pod.

Pure: the caller (the PodActor) gives the pod, what the DMS said (the deployment status, its
manifest, the ``allocation_info`` of ``deployment/status``) and what it observed itself over
time (:class:`ContainerObservation`: start and finish times, exit codes, restarts), plus the
current time; the result is a pair of ``ContainerStatus`` lists. The rules are those the
virtual kubelet needs to turn them into the right pod phase (``interlink-plugin.md`` §3.2):

* every container of the pod is reported, init containers included; never an empty list;
* init containers complete in order: after one that has not completed, the rest and every
  main container are ``waiting`` (``PodInitializing``);
* an init container runs while the DMS still provisions the deployment (the provision
  scripts of the main containers wait for it): what its wrapper's markers showed of its run
  (:class:`ContainerObservation` ``running`` / ``ended``) is its state until the DMS lists it;
* a failed init container that will not be retried (``restartPolicy: Never``, or the
  caller's ``final``) ends the pod: the containers after it never ran and are reported
  ``waiting`` (``PodInitializing``, with a message naming it), as the kubelet does; once the
  pod has ended (the caller's ``final``, or the deployment ended) they are reported
  ``terminated`` too, or the virtual kubelet would keep the pod Pending forever;
* a container that ended and that the pod's ``restartPolicy`` runs again — under ``Always``
  any main container, under ``OnFailure`` one that failed, and a failed init container under
  either — is ``waiting`` (``CrashLoopBackOff``) with the run that ended as its
  ``lastState``, as the kubelet reports a container between two runs, until the caller says
  it is ``final``. The virtual kubelet ignores ``restartPolicy``: a pod whose containers are
  all reported ``terminated`` it ends (``Succeeded`` or ``Failed``) and never asks about again,
  so the restart would never be seen;
* a deployment that failed or completed leaves no container running;
* ``ready`` and ``started`` come from the container's probes as its wrapper ran them
  (:mod:`dmsgw.interlink.records.probe_state`), or, until it has reported any, from the DMS health
  check of the allocation: a container with a readiness (startup) probe is ready (started)
  once that probe succeeds, one without such a probe as soon as it runs (``ready`` only once
  it has started).

Terminated reasons are ``Completed``, ``Error`` or ``OOMKilled`` (the virtual kubelet rewrites
them to ``Completed`` / ``Error: <code>`` anyway; they matter to our own logs and snapshot).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import NamedTuple, Protocol, TypeVar

from ...behaviors.status import (
    AllocationManifest,
    AllocationStatus,
    DeploymentStatus,
    EnsembleManifest,
)
from ...errors import DmsgwError
from ..translate import allocation_key
from ..wire import bodies as interlink
from ..wire import k8s

__all__ = [
    "CRASH_LOOP",
    "FAILED_EXIT_CODE",
    "NOT_RUN_EXIT_CODE",
    "ContainerObservation",
    "LiveAllocation",
    "PodContainerStatuses",
    "allocation_of",
    "find_allocation_key",
    "terminated_state",
    "container_statuses",
    "pod_status",
]

NOT_RUN_EXIT_CODE = 1
"""Exit code reported for a container that never ran because the pod failed before it."""
FAILED_EXIT_CODE = 1
"""Exit code of a failed allocation whose real code is unknown (the DMS does not report it)."""
CRASH_LOOP = "CrashLoopBackOff"
"""The waiting reason of a container that ended and runs again (its last state says how)."""
_NO_EXIT_CODE = (
    f"the DMS reports the allocation failed, and no exit code ({FAILED_EXIT_CODE} stands in)"
)
_BEFORE = {
    "": " before this container was placed",
    AllocationStatus.PENDING: " before this container started",
}
_NO_REASON = " (the DMS's replies give no reason; its own log does)"
"""What a failed deployment's status says of a container, from its allocation's last status:
all the DMS's replies tell of why (decision 117)."""
_STOPPED_EXIT_CODE = 143
"""Exit code of an allocation the DMS stopped, when its real code is unknown (SIGTERM)."""

_WAITING = frozenset(
    {AllocationStatus.PENDING, AllocationStatus.RESTARTING, AllocationStatus.STANDBY}
)
_STOPPED = frozenset({AllocationStatus.STOPPED, AllocationStatus.TERMINATED})
_ENDED = frozenset({DeploymentStatus.FAILED, DeploymentStatus.COMPLETED})
_UNLISTED = frozenset({"", AllocationStatus.PENDING})
"""What the DMS says of an allocation it has not started, as far as it knows."""


class ContainerObservation(NamedTuple):
    """What the caller saw of one container across polls (the DMS keeps none of it).

    ``exit_code`` is the code of the run that ended, when the caller knows it (the DMS's
    status reply has none; without it a failed allocation reports 1); ``oom_killed`` marks it
    as killed over its memory limit; ``last_state`` is the state of the previous run, kept by
    the caller across restarts. ``running`` and ``ended`` say that the caller saw the current
    run start, or end, before the DMS lists the allocation (an init container runs while the
    DMS is still provisioning the deployment: its wrapper's markers tell). A named tuple, as
    :class:`~dmsgw.interlink.records.container_runs.Runs` is: each snapshot makes one per container.
    """

    started_at: datetime | None = None
    finished_at: datetime | None = None
    exit_code: int | None = None
    oom_killed: bool = False
    restart_count: int = 0
    last_state: k8s.ContainerState | None = None
    started: bool | None = None
    """The startup probe succeeded, as the wrapper ran it (``None``: not reported)."""
    ready: bool | None = None
    """The readiness probe's verdict, as the wrapper ran it (``None``: not reported)."""
    message: str = ""
    """Why the run ended, when the caller knows (a probe killed it)."""
    running: bool = False
    ended: bool = False
    unseen_start: bool = False
    """No run of the current deployment has shown its start marker, and earlier deployments
    ran the container: a run the DMS shows running is one more than ``restart_count`` says."""


class LiveAllocation(Protocol):
    """What a status reads of an allocation's live state: an :class:`AllocationInfo` of
    ``deployment/status``, or the same three fields read from a stored reply."""

    @property
    def allocation_id(self) -> str: ...

    @property
    def status(self) -> str: ...

    @property
    def health(self) -> str: ...


Live = TypeVar("Live", bound=LiveAllocation)


class PodContainerStatuses(NamedTuple):
    init_containers: list[k8s.ContainerStatus]
    containers: list[k8s.ContainerStatus]


class _State(NamedTuple):
    """A container's state before the pod-level rules, with what ``ready``/``started`` need."""

    state: k8s.ContainerState
    healthy: bool = False
    allocation_id: str = ""

    @property
    def succeeded(self) -> bool:
        return self.state.terminated is not None and self.state.terminated.exit_code == 0

    @property
    def failed(self) -> bool:
        return self.state.terminated is not None and self.state.terminated.exit_code != 0


def _waiting(reason: str, message: str = "") -> k8s.ContainerState:
    return k8s.ContainerState(waiting=k8s.ContainerStateWaiting(reason=reason, message=message))


def terminated_state(
    code: int,
    *,
    oom_killed: bool = False,
    message: str = "",
    started_at: datetime | None = None,
    finished_at: datetime | None = None,
) -> k8s.ContainerState:
    """A run that ended with ``code``: ``Completed``, ``OOMKilled`` or ``Error``."""
    reason = "Completed" if code == 0 else ("OOMKilled" if oom_killed else "Error")
    return k8s.ContainerState(
        terminated=k8s.ContainerStateTerminated(
            exit_code=code,
            reason=reason,
            message=message,
            started_at=started_at,
            finished_at=finished_at,
        )
    )


def _terminated(
    code: int, seen: ContainerObservation, now: datetime, message: str = ""
) -> k8s.ContainerState:
    return terminated_state(
        code,
        oom_killed=seen.oom_killed,
        message=seen.message or message,  # a probe's kill says more than how it ended
        started_at=seen.started_at,
        finished_at=seen.finished_at or now,
    )


def find_allocation_key(entries: Mapping[str, object], name: str) -> str | None:
    """The key of container ``name``'s allocation: ``pod.<name>`` in a manifest, a full
    allocation ID (``<ensemble>_pod.<name>``) in ``allocation_info``."""
    for key in (allocation_key(name), name):
        if key in entries:
            return key
    return next((key for key in sorted(entries) if key.rsplit(".", 1)[-1] == name), None)


def allocation_of(
    name: str,
    allocations: Mapping[str, AllocationManifest],
    info: Mapping[str, Live],
) -> tuple[str, Live | None, str]:
    """Container ``name``'s allocation in a manifest's ``allocations`` and in ``deployment/
    status``'s ``allocation_info``: its status (``""`` if unknown), live info and ID."""
    key = find_allocation_key(allocations, name)
    entry = allocations[key] if key else None
    info_key = entry.id if entry and entry.id in info else find_allocation_key(info, name)
    live = info[info_key] if info_key else None
    status = (live.status if live else "") or (entry.status if entry else "")
    ident = entry.id if entry and entry.id else (live.allocation_id if live else "")
    return status, live, ident


class _Deployment:
    """What the DMS reported, looked up by container name."""

    def __init__(
        self,
        status: DeploymentStatus,
        manifest: EnsembleManifest | None,
        info: Mapping[str, LiveAllocation],
        error: str,
    ) -> None:
        self.status = status
        self.allocations: Mapping[str, AllocationManifest] = (
            manifest.allocations or {} if manifest else {}
        )
        self.info = info
        self.error = error

    def state(self, name: str, seen: ContainerObservation, now: datetime) -> _State:
        """The container's own state, from its allocation and the deployment as a whole."""
        status, info, ident = allocation_of(name, self.allocations, self.info)
        healthy = info is not None and info.health == "healthy"
        if status == AllocationStatus.RUNNING and self.status not in _ENDED:
            running = k8s.ContainerStateRunning(started_at=seen.started_at or now)
            return _State(k8s.ContainerState(running=running), healthy, ident)
        if status == AllocationStatus.COMPLETED:
            return _State(_terminated(seen.exit_code or 0, seen, now), allocation_id=ident)
        if status == AllocationStatus.FAILED:
            code = seen.exit_code or FAILED_EXIT_CODE
            unknown = "" if seen.exit_code else _NO_EXIT_CODE
            return _State(_terminated(code, seen, now, unknown), allocation_id=ident)
        if status in _STOPPED:
            code = seen.exit_code if seen.exit_code is not None else _STOPPED_EXIT_CODE
            return _State(_terminated(code, seen, now, "stopped by the DMS"), allocation_id=ident)
        if self.status == DeploymentStatus.FAILED:
            code = seen.exit_code or FAILED_EXIT_CODE
            message = (
                self.error or f"the DMS deployment failed{_BEFORE.get(status, '')}{_NO_REASON}"
            )
            return _State(_terminated(code, seen, now, message), allocation_id=ident)
        if self.status == DeploymentStatus.COMPLETED:
            code = seen.exit_code or 0
            return _State(
                _terminated(code, seen, now, "the DMS deployment ended"), allocation_id=ident
            )
        if status in _WAITING and (seen.restart_count or seen.ended):
            return _State(_waiting(CRASH_LOOP, "restarting"), allocation_id=ident)
        if status in _UNLISTED and seen.running:
            running = k8s.ContainerStateRunning(started_at=seen.started_at or now)
            return _State(k8s.ContainerState(running=running), healthy, ident)
        if status in _UNLISTED and seen.ended and seen.exit_code is not None:
            return _State(_terminated(seen.exit_code, seen, now), allocation_id=ident)
        return _State(_waiting("ContainerCreating"), allocation_id=ident)


def _status(
    container: k8s.Container, state: _State, seen: ContainerObservation
) -> k8s.ContainerStatus:
    running = state.state.running is not None
    started = running and (container.startup_probe is None or _passes(seen.started, state))
    ready = started and (container.readiness_probe is None or _passes(seen.ready, state))
    return k8s.ContainerStatus(
        name=container.name,
        state=state.state,
        last_state=seen.last_state or k8s.ContainerState(),
        ready=ready,
        restart_count=seen.restart_count + (1 if running and seen.unseen_start else 0),
        image=container.image,
        image_id="",
        container_id=f"dms://{state.allocation_id}" if state.allocation_id else "",
        started=started,
    )


def _passes(probed: bool | None, state: _State) -> bool:
    """A probe's verdict: the wrapper's, else (it has reported nothing) the DMS health
    check's."""
    return state.healthy if probed is None else probed


def container_statuses(
    pod: k8s.Pod,
    status: DeploymentStatus | str | int,
    manifest: EnsembleManifest | None = None,
    *,
    now: datetime,
    allocation_info: Mapping[str, LiveAllocation] | None = None,
    observations: Mapping[str, ContainerObservation] | None = None,
    error: str = "",
    final: bool = False,
) -> PodContainerStatuses:
    """The init and main container statuses of ``pod`` deployed as an ensemble in ``status``.

    ``observations`` are keyed by container name; ``error`` is the DMS's reason for a failed
    deployment; ``final`` says the caller will not restart anything any more (the pod has
    ended for good), so that every container that ended is reported ``terminated`` and a
    failed init container ends the pod under any restart policy. ``now`` stands in for times
    the caller did not observe.
    """
    if not pod.spec.containers:
        raise DmsgwError(f"pod {pod.metadata.name!r} has no containers to report")
    parsed = status if isinstance(status, DeploymentStatus) else DeploymentStatus.parse(status)
    deployment = _Deployment(parsed, manifest, allocation_info or {}, error)
    seen = observations or {}
    policy = pod.spec.restart_policy
    ends_pod = final or policy == "Never"
    over = final or parsed in _ENDED  # the containers that did not run never will
    blocked = ""  # the init container that has not completed yet
    failed = ""  # the init container whose failure ended the pod
    init: list[k8s.ContainerStatus] = []
    for container in pod.spec.init_containers:
        own = seen.get(container.name, ContainerObservation())
        state = deployment.state(container.name, own, now)
        own = _last_run(state, own, now)
        if not ends_pod and state.failed:
            state, own = _restarting(state, own)
        if failed:
            state = _not_run(failed, over, error)
        elif blocked and state.state.terminated is None:
            state = _State(_waiting("PodInitializing"), allocation_id=state.allocation_id)
        if not failed and state.failed and ends_pod:
            failed = container.name
        if not blocked and not state.succeeded:
            blocked = container.name
        init.append(_status(container, state, own))
    main: list[k8s.ContainerStatus] = []
    for container in pod.spec.containers:
        own = seen.get(container.name, ContainerObservation())
        state = deployment.state(container.name, own, now)
        own = _last_run(state, own, now)
        if not ends_pod and (state.failed or (policy == "Always" and state.succeeded)):
            state, own = _restarting(state, own)
        if failed:
            state = _not_run(failed, over, error)
        elif blocked:
            state = _State(_waiting("PodInitializing"), allocation_id=state.allocation_id)
        main.append(_status(container, state, own))
    return PodContainerStatuses(init, main)


def _last_run(state: _State, seen: ContainerObservation, now: datetime) -> ContainerObservation:
    """``seen`` with the run that ended as its ``lastState`` while the DMS restarts it in
    place (``waiting``), as the kubelet reports a container between two runs; one that runs
    again, or is shown ``terminated``, keeps the run before it there."""
    if state.state.waiting is None or not seen.ended:
        return seen
    code = FAILED_EXIT_CODE if seen.exit_code is None else seen.exit_code
    return seen._replace(last_state=_terminated(code, seen, now))


def _restarting(ended: _State, seen: ContainerObservation) -> tuple[_State, ContainerObservation]:
    """A container that ended and that its pod's restart policy runs again: waiting, with the
    run that ended as its last state."""
    waiting = _waiting(CRASH_LOOP, "back-off: it runs again after a delay")
    return (
        _State(waiting, allocation_id=ended.allocation_id),
        seen._replace(last_state=ended.state),
    )


def _not_run(failed: str, over: bool, error: str) -> _State:
    """A container that the failure of init container ``failed`` kept from running (its
    provision script waits for the init containers and fails with them): ``waiting``
    (``PodInitializing``), as the kubelet reports it, while the pod lives; once it is
    ``over``, ``terminated`` with no times, because the virtual kubelet fails a pod only when
    all its containers are reported terminated. ``error``: the DMS's reason, if it gave one."""
    message = f"not run: init container {failed!r} failed" + (f" ({error})" if error else "")
    if not over:
        return _State(_waiting("PodInitializing", message))
    return _State(terminated_state(NOT_RUN_EXIT_CODE, message=message))


def waiting_statuses(
    pod: k8s.Pod, reason: str, message: str, observations: Mapping[str, ContainerObservation]
) -> PodContainerStatuses:
    """Every container of ``pod`` waiting with ``reason`` and ``message``, with its runs so far
    (``observations`` by name): a pod waiting for DMS capacity
    (:mod:`~dmsgw.interlink.capacity.admission`), which no DMS holds now."""
    state = _State(_waiting(reason, message))

    def statuses(containers: list[k8s.Container]) -> list[k8s.ContainerStatus]:
        return [
            _status(c, state, observations.get(c.name, ContainerObservation())) for c in containers
        ]

    return PodContainerStatuses(statuses(pod.spec.init_containers), statuses(pod.spec.containers))


def pod_status(pod: k8s.Pod, job_id: str, statuses: PodContainerStatuses) -> interlink.PodStatus:
    """The ``/status`` entry for ``pod``: its identity echoed exactly, and ``job_id`` (our
    ``PodJID``)."""
    meta = pod.metadata
    return interlink.PodStatus(
        name=meta.name,
        uid=meta.uid,
        namespace=meta.namespace,
        jid=job_id,
        containers=statuses.containers,
        init_containers=statuses.init_containers,
    )
