"""``dmsgw repl``, ``dmsgw invoke`` and ``dmsgw deploy``: the client from a shell.

All three connect like :func:`dmsgw.connect` (``--url``, ``--key``, ``--context``, key and
capability directories; ``$DMSGW_DMS_URL`` or a running ``dmsgw devnet up``,
``$DMSGW_KEY_DIR``, ``$DMSGW_CAP_DIR``, ``$DMS_PASSPHRASE``), and offer the behaviors of the
DMS's version, asked of the DMS unless ``--dms-version`` names it. ``invoke`` prints the reply
as JSON; ``deploy --wait`` shows the deployment's progress, one line per change (its status,
each allocation's placement, status, health and end), until its services run or, for a job
(tasks only), until it ends, and exits with its outcome. Every failure is one line on stderr
and a non-zero exit code.
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import code
import dataclasses
import inspect
import json
import sys
import threading
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..behaviors.catalog import DMS_VERSIONS
from ..behaviors.ensemble import AllocationType
from ..behaviors.ensemble_yaml import load_ensemble_yaml
from ..behaviors.session import LEARN_VERSION, Node, connect
from ..behaviors.status import AllocationStatus, DeploymentStatus, is_terminal
from ..behaviors.typed_client import allocation_key
from ..errors import DmsgwError
from . import summary


def _add_connection_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("connection")
    group.add_argument(
        "--url",
        help="DMS REST API (default $DMSGW_DMS_URL, else node0 of a running `dmsgw devnet up`, "
        "else http://127.0.0.1:9999)",
    )
    group.add_argument("--key", help="the gateway's key name (default dmsgw)")
    group.add_argument("--context", help="capability context name (default: the key's name)")
    group.add_argument(
        "--key-dir", type=Path, help="key directory (default $DMSGW_KEY_DIR, else ~/.nunet/key)"
    )
    group.add_argument(
        "--cap-dir",
        type=Path,
        help="capability directory (default $DMSGW_CAP_DIR, else ~/.nunet/cap)",
    )
    group.add_argument(
        "--dms-version",
        choices=[LEARN_VERSION, *DMS_VERSIONS],
        default=LEARN_VERSION,
        help="the DMS version whose behaviors to offer (default: ask the DMS)",
    )


def _connect(args: argparse.Namespace) -> Node:
    return connect(
        args.url,
        key=args.key,
        context=args.context,
        key_dir=args.key_dir,
        cap_dir=args.cap_dir,
        dms_version=args.dms_version,
    )


def reply_json(reply: Any) -> str:
    """A reply as indented JSON with the DMS's own keys."""
    if isinstance(reply, list):
        return "[" + ",\n".join(reply_json(r) for r in reply) + "]"
    raw = reply.to_json() if hasattr(reply, "to_json") else json.dumps(reply).encode()
    return json.dumps(json.loads(raw), indent=2, ensure_ascii=False)


def _payload(text: str | None) -> str | None:
    if text is None:
        return None
    if text.startswith("@"):
        path = Path(text[1:])
        try:
            return path.read_text()
        except OSError as exc:
            raise DmsgwError(f"cannot read the payload file {path}: {exc.strerror}") from None
    return text


# --- invoke --------------------------------------------------------------------------------


def _invoke(args: argparse.Namespace) -> int:
    with _connect(args) as dms:
        options: dict[str, Any] = {}
        if args.to:
            options["to"] = args.to
        if args.timeout is not None:
            options["timeout"] = args.timeout
        payload = _payload(args.data)
        logs_of = _logs_request(dms, payload, options) if args.behavior == LOGS else None
        if logs_of is not None:
            payload = json.dumps(logs_of)
        reply = dms.invoke(args.behavior, payload, **options)
    print(reply_json(reply))
    written = str(getattr(reply, "logs_written_to", None) or "")
    if logs_of is not None and written:
        ensemble, allocation = logs_of["EnsembleID"], logs_of["AllocationName"]
        print(
            f"dmsgw: the DMS wrote stdout.log and stderr.log in {written} on its "
            f"host; `dmsgw logs {ensemble} {allocation}` prints them",
            file=sys.stderr,
        )
    return 0


LOGS = "/dms/node/deployment/logs"


def _logs_request(dms: Node, payload: str | None, options: dict[str, Any]) -> Any:
    """A ``deployment/logs`` payload whose ``AllocationName`` is the allocation's full name,
    as the DMS needs it, where it gave the name in the ensemble (``alloc1``); ``None`` when
    the payload is not one to complete (the DMS then answers it as it is)."""
    try:
        request = json.loads(payload or "")
    except ValueError:
        return None
    if not isinstance(request, dict) or not isinstance(request.get("EnsembleID"), str):
        return None
    name = request.get("AllocationName")
    if not isinstance(name, str) or "." in name:
        return request
    manifest = dms.deployment.manifest(request["EnsembleID"], **options).manifest
    allocations = manifest.allocations if manifest is not None else None
    return {**request, "AllocationName": allocation_key(request["EnsembleID"], name, allocations)}


