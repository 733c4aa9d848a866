"""Container logs from the files the DMS writes, shaped by interLink's log options.

The DMS's ``deployment/logs`` answers with a directory on the DMS host (the gateway's host in
NuNet's topology) holding the allocation's ``stdout.log`` and ``stderr.log``, rewritten in place
on every request: the gateway's own fetches of one allocation's logs (``/getLogs`` calls and
the pod actor's marker reads) are made one at a time, each read before the next fetch
(:func:`fetched_logs`).

``Timestamps``, ``SinceSeconds`` and ``SinceTime`` use the time each line was written where the
producer recorded it (:mod:`dmsgw.devnet_files.log_times`: the embedded devnet does). A DMS keeps
no such record (its docker executor copies the container's output without Docker's
timestamps), so there the gateway falls back to what it can know: a line that was already in
the file when first read is stamped with the file's last modification (an upper bound of when
it was written), a line that ``Follow`` sees appear with the time it was read. ``Tail`` keeps
the last lines, then ``Bytes`` (the kubelet's ``limitBytes``) the first bytes of what is left,
over the whole reply, followed output included. The DMS writes the files when asked, so
``Follow`` asks again every interval and sends what is new, until the container ends. The pod
wrapper's markers (:mod:`dmsgw.interlink.translate.run_markers`) are the gateway's, not the
container's output: they are left out of both files.

A pod's follower reads the same files for those markers: :func:`fetched_logs` and
:func:`lines_after` serve both.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime as dt
import errno
import os
import stat
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import BinaryIO, NamedTuple

from ...behaviors.catalog import DEPLOYMENT_LOGS
from ...behaviors.deployment import DeploymentLogsRequest
from ...behaviors.node import Invoke
from ...clock import NS_PER_SECOND
from ...devnet_files.log_times import parse, times_path, written_by
from ...errors import DmsgwError
from ..translate.run_markers import is_start_marker, strip_marker
from ..wire.bodies import ContainerLogOpts

STDERR_LOG = "stderr.log"
LOG_FILES = ("stdout.log", STDERR_LOG)
FOLLOW_INTERVAL_S = 0.2
READ_ON_LOOP_BYTES = 64 * 1024
_READ_BLOCK = 64 * 1024
"""The first block read from either end of a log for ``Tail`` or ``Bytes``; it grows fourfold
until it holds enough lines."""
"""At most this much new log is read on the event loop itself (:func:`new_lines`); more goes
to a thread."""

Fetch = Callable[[], AbstractAsyncContextManager[Path]]
"""Has the DMS write the log files and holds them while the caller reads their directory."""


@dataclasses.dataclass
class _Fetching:
    lock: asyncio.Lock = dataclasses.field(default_factory=asyncio.Lock)
    users: int = 0
    fetch: asyncio.Future[Path] | None = None
    """The fetch of the current round: readers that come while it is under way join it."""
    readers: int = 0
    """The readers of the current round; the last one out ends it (releases ``lock``)."""


_FETCHING: dict[tuple[asyncio.AbstractEventLoop, str, str], _Fetching] = {}
"""The fetches under way or waiting, per event loop and allocation (gone when none is)."""


async def log_directory(invoke: Invoke, ensemble_id: str, allocation: str) -> Path:
    """Have the DMS write ``allocation``'s log files (``deployment/logs``); their directory."""
    reply = await invoke(DEPLOYMENT_LOGS, DeploymentLogsRequest(ensemble_id, allocation))
    if not reply.logs_written_to:
        raise DmsgwError(f"the DMS wrote no logs for {allocation} of {ensemble_id}")
    if "\0" in reply.logs_written_to:  # no file has such a name: every file call would raise
        raise DmsgwError(
            f"the DMS named a log directory for {allocation} of {ensemble_id} with a NUL byte: "
            f"{reply.logs_written_to!r}"
        )
    return Path(reply.logs_written_to)


