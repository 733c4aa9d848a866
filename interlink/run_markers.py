"""The lines the pod wrapper writes on a container's stderr, so that the gateway learns its runs.

The DMS's ``deployment/status`` says that an allocation ``failed``, never with which exit code,
and does not count the allocation's restarts. So the pod translation runs every container that
has a ``command`` under a shell wrapper (:mod:`dmsgw.interlink.translate.wrapper`) that writes one
line to stderr when it starts the command and one when the command has ended::

    dmsgw.io/started
    dmsgw.io/exit-code=3

A restarted allocation appends to the same log, so the markers in its ``stderr.log`` are the
history of its runs. A marker is recognised at the end of a line, after whatever unterminated
output the command left; an exit code outside 0-255 is not a marker. Pure: parsing, and the
filter that keeps the markers out of the logs users read.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import NamedTuple

__all__ = ["EXIT_CODE_MARKER", "STARTED_MARKER", "Marker", "markers", "strip_marker"]

STARTED_MARKER = "dmsgw.io/started"
"""Written by the wrapper just before it starts the command."""
EXIT_CODE_MARKER = "dmsgw.io/exit-code="
"""Written by the wrapper, followed by the command's exit status, once the command has ended."""

_MARKER = re.compile(
    rb"(?:"
    + re.escape(STARTED_MARKER.encode())
    + rb"|"
    + re.escape(EXIT_CODE_MARKER.encode())
    + rb"([0-9]{1,3}))\r?\n?\Z"
)


class Marker(NamedTuple):
    """A run started (``exit_code`` is ``None``) or ended with ``exit_code``."""

    exit_code: int | None


def _match(line: bytes) -> re.Match[bytes] | None:
    found = _MARKER.search(line)
    if found is None or (found.group(1) is not None and int(found.group(1)) > 255):
        return None
    return found


def markers(text: bytes) -> Iterator[Marker]:
    """The markers in ``text`` (whole lines of a container's stderr), in order."""
    for line in text.splitlines():
        found = _match(line)
        if found is not None:
            code = found.group(1)
            yield Marker(None if code is None else int(code))


def strip_marker(line: bytes) -> bytes:
    """``line`` without its marker: ``b""`` for a line that was only a marker, the output the
    marker was appended to (ended by a newline) otherwise."""
    found = _match(line)
    if found is None:
        return line
    before = line[: found.start()]
    return before + b"\n" if before else b""
