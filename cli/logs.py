"""``dmsgw logs``: what a deployment's allocations wrote, from a shell.

``dmsgw logs ENSEMBLE`` prints the output of every allocation of the deployment, each under a
``==> node.allocation <==`` header (as ``tail`` heads several files); ``dmsgw logs ENSEMBLE
ALLOCATION`` one allocation's, by its name (``alloc1``) or full name (``node1.alloc1``). What
an allocation wrote to stdout goes to stdout, its stderr to stderr. ``--tail N`` keeps the last
N lines of each; ``--follow`` waits for the deployment to be placed if it is not yet, prints
what is written next, until the deployment ends (or Ctrl-C), then how each allocation ended
(the DMS tells its status, not its exit code). The DMS writes the logs on its own host
(``deployment/logs``), so this works where the DMS runs on this machine: a devnet, a local
DMS.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from typing import TextIO

from ..behaviors.session import Node
from ..behaviors.status import is_terminal
from ..errors import DmsgwError
from . import summary
from .client_commands import _FAILED, NO_EXIT_CODE, _add_connection_options, _connect

FOLLOW_INTERVAL_S = 1.0


def last_lines(text: str, count: int | None) -> str:
    """The last ``count`` lines of ``text`` (``None``: all of it)."""
    if count is None or not text:
        return text
    if count == 0:
        return ""
    lines = text.splitlines(keepends=True)
    return "".join(lines[-count:])


def allocation_names(dms: Node, ensemble_id: str) -> list[str]:
    """Every allocation of the deployment, by its full name, in order."""
    manifest = dms.deployment.manifest(ensemble_id).manifest
    names = sorted((manifest.allocations or {}) if manifest is not None else {})
    if not names:
        raise DmsgwError(
            f"{ensemble_id} has no allocations yet: they exist once it is placed (Committing)"
        )
    return names


class Printer:
    """Writes each allocation's new output once: ``seen`` is how much of each stream of each
    allocation was printed (the DMS hands the whole files each time)."""

    def __init__(self, out: TextIO, err: TextIO, headers: bool) -> None:
        self.out, self.err, self.headers = out, err, headers
        self.seen: dict[tuple[str, str], int] = {}
        self._last: dict[str, str] = {}
        """Whose output each stream printed last (a header when another's comes)."""

    def show(self, name: str, stdout: str, stderr: str, tail: int | None) -> None:
        for stream, text, to in (("stdout", stdout, self.out), ("stderr", stderr, self.err)):
            key = (name, stream)
            if key in self.seen:
                new = text[self.seen[key] :] if len(text) >= self.seen[key] else text
            else:
                new = last_lines(text, tail)
            self.seen[key] = len(text)
            if new:
                self._header(name, stream, to)
                to.write(new)
                to.flush()

    def _header(self, name: str, stream: str, to: TextIO) -> None:
        if self.headers and self._last.get(stream) != name:
            print(f"==> {name} <==", file=to, flush=True)
            self._last[stream] = name


def show_logs(
    dms: Node,
    ensemble_id: str,
    allocation: str | None,
    *,
    tail: int | None = None,
    follow: bool = False,
    out: TextIO | None = None,
    err: TextIO | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Print the logs (see the module); with ``follow``, poll until the deployment ends
    (from its placement: a follow started right after ``dmsgw deploy`` waits for it)."""
    if follow:
        _await_placement(dms, ensemble_id, err or sys.stderr, sleep)
    names: Sequence[str] = [allocation] if allocation else allocation_names(dms, ensemble_id)
    printer = Printer(out or sys.stdout, err or sys.stderr, headers=len(names) > 1)
    while True:
        ended = follow and is_terminal(dms.deployment.status(ensemble_id).status)
        read = [dms.deployment.logs(ensemble_id, name) for name in names]
        for logs in read:
            printer.show(logs.allocation, logs.stdout, logs.stderr, tail)
        if ended:
            full = [logs.allocation for logs in read]
            print("\n".join(endings(dms, ensemble_id, full)), file=err or sys.stderr)
        if not follow or ended:
            return
        sleep(FOLLOW_INTERVAL_S)


def _await_placement(
    dms: Node, ensemble_id: str, err: TextIO, sleep: Callable[[float], None]
) -> None:
    """Until the deployment has allocations, saying once what it waits for; a deployment that
    ends before it was placed is an error naming how it ended."""
    said = False
    while not (dms.deployment.manifest(ensemble_id).manifest.allocations or {}):
        status = dms.deployment.status(ensemble_id).status
        if is_terminal(status):
            raise DmsgwError(f"{ensemble_id} ended {status} before any allocation was placed")
        if not said:
            print(f"dmsgw: {ensemble_id} is {status}: waiting for it to be placed", file=err)
            said = True
        sleep(FOLLOW_INTERVAL_S)


def endings(dms: Node, ensemble_id: str, names: Sequence[str]) -> list[str]:
    """How each allocation ended, as the DMS's manifest shows it (its status: the DMS
    reports no exit code)."""
    allocations = dms.deployment.manifest(ensemble_id).manifest.allocations or {}
    shown = []
    for name in names:
        status = allocations[name].status if name in allocations else "never placed"
        shown.append(f"dmsgw: {name} {status}{NO_EXIT_CODE if status == _FAILED else ''}")
    return shown


def _run(args: argparse.Namespace) -> int:
    if args.tail is not None and args.tail < 0:
        raise DmsgwError(f"--tail: {args.tail} is not a number of lines (0 or more)")
    with _connect(args) as dms:
        try:
            show_logs(dms, args.ensemble, args.allocation, tail=args.tail, follow=args.follow)
        except KeyboardInterrupt:  # how a follow is meant to be stopped
            return 0
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    logs = sub.add_parser(
        "logs",
        help=summary("logs"),
        description=__doc__.split("\n\n", 1)[1] if __doc__ else None,
    )
    logs.add_argument("ensemble", help="the deployment's ensemble ID")
    logs.add_argument(
        "allocation", nargs="?", help="one allocation: alloc1 or node1.alloc1 (default: all)"
    )
    logs.add_argument("--tail", type=int, metavar="N", help="only the last N lines of each")
    logs.add_argument(
        "-f", "--follow", action="store_true", help="print new output until the deployment ends"
    )
    _add_connection_options(logs)
    logs.set_defaults(handler=_run)


def failure_details(dms: Node, ensemble_id: str, failed: Sequence[str], lines: int) -> list[str]:
    """For each failed allocation, its last ``lines`` lines of output (stderr after stdout),
    indented under its name; a log that cannot be read says why instead."""
    shown: list[str] = []
    for name in failed:
        try:
            logs = dms.deployment.logs(ensemble_id, name)
        except DmsgwError as exc:
            shown.append(f"  {name}: its logs cannot be read: {exc}")
            continue
        text = last_lines(logs.stdout + logs.stderr, lines)
        if not text.strip():
            shown.append(f"  {name}: wrote nothing")
            continue
        shown.append(f"  {name}, its last lines (`dmsgw logs {ensemble_id} {name}`: all):")
        shown += [f"    {line}" for line in text.splitlines()]
    return shown
