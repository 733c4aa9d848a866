"""A pod as the operator port shows it: the JSON of ``GET /pods`` and the kubelet's stats
summary. Pure: the caller gives the pod's record, its ``/status`` snapshot and its containers'
usage (:mod:`.pod_usage`).

One pod's object (:func:`pod_view`), the same in the ``/pods`` list and wherever one pod is
shown: ``namespace``, ``name``, ``uid``, ``phase`` (the Kubernetes pod phase the containers'
states make), ``gatewayPhase`` (where the gateway is in the pod's life), ``ensemble``,
``node`` and ``peer`` (the ensemble node and the provider's peer ID running it, read once
from the deployment's manifest when it first runs or ends; ``""`` until then), ``restarts``
(kubectl's RESTARTS: :func:`pod_restarts`), ``redeploys`` (how often the gateway deployed
the pod again),
``endpoints`` (where its services are reached, :mod:`..pods.endpoints`; empty until its deployment
has run once with ports), ``containers`` (init containers first, each with ``init``, its
Kubernetes ``state``, ``ready``, ``restarts`` and, when the DMS measured it, ``usage``) and the
pod's ``usage`` (its containers' sums, when every running container has one).

Usage follows the kubelet's names (``cpu.usageNanoCores``, ``cpu.usageCoreNanoSeconds``,
``memory.workingSetBytes``, ``memory.usageBytes``, ``time``), and a figure the DMS did not
report is left out, never written as zero. :func:`stats_summary` is the kubelet's
``/stats/summary`` (``statsapi.Summary``: ``node`` and ``pods`` with ``podRef``) over the
running pods, which a virtual kubelet can serve for ``kubectl top``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, NamedTuple

from ...clock import NS_PER_SECOND
from ..capacity.admission import Waiting
from ..records.endpoints import ENDPOINTS_KEY, PLACEMENT_KEY
from ..records.pod_record import Phase, PodRecord
from ..records.snapshots import containers_phase
from ..wire.apimachinery import format_time
from ..wire.bodies import PodStatus
from ..wire.k8s import ContainerStatus
from .pod_usage import ContainerUsage

__all__ = ["PodFacts", "pod_phase", "pod_restarts", "pod_view", "stats_summary", "usage_json"]

_MS_PER_SECOND = 1_000


class PodFacts(NamedTuple):
    """What the gateway knows of one pod: its record, its ``/status`` snapshot (``None``
    before the first), and its containers' usage by name."""

    record: PodRecord
    snapshot: PodStatus | None
    usage: Mapping[str, ContainerUsage]
    waiting: Waiting | None = None  # its place in the admission queue, while it waits


def pod_phase(record: PodRecord, containers: str) -> str:
    """The pod phase the virtual kubelet shows: what its main containers show
    (:func:`containers_phase`), else ``Failed`` for a pod that ended before any ran and
    ``Pending`` for one on its way."""
    return containers or ("Failed" if record.phase == Phase.TERMINAL else "Pending")


def pod_restarts(inits: Sequence[ContainerStatus], mains: Sequence[ContainerStatus]) -> int:
    """kubectl's RESTARTS of a pod: while an init container has not completed, the init
    containers' restart counts; then the main containers' (decision 68)."""
    initializing = any(
        s.state.terminated is None or s.state.terminated.exit_code != 0 for s in inits
    )
    return sum(s.restart_count for s in (inits if initializing else mains))


def _time(ms: int) -> str:
    return format_time(datetime.fromtimestamp(ms / _MS_PER_SECOND, UTC))


def usage_json(usage: ContainerUsage) -> dict[str, Any]:
    """A container's usage in the kubelet's words (``usageNanoCores`` only when known)."""
    cpu: dict[str, Any] = {"time": _time(usage.measured_ms)}
    if usage.cpu_nano_cores is not None:
        cpu["usageNanoCores"] = usage.cpu_nano_cores
    cpu["usageCoreNanoSeconds"] = usage.cpu_core_ns
    memory = {
        "time": _time(usage.measured_ms),
        "workingSetBytes": usage.memory_bytes,
        "usageBytes": usage.memory_bytes,
    }
    return {"time": _time(usage.measured_ms), "cpu": cpu, "memory": memory}


