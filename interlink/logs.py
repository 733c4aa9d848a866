"""Container logs from the files the DMS writes, shaped by interLink's log options.

The DMS's ``deployment/logs`` answers with a directory on the DMS host (the gateway's host in
NuNet's topology) holding the allocation's ``stdout.log`` and ``stderr.log``. The files carry no
per-line times, so ``Timestamps`` stamps a line with the time the gateway read it (for lines
that already existed: the file's last modification, an upper bound), and ``SinceSeconds`` /
``SinceTime`` compare against those same times. ``Tail`` and ``Bytes`` are exact. The DMS
writes the files when asked, so ``Follow`` asks again every interval and sends what is new,
until the container ends. The pod wrapper's markers (:mod:`dmsgw.interlink.run_markers`) are
the gateway's, not the container's output: they are left out of ``stderr.log``.

A pod's follower reads the same files for those markers: :func:`log_directory` and
:func:`lines_after` serve both.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

from ..behaviors.catalog import DEPLOYMENT_LOGS
from ..behaviors.deployment import DeploymentLogsRequest
from ..behaviors.node import Invoke
from ..errors import DmsgwError
from .bodies import ContainerLogOpts
from .run_markers import strip_marker

STDERR_LOG = "stderr.log"
LOG_FILES = ("stdout.log", STDERR_LOG)
FOLLOW_INTERVAL_S = 0.2


async def log_directory(invoke: Invoke, ensemble_id: str, allocation: str) -> Path:
    """Have the DMS write ``allocation``'s log files (``deployment/logs``); their directory."""
    reply = await invoke(DEPLOYMENT_LOGS, DeploymentLogsRequest(ensemble_id, allocation))
    if not reply.logs_written_to:
        raise DmsgwError(f"the DMS wrote no logs for {allocation} of {ensemble_id}")
    return Path(reply.logs_written_to)


def lines_after(path: Path, offset: int, limit: int | None = None) -> tuple[bytes, int]:
    """The whole lines written to ``path`` after byte ``offset`` (of more than ``limit``
    bytes, the lines in the last ``limit``), and the offset after them; an unterminated last
    line is left for the next call. Blocking."""
    try:
        with path.open("rb") as f:
            size = f.seek(0, os.SEEK_END)
            start = offset if limit is None else max(offset, size - limit)
            # Skipping ahead, read one byte before: whether it ends a line tells whether the
            # first line read is whole or only the tail of one.
            skipped = start > offset
            f.seek(start - 1 if skipped else start)
            data = f.read(max(size - start, 0) + (1 if skipped else 0))
    except FileNotFoundError:
        return b"", offset
    if skipped:
        cut = data.find(b"\n") + 1
        start, data = start - 1 + cut, data[cut:]
    complete = data[: data.rfind(b"\n") + 1]
    return complete, start + len(complete)


def _visible(name: str, lines: list[bytes]) -> list[bytes]:
    """The lines of log file ``name`` that are the container's own output."""
    if name != STDERR_LOG:
        return lines
    return [kept for kept in map(strip_marker, lines) if kept]


def _stamp(ts: float) -> bytes:
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ ").encode()


def _since_ts(opts: ContainerLogOpts, now: float) -> float | None:
    if opts.since_seconds:
        return now - opts.since_seconds
    if opts.since_time is not None:
        return opts.since_time.timestamp()
    return None


def _existing_lines(
    directory: Path, opts: ContainerLogOpts, now: float
) -> tuple[list[bytes], dict[str, int]]:
    """The lines already written (stdout then stderr), and where each file ends."""
    lines: list[bytes] = []
    offsets: dict[str, int] = {}
    since = _since_ts(opts, now)
    for name in LOG_FILES:
        path = directory / name
        try:
            data = path.read_bytes()
            mtime = os.stat(path).st_mtime
        except FileNotFoundError:
            offsets[name] = 0
            continue
        offsets[name] = len(data)
        if since is not None and mtime < since:
            continue
        prefix = _stamp(mtime) if opts.timestamps else b""
        lines += [prefix + line for line in _visible(name, data.splitlines(keepends=True))]
    return lines, offsets


def _limit(lines: list[bytes], opts: ContainerLogOpts) -> bytes:
    if opts.tail:
        lines = lines[-opts.tail :]
    text = b"".join(lines)
    if opts.limit_bytes and len(text) > opts.limit_bytes:
        text = text[-opts.limit_bytes :]
    return text


async def read_logs(
    fetch: Callable[[], Awaitable[Path]],
    opts: ContainerLogOpts,
    *,
    running: Callable[[], bool],
    clock: Callable[[], float] | None = None,
    interval_s: float = FOLLOW_INTERVAL_S,
) -> AsyncIterator[bytes]:
    """Yield the container's log, then (with ``Follow``) new output until ``running()`` is
    false and nothing more was written. ``fetch()`` has the DMS write the log files and
    returns their directory."""
    now = (clock or _wall)()
    lines, offsets = await asyncio.to_thread(_existing_lines, await fetch(), opts, now)
    first = _limit(lines, opts)
    if first:
        yield first
    if not opts.follow:
        return
    while True:
        alive = running()
        directory = await fetch()
        chunk = await asyncio.to_thread(
            _new_output, directory, offsets, opts.timestamps, clock or _wall
        )
        if chunk:
            yield chunk
        elif not alive:
            return
        await asyncio.sleep(interval_s)  # paces reads of a growing file


def _new_output(
    directory: Path, offsets: dict[str, int], timestamps: bool, clock: Callable[[], float]
) -> bytes:
    out = b""
    for name, offset in offsets.items():
        complete, offsets[name] = lines_after(directory / name, offset)
        lines = _visible(name, complete.splitlines(keepends=True))
        if lines and timestamps:
            stamp = _stamp(clock())
            lines = [stamp + line for line in lines]
        out += b"".join(lines)
    return out


def _wall() -> float:
    import time

    return time.time()
