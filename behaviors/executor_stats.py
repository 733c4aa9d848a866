"""An allocation's measured resource usage: ``types.ExecutorStats`` of the DMS.

Mirrors the newest ``types/executor.go`` in the search index: what an executor's ``Stats``
measures of one execution (CPU time in nanoseconds, memory in bytes, network and block I/O
counters) and when (Unix milliseconds). The DMS answers it per allocation to
``AllocationStatsBehavior`` (``AllocationStatsResponse{ok, error, stats}``, sent by the node
to the allocation's actor) and passes it on, keyed by allocation, in ``deployment/status``'s
``allocation_usage``, ``deployment/info``'s ``usage`` and its allocations' ``executor_stats``
when ``include_usage`` is asked: each a ``*types.ExecutorStats``, typed as this module's
:class:`ExecutorStats` in those replies (:mod:`~dmsgw.behaviors.deployment`).

An allocation that is not running answers an all-zero ``ExecutorStats`` (``timestamp`` 0):
nothing was measured, which :attr:`ExecutorStats.measured` says, so a reader shows no usage
rather than a zero that would drain or mislead.
"""

from __future__ import annotations

import dataclasses

from ..gojson import BOOL, FLOAT64, INT64, STRING, UINT64, GoStruct, Ptr, StructOf, go_field

__all__ = [
    "AllocationStatsResponse",
    "BlockIOStats",
    "CPUUsageStats",
    "ExecutorStats",
    "MemoryStats",
    "NetworkStats",
]


@dataclasses.dataclass(frozen=True, slots=True)
class CPUUsageStats(GoStruct):
    """``ExecutorStats.CPUUsage``: CPU time consumed since the execution started (ns)."""

    GO_NAME = "ExecutorStats.CPUUsage"
    total_usage: int = go_field("total_usage", UINT64, default=0)
    usage_in_kernelmode: int = go_field("usage_in_kernelmode", UINT64, default=0)
    usage_in_usermode: int = go_field("usage_in_usermode", UINT64, default=0)
    percent: float = go_field("percent", FLOAT64, default=0.0)


@dataclasses.dataclass(frozen=True, slots=True)
class MemoryStats(GoStruct):
    """``ExecutorStats.Memory``: bytes in use now, the most used, the limit."""

    GO_NAME = "ExecutorStats.Memory"
    usage: int = go_field("usage", UINT64, default=0)
    max_usage: int = go_field("max_usage", UINT64, default=0)
    limit: int = go_field("limit", UINT64, default=0)
    percent: float = go_field("percent", FLOAT64, default=0.0)


@dataclasses.dataclass(frozen=True, slots=True)
class NetworkStats(GoStruct):
    GO_NAME = "ExecutorStats.Network"
    rx_bytes: int = go_field("rx_bytes", UINT64, default=0)
    rx_packets: int = go_field("rx_packets", UINT64, default=0)
    rx_errors: int = go_field("rx_errors", UINT64, default=0)
    rx_dropped: int = go_field("rx_dropped", UINT64, default=0)
    tx_bytes: int = go_field("tx_bytes", UINT64, default=0)
    tx_packets: int = go_field("tx_packets", UINT64, default=0)
    tx_errors: int = go_field("tx_errors", UINT64, default=0)
    tx_dropped: int = go_field("tx_dropped", UINT64, default=0)


@dataclasses.dataclass(frozen=True, slots=True)
class BlockIOStats(GoStruct):
    GO_NAME = "ExecutorStats.BlockIO"
    read_bytes: int = go_field("read_bytes", UINT64, default=0)
    write_bytes: int = go_field("write_bytes", UINT64, default=0)


@dataclasses.dataclass(frozen=True, slots=True)
class ExecutorStats(GoStruct):
    """``types.ExecutorStats`` (no ``omitempty``: every field is always sent)."""

    GO_NAME = "ExecutorStats"
    cpu_usage: CPUUsageStats = go_field(
        "cpu_usage", StructOf(CPUUsageStats), default=CPUUsageStats()
    )
    memory: MemoryStats = go_field("memory", StructOf(MemoryStats), default=MemoryStats())
    network: NetworkStats = go_field("network", StructOf(NetworkStats), default=NetworkStats())
    block_io: BlockIOStats = go_field("block_io", StructOf(BlockIOStats), default=BlockIOStats())
    timestamp: int = go_field("timestamp", INT64, default=0)

    @property
    def measured(self) -> bool:
        """Whether these are a measurement: the DMS sends all zeros, ``timestamp`` 0, for an
        allocation that is not running."""
        return self.timestamp > 0


@dataclasses.dataclass(frozen=True, slots=True)
class AllocationStatsResponse(GoStruct):
    """``behaviors.AllocationStatsResponse``: an allocation's answer to its stats request."""

    GO_NAME = "AllocationStatsResponse"
    ok: bool = go_field("ok", BOOL, default=False)
    error: str = go_field("error", STRING, omitempty=True, default="")
    stats: ExecutorStats | None = go_field(
        "stats", Ptr(StructOf(ExecutorStats)), omitempty=True, default=None
    )
