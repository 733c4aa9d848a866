"""The gateway's pods as the operator port reports them: ``GET /pods``, ``/stats/summary``
and the per-pod series of ``/metrics``, all read from one :class:`PodReport`.

Each read first asks :meth:`PodReport.refresh` for fresh usage (:class:`~.pod_usage.UsageBook`:
the DMS is asked then, not between reads); the JSON is :mod:`.pod_view`'s, and the series are
built at scrape time by :meth:`PodReport.collect` (a Prometheus collector), so 10,000 pods
hold no series objects between scrapes. Series of usage the DMS did not report are absent.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from ...clock import NS_PER_SECOND, Clock, system_clock
from ...keys.ucan.token import format_second
from ..capacity.admission import Waiting
from ..records.pod_record import Phase, PodRecord
from ..records.snapshots import Shown
from .pod_usage import PodToMeasure, UsageBook
from .pod_view import PodFacts, pod_phase, pod_view, stats_summary

__all__ = ["POD_PHASES", "PodReport", "PodSource"]

log = logging.getLogger("dmsgw.usage")

PodSource = Callable[[], list[tuple[PodRecord, Shown | None]]]
"""Every pod the gateway tracks, with its ``/status`` entry (``Gateway.pods``). An entry is
read back as its model only for the pods a read shows in full: a scrape reads none."""
POD_PHASES = ("Pending", "Running", "Succeeded", "Failed")
_LABELS = ("namespace", "pod", "container")


class PodReport:
    """The pods of ``pods`` with the usage ``usage`` measures; ``node_name`` names the
    virtual node in the stats summary. ``stale_since`` tells since when the DMS has not
    answered (``None`` while it does): each pod's object then carries ``staleSince``, as its
    status is the last the DMS confirmed (decision 85)."""

    def __init__(
        self,
        pods: PodSource,
        usage: UsageBook,
        *,
        node_name: str = "dmsgw",
        clock: Clock = system_clock,
        stale_since: Callable[[], int | None] = lambda: None,
        waiting: Callable[[], Mapping[str, Waiting]] = dict,
    ) -> None:
        self._pods = pods
        self._waiting = waiting  # the pods waiting for DMS capacity, by UID
        self.usage = usage
        self._node_name = node_name
        self._started_ns = clock()
        self._stale_since = stale_since

    async def refresh(self) -> None:
        """Fresh usage for the running pods (see :class:`~.pod_usage.UsageBook`)."""
        running = [
            PodToMeasure(r.uid, r.ensemble_id, list(s.containers))
            for r, s in self._pods()
            if s is not None and r.ensemble_id and r.phase == Phase.RUNNING
        ]
        await self.usage.refresh(running)

    def facts(self, *, running: bool = False) -> list[PodFacts]:
        """Every pod (or only those whose containers run) with its usage, by namespace and
        name."""
        pods = sorted(self._pods(), key=_by_name)
        waiting = self._waiting()
        return [
            PodFacts(r, s.status() if s else None, self.usage.of(r.uid), waiting.get(r.uid))
            for r, s in pods
            if not running or (s is not None and s.phase == "Running")
        ]

    def views(self) -> list[dict[str, Any]]:
        """``GET /pods``: one :func:`~.pod_view.pod_view` object per pod."""
        return [self._marked(pod_view(f)) for f in self.facts()]

    def view(self, namespace: str, name: str) -> dict[str, Any] | None:
        """``GET /pods/{namespace}/{name}``: the pod's object (the newest, if a pod of that
        name was recreated), ``None`` if the gateway has no such pod."""
        wanted = (namespace, name)
        named = [(r, s) for r, s in self._pods() if (r.namespace, r.name) == wanted]
        if not named:
            return None
        record, shown = max(named, key=lambda p: p[0].created_ns)
        snapshot = shown.status() if shown else None
        waiting = self._waiting().get(record.uid)
        return self._marked(
            pod_view(PodFacts(record, snapshot, self.usage.of(record.uid), waiting))
        )

    def _marked(self, view: dict[str, Any]) -> dict[str, Any]:
        """``view`` marked stale while the DMS is silent."""
        since = self._stale_since()
        if since is not None:
            view["staleSince"] = format_second(since)
        return view

    def summary(self) -> dict[str, Any]:
        """``GET /stats/summary``: the kubelet's summary of the running pods."""
        return stats_summary(self._node_name, self._started_ns, self.facts(running=True))

    # --- Prometheus -------------------------------------------------------------------------

    def collect(self) -> Iterator[Metric]:
        """The per-pod series, built now from the last refresh."""
        phases = dict.fromkeys(POD_PHASES, 0)
        restarts = CounterMetricFamily(
            "dmsgw_pod_restarts",
            "Times the gateway redeployed the pod (its restartPolicy).",
            labels=("namespace", "pod"),
        )
        cpu_seconds = CounterMetricFamily(
            "dmsgw_container_cpu_usage_seconds",
            "CPU time the container's process used since it started, as its DMS measured it.",
            labels=_LABELS,
        )
        cpu_cores = GaugeMetricFamily(
            "dmsgw_container_cpu_usage_cores",
            "Cores the container used between its DMS's last two measurements.",
            labels=_LABELS,
        )
        memory = GaugeMetricFamily(
            "dmsgw_container_memory_working_set_bytes",
            "Memory the container uses, as its DMS measured it.",
            labels=_LABELS,
        )
        for record, shown in sorted(self._pods(), key=_by_name):
            phases[pod_phase(record, shown.phase if shown else "")] += 1
            usage = self.usage.of(record.uid)
            restarts.add_metric((record.namespace, record.name), record.restarts)
            for container, measured in usage.items():
                labels = (record.namespace, record.name, container)
                cpu_seconds.add_metric(labels, measured.cpu_core_ns / NS_PER_SECOND)
                memory.add_metric(labels, measured.memory_bytes)
                if measured.cpu_nano_cores is not None:
                    cpu_cores.add_metric(labels, measured.cpu_nano_cores / NS_PER_SECOND)
        by_phase = GaugeMetricFamily(
            "dmsgw_pods_by_phase", "Pods the gateway tracks, by pod phase.", labels=("phase",)
        )
        for phase, count in phases.items():
            by_phase.add_metric((phase,), count)
        yield from (by_phase, restarts, cpu_seconds, cpu_cores, memory)


def _by_name(pod: tuple[PodRecord, Shown | None]) -> tuple[str, str, str]:
    record = pod[0]
    return record.namespace, record.name, record.uid
