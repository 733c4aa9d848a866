"""Each running pod's CPU and memory as its DMS measures them, asked for when someone looks.

Nothing is polled in the background: :meth:`UsageBook.refresh` runs when ``/metrics``,
``/stats/summary`` or ``/pods`` is read (so 10,000 pods cost nothing between reads), asks the
DMS ``deployment/status`` with ``include_usage`` for each running pod's ensemble (a bounded
number at a time), and keeps the answer until the next refresh. Reads that come together
share one refresh, and a refresh within ``min_interval_s`` of the last reuses its answer.

What the DMS cannot report is absent, never zero (a zero would drain or mislead): a DMS that
ignores ``include_usage`` (older than the field), answers an error (an executor without
stats makes the whole status an error), or sends an allocation's all-zero stats (it does not
run) leaves that pod's containers without usage. The CPU rate (``usageNanoCores``) needs two
measurements of the same run at least :data:`RATE_WINDOW_MS` apart: the CPU time between them
over the DMS's own timestamps; absent until then, and after the CPU time went back (the
process restarted).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Iterable, Mapping, Sequence

from ...behaviors.catalog import DEPLOYMENT_STATUS
from ...behaviors.deployment import DeploymentStatusRequest
from ...behaviors.executor_stats import ExecutorStats
from ...behaviors.node import Invoke
from ...clock import NS_PER_SECOND, Clock, system_clock
from ...errors import DmsgwError
from ..records.pod_status import find_allocation_key

__all__ = ["ContainerUsage", "PodToMeasure", "UsageBook"]

log = logging.getLogger("dmsgw.usage")

MIN_INTERVAL_S = 5.0
"""How long one refresh's answer serves the reads that follow it."""
CONCURRENCY = 16
"""DMS calls in flight at once during a refresh."""
CALL_TIMEOUT_S = 10.0
RATE_WINDOW_MS = 1_000
"""The shortest time a CPU rate is measured over (the kernel counts CPU time in ticks)."""
_NS_PER_MS = 1_000_000


@dataclasses.dataclass(frozen=True, slots=True)
class ContainerUsage:
    """One container's usage as its DMS measured it at ``measured_ms`` (Unix ms).

    ``cpu_core_ns`` is the CPU time its process used since it started (the kubelet's
    ``usageCoreNanoSeconds``); ``cpu_nano_cores`` the rate over at least
    :data:`RATE_WINDOW_MS` up to a recent measurement (``usageNanoCores``; ``None`` until
    there is one); ``memory_bytes`` the memory it uses (the DMS reports one figure: it stands
    for both the working set and the usage). ``rate_from`` is the measurement (CPU time,
    Unix ms) the next rate is counted from."""

    cpu_core_ns: int
    memory_bytes: int
    measured_ms: int
    cpu_nano_cores: int | None = None
    rate_from: tuple[int, int] | None = None

    @classmethod
    def of(cls, stats: ExecutorStats, before: ContainerUsage | None) -> ContainerUsage:
        """``stats`` read as usage, its CPU rate counted from ``before``'s base measurement
        once the window has passed (a shorter window measures the kernel's tick, not the
        process); a CPU time or a clock that went back starts over (the run restarted)."""
        cpu, now = stats.cpu_usage.total_usage, stats.timestamp
        base = before.rate_from if before is not None else None
        if before is None or base is None or cpu < base[0] or now <= base[1]:
            return cls(cpu, stats.memory.usage, now, None, (cpu, now))
        if now - base[1] < RATE_WINDOW_MS:
            return cls(cpu, stats.memory.usage, now, before.cpu_nano_cores, base)
        rate = (cpu - base[0]) * NS_PER_SECOND // ((now - base[1]) * _NS_PER_MS)
        return cls(cpu, stats.memory.usage, now, rate, (cpu, now))


@dataclasses.dataclass(frozen=True, slots=True)
class PodToMeasure:
    """A running pod: its UID, its current ensemble and its containers' names."""

    uid: str
    ensemble_id: str
    containers: Sequence[str]


class UsageBook:
    """The last usage measured of each running pod's containers (see the module)."""

    def __init__(
        self,
        invoke: Invoke,
        *,
        clock: Clock = system_clock,
        min_interval_s: float = MIN_INTERVAL_S,
        concurrency: int = CONCURRENCY,
    ) -> None:
        self._invoke = invoke
        self._clock = clock
        self.min_interval_s = min_interval_s
        self._room = asyncio.Semaphore(concurrency)
        self._usage: dict[str, dict[str, ContainerUsage]] = {}
        self._refreshed_ns: int | None = None
        self._running: asyncio.Future[None] | None = None

    def of(self, uid: str) -> Mapping[str, ContainerUsage]:
        """The pod's containers that have usage, by name (empty: none known)."""
        return self._usage.get(uid, {})

    async def refresh(self, pods: Iterable[PodToMeasure]) -> None:
        """Measure ``pods`` (the running ones; every other pod's usage is dropped), unless a
        refresh is under way (its result is awaited) or one ended within ``min_interval_s``."""
        if self._running is not None:
            await asyncio.shield(self._running)
            return
        now = self._clock()
        if (
            self._refreshed_ns is not None
            and now - self._refreshed_ns < self.min_interval_s * NS_PER_SECOND
        ):
            return
        self._running = asyncio.ensure_future(self._measure(list(pods)))
        try:
            await asyncio.shield(self._running)
        finally:
            self._running = None
            self._refreshed_ns = self._clock()

    async def _measure(self, pods: list[PodToMeasure]) -> None:
        measured = await asyncio.gather(*(self._measure_pod(p) for p in pods))
        self._usage = {p.uid: usage for p, usage in zip(pods, measured, strict=True) if usage}

    async def _measure_pod(self, pod: PodToMeasure) -> dict[str, ContainerUsage]:
        """The pod's containers' usage (only those the DMS measured)."""
        try:
            async with self._room:
                reply = await self._invoke(
                    DEPLOYMENT_STATUS,
                    DeploymentStatusRequest(id=pod.ensemble_id, include_usage=True),
                    timeout_s=CALL_TIMEOUT_S,
                )
        except DmsgwError as exc:
            log.debug("pod %s: no usage from the DMS: %s", pod.uid, exc)
            return {}
        stats = {k: v for k, v in (reply.allocation_usage or {}).items() if v is not None}
        before = self._usage.get(pod.uid, {})
        usage = {}
        for name in pod.containers:
            key = find_allocation_key(stats, name)
            if key is not None and stats[key].measured:
                usage[name] = ContainerUsage.of(stats[key], before.get(name))
        return usage
