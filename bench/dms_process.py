"""A DMS stand-in in a process of its own, as a DMS would be: what the benches that call the
DMS through the gateway's own client share (``invoke.py``, ``follow.py``, ``creates.py``,
``pods.py``)."""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import os
import signal
import socket
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import aiohttp

TICKS = os.sysconf("SC_CLK_TCK")


def cpu_of(pid: int) -> float:
    """A process's CPU seconds so far (user + system)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def wait_healthy(url: str) -> None:
    """Until the stand-in's REST API answers ``/health`` (bounded)."""
    async with aiohttp.ClientSession() as session:
        for _ in range(400):
            try:
                async with session.get(url + "/health") as resp:
                    if resp.status == 200:
                        return
            except aiohttp.ClientError:
                await asyncio.sleep(0.05)  # the child is still starting
    raise SystemExit(f"the DMS stand-in at {url} did not come up")


@contextlib.asynccontextmanager
async def dms_process(serve: Callable[[int], None]) -> AsyncIterator[tuple[str, int]]:
    """``serve(port)`` run in a spawned process until the block ends (or this process is
    terminated): its URL and process ID, once it answers."""
    port = free_port()
    child = multiprocessing.get_context("spawn").Process(target=serve, args=(port,))
    child.start()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # the child is ended all the same
    url = f"http://127.0.0.1:{port}"
    try:
        await wait_healthy(url)
        assert child.pid is not None
        yield url, child.pid
    finally:
        child.terminate()
        child.join()


def process_cpu(pid: int) -> float:
    """A process's CPU seconds so far (user + system, from ``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
