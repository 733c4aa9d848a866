"""The lines the pod wrapper writes on a container's stderr, so that the gateway learns its runs.

The DMS's ``deployment/status`` says that an allocation ``failed``, never with which exit code,
and does not count the allocation's restarts. So the pod translation runs every container that
has a ``command`` under a shell wrapper (:mod:`dmsgw.interlink.translate.wrapper`) that writes one
line to stderr when it starts the command and one when the command has ended::

    dmsgw.io/started
    dmsgw.io/exit-code=3

A restarted allocation appends to the same log, so the markers in its ``stderr.log`` are the
history of its runs. The start marker is written on stdout as well, so that each run's part
of ``stdout.log`` can be told apart too (:mod:`dmsgw.interlink.logs.kept_logs`). A marker is
recognised at the end of a line, after whatever unterminated output the command left; an
exit code outside 0-255 is not a marker. Pure: parsing, and the filter that keeps the
markers out of the logs users read.

A container with probes has the wrapper run them (the DMS cannot reach the container, and
its health check restarts whatever fails), and report their outcomes the same way
(:data:`PROBE_MARKER`)::

    dmsgw.io/probe=startup:ok
    dmsgw.io/probe=readiness:failing:HTTP GET http://127.0.0.1:8080/ready: status 503
    dmsgw.io/probe=readiness:down
    dmsgw.io/probe=liveness:down

``ok``: the probe reached its ``successThreshold``; ``down``: its ``failureThreshold`` (the
wrapper then kills the command for a liveness or startup probe); ``failing``: an attempt
failed for a reason other than the last one reported (diagnostics, one line). The pod's
tunnel, run by the wrapper of the container whose ports it exposes, reports its end the same
way (``dmsgw.io/probe=tunnel:down``), and the wrapper stops the command as for a failed
liveness probe.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import NamedTuple

__all__ = [
    "EXIT_CODE_MARKER",
    "is_start_marker",
    "PROBE_MARKER",
    "STARTED_MARKER",
    "Marker",
    "ProbeMarker",
    "markers",
    "probe_markers",
    "strip_marker",
]

STARTED_MARKER = "dmsgw.io/started"
"""Written by the wrapper just before it starts the command."""
EXIT_CODE_MARKER = "dmsgw.io/exit-code="
"""Written by the wrapper, followed by the command's exit status, once the command has ended."""

PROBE_MARKER = "dmsgw.io/probe="
"""Written by the wrapper, followed by ``<probe>:<event>[:<reason>]``, when a probe's outcome
changes."""
PROBE_KINDS = ("startup", "liveness", "readiness", "tunnel")
"""The probes, as the wrapper names them in its markers; ``tunnel`` is the pod's port tunnel
(interLink's wstunnel client), which goes ``down`` when it ends."""

_MARKER = re.compile(
    rb"(?:"
    + re.escape(STARTED_MARKER.encode())
    + rb"|"
    + re.escape(EXIT_CODE_MARKER.encode())
    + rb"([0-9]{1,3}))\r?\n?\Z"
)


_PROBE = re.compile(
    re.escape(PROBE_MARKER.encode())
    + rb"("
    + b"|".join(kind.encode() for kind in PROBE_KINDS)
    + rb"):(ok|down|failing)(?::([^\r\n]*))?\r?\n?\Z"
)


class Marker(NamedTuple):
    """A run started (``exit_code`` is ``None``) or ended with ``exit_code``."""

    exit_code: int | None


class ProbeMarker(NamedTuple):
    """A run started (``probe`` is ``""``), or ``probe``'s outcome: ``event`` is ``ok``,
    ``down`` or ``failing`` (with its ``reason``)."""

    probe: str
    event: str = ""
    reason: str = ""


def _run_match(line: bytes) -> re.Match[bytes] | None:
    found = _MARKER.search(line)
    if found is None or (found.group(1) is not None and int(found.group(1)) > 255):
        return None
    return found


def _match(line: bytes) -> re.Match[bytes] | None:
    """A run's marker or a probe's, at the end of ``line``."""
    return _run_match(line) or _PROBE.search(line)


def is_start_marker(line: bytes) -> bool:
    """Whether ``line`` ends with a run's start marker (the wrapper writes one on stdout
    too, where the runs of one allocation are told apart by it alone)."""
    found = _run_match(line)
    return found is not None and found.group(1) is None


def markers(text: bytes) -> Iterator[Marker]:
    """The markers in ``text`` (whole lines of a container's stderr), in order."""
    for line in text.splitlines():
        found = _run_match(line)
        if found is not None:
            code = found.group(1)
            yield Marker(None if code is None else int(code))


def probe_markers(text: bytes) -> Iterator[ProbeMarker]:
    """The probe markers in ``text`` and the runs' starts between them, in order: a probe's
    outcome is that of the run it follows."""
    for line in text.splitlines():
        probe = _PROBE.search(line)
        if probe is not None:
            kind, event, reason = probe.groups()
            text_reason = (reason or b"").decode("utf-8", "replace").strip()
            yield ProbeMarker(kind.decode(), event.decode(), text_reason)
        elif (found := _run_match(line)) is not None and found.group(1) is None:
            yield ProbeMarker("")


def strip_marker(line: bytes) -> bytes:
    """``line`` without its marker: ``b""`` for a line that was only a marker, the output the
    marker was appended to (ended by a newline) otherwise."""
    found = _match(line)
    if found is None:
        return line
    before = line[: found.start()]
    return before + b"\n" if before else b""
