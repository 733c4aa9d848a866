"""``dmsgw pods``: the gateway's pods as ``kubectl get pods -o wide`` shows them, plus usage.

It reads ``GET /pods`` on a running gateway's operator port (``--operator``, or
``$DMSGW_OPERATOR_LISTEN``, else ``127.0.0.1:4001``; the bearer token from ``$DMSGW_TOKEN`` or
``--token-file`` when the port needs one) and prints one row per pod: ``READY`` and ``STATUS``
as kubectl reads them from the containers, the pod's CPU (millicores) and memory (MiB) as its
DMS measured them (``<none>`` when it reported none), where it runs, and where its services
are reached (``address:public->containerPort``). ``--watch`` prints
the table again every ``--interval`` seconds until Ctrl-C; ``-o json`` prints the JSON.
"""

from __future__ import annotations

import argparse
import http.client
import json
import math
import os
import socket
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TextIO

from ..errors import DmsgwError
from ..interlink.configuration.serve_config import OPERATOR_TOKEN_ENV
from ..interlink.server.listening import AddressError, ListenAddress
from ..interlink.server.options import DEFAULT_OPERATOR_PORT
from . import summary

OPERATOR_ENV = "DMSGW_OPERATOR_LISTEN"
REQUEST_TIMEOUT_S = 30.0
COLUMNS = (
    "NAMESPACE",
    "NAME",
    "READY",
    "STATUS",
    "RESTARTS",
    "CPU",
    "MEMORY",
    "NODE",
    "PEER",
    "ENDPOINTS",
)
_MIB = 1024 * 1024
_NANO_PER_MILLI = 1_000_000
_CLEAR = "\x1b[H\x1b[2J"


class _UnixConnection(http.client.HTTPConnection):
    """HTTP over the operator port's unix socket."""

    def __init__(self, path: Path) -> None:
        super().__init__("localhost", timeout=REQUEST_TIMEOUT_S)
        self._path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(REQUEST_TIMEOUT_S)
        self.sock.connect(str(self._path))


def fetch_pods(address: ListenAddress, token: str | None) -> list[dict[str, Any]]:
    """``GET /pods``; an answer other than 200 is an error naming the gateway's reason."""
    connection = (
        _UnixConnection(address.path)
        if address.path is not None
        else http.client.HTTPConnection(address.host, address.port, timeout=REQUEST_TIMEOUT_S)
    )
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        connection.request("GET", "/pods", headers=headers)
        response = connection.getresponse()
        body = response.read()
    except OSError as exc:
        raise DmsgwError(f"cannot reach the gateway's operator port at {address}: {exc}") from None
    finally:
        connection.close()
    if response.status != 200:
        reason = body.decode(errors="replace").strip() or response.reason
        hint = _ANSWER_HINTS.get(response.status, "")
        raise DmsgwError(f"the gateway at {address} answered {response.status}: {reason}{hint}")
    try:
        pods = json.loads(body)
    except ValueError as exc:
        raise DmsgwError(f"the gateway at {address} answered /pods with no JSON: {exc}") from None
    if not isinstance(pods, list):
        raise DmsgwError(f"the gateway at {address} answered /pods with no list")
    return pods


_ANSWER_HINTS = {
    401: f" (give its token with --token-file FILE or ${OPERATOR_TOKEN_ENV})",
    404: " (no /pods there: is this the plugin port? `dmsgw pods` reads the operator port, "
    f"--operator, default 127.0.0.1:{DEFAULT_OPERATOR_PORT})",
}
"""What to try when the operator port refuses: the answers a user can act on."""


def _status(pod: dict[str, Any]) -> str:
    """kubectl's STATUS: a container's waiting reason, else the terminated reason of a
    failed pod, else the pod phase."""
    states = [c.get("state", {}) for c in pod.get("containers", [])]
    waiting = [s["waiting"].get("reason") for s in states if "waiting" in s]
    if any(waiting):
        return str(next(r for r in waiting if r))
    ended = [s["terminated"].get("reason") for s in states if "terminated" in s]
    if pod.get("phase") == "Failed" and any(ended):
        return str(next(r for r in ended if r))
    return str(pod.get("phase", ""))


def _cpu(usage: dict[str, Any] | None) -> str:
    cores = (usage or {}).get("cpu", {}).get("usageNanoCores")
    return "<none>" if cores is None else f"{round(cores / _NANO_PER_MILLI)}m"


def _memory(usage: dict[str, Any] | None) -> str:
    used = (usage or {}).get("memory", {}).get("workingSetBytes")
    return "<none>" if used is None else f"{round(used / _MIB)}Mi"


def _endpoints(endpoints: Sequence[dict[str, Any]]) -> str:
    """Where the pod's services are reached: ``address:public->containerPort`` each (the
    peer's ID where the DMS names no address for it)."""
    shown = [
        f"{e.get('address') or e.get('peer', '')}:{e.get('port')}->{e.get('containerPort')}"
        for e in endpoints
    ]
    return ",".join(shown) or "<none>"