@contextlib.asynccontextmanager
async def fetched_logs(invoke: Invoke, ensemble_id: str, allocation: str) -> AsyncIterator[Path]:
    """:func:`log_directory`, the files left as they are until the caller is done reading.
    The DMS rewrites them in place on each request, so fetches take rounds: a reader that comes
    while a round's fetch is under way joins that round and reads the same files (three
    ``/getLogs`` of a large log at once wait for one fetch, not three in a row); one that
    comes later waits for the round's readers to finish, then fetches again."""
    key = (asyncio.get_running_loop(), ensemble_id, allocation)
    state = _FETCHING.setdefault(key, _Fetching())
    state.users += 1
    try:
        starts = state.fetch is None or state.fetch.done()
        if starts:
            await state.lock.acquire()
            state.fetch = asyncio.get_running_loop().create_future()
        fetch = state.fetch
        assert fetch is not None
        state.readers += 1
        try:
            if starts:
                await _fetch_into(fetch, invoke, ensemble_id, allocation)
            yield await asyncio.shield(fetch)
        finally:
            state.readers -= 1
            if not state.readers:
                state.fetch = None
                state.lock.release()
    finally:
        state.users -= 1
        if not state.users:
            del _FETCHING[key]


async def _fetch_into(
    result: asyncio.Future[Path], invoke: Invoke, ensemble_id: str, allocation: str
) -> None:
    """Settle ``result`` with the fetch's outcome, whatever it is: the round's other readers
    wait on it (a cancelled fetch is an error to them, not their own cancel)."""
    try:
        result.set_result(await log_directory(invoke, ensemble_id, allocation))
    except asyncio.CancelledError:
        result.set_exception(DmsgwError(f"the fetch of {allocation}'s logs was cancelled"))
        result.exception()  # retrieved: its readers may all be gone
        raise
    except Exception as exc:
        result.set_exception(exc)


def lines_after(path: Path, offset: int, limit: int | None = None) -> tuple[bytes, int]:
    """The whole lines written to ``path`` after byte ``offset`` (of more than ``limit``
    bytes, the lines in the last ``limit``), and the offset after them; an unterminated last
    line is left for the next call. Blocking."""
    try:
        with path.open("rb") as f:
            return _lines_in(f, f.seek(0, os.SEEK_END), offset, limit)
    except FileNotFoundError:
        return b"", offset


def _lines_in(f: BinaryIO, size: int, offset: int, limit: int | None) -> tuple[bytes, int]:
    """:func:`lines_after` of the open file ``f``, read up to byte ``size``."""
    start = offset if limit is None else max(offset, size - limit)
    # Skipping ahead, read one byte before: whether it ends a line tells whether the first
    # line read is whole or only the tail of one.
    skipped = start > offset
    f.seek(start - 1 if skipped else start)
    data = f.read(max(size - start, 0) + (1 if skipped else 0))
    if skipped:
        cut = data.find(b"\n") + 1
        start, data = start - 1 + cut, data[cut:]
    complete = data[: data.rfind(b"\n") + 1]
    return complete, start + len(complete)


