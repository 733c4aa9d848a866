"""Container logs from the files the DMS writes, shaped by interLink's log options.

The DMS's ``deployment/logs`` answers with a directory on the DMS host (the gateway's host in
NuNet's topology) holding the allocation's ``stdout.log`` and ``stderr.log``. The files carry no
per-line times, so ``Timestamps`` stamps a line with the time the gateway read it (for lines
that already existed: the file's last modification, an upper bound), and ``SinceSeconds`` /
``SinceTime`` compare against those same times. ``Tail`` and ``Bytes`` are exact. The DMS
writes the files when asked, so ``Follow`` asks again every interval and sends what is new,
until the container ends.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

from dmsgw.transport.interlink import ContainerLogOpts

LOG_FILES = ("stdout.log", "stderr.log")
FOLLOW_INTERVAL_S = 0.2


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
        lines += [prefix + line for line in data.splitlines(keepends=True)]
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
        path = directory / name
        try:
            with path.open("rb") as f:
                f.seek(offset)
                data = f.read()
        except FileNotFoundError:
            continue
        if not data:
            continue
        complete = data[: data.rfind(b"\n") + 1]  # whole lines only; the rest comes next time
        if not complete:
            continue
        offsets[name] = offset + len(complete)
        if timestamps:
            stamp = _stamp(clock())
            complete = b"".join(stamp + line for line in complete.splitlines(keepends=True))
        out += complete
    return out


def _wall() -> float:
    import time

    return time.time()