def printable(text: str) -> str:
    """``text`` with every character a terminal would act on (escape sequences, carriage
    returns, bells) written as Python writes it in a string (``\\x1b``): names, reasons and
    endpoints come from pods, and a pod must not move the operator's cursor or rewrite the
    screen."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)


def row(pod: dict[str, Any]) -> tuple[str, ...]:
    """One pod's cells, in :data:`COLUMNS` order, each :func:`printable`."""
    return tuple(printable(cell) for cell in _cells(pod))


def _cells(pod: dict[str, Any]) -> tuple[str, ...]:
    mains = [c for c in pod.get("containers", []) if not c.get("init")]
    ready = f"{sum(bool(c.get('ready')) for c in mains)}/{len(mains)}"
    return (
        str(pod.get("namespace", "")),
        str(pod.get("name", "")),
        ready,
        _status(pod),
        str(pod.get("restarts", 0)),
        _cpu(pod.get("usage")),
        _memory(pod.get("usage")),
        str(pod.get("node") or "<none>"),
        str(pod.get("peer") or "<none>"),
        _endpoints(pod.get("endpoints") or ()),
    )


def table(pods: Sequence[dict[str, Any]]) -> str:
    """The rows under their headers, in columns as kubectl aligns them (three spaces)."""
    rows = [COLUMNS, *(row(p) for p in pods)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(COLUMNS))]
    text = "\n".join(
        "   ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in rows
    )
    return text + waiting(pods)


def waiting(pods: Sequence[dict[str, Any]]) -> str:
    """Below the table, the pods waiting for DMS capacity in the order they will be admitted
    (their place in line, name and why), or nothing when none waits."""
    waits = sorted(
        ((p["waiting"], p) for p in pods if isinstance(p.get("waiting"), dict)),
        key=lambda wp: wp[0].get("position") if isinstance(wp[0].get("position"), int) else 0,
    )
    lines = [
        f"  {w.get('position', '?')}  {p.get('namespace', '')}/{p.get('name', '')}  "
        f"since {w.get('since', '')}: {w.get('message', '')}"
        for w, p in waits
    ]
    return "\n\nWaiting for DMS capacity, in order:\n" + "\n".join(lines) if lines else ""


def watch(
    fetch: Callable[[], list[dict[str, Any]]],
    out: TextIO,
    *,
    interval_s: float,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Print the table, then again every ``interval_s`` (over the last one on a terminal),
    until Ctrl-C (exit 0)."""
    try:
        while True:
            text = table(fetch())
            print(f"{_CLEAR}{text}" if out.isatty() else f"{text}\n", file=out, flush=True)
            sleep(interval_s)
    except KeyboardInterrupt:
        return 0


def _token(args: argparse.Namespace) -> str | None:
    if args.token_file:
        try:
            return Path(args.token_file).read_text().strip() or None
        except OSError as exc:
            raise DmsgwError(f"--token-file: {exc}") from None
    return os.environ.get(OPERATOR_TOKEN_ENV) or None


def _run(args: argparse.Namespace) -> int:
    text = args.operator or os.environ.get(OPERATOR_ENV) or f"127.0.0.1:{DEFAULT_OPERATOR_PORT}"
    try:
        address = ListenAddress.parse(text, default_port=DEFAULT_OPERATOR_PORT)
    except AddressError as exc:
        raise DmsgwError(f"--operator: {exc}") from None
    if not 0 < args.interval < math.inf:  # also refuses nan, which compares false to all
        raise DmsgwError(f"--interval: {args.interval:g} is not a positive number of seconds")
    token = _token(args)

    def fetch() -> list[dict[str, Any]]:
        return fetch_pods(address, token)

    if args.output == "json":
        print(json.dumps(fetch(), indent=2))
        return 0
    if args.watch:
        return watch(fetch, sys.stdout, interval_s=args.interval)
    print(table(fetch()))
    return 0


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "pods",
        help=summary("pods"),
        description=(
            "List the pods of a running `dmsgw serve` as `kubectl get pods -o wide` does, "
            "with each pod's CPU (millicores) and memory (MiB) as its DMS measured them "
            "(<none>: the DMS reported none). Reads GET /pods on the gateway's operator port."
        ),
    )
    parser.add_argument(
        "--operator",
        metavar="ADDR",
        help=f"the gateway's operator port: host:port or a unix socket path "
        f"[${OPERATOR_ENV}, else 127.0.0.1:{DEFAULT_OPERATOR_PORT}]",
    )
    parser.add_argument(
        "--token-file",
        metavar="FILE",
        help=f"file holding the operator port's bearer token [${OPERATOR_TOKEN_ENV}]",
    )
    parser.add_argument("-w", "--watch", action="store_true", help="refresh until Ctrl-C")
    parser.add_argument(
        "--interval", type=float, default=2.0, metavar="S", help="--watch's period (default 2 s)"
    )
    parser.add_argument(
        "-o", "--output", choices=("wide", "json"), default="wide", help="table or JSON"
    )
    parser.set_defaults(handler=_run)