async def new_lines(path: Path, offset: int, limit: int | None = None) -> tuple[bytes, int]:
    """:func:`lines_after`, up to the size the file had when opened: read on the event loop
    when that leaves at most :data:`READ_ON_LOOP_BYTES` to read, on a thread when more. A
    pod's follower reads its container's markers as runs start and end: a few lines of a file
    the DMS has just written, whose read costs a small fraction of the hand-off to a thread
    and back (decision 54; bench/README.md, "Reading logs"). The file is opened without
    blocking and
    anything but a regular file is refused (:class:`OSError`): a FIFO would otherwise hold
    the loop until something wrote to it."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        return b"", offset  # nothing written yet
    with open(fd, "rb") as f:
        found = os.fstat(fd)
        if not stat.S_ISREG(found.st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        if found.st_size - offset <= READ_ON_LOOP_BYTES:
            return _lines_in(f, found.st_size, offset, limit)
        return await asyncio.to_thread(_lines_in, f, found.st_size, offset, limit)


class _Line(NamedTuple):
    """A line of a log file and when it was written (Unix seconds)."""

    at: float
    text: bytes


def _timed(path: Path, start: int, data: bytes, fallback: float) -> list[_Line]:
    """The lines of ``data``, read from ``path`` at byte ``start``, with the time each was
    written by its producer's record, or ``fallback`` where there is none; the lines that
    are the container's own output only (the wrapper's markers left out)."""
    try:
        record = parse(times_path(path).read_bytes())
    except FileNotFoundError:
        record = []
    lines: list[_Line] = []
    end = start
    for text in data.splitlines(keepends=True):
        end += len(text)
        at_ns = written_by(record, end)
        kept = strip_marker(text)
        if kept:
            lines.append(_Line(fallback if at_ns is None else at_ns / NS_PER_SECOND, kept))
    return lines


def _stamp(ts: float) -> bytes:
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ ").encode()


def _shown(lines: list[_Line], timestamps: bool) -> list[bytes]:
    return [(_stamp(line.at) if timestamps else b"") + line.text for line in lines]


def _since_ts(opts: ContainerLogOpts, now: float) -> float | None:
    if opts.since_seconds:
        return now - opts.since_seconds
    if opts.since_time is not None:
        return opts.since_time.timestamp()
    return None


def run_part(path: Path, run: int | None) -> tuple[int, int]:
    """Where run ``run`` (the ``run``-th of the file, from 1; ``None``: the whole file) lies
    in ``path``: the offsets of its first byte (after its start marker) and of the byte after
    its last; the whole file when it has no start marker at all (an unwrapped container's).
    ``(0, 0)`` when the file does not exist or holds fewer runs. Blocking."""
    try:
        f = path.open("rb")
    except FileNotFoundError:
        return 0, 0
    with f:
        size = f.seek(0, os.SEEK_END)
        if run is None:
            return 0, size
        f.seek(0)
        starts: list[tuple[int, int]] = []  # each start marker's line: its offset and end
        offset = 0
        for line in f:
            if is_start_marker(line):
                starts.append((offset, offset + len(line)))
            offset += len(line)
    if not starts:
        return 0, size
    if run > len(starts) or run < 1:
        return 0, 0
    begin = starts[run - 1][1]
    end = starts[run][0] if run < len(starts) else size
    return begin, end


def _existing_lines(
    directory: Path, opts: ContainerLogOpts, now: float, run: int | None = None
) -> tuple[list[bytes], dict[str, int]]:
    """The lines already written (stdout then stderr) that the options select, of run ``run``
    of the files (:func:`run_part`; ``None``: all), and where each file ends. With ``Tail``
    only each file's last lines are read (from the end), with ``Bytes`` only its first ones:
    a large log is not read whole for three lines."""
    lines: list[bytes] = []
    offsets: dict[str, int] = {}
    since = _since_ts(opts, now)
    budget = None if opts.tail else opts.limit_bytes or None
    for name in LOG_FILES:
        path = directory / name
        try:
            with path.open("rb") as f:
                size = os.fstat(f.fileno()).st_size
                mtime = os.fstat(f.fileno()).st_mtime
                if run is None:  # the wrapper's markers, on both files, are not shown
                    start, data = _part(f, size, opts.tail, budget, markers=True)
                else:
                    start, end = run_part(path, run)
                    f.seek(start)
                    data = f.read(end - start)
        except FileNotFoundError:
            offsets[name] = 0
            continue
        offsets[name] = size
        timed = _timed(path, start, data, mtime)
        shown = _shown([t for t in timed if since is None or t.at >= since], opts.timestamps)
        lines += shown
        if budget is not None:
            budget = max(budget - sum(map(len, shown)), 0)
    return lines, offsets


def _part(
    f: BinaryIO, size: int, tail: int, budget: int | None, markers: bool
) -> tuple[int, bytes]:
    """Where the part of ``f`` worth reading starts, and that part: enough whole lines from
    the end for ``tail`` lines, or from the start for ``budget`` bytes, else all. Read in
    growing blocks; ``markers``: lines the wrapper wrote are left out later, so they do not
    count."""
    if not tail and budget is None:
        return 0, f.read(size)
    block = _READ_BLOCK
    while True:
        if tail:
            start = max(size - block, 0)
            f.seek(start)
            data = f.read(size - start)
            found = data.splitlines(keepends=True)[1:] if start else data.splitlines(True)
            if start == 0 or _kept(found, markers) > tail:
                part = _last_kept(found, tail, markers)
                return size - len(part), part
        else:
            f.seek(0)
            data = f.read(min(block, size))
            whole = data if len(data) == size else data[: data.rfind(b"\n") + 1]
            if len(data) == size or (whole and _kept_bytes(whole, markers) >= (budget or 0)):
                return 0, whole
        block *= 4


def _kept(lines: list[bytes], markers: bool) -> int:
    return sum(1 for line in lines if not markers or strip_marker(line))


def _last_kept(lines: list[bytes], count: int, markers: bool) -> bytes:
    """The shortest end of ``lines`` that holds ``count`` lines kept (markers not counted)."""
    kept = 0
    for i in range(len(lines) - 1, -1, -1):
        kept += 1 if not markers or strip_marker(lines[i]) else 0
        if kept == count:
            return b"".join(lines[i:])
    return b"".join(lines)


def _kept_bytes(data: bytes, markers: bool) -> int:
    if not markers:
        return len(data)
    return sum(len(strip_marker(line)) for line in data.splitlines(keepends=True))


class _Budget:
    """What is left of ``Bytes`` for the rest of the reply (``None``: no limit)."""

    def __init__(self, limit_bytes: int) -> None:
        self.left: int | None = limit_bytes or None

    def take(self, chunk: bytes) -> bytes:
        if self.left is None:
            return chunk
        chunk = chunk[: self.left]
        self.left -= len(chunk)
        return chunk

    @property
    def spent(self) -> bool:
        return self.left == 0


async def read_logs(
    fetch: Fetch,
    opts: ContainerLogOpts,
    *,
    running: Callable[[], bool],
    clock: Callable[[], float] | None = None,
    interval_s: float = FOLLOW_INTERVAL_S,
    run: int | None = None,
) -> AsyncIterator[bytes]:
    """Yield the container's log (of run ``run`` of the files only, see :func:`run_part`),
    then (with ``Follow``) new output until ``running()`` is false and nothing more was
    written, or ``Bytes`` have been sent. ``fetch()`` has the DMS write the log files and
    holds them while they are read."""
    now = clock or _wall
    budget = _Budget(opts.limit_bytes)
    async with fetch() as directory:
        lines, offsets = await asyncio.to_thread(_existing_lines, directory, opts, now(), run)
    first = budget.take(b"".join(lines[-opts.tail :] if opts.tail else lines))
    if first:
        yield first
    if not opts.follow:
        return
    while not budget.spent:
        alive = running()
        async with fetch() as directory:
            chunk = await asyncio.to_thread(_new_output, directory, offsets, opts.timestamps, now)
        if chunk:
            yield budget.take(chunk)
        elif not alive:
            return
        await asyncio.sleep(interval_s)  # paces reads of a growing file


def _new_output(
    directory: Path, offsets: dict[str, int], timestamps: bool, clock: Callable[[], float]
) -> bytes:
    out = b""
    for name, offset in offsets.items():
        path = directory / name
        complete, offsets[name] = lines_after(path, offset)
        out += b"".join(_shown(_timed(path, offset, complete, clock()), timestamps))
    return out


def _wall() -> float:
    import time

    return time.time()
