"""Reading the logs of a large output as ``/getLogs`` does: the DMS's ``deployment/logs``, then
the gateway's log reader (``interlink/logs.py``), against the floor of reading the same bytes
from the file the allocation wrote.

One embedded devnet node runs a service that writes ``--mib`` MiB of 60-byte lines and then
sleeps. Once its output is whole, each read is timed (wall, and the process's CPU: the devnet
runs in this process, so its CPU is counted with the reader's):

- floor: the allocation's own ``stdout.log`` read whole, once, on the DMS's host (what any
  fetch of those bytes must at least do; it skips the request, its signatures and the
  compute node's answer);
- the first ``Tail: 3`` (once: the DMS's host gets its first copy of the output), then
  ``Tail: 3`` and ``Bytes: 10``, each a fetch through the gateway's DMS client (a signed
  ``deployment/logs``, the devnet's orchestrator asking the compute node, the files written on
  the DMS's host) and the gateway's read of their end or start;
- three ``Tail: 3`` at once (they share one fetch, decision 78);
- ``Tail: 3`` after one more line was written (what a follow's next fetch costs).

    .venv/bin/python bench/logs.py [--mib 100] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from dmsgw.devnet.pytest_plugin import one_node_ensemble, shell_allocation, start_embedded
from dmsgw.interlink.logs.dms_logs import fetched_logs, read_logs
from dmsgw.interlink.wire.bodies import ContainerLogOpts

LINE = b"%059d\n"
ALLOCATION = "n1.out"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--mib", type=int, default=100, help="the output's size (MiB)")
    parser.add_argument("--rounds", type=int, default=3, help="times each read is timed")
    args = parser.parse_args()
    devnet = start_embedded(1, seed="bench-logs")
    try:
        run(devnet, args.mib * 1024 * 1024, args.rounds)
    finally:
        devnet.close()


def run(devnet: Any, size: int, rounds: int) -> None:
    """Deploy the writer, wait for its whole output, then time every read ``rounds`` times."""
    lines = size // len(LINE % 0)
    script = (
        f"awk 'BEGIN {{ for (i = 1; i <= {lines}; i++) printf \"%059d\\n\", i }}'; "
        "echo ready >&2; sleep 3600"
    )
    spec = one_node_ensemble({"out": shell_allocation("service", script)})
    eid = devnet.dms.deployment.new(spec).ensemble_id
    devnet.wait_status(eid, "Running")
    source = _source_file(devnet)
    written = _wait_written(source, lines)
    print(f"{written / 2**20:.1f} MiB of output in {lines:,} lines; {rounds} rounds each")
    invoke = devnet.dms._runtime.client.invoke
    loop = devnet.dms._runtime.loop

    def timed(name: str, make: Callable[[], Awaitable[object]], times: int = rounds) -> None:
        walls, cpus = [], []
        for _ in range(times):
            wall, cpu = time.perf_counter(), time.process_time()
            asyncio.run_coroutine_threadsafe(make(), loop).result()  # type: ignore[arg-type]
            walls.append(time.perf_counter() - wall)
            cpus.append(time.process_time() - cpu)
        results[name] = (statistics.median(walls), statistics.median(cpus))

    async def floor() -> None:
        await asyncio.to_thread(source.read_bytes)

    async def read(**opts: Any) -> None:
        async for _ in read_logs(
            lambda: fetched_logs(invoke, eid, ALLOCATION),
            ContainerLogOpts.model_validate(opts),
            running=lambda: True,
        ):
            pass

    async def three() -> None:
        await asyncio.gather(*(read(Tail=3) for _ in range(3)))

    async def one_more_line() -> None:
        with source.open("ab") as f:  # the devnet appends as the allocation writes
            f.write(LINE % 1)
        await read(Tail=3)

    results: dict[str, tuple[float, float]] = {}
    timed("floor: the file read whole", floor)
    timed("Tail: 3, the first fetch", lambda: read(Tail=3), 1)
    timed("Tail: 3", lambda: read(Tail=3))
    timed("Bytes: 10", lambda: read(Bytes=10))
    timed("three Tail: 3 at once", three)
    timed("Tail: 3 after one more line", one_more_line)
    floor_wall, floor_cpu = results["floor: the file read whole"]
    print(f"{'read':32} {'wall':>9} {'CPU':>9} {'wall/floor':>10} {'CPU/floor':>10}")
    for name, (wall, cpu) in results.items():
        print(
            f"{name:32} {wall * 1000:7.1f}ms {cpu * 1000:7.1f}ms "
            f"{wall / floor_wall:9.2f}x {cpu / max(floor_cpu, 1e-6):9.2f}x"
        )


def _source_file(devnet: Any) -> Path:
    """The allocation's own stdout.log in its sandbox on the compute node."""
    provider = devnet.devnet.nodes[0].provider
    (allocation,) = provider.allocations.values()
    path: Path = allocation.plan.stdout
    return path


def _wait_written(path: Path, lines: int) -> int:
    """The output's size once all its lines are in the file (a bench may poll)."""
    while True:
        size = path.stat().st_size if path.exists() else 0
        if size >= lines * len(LINE % 0):
            return size
        time.sleep(0.2)


if __name__ == "__main__":
    main()
