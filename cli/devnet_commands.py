"""``dmsgw devnet up`` and ``dmsgw devnet grant``: the embedded DMS devnet from a shell.

``up`` runs N simulated DMS nodes in the foreground and prints, for each, its REST URL, DID, peer ID
and machine, and the command that grants a gateway key what it uses on it; Ctrl-C or SIGTERM stops
it cleanly (every allocation process ends, the working directory is removed). While it runs, it is
recorded in the user's state directory (:mod:`dmsgw.devnet_files.devnet_record`), so that the client
commands reach it without ``--url``.

``grant`` is ``nunet cap grant --context dms`` for a devnet node: the node's key follows from
the devnet's seed, so it needs neither the running devnet nor a passphrase (it takes the
running devnet's seed, and checks ``--node`` against it, when there is one). With ``--anchor
CONTEXT`` it first adds the grant to the gateway's capability context file as a provide anchor
(creating the file for the subject DID if needed), which is all ``dmsgw invoke`` and
``dmsgw.connect`` need to be obeyed by the devnet; then it prints the token list JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import shlex
import signal
import sys
import time
from pathlib import Path

from ..behaviors.units import UnitError, parse_go_duration
from ..clock import system_clock
from ..devnet.confinement import parse_run_as
from ..devnet.devnet import DEFAULT_SEED, Devnet, grant_token, node_key
from ..devnet.sandbox import Isolation
from ..devnet.timeouts import DEVNET_TIMEOUTS, DMS_TIMEOUTS
from ..devnet_files import devnet_record
from ..devnet_files.devnet_record import GATEWAY_CAPABILITIES, GATEWAY_TOPICS, grant_command
from ..errors import DmsgwError
from ..keys.did import DID, DIDError
from ..keys.keystore import KeyStore, validate_key_name
from ..keys.trust import provider_from_private_key
from ..keys.ucan import CapabilityContext, TokenList, load_context, save_context
from ..keys.ucan.expiry import ExpiryError, expiry_after
from ..keys.ucan.store import CAP_DIR_ENV, default_cap_dir
from . import summary
from .cap import common as cap_common

MAX_NODES = 64
DEFAULT_GATEWAY_CONTEXT = "dmsgw"
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


# --- up ------------------------------------------------------------------------------------


def _dir_option(cap_dir: Path) -> Path | None:
    """``cap_dir`` when a printed command must name it (it is not the default)."""
    return None if cap_dir == default_cap_dir() else cap_dir


def _gateway_exists(context: str, cap_dir: Path) -> bool:
    """Whether ``grant --anchor context`` finds the gateway's DID (its context or key file)."""
    return (cap_dir / f"{context}.cap").is_file() or KeyStore().exists(context)


def _banner(devnet: Devnet, started_s: float, context: str, cap_dir: Path) -> str:
    lines = [
        f"dmsgw devnet: {len(devnet.nodes)} DMS node(s), seed {devnet.seed!r}, "
        f"started in {started_s * 1000:.0f} ms (Ctrl-C stops it)",
        f"work dir {devnet.root} (allocation sandboxes and logs; removed on stop)",
        devnet.describe_identities(),
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
            f"  grant     {_gateway_grant(devnet.seed, i, context, cap_dir)}",
            "",
        ]
    if not _gateway_exists(context, cap_dir):
        lines.append(
            f"The gateway key {context!r} does not exist yet: `dmsgw whoami` creates it. The "
            f"grant is written to {cap_dir / (context + '.cap')}."
        )
    invoke = ["dmsgw", "invoke"]
    if context != DEFAULT_GATEWAY_CONTEXT:
        invoke += ["--key", context]
    if _dir_option(cap_dir) is not None:
        invoke += ["--cap-dir", str(cap_dir)]
    lines.append(
        "A grant from any node is obeyed by every node. While this runs, `dmsgw invoke`, "
        "`deploy`, `repl` and dmsgw.connect() use node0 when no DMS URL is set. "
        f"Then: {shlex.join([*invoke, '/dms/node/peers/list'])}"
    )
    return "\n".join(lines)