# --- deploy --------------------------------------------------------------------------------


@dataclasses.dataclass
class Progress:
    """What ``deploy --wait`` has shown of a deployment, to print only what changed."""

    ensemble_id: str
    out: Any
    start: float = dataclasses.field(default_factory=time.monotonic)
    status: DeploymentStatus | None = None
    allocations: dict[str, str] = dataclasses.field(default_factory=dict)
    placed: set[str] = dataclasses.field(default_factory=set)
    types: dict[str, str] = dataclasses.field(default_factory=dict)

    def line(self, text: str) -> None:
        elapsed = time.monotonic() - self.start
        print(f"[{elapsed:6.1f}s] {text}", file=self.out, flush=True)

    def short(self, allocation: str) -> str:
        """An allocation's name without its ensemble's ID (``node.allocation``)."""
        return allocation.removeprefix(f"{self.ensemble_id}_")

    def saw_status(self, reply: Any) -> bool:
        """Show the deployment's status if it changed; whether it did."""
        status = DeploymentStatus.parse(reply.status)
        if status == self.status:
            return False
        self.status = status
        self.line(f"{self.ensemble_id}: {status.go_name}")
        return True

    def saw_allocations(self, reply: Any) -> None:
        """Show each allocation's status and health where they changed."""
        for name, info in sorted((reply.allocation_info or {}).items()):
            state = info.status + (f" ({info.health})" if info.health else "")
            if self.allocations.get(self.short(name)) != state:
                self.allocations[self.short(name)] = state
                self.line(f"{self.short(name)}: {state}")

    def saw_manifest(self, manifest: Any) -> None:
        """Show where each allocation was placed, and how it ended once the DMS lists it
        (the manifest keeps what ``allocation_info`` stops listing at the end)."""
        nodes = manifest.nodes or {} if manifest is not None else {}
        for name, allocation in sorted((manifest.allocations or {}).items() if manifest else ()):
            self.types[name] = allocation.type
            node = nodes.get(allocation.node_id)
            if name not in self.placed and node is not None and node.peer:
                self.placed.add(name)
                self.line(f"{name}: placed on node {allocation.node_id} (peer {node.peer})")
            known = self.allocations.get(name, "").split(" ")[0]
            if allocation.status and allocation.status != known:
                self.allocations[name] = allocation.status
                self.line(f"{name}: {allocation.status}")

    @property
    def is_task(self) -> bool:
        """An ensemble of tasks only (a job): it is followed to its end, not to Running."""
        return bool(self.types) and all(t == AllocationType.TASK for t in self.types.values())

    @property
    def failed(self) -> list[str]:
        """The allocations last seen failed."""
        return sorted(n for n, s in self.allocations.items() if s.startswith(_FAILED))

    def failure(self, error: str) -> str:
        """Why the deployment failed ("" if it did not): the DMS's error, else all its
        replies tell (decision 117): how each allocation was last seen (one that never
        started is named so), and that the DMS reports no exit code."""
        failed = ", ".join(f"allocation {n} failed{NO_EXIT_CODE}" for n in self.failed)
        if self.status != DeploymentStatus.FAILED:
            return failed
        if error:
            return error
        names = sorted({*self.types, *self.allocations})
        states = {n: self.allocations.get(n, "").split(" ")[0] for n in names}
        pending = [n for n, s in states.items() if s in _NEVER_STARTED]
        told = [*(f"allocation {n} never started" for n in pending), failed]
        if not states:
            told = ["no allocation was placed (no peer's bid in time, or a commit failed)"]
        return "; ".join(["the DMS gave no reason", *filter(None, told)]) + _CAUSE_IN_DMS_LOG


_FAILED = AllocationStatus.FAILED.value
_NEVER_STARTED = ("", AllocationStatus.PENDING.value)
NO_EXIT_CODE = " (the DMS reports no exit code)"
_CAUSE_IN_DMS_LOG = ": the DMS tells the cause only in its own log, on its host"
FAILURE_LINES = 10
"""How many of a failed allocation's last lines of output ``deploy --wait`` shows."""