def _pod_usage(
    statuses: Sequence[ContainerStatus], usage: Mapping[str, ContainerUsage]
) -> ContainerUsage | None:
    """The sum of the containers' usage, when every running container has one (a sum that
    leaves one out would understate the pod)."""
    running = [s.name for s in statuses if s.state.running is not None]
    if not running or any(name not in usage for name in running):
        return None
    parts = [usage[name] for name in running]
    rates = [u.cpu_nano_cores for u in parts]
    return ContainerUsage(
        cpu_core_ns=sum(u.cpu_core_ns for u in parts),
        memory_bytes=sum(u.memory_bytes for u in parts),
        measured_ms=max(u.measured_ms for u in parts),
        cpu_nano_cores=None if None in rates else sum(r or 0 for r in rates),
    )


def _placement(record: PodRecord) -> tuple[str, str]:
    """The ensemble node and provider peer running the pod, as the gateway read them from its
    deployment's manifest once it ran (``""``: not known yet)."""
    placement = record.observed.get(PLACEMENT_KEY) or {}
    return str(placement.get("node", "")), str(placement.get("peer", ""))


def _container(
    status: ContainerStatus, usage: ContainerUsage | None, *, init: bool
) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "name": status.name,
        "init": init,
        "state": status.state.model_dump(mode="json", by_alias=True, exclude_none=True),
        "ready": status.ready,
        "restarts": status.restart_count,
    }
    if usage is not None:
        entry["usage"] = usage_json(usage)
    return entry


def pod_view(facts: PodFacts) -> dict[str, Any]:
    """One pod's JSON object (see the module)."""
    record, snapshot, usage, _ = facts
    inits = snapshot.init_containers if snapshot else []
    mains = snapshot.containers if snapshot else []
    node, peer = _placement(record)
    view: dict[str, Any] = {
        "namespace": record.namespace,
        "name": record.name,
        "uid": record.uid,
        "phase": pod_phase(record, containers_phase(snapshot)),
        "gatewayPhase": record.phase,
        "ensemble": record.ensemble_id,
        "node": node,
        "peer": peer,
        "restarts": pod_restarts(inits, mains),
        "redeploys": record.restarts,
        ENDPOINTS_KEY: list(record.observed.get(ENDPOINTS_KEY) or ()),
        "containers": [
            *(_container(s, usage.get(s.name), init=True) for s in inits),
            *(_container(s, usage.get(s.name), init=False) for s in mains),
        ],
    }
    total = _pod_usage(mains, usage)
    if total is not None:
        view["usage"] = usage_json(total)
    if facts.waiting is not None:
        view["waiting"] = _waiting_json(facts.waiting)
    return view


def _waiting_json(waiting: Waiting) -> dict[str, Any]:
    """A pod's wait for DMS capacity: its place in line (1: next), since when, and why."""
    return {
        "position": waiting.position,
        "since": _start(waiting.since_ns),
        "reason": waiting.wait.reason,
        "message": waiting.wait.message,
    }


def _start(ns: int) -> str:
    return format_time(datetime.fromtimestamp(ns / NS_PER_SECOND, UTC))


def _summary_pod(facts: PodFacts) -> dict[str, Any]:
    """``statsapi.PodStats`` of a running pod: its measured containers, and the pod's sums."""
    record, snapshot, usage, _ = facts
    statuses = snapshot.containers if snapshot else []
    containers = []
    for status in statuses:
        running = status.state.running
        started = running.started_at if running is not None else None
        entry: dict[str, Any] = {
            "name": status.name,
            "startTime": format_time(started) if started else _start(record.running_ns),
        }
        measured = usage.get(status.name)
        if measured is not None:
            entry |= {k: v for k, v in usage_json(measured).items() if k != "time"}
        containers.append(entry)
    pod: dict[str, Any] = {
        "podRef": {"name": record.name, "namespace": record.namespace, "uid": record.uid},
        "startTime": _start(record.running_ns or record.created_ns),
        "containers": containers,
    }
    total = _pod_usage(statuses, usage)
    if total is not None:
        pod |= {k: v for k, v in usage_json(total).items() if k != "time"}
    return pod


def stats_summary(node_name: str, started_ns: int, pods: Iterable[PodFacts]) -> dict[str, Any]:
    """The kubelet's ``/stats/summary`` over the running pods. The node's own CPU and memory
    are the DMS providers', which no one DMS reports for the whole virtual node: left out."""
    running = [f for f in pods if containers_phase(f.snapshot) == "Running"]
    return {
        "node": {"nodeName": node_name, "startTime": _start(started_ns)},
        "pods": [_summary_pod(f) for f in running],
    }
