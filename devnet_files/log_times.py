"""When each part of an allocation's log was written: a side record beside the log file.

A DMS writes an allocation's output to ``stdout.log`` / ``stderr.log`` with no per-line times
(its docker executor copies the container's streams without Docker's timestamps). The embedded
devnet, which produces the output itself, also keeps ``stdout.log.times`` / ``stderr.log.times``:
one ASCII line ``<offset> <unix ns>`` per piece of output it received, saying that the log's
first ``offset`` bytes had been written by that time. The log files stay byte for byte what a
DMS writes, so readers that know nothing of the record read them as before; the gateway stamps
a line with the time of the first record that covers its end, where a record exists.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

__all__ = ["TIMES_SUFFIX", "Written", "entry", "parse", "times_path", "written_by"]

TIMES_SUFFIX = ".times"


class Written(NamedTuple):
    """The log's first ``offset`` bytes had been written by ``at_ns`` (Unix nanoseconds)."""

    offset: int
    at_ns: int


def times_path(log: Path) -> Path:
    """The side record of the log file ``log``."""
    return log.with_name(log.name + TIMES_SUFFIX)


def entry(offset: int, at_ns: int) -> bytes:
    """One line of the record."""
    return f"{offset} {at_ns}\n".encode()


def parse(data: bytes) -> list[Written]:
    """The record's entries in order of offset; a line that is not two numbers (one cut
    short by a crash, say) is skipped, as is one that does not move the offset forward."""
    found: list[Written] = []
    for line in data.splitlines():
        parts = line.split()
        if len(parts) != 2 or not all(p.isdigit() for p in parts):
            continue
        offset, at_ns = int(parts[0]), int(parts[1])
        if not found or offset > found[-1].offset:
            found.append(Written(offset, at_ns))
    return found


def written_by(record: Sequence[Written], end: int) -> int | None:
    """When the log's bytes up to ``end`` had all been written (``None``: the record does not
    reach that far)."""
    index = bisect.bisect_left(record, end, key=lambda w: w.offset)
    return record[index].at_ns if index < len(record) else None
