"""An allocation's output, copied from its pipes into its log files as it is written.

A run's stdout and stderr are pipes that the devnet reads, rather than files the process writes
itself, so that the devnet knows when each piece of output arrived: it appends the bytes to the
log file unchanged (what a DMS writes, which the gateway and any DMS reader read as before) and
records the time in the side record of :mod:`dmsgw.devnet_files.log_times`. That is what lets the
gateway's ``Timestamps`` and ``SinceTime`` use the time a line was written, not the time it was
read. The pipes are plain file descriptors read by the event loop (not the subprocess's own
pipes), so the process is waited for as before, whatever holds the pipes.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from pathlib import Path
from typing import BinaryIO

from ..clock import Clock, system_clock
from ..devnet_files.log_times import entry, times_path

CHUNK = 1 << 16
DRAIN_S = 1.0
"""How long the end of a run waits for the rest of its output. A process the run left behind
(in the background) may hold the pipes open past it: what it writes after that is not kept, as
Docker ends a container's every process with its main one."""


class OutputCopy:
    """One pipe whose reading end the event loop copies into ``log_file`` and its record."""

    def __init__(self, log_file: Path, clock: Clock) -> None:
        self._clock = clock
        self._loop = asyncio.get_running_loop()
        self._ended: asyncio.Future[None] = self._loop.create_future()
        self._out = _private_append(log_file)
        self._times = _private_append(times_path(log_file))
        self._offset = self._out.seek(0, os.SEEK_END)
        self.read_fd, self.write_fd = os.pipe()
        os.set_blocking(self.read_fd, False)

    def start(self) -> None:
        """The process has its end of the pipe: the devnet's copy of it goes, reading starts."""
        self._close_write_end()
        self._loop.add_reader(self.read_fd, self._readable)

    def _close_write_end(self) -> None:
        if self.write_fd >= 0:
            os.close(self.write_fd)
            self.write_fd = -1

    def _readable(self) -> None:
        """Copy what the pipe holds; at its end, close."""
        while True:
            try:
                chunk = os.read(self.read_fd, CHUNK)
            except BlockingIOError:
                return
            except OSError:
                chunk = b""
            if not chunk:
                self.close()
                return
            self._out.write(chunk)
            self._offset += len(chunk)
            self._times.write(entry(self._offset, self._clock()))

    async def ended(self, timeout_s: float) -> None:
        """Once the pipe has ended (every writer closed it), or ``timeout_s`` passed."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                await asyncio.shield(self._ended)

    def close(self) -> None:
        """Copy what is left in the pipe, stop reading and close everything (idempotent)."""
        if self._ended.done():
            return
        self._ended.set_result(None)
        self._loop.remove_reader(self.read_fd)
        with contextlib.suppress(BlockingIOError, OSError):
            while chunk := os.read(self.read_fd, CHUNK):
                self._out.write(chunk)
                self._offset += len(chunk)
                self._times.write(entry(self._offset, self._clock()))
        os.close(self.read_fd)
        self._close_write_end()
        self._out.close()
        self._times.close()


class OutputCopies:
    """The copies of one run's stdout and stderr."""

    def __init__(self, stdout: Path, stderr: Path, clock: Clock = system_clock) -> None:
        self.stdout = OutputCopy(stdout, clock)
        try:
            self.stderr = OutputCopy(stderr, clock)
        except BaseException:
            self.stdout.close()
            raise

    def started(self) -> None:
        """The process was started with the pipes' writing ends."""
        self.stdout.start()
        self.stderr.start()

    async def drained(self) -> None:
        """Once the run's output is in the log files (see :data:`DRAIN_S`); then closed."""
        await asyncio.gather(self.stdout.ended(DRAIN_S), self.stderr.ended(DRAIN_S))
        self.close()

    def close(self) -> None:
        self.stdout.close()
        self.stderr.close()


def _private_append(path: Path) -> BinaryIO:
    """``path`` opened for appending, made readable by the devnet alone (0600)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
    return os.fdopen(fd, "ab", buffering=0)
