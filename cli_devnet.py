"""``dmsgw devnet up`` and ``dmsgw devnet grant``: the embedded DMS devnet from a shell.

``up`` runs N simulated DMS nodes in the foreground and prints, for each, its REST URL, DID,
peer ID and machine, and the command that grants a gateway key a capability on it; Ctrl-C or
SIGTERM stops it cleanly (every allocation process ends, the working directory is removed).

``grant`` is ``nunet cap grant --context dms`` for a devnet node: the node's key follows from
the devnet's seed, so it needs neither the running devnet nor a passphrase. It prints the token
list JSON; with ``--anchor CONTEXT`` it also adds it to the gateway's capability context file as
a provide anchor (creating the file for the subject DID if needed), which is all ``dmsgw
invoke``/``dmsgw.connect`` need to be obeyed by the devnet.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shlex
import signal
import sys
import time
from pathlib import Path

from dmsgw.behaviors.units import UnitError, parse_go_duration
from dmsgw.clock import system_clock
from dmsgw.devnet.confinement import choose_run_as, describe_run_as, parse_run_as
from dmsgw.devnet.devnet import DEFAULT_SEED, Devnet, grant_token, node_key
from dmsgw.devnet.sandbox import Isolation
from dmsgw.devnet.timeouts import DEVNET_TIMEOUTS, DMS_TIMEOUTS
from dmsgw.errors import DmsgwError
from dmsgw.keys.did import DID, DIDError
from dmsgw.keys.keystore import validate_key_name
from dmsgw.keys.trust import provider_from_private_key
from dmsgw.keys.ucan import CapabilityContext, TokenList, load_context, save_context
from dmsgw.keys.ucan.store import default_cap_dir

MAX_NODES = 64
DEFAULT_GATEWAY_CONTEXT = "dmsgw"
CAP_DIR_ENV = "DMSGW_CAP_DIR"
TIMINGS = {"devnet": DEVNET_TIMEOUTS, "dms": DMS_TIMEOUTS}


class DevnetCliError(DmsgwError):
    """A devnet command that cannot do what it was asked (the message says why)."""


def _node_count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of nodes") from None
    if not 1 <= value <= MAX_NODES:
        raise argparse.ArgumentTypeError(f"a devnet has 1 to {MAX_NODES} nodes, not {value}")
    return value


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{value} is not a port number (0-65535)")
    return value


def _cap_dir(value: str | None) -> Path:
    chosen = value or os.environ.get(CAP_DIR_ENV)
    return Path(chosen).expanduser() if chosen else default_cap_dir()


# --- up ------------------------------------------------------------------------------------


def _dir_option(cap_dir: Path) -> list[str]:
    return [] if cap_dir == default_cap_dir() else ["--cap-dir", str(cap_dir)]


def grant_command(seed: str, node: int, context: str, cap_dir: Path, subject: str) -> str:
    """The shell command that grants ``/dms/node`` on ``node`` and anchors it for ``context``."""
    argv = ["dmsgw", "devnet", "grant", "--seed", seed, "--node", str(node)]
    argv += ["--cap", "/dms/node", "--anchor", context, *_dir_option(cap_dir)]
    return shlex.join(argv) + (f" {subject}" if subject else "")


def _gateway_subject(context: str, cap_dir: Path) -> str:
    """Nothing when the gateway's context file exists (``grant`` reads its DID), else a
    placeholder for the DID that ``dmsgw whoami`` prints."""
    if (cap_dir / f"{context}.cap").is_file():
        return ""
    return "<gateway DID>"


def _banner(devnet: Devnet, started_s: float, context: str, cap_dir: Path) -> str:
    subject = _gateway_subject(context, cap_dir)
    lines = [
        f"dmsgw devnet: {len(devnet.nodes)} DMS node(s), seed {devnet.seed!r}, "
        f"started in {started_s * 1000:.0f} ms (Ctrl-C stops it)",
        f"work dir {devnet.root} (allocation sandboxes and logs; removed on stop)",
        describe_run_as(choose_run_as(devnet.run_as)),
        "",
    ]
    for i, entry in enumerate(devnet.nodes):
        node = entry.node
        offer = entry.ledger.onboarded
        lines += [
            f"node{i}  {entry.url}  [{entry.profile.label}]",
            f"  DID       {node.did.uri}",
            f"  peer ID   {node.peer_id}",
            f"  offers    {offer.describe() if offer else 'nothing (not onboarded)'}",
            f"  grant     {grant_command(devnet.seed, i, context, cap_dir, subject)}",
            "",
        ]
    if subject:
        lines.append(
            "Replace <gateway DID> with the gateway key's DID (`dmsgw whoami` prints it); the "
            f"grant is written to {cap_dir / (context + '.cap')}."
        )
    invoke = ["dmsgw", "invoke", "--url", devnet.urls[0], "--key", context]
    invoke += [*_dir_option(cap_dir), "/dms/node/peers/list"]
    lines.append(f"A grant from any node is obeyed by every node. Then: {shlex.join(invoke)}")
    return "\n".join(lines)


async def _run_up(args: argparse.Namespace) -> int:
    validate_key_name(args.context)
    isolation = None if args.isolation == "auto" else Isolation(args.isolation)
    try:
        devnet = Devnet(
            args.nodes,
            seed=args.seed,
            base_port=args.base_port,
            host=args.host,
            timeouts=TIMINGS[args.timings],
            isolation=isolation,
            run_as=parse_run_as(args.run_as) if args.run_as else None,
        )
    except ValueError as exc:
        raise DevnetCliError(str(exc)) from None
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    began = time.perf_counter()
    try:
        await devnet.start()
    except OSError as exc:
        await devnet.stop()
        raise DevnetCliError(
            f"cannot listen on {args.host} from port {args.base_port}: {exc.strerror or exc}"
        ) from None
    try:
        print(_banner(devnet, time.perf_counter() - began, args.context, _cap_dir(args.cap_dir)))
        sys.stdout.flush()
        await stop.wait()
    finally:
        await devnet.stop()
    print("dmsgw devnet: stopped", file=sys.stderr)
    return 0


def cmd_up(args: argparse.Namespace) -> int:
    return asyncio.run(_run_up(args))


# --- grant ---------------------------------------------------------------------------------


def _parse_subject(text: str) -> DID:
    try:
        did = DID(text)
        did.public_key()
    except DIDError as exc:
        raise DevnetCliError(f"{text!r} is not a did:key DID: {exc}") from None
    return did


def _anchor(tokens: TokenList, subject: DID, context: str, cap_dir: Path) -> Path:
    """Add ``tokens`` to the ``context`` file as a provide anchor (creating it for ``subject``)."""
    if (cap_dir / f"{context}.cap").is_file():
        ctx = load_context(context, directory=cap_dir)
        if ctx.did != subject:
            raise DevnetCliError(
                f"capability context {context!r} belongs to {ctx.did.uri}, not to {subject.uri}"
            )
    else:
        ctx = CapabilityContext(subject, name=context)
    ctx.add_roots(provide=tokens)
    return save_context(ctx, directory=cap_dir)


def _subject(args: argparse.Namespace, cap_dir: Path) -> DID:
    """The DID named on the command line, else that of the ``--anchor`` context file."""
    if args.subject:
        return _parse_subject(args.subject)
    if args.anchor and (cap_dir / f"{args.anchor}.cap").is_file():
        return load_context(args.anchor, directory=cap_dir).did
    where = f"no capability context {args.anchor!r} in {cap_dir}" if args.anchor else "no DID"
    raise DevnetCliError(f"{where}: give the gateway's DID (`dmsgw whoami` prints it)")


def cmd_grant(args: argparse.Namespace) -> int:
    cap_dir = _cap_dir(args.cap_dir)
    if args.anchor:
        validate_key_name(args.anchor)
    if args.node < 0:
        raise DevnetCliError(f"--node {args.node}: nodes are numbered from 0")
    subject = _subject(args, cap_dir)
    caps = [c for value in args.cap or ["/dms/node"] for c in value.split(",") if c]
    bad = [c for c in caps if not c.startswith("/")]
    if bad:
        raise DevnetCliError(f"a capability is a path such as /dms/node, not {bad[0]!r}")
    try:
        lifetime = parse_go_duration(args.duration)
    except UnitError as exc:
        raise DevnetCliError(f"--duration {args.duration!r}: {exc}") from None
    if lifetime <= 0:
        raise DevnetCliError(f"--duration {args.duration!r}: must be positive, e.g. 8760h")
    issuer = CapabilityContext(provider_from_private_key(node_key(args.seed, args.node)))
    tokens = grant_token(
        issuer, subject, caps, topics=args.topic or (), expire=system_clock() + lifetime
    )
    print(tokens.to_json().decode())
    if args.anchor:
        path = _anchor(tokens, subject, args.anchor, cap_dir)
        print(f"dmsgw: added to {path} as a provide anchor", file=sys.stderr)
    return 0


# --- parsers -------------------------------------------------------------------------------


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``devnet`` (``up``, ``grant``)."""
    devnet = subparsers.add_parser(
        "devnet",
        help="run the embedded DMS devnet, grant keys capabilities on it",
        description="Simulated DMS nodes speaking the real wire protocol on loopback.",
    )
    sub = devnet.add_subparsers(dest="devnet_command", metavar="COMMAND", required=True)

    up = sub.add_parser(
        "up",
        help="start a devnet in the foreground",
        description="Start N simulated DMS nodes (REST on loopback) until Ctrl-C/SIGTERM. "
        "Allocations run as host processes (images are not pulled).",
    )
    up.add_argument("--nodes", type=_node_count, default=3, help="how many nodes (default 3)")
    up.add_argument(
        "--base-port",
        type=_port,
        default=9990,
        help="node i listens on BASE+i (default 9990; 0: any free ports)",
    )
    up.add_argument("--host", default="127.0.0.1", help="address to listen on (default loopback)")
    up.add_argument(
        "--seed", default=DEFAULT_SEED, help="identities follow from it (default 'default')"
    )
    up.add_argument(
        "--timings",
        choices=sorted(TIMINGS),
        default="devnet",
        help="orchestration timeouts: devnet (quick bids) or dms (the DMS's own)",
    )
    up.add_argument(
        "--isolation",
        choices=("auto", *(i.value for i in Isolation)),
        default="auto",
        help="how volumes reach their paths: namespace (root + unshare), rewrite, or auto",
    )
    up.add_argument(
        "--run-as",
        metavar="USER[:GROUP]",
        help="as root, the unprivileged user allocations run as (default nobody:nogroup)",
    )
    up.add_argument(
        "--context",
        default=DEFAULT_GATEWAY_CONTEXT,
        help="the gateway key and context the printed commands use (default dmsgw)",
    )
    up.add_argument(
        "--cap-dir", help=f"capability directory (default ${CAP_DIR_ENV}, ~/.nunet/cap)"
    )
    up.set_defaults(handler=cmd_up)

    grant = sub.add_parser(
        "grant",
        help="delegate capabilities of a devnet node to a DID",
        description="Issue a delegation from devnet node N (its key follows from the seed) "
        "to SUBJECT_DID and print the token list JSON; --anchor adds it to a capability "
        "context as a provide anchor.",
    )
    grant.add_argument("subject", nargs="?", metavar="SUBJECT_DID", help="the gateway's DID")
    grant.add_argument("--seed", default=DEFAULT_SEED, help="the devnet's seed (default 'default')")
    grant.add_argument("--node", type=int, default=0, help="the granting node (default 0)")
    grant.add_argument(
        "--cap", action="append", help="capability, e.g. /dms/node (repeatable; default /dms/node)"
    )
    grant.add_argument("--topic", action="append", help="broadcast topic, e.g. /nunet")
    grant.add_argument("--duration", default="8760h", help="lifetime (Go duration; default 8760h)")
    grant.add_argument("--anchor", metavar="CONTEXT", help="add it to this capability context")
    grant.add_argument(
        "--cap-dir", help=f"capability directory (default ${CAP_DIR_ENV}, ~/.nunet/cap)"
    )
    grant.set_defaults(handler=cmd_grant)
