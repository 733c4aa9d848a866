"""The orchestrator's copies of its allocations' logs, kept up to date with little work.

A DMS's ``deployment/logs`` has the compute node send the allocation's whole output in one
message, and the orchestrator writes it whole under ``deployments/<id>/<key>`` on its host
(``GetAllocationLogs`` + ``WriteAllocationLogs``). The devnet's compute nodes share that host,
so an allocation answers where its output is and how long it is (:class:`LogExtent`), and the
orchestrator copies those bytes file to file in the kernel (``copy_file_range``): the files it
writes hold what a DMS's would, the output as of the request, but a large output no longer travels
through a signed message and two encodings. And since an allocation's files only grow (the
devnet appends its output), a copy that already holds a prefix of them gets only what is new.

A copy is made afresh (written beside, then renamed into place) when it is not the prefix
this orchestrator last wrote: the first time, after the allocation's files were replaced, or
when someone else changed the copy. As a DMS, an empty output writes no file: a copy already
there stays as it was (the devnet removes an allocation's files when it is shut down).
"""

from __future__ import annotations

import asyncio
import dataclasses
import errno
import os
import threading
from pathlib import Path

from ..devnet_files.log_times import times_path

__all__ = ["LogCopies", "LogExtent"]

_CHUNK = 1 << 20


@dataclasses.dataclass(frozen=True, slots=True)
class LogExtent:
    """One log file of an allocation and how many of its bytes the request covers."""

    path: Path
    length: int

    @classmethod
    def of(cls, path: Path) -> LogExtent:
        """``path`` as it is now (an absent file is empty)."""
        try:
            return cls(path, os.stat(path).st_size)
        except FileNotFoundError:
            return cls(path, 0)


@dataclasses.dataclass(frozen=True, slots=True)
class _Copied:
    """What a copy holds: the first ``length`` bytes of the source file ``source``."""

    source: tuple[int, int]  # (st_dev, st_ino)
    copy: tuple[int, int]
    length: int


class LogCopies:
    """One orchestrator's copies, one update at a time per allocation."""

    def __init__(self) -> None:
        self._copied: dict[Path, _Copied] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    async def update(self, key: str, directory: Path, stdout: LogExtent, stderr: LogExtent) -> None:
        """Bring ``directory``'s ``stdout.log`` and ``stderr.log`` (and their side records of
        when lines were written, first: a reader between two writes finds them covering no
        less) up to the extents given."""
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            await asyncio.to_thread(self._update, directory, stdout, stderr)

    def _update(self, directory: Path, stdout: LogExtent, stderr: LogExtent) -> None:
        """As ``WriteAllocationLogs``, which writes a file only when its output is not empty:
        an empty one (an allocation whose files are gone) leaves the copy as it was."""
        directory.mkdir(parents=True, exist_ok=True)
        logs = [(e, directory / n) for e, n in ((stdout, "stdout.log"), (stderr, "stderr.log"))]
        written = [(extent, copy) for extent, copy in logs if extent.length]
        for extent, copy in written:
            self._bring_up(LogExtent.of(times_path(extent.path)), times_path(copy))
        for extent, copy in written:
            self._bring_up(extent, copy)

    def _bring_up(self, extent: LogExtent, copy: Path) -> None:
        """``copy`` made the first ``extent.length`` bytes of ``extent.path``."""
        try:
            source = os.open(extent.path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:  # gone since it was measured: as if empty, nothing written
            return
        try:
            src = os.fstat(source)
            length = min(extent.length, src.st_size)
            identity = (src.st_dev, src.st_ino)
            if not self._append(copy, source, identity, length):
                _write_whole(copy, source, length)
            done = os.stat(copy)
            self._copied[copy] = _Copied(identity, (done.st_dev, done.st_ino), done.st_size)
        finally:
            os.close(source)

    def _append(self, copy: Path, source: int, identity: tuple[int, int], length: int) -> bool:
        """Add to ``copy`` what is new, if it holds exactly what this orchestrator last
        wrote of the same source; whether it did."""
        before = self._copied.get(copy)
        if before is None or before.source != identity or length < before.length:
            return False
        try:
            out = os.open(copy, os.O_WRONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return False
        try:
            now = os.fstat(out)
            if (now.st_dev, now.st_ino) != before.copy or now.st_size != before.length:
                return False
            _copy_range(source, out, before.length, length)
        finally:
            os.close(out)
        return True


def _write_whole(copy: Path, source: int, length: int) -> None:
    """``copy`` made afresh from the first ``length`` bytes of ``source``, in one step: a
    reader of the old copy keeps reading it whole."""
    temporary = copy.with_name(f".{copy.name}.{os.getpid()}.{threading.get_ident()}")
    out = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        _copy_range(source, out, 0, length)
    finally:
        os.close(out)
    os.replace(temporary, copy)


def _copy_range(source: int, out: int, start: int, end: int) -> None:
    """Bytes ``start`` to ``end`` of ``source`` appended at ``start`` of ``out``: in the
    kernel where it can, else through a buffer."""
    offset = start
    while offset < end:
        try:
            done = os.copy_file_range(source, out, end - offset, offset, offset)
        except OSError as exc:
            if exc.errno not in (errno.EXDEV, errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
                raise
            _copy_buffered(source, out, offset, end)
            return
        if done == 0:  # the source is shorter than it was: nothing more to copy
            return
        offset += done


def _copy_buffered(source: int, out: int, offset: int, end: int) -> None:
    while offset < end:
        data = os.pread(source, min(_CHUNK, end - offset), offset)
        if not data:
            return
        os.pwrite(out, data, offset)
        offset += len(data)