def follow(
    dms: Node,
    ensemble_id: str,
    *,
    out: Any = None,
    max_wait_s: float = 3600.0,
    sleep: Callable[[float], None] = time.sleep,
) -> tuple[DeploymentStatus, str, list[str]]:
    """Poll the deployment (quickly at first, then every few seconds), printing one line per
    change: its status, each allocation's placement (from the manifest), status and health,
    and how it ended. A deployment of services is followed until it runs; one of tasks (a
    job) until it ends. Returns the last status, why it failed (``""``: it did not) and the
    allocations that failed."""
    progress = Progress(ensemble_id, out if out is not None else sys.stdout)
    interval = 0.2
    while True:
        reply = dms.deployment.status(ensemble_id)
        if progress.saw_status(reply) or is_terminal(reply.status):
            progress.saw_manifest(dms.deployment.manifest(ensemble_id).manifest)
        progress.saw_allocations(reply)
        status = progress.status
        assert status is not None
        if is_terminal(status) or (status == DeploymentStatus.RUNNING and not progress.is_task):
            return status, progress.failure(reply.error), progress.failed
        if time.monotonic() - progress.start > max_wait_s:
            raise DmsgwError(f"{ensemble_id} is still {status.go_name} after {max_wait_s:g} s")
        sleep(interval)
        interval = min(interval * 1.5, 5.0)


def _deploy(args: argparse.Namespace) -> int:
    ensemble = load_ensemble_yaml(args.ensemble)  # a bad file is told before any connection
    with _connect(args) as dms:
        reply = dms.deployment.new(ensemble, timeout=args.timeout)
        print(f"deployed {args.ensemble}: ensemble {reply.ensemble_id}", flush=True)
        if not args.wait:
            return 0
        _, failure, failed = follow(dms, reply.ensemble_id)
        details: list[str] = []
        if failure:
            from .logs import failure_details

            details = failure_details(dms, reply.ensemble_id, failed, FAILURE_LINES)
    if failure:
        print(f"dmsgw: deployment {reply.ensemble_id} failed: {failure}", file=sys.stderr)
        if details:
            print("\n".join(details), file=sys.stderr)
        return 1
    return 0


# --- repl ----------------------------------------------------------------------------------


class Console(code.InteractiveConsole):
    """A Python console where ``await`` works at top level (as ``python -m asyncio``): an
    awaited expression runs on a private event loop while the console waits for it."""

    def __init__(self, namespace: dict[str, Any]) -> None:
        super().__init__(namespace)
        self.compile.compiler.flags |= ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    def runcode(self, code_obj: types.CodeType) -> None:
        try:
            result = types.FunctionType(code_obj, self.locals)()
            if inspect.iscoroutine(result):
                asyncio.run_coroutine_threadsafe(result, self.loop).result()
        except SystemExit:
            raise
        except DmsgwError as exc:
            print(f"{type(exc).__name__}: {exc}", file=sys.stderr)
        except BaseException:
            self.showtraceback()

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.close()


BANNER = """dmsgw {version} — connected as {did}
to {url}. `dms` is the DMS: try dms.peers.list(), dms.resources.free(),
dms.deployment.new("ensemble.yaml"), help(dms.deployment). `await` works here too."""


def _repl(args: argparse.Namespace) -> int:
    from .. import __version__

    dms = _connect(args)
    console = Console({"dms": dms, "__name__": "__console__"})
    try:
        import readline
        import rlcompleter

        readline.set_completer(rlcompleter.Completer(console.locals).complete)
        readline.parse_and_bind("tab: complete")
    except ImportError:  # no readline on this platform: no completion, same console
        pass
    try:
        console.interact(
            banner=BANNER.format(version=__version__, did=dms.did, url=dms.url), exitmsg=""
        )
    finally:
        console.close()
        dms.close()
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    invoke = sub.add_parser("invoke", help=summary("invoke"))
    invoke.add_argument("behavior", help="e.g. /dms/node/peers/list")
    invoke.add_argument("--data", help="the payload: JSON text, or @file")
    invoke.add_argument("--to", help="another DMS (peer ID, DID or handle JSON), through this one")
    invoke.add_argument("--timeout", type=float, help="seconds the message lives")
    _add_connection_options(invoke)
    invoke.set_defaults(handler=_invoke)

    deploy = sub.add_parser("deploy", help=summary("deploy"))
    deploy.add_argument("ensemble", help="ensemble YAML file")
    deploy.add_argument(
        "--wait",
        action="store_true",
        help="show its progress until it runs (a job: until it ends); exit 1 if it failed",
    )
    deploy.add_argument("--timeout", type=float, help="seconds the request lives (>= 60)")
    _add_connection_options(deploy)
    deploy.set_defaults(handler=_deploy)

    repl = sub.add_parser("repl", help=summary("repl"))
    _add_connection_options(repl)
    repl.set_defaults(handler=_repl)
