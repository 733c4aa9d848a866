"""The benchmarks still run: each in a tiny size, in its own process, as `make bench` runs it.

Only that they finish and print their verdict line is checked; their numbers mean nothing at
this size and are never asserted.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"


@pytest.mark.parametrize(
    ("script", "args", "verdict"),
    [
        ("crypto.py", ["--seconds", "0.02"], "worst ratio"),
        ("devnet_start.py", ["--rounds", "1", "--nodes", "2"], ""),
        ("invoke.py", ["--rounds", "20", "--concurrency", "4"], "ratio: client CPU"),
        ("follow.py", ["--pods", "6", "--seconds", "0.5", "--poll-max-s", "0.2"], "steady state"),
        ("creates.py", ["--pods", "2"], "p50 ratio"),
        ("cli.py", ["--rounds", "1"], "dmsgw invoke (agent, again)"),
        (
            "pods.py",
            ["--pods", "20", "--rate", "100", "--seconds", "0.4", "--steady-seconds", "0.5"],
            "steady state:",
        ),
        (
            "pods.py",
            [
                "--pods",
                "20",
                "--rate",
                "100",
                "--seconds",
                "0.4",
                "--steady-seconds",
                "0.5",
                "--profile-creates",
            ],
            "cProfile of the creates",
        ),
        (
            "ping.py",
            ["--peers", "20", "--peer-latency-ms", "1", "--seconds", "0.2", "--burst", "3"],
            "cached p99 ratio",
        ),
    ],
)
def test_the_benchmark_runs(script: str, args: list[str], verdict: str) -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH / script), *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=BENCH.parent,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert verdict in done.stdout