def _gateway_grant(seed: str, node: int, context: str, cap_dir: Path) -> str:
    """The grant of everything a gateway uses (``GATEWAY_CAPABILITIES``) on ``node``."""
    return grant_command(
        seed,
        node,
        GATEWAY_CAPABILITIES,
        GATEWAY_TOPICS,
        anchor=context,
        cap_dir=_dir_option(cap_dir),
    )


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
    previous = devnet_record.running()
    try:
        devnet_record.record(devnet.seed, devnet.urls)
        print(_banner(devnet, time.perf_counter() - began, args.context, cap_common.cap_dir(args)))
        sys.stdout.flush()
        await stop.wait()
    finally:
        devnet_record.forget(previous=previous)
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
    """The DID named on the command line, else that of the ``--anchor`` context file, else
    that of the key of the same name (the one ``dmsgw whoami`` creates)."""
    if args.subject:
        return _parse_subject(args.subject)
    if not args.anchor:
        raise DevnetCliError("no DID: give the gateway's DID (`dmsgw whoami` prints it)")
    if (cap_dir / f"{args.anchor}.cap").is_file():
        return load_context(args.anchor, directory=cap_dir).did
    keys = KeyStore()
    if keys.exists(args.anchor):
        return DID.from_public_key(keys.unlock(args.anchor).public_key())
    raise DevnetCliError(
        f"no capability context {args.anchor!r} in {cap_dir} and no key {args.anchor!r} in "
        f"{keys.keys_dir}: run `dmsgw whoami` first (it creates the key), or give the DID"
    )


def _granting_seed_and_node(args: argparse.Namespace) -> tuple[str, int]:
    """The seed (default: the running devnet's) and a node that exists in it."""
    running = devnet_record.running()
    seed = args.seed or (running.seed if running is not None else DEFAULT_SEED)
    if not 0 <= args.node < MAX_NODES:
        raise DevnetCliError(f"--node {args.node}: nodes are numbered from 0 to {MAX_NODES - 1}")
    if running is not None and running.seed == seed and args.node >= len(running.urls):
        raise DevnetCliError(
            f"--node {args.node}: the running devnet (seed {seed!r}) has {len(running.urls)} "
            f"node(s), numbered 0 to {len(running.urls) - 1}"
        )
    return seed, args.node


def _grant_scope(args: argparse.Namespace) -> tuple[list[str], list[str]]:
    """The capabilities and topics asked for; by default what a gateway uses."""
    if not args.cap:
        return list(GATEWAY_CAPABILITIES), args.topic or list(GATEWAY_TOPICS)
    return list(cap_common.capabilities(args.cap, "--cap")), args.topic or []


def cmd_grant(args: argparse.Namespace) -> int:
    cap_dir = cap_common.cap_dir(args)
    if args.anchor:
        validate_key_name(args.anchor)
    seed, node = _granting_seed_and_node(args)
    subject = _subject(args, cap_dir)
    caps, topics = _grant_scope(args)
    try:
        expire = expiry_after(system_clock(), parse_go_duration(args.duration))
    except (UnitError, ExpiryError) as exc:
        raise DevnetCliError(f"--duration {args.duration!r}: {exc}") from None
    issuer = CapabilityContext(provider_from_private_key(node_key(seed, node)))
    tokens = grant_token(issuer, subject, caps, topics=topics, expire=expire)
    if args.anchor:  # saved before anything is printed: a closed pipe cannot lose it
        path = _anchor(tokens, subject, args.anchor, cap_dir)
        print(f"dmsgw: added to {path} as a provide anchor", file=sys.stderr, flush=True)
    print(tokens.to_json().decode())
    return 0


# --- parsers -------------------------------------------------------------------------------


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``devnet`` (``up``, ``grant``)."""
    devnet = subparsers.add_parser(
        "devnet",
        help=summary("devnet"),
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
        help="as root, one unprivileged user for every allocation (default: a user of each "
        "pod's own)",
    )
    up.add_argument(
        "--context",
        default=DEFAULT_GATEWAY_CONTEXT,
        help="the gateway key and context the printed commands use (default dmsgw)",
    )
    up.add_argument(
        "--cap-dir", help=f"capability directory (default ${CAP_DIR_ENV}, else ~/.nunet/cap)"
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
    grant.add_argument(
        "--seed", help="the devnet's seed (default: the running devnet's, else 'default')"
    )
    grant.add_argument("--node", type=int, default=0, help="the granting node (default 0)")
    grant.add_argument(
        "--cap",
        action="append",
        help="capability, e.g. /dms/node (repeatable; default "
        f"{' '.join(GATEWAY_CAPABILITIES)}, all a gateway uses)",
    )
    grant.add_argument(
        "--topic",
        action="append",
        help=f"broadcast topic (repeatable; default {' '.join(GATEWAY_TOPICS)} without --cap)",
    )
    grant.add_argument("--duration", default="8760h", help="lifetime (Go duration; default 8760h)")
    grant.add_argument("--anchor", metavar="CONTEXT", help="add it to this capability context")
    grant.add_argument(
        "--cap-dir", help=f"capability directory (default ${CAP_DIR_ENV}, else ~/.nunet/cap)"
    )
    grant.set_defaults(handler=cmd_grant)
