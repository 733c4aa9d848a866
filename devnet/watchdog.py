"""The devnet's watchdog: a process of its own that ends the allocations of a devnet that died.

A devnet that stops cleanly stops every allocation and removes its working directory itself.
One that is SIGKILLed (or crashes) cannot: the parent-death signal kills each allocation's main
process, but what that process started lives on, re-parented to PID 1. So each devnet starts
this script (``python -I -S watchdog.py <work dir>``, standard library only, in a session of
its own) with a pipe on its stdin that only the devnet holds, and tells it, one line each,
which process groups to watch (``+<pgid>``) and which have ended (``-<pgid>``). When the pipe
ends, whoever closed it, every group still watched is SIGKILLed and the working directory is
removed; then the watchdog exits.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
from collections.abc import Iterable


def watched(lines: Iterable[bytes]) -> set[int]:
    """The process groups still watched once ``lines`` have been read (bad lines are skipped:
    only the devnet writes here)."""
    groups: set[int] = set()
    for line in lines:
        sign, number = line[:1], line[1:].strip()
        if not number.isdigit() or int(number) <= 1:
            continue
        if sign == b"+":
            groups.add(int(number))
        elif sign == b"-":
            groups.discard(int(number))
    return groups


def end(groups: Iterable[int], work_dir: str) -> None:
    """SIGKILL every group, then remove the devnet's working directory."""
    for pgid in groups:
        with contextlib.suppress(ProcessLookupError, PermissionError):  # ended meanwhile
            os.killpg(pgid, signal.SIGKILL)
    shutil.rmtree(work_dir, ignore_errors=True)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: watchdog.py WORK_DIR (lines +PGID / -PGID on stdin)", file=sys.stderr)
        return 2
    end(watched(sys.stdin.buffer), argv[1])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
