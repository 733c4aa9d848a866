"""``dmsgw repl``, ``dmsgw invoke`` and ``dmsgw deploy``: the client from a shell.

All three connect like :func:`dmsgw.connect` (``--url``, ``--key``, ``--context``, key and
capability directories; ``$DMSGW_DMS_URL`` or a running ``dmsgw devnet up``,
``$DMSGW_KEY_DIR``, ``$DMSGW_CAP_DIR``, ``$DMS_PASSPHRASE``), and offer the behaviors of the
DMS's version, asked of the DMS unless ``--dms-version`` names it. ``invoke`` prints the reply
as JSON; ``deploy --wait`` follows the deployment until it runs, completes or fails. Every
failure is one line on stderr and a non-zero exit code.
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import code
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
from ..behaviors.session import LEARN_VERSION, Node, connect
from ..behaviors.status import DeploymentStatus
from ..errors import DmsgwError

TERMINAL = {DeploymentStatus.RUNNING, DeploymentStatus.COMPLETED, DeploymentStatus.FAILED}


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
        reply = dms.invoke(args.behavior, _payload(args.data), **options)
    print(reply_json(reply))
    return 0


# --- deploy --------------------------------------------------------------------------------


def follow(
    dms: Node,
    ensemble_id: str,
    *,
    out: Any = None,
    max_wait_s: float = 3600.0,
    sleep: Callable[[float], None] = time.sleep,
) -> DeploymentStatus:
    """Poll the deployment's status (quickly at first, then every few seconds), printing each
    transition as it happens, until it is Running, Completed or Failed."""
    out = out if out is not None else sys.stdout
    start = time.monotonic()
    interval, last = 0.2, None
    while True:
        reply = dms.deployment.status(ensemble_id)
        status = DeploymentStatus.parse(reply.status)
        if status != last:
            elapsed = time.monotonic() - start
            print(f"[{elapsed:6.1f}s] {ensemble_id}: {status.go_name}", file=out, flush=True)
            last = status
        if status in TERMINAL:
            return status
        if time.monotonic() - start > max_wait_s:
            raise DmsgwError(f"{ensemble_id} is still {status.go_name} after {max_wait_s:g} s")
        sleep(interval)
        interval = min(interval * 1.5, 5.0)


def _deploy(args: argparse.Namespace) -> int:
    with _connect(args) as dms:
        reply = dms.deployment.new(args.ensemble, timeout=args.timeout)
        print(f"deployed {args.ensemble}: ensemble {reply.ensemble_id}", flush=True)
        if not args.wait:
            return 0
        final = follow(dms, reply.ensemble_id)
    return 1 if final is DeploymentStatus.FAILED else 0


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
    invoke = sub.add_parser("invoke", help="invoke a DMS behavior and print its reply as JSON")
    invoke.add_argument("behavior", help="e.g. /dms/node/peers/list")
    invoke.add_argument("--data", help="the payload: JSON text, or @file")
    invoke.add_argument("--to", help="another DMS (peer ID, DID or handle JSON), through this one")
    invoke.add_argument("--timeout", type=float, help="seconds the message lives")
    _add_connection_options(invoke)
    invoke.set_defaults(handler=_invoke)

    deploy = sub.add_parser("deploy", help="deploy an ensemble (YAML) on the DMS network")
    deploy.add_argument("ensemble", help="ensemble YAML file")
    deploy.add_argument(
        "--wait", action="store_true", help="follow it until Running/Completed/Failed"
    )
    deploy.add_argument("--timeout", type=float, help="seconds the request lives (>= 60)")
    _add_connection_options(deploy)
    deploy.set_defaults(handler=_deploy)

    repl = sub.add_parser("repl", help="an interactive Python session with `dms` connected")
    _add_connection_options(repl)
    repl.set_defaults(handler=_repl)
