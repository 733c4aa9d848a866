"""The devnet measures a run's usage from the kernel: CPU time from ``/proc/<pid>/stat`` (or
a v2 group's ``cpu.stat``), memory from the run's memory group or its resident pages, never an
estimate.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from dmsgw.clock import NS_PER_SECOND, FixedClock
from dmsgw.devnet.cgroups import RunGroup
from dmsgw.devnet.run_usage import RunMeter

HELD = 16 * 1024 * 1024
BURNER = (
    "import sys\n"
    f"held = bytearray({HELD})\n"
    "for i in range(0, len(held), 4096): held[i] = 1\n"
    "sys.stdout.write('ready\\n'); sys.stdout.flush()\n"
    "while True: pass\n"
)


@pytest.fixture
def burner() -> Iterator[subprocess.Popen[bytes]]:
    """A process that holds 16 MiB it has touched and burns a core until killed."""
    proc = subprocess.Popen([sys.executable, "-c", BURNER], stdout=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


def test_a_run_without_groups_is_measured_from_proc(burner: subprocess.Popen[bytes]) -> None:
    clock = FixedClock(1_000 * NS_PER_SECOND)
    meter = RunMeter(burner.pid, None, 64 << 20, clock, started_ns=clock())
    deadline = time.monotonic() + 30
    # A tick of CPU time in user mode (at most 10 ms of burning): the first ticks may be the
    # kernel's, filling the memory the burner holds.
    while (cpu := meter.cpu()).user_ns == 0:
        assert time.monotonic() < deadline, "the burner never used CPU time"
    clock.advance(2.0)
    stats = meter.measure()
    assert stats.cpu_usage.total_usage >= cpu.total_ns > 0
    assert stats.cpu_usage.usage_in_usermode > 0
    assert stats.cpu_usage.percent == pytest.approx(
        100 * stats.cpu_usage.total_usage / (2 * NS_PER_SECOND)
    )
    assert stats.memory.usage >= HELD and stats.memory.limit == 64 << 20
    assert stats.timestamp == 1_002_000 and stats.measured


def test_a_run_with_a_memory_group_reads_the_kernels_count(tmp_path: Path) -> None:
    (tmp_path / "memory.current").write_text("123456789\n")
    (tmp_path / "memory.peak").write_text("223456789\n")
    (tmp_path / "cpu.stat").write_text("usage_usec 3000\nuser_usec 2000\nsystem_usec 1000\n")
    group = RunGroup([tmp_path], tmp_path, True, [], cpu=tmp_path)
    stats = RunMeter(2**22 + 1, group, 0, FixedClock(NS_PER_SECOND), 0).measure()
    assert (stats.memory.usage, stats.memory.max_usage, stats.memory.percent) == (
        123456789,
        223456789,
        0.0,
    )
    assert stats.cpu_usage.total_usage == 3_000_000
    assert stats.cpu_usage.usage_in_kernelmode == 1_000_000


def test_a_process_gone_measures_as_nothing_used() -> None:
    """A PID that no longer exists has no CPU time or memory left to read (the allocation
    answers all zeros once it does not run, before it is asked)."""
    meter = RunMeter(2**22 + 1, None, 0, FixedClock(NS_PER_SECOND), 0)
    assert meter.cpu().total_ns == 0 and meter.memory() == (0, 0)
