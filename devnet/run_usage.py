"""What an allocation's run uses, measured from the kernel: the devnet's ``executor.Stats``.

A Docker executor reads the container's cgroup; the devnet reads what the kernel keeps of the
run's processes, never an estimate:

* **CPU time**: the run's cgroup v2 ``cpu.stat`` (``usage_usec``, ``user_usec``,
  ``system_usec``) where the run has a group in a v2 ``cpu`` hierarchy; else the sum over
  the run's process tree of ``/proc/<pid>/stat``'s ``utime + stime`` and ``cutime + cstime``
  (the children it has reaped), in clock ticks.
* **memory**: the run's memory group (``memory.current`` on v2, ``memory.usage_in_bytes``
  on v1, their peaks ``memory.peak`` / ``memory.max_usage_in_bytes``); else the resident
  memory of its process tree (its peak unknown: 0, as a Go zero value).
* **CPU percent**: as ``docker stats`` shows it (100 is one core), over the time since the
  previous measurement of the same run (its start, the first time).

Network and block I/O are not measured by the devnet (its allocations share the host's
network namespace): they stay 0, and the gateway shows neither.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from pathlib import Path

from ..behaviors.executor_stats import CPUUsageStats, ExecutorStats, MemoryStats
from ..clock import NS_PER_SECOND, Clock
from .cgroups import RunGroup
from .executor import resident_bytes

__all__ = ["CpuTimes", "RunMeter"]

_TICK_NS = NS_PER_SECOND // os.sysconf("SC_CLK_TCK")
_NS_PER_US = 1_000
_NS_PER_MS = 1_000_000


@dataclasses.dataclass(frozen=True)
class CpuTimes:
    """CPU time a run has consumed (ns): in user mode, in kernel mode."""

    user_ns: int
    system_ns: int

    @property
    def total_ns(self) -> int:
        return self.user_ns + self.system_ns


def _process_tree(pid: int) -> list[int]:
    """``pid`` and its living descendants (those ``/proc/…/children`` lists)."""
    return list(resident_bytes(pid))


def _proc_cpu(pid: int) -> CpuTimes:
    """The process tree's CPU time from ``/proc/<pid>/stat`` (fields 14-17, after the
    command name, which may hold spaces and parentheses: read from its last ``)``)."""
    user = system = 0
    for member in _process_tree(pid):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = Path(f"/proc/{member}/stat").read_text().rsplit(")", 1)[1].split()
            utime, stime, cutime, cstime = (int(f) for f in fields[11:15])
            user += (utime + cutime) * _TICK_NS
            system += (stime + cstime) * _TICK_NS
    return CpuTimes(user, system)


def _cgroup_cpu(directory: Path) -> CpuTimes | None:
    """``cpu.stat`` of a v2 group (``None``: unreadable)."""
    try:
        lines = (directory / "cpu.stat").read_text().splitlines()
    except OSError:
        return None
    values = dict(line.split(" ", 1) for line in lines if " " in line)
    try:
        return CpuTimes(
            int(values["user_usec"]) * _NS_PER_US, int(values["system_usec"]) * _NS_PER_US
        )
    except (KeyError, ValueError):
        return None


def _read_int(path: Path) -> int | None:
    with contextlib.suppress(OSError, ValueError):
        return int(path.read_text().split()[0])
    return None


def _cgroup_memory(group: RunGroup) -> tuple[int, int] | None:
    """Bytes in use and their peak, from the run's memory group (``None``: none)."""
    if group.memory is None:
        return None
    current, peak = (
        ("memory.current", "memory.peak")
        if group.v2
        else ("memory.usage_in_bytes", "memory.max_usage_in_bytes")
    )
    usage = _read_int(group.memory / current)
    if usage is None:
        return None
    return usage, _read_int(group.memory / peak) or 0


class RunMeter:
    """Measures one run of an allocation (its main process ``pid``, its groups), remembering
    the previous CPU reading for the percentage."""

    def __init__(
        self, pid: int, group: RunGroup | None, memory_limit: int, clock: Clock, started_ns: int
    ) -> None:
        self._pid = pid
        self._group = group
        self._limit = memory_limit
        self._clock = clock
        self._last = (started_ns, 0)

    def cpu(self) -> CpuTimes:
        """The run's CPU time: its cgroup's count where there is one, else its processes'."""
        if self._group is not None and self._group.cpu is not None:
            counted = _cgroup_cpu(self._group.cpu)
            if counted is not None:
                return counted
        return _proc_cpu(self._pid)

    def memory(self) -> tuple[int, int]:
        """Bytes the run uses now and their peak (0: unknown)."""
        if self._group is not None:
            counted = _cgroup_memory(self._group)
            if counted is not None:
                return counted
        return sum(resident_bytes(self._pid).values()), 0

    def measure(self) -> ExecutorStats:
        """One ``ExecutorStats`` of the run, as of now (blocking: reads ``/proc`` or cgroup
        files)."""
        now = self._clock()
        cpu = self.cpu()
        since, before = self._last
        self._last = (now, cpu.total_ns)
        elapsed = now - since
        percent = 100.0 * (cpu.total_ns - before) / elapsed if elapsed > 0 else 0.0
        usage, peak = self.memory()
        return ExecutorStats(
            cpu_usage=CPUUsageStats(
                total_usage=cpu.total_ns,
                usage_in_kernelmode=cpu.system_ns,
                usage_in_usermode=cpu.user_ns,
                percent=max(percent, 0.0),
            ),
            memory=MemoryStats(
                usage=usage,
                max_usage=peak,
                limit=self._limit,
                percent=100.0 * usage / self._limit if self._limit else 0.0,
            ),
            timestamp=max(now // _NS_PER_MS, 1),
        )
