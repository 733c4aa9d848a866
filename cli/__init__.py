"""The ``dmsgw`` command: one sub-command family per module (:mod:`.key`, :mod:`.cap`, …).

Every expected failure is a :class:`~dmsgw.errors.DmsgwError`; it is printed as one line
``dmsgw: error: <reason>`` with exit code 2, never as a traceback. Output into a pipe that
closes early (``dmsgw … | head``) ends the command quietly, as a shell tool does.

A command imports only the family that has it (:data:`COMMANDS`): ``dmsgw invoke`` does not
pay for the gateway's configuration and servers that ``dmsgw serve`` needs, and ``dmsgw
--help`` lists the commands from :data:`SUMMARIES` without importing any family. While a key
agent runs (``dmsgw agent start``), the commands that need the key are run by it
(:mod:`.agent`), so they pay neither the imports nor the key's unlock.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable, Sequence

from .. import __version__
from ..errors import DmsgwError

Handler = Callable[[argparse.Namespace], int]
Register = Callable[["argparse._SubParsersAction[argparse.ArgumentParser]"], None]

COMMANDS: dict[str, str] = {
    "key": "key",
    "whoami": "key",
    "cap": "cap",
    "invoke": "client_commands",
    "deploy": "client_commands",
    "logs": "logs",
    "repl": "client_commands",
    "devnet": "devnet_commands",
    "serve": "serve",
    "pods": "pods",
    "agent": "agent",
}
"""Each command, and the module (family) whose ``register`` adds it."""

SUMMARIES: dict[str, str] = {
    "key": "manage DMS key files (as nunet key)",
    "whoami": "show (creating if needed) the gateway's identity and how to delegate to it",
    "cap": "manage capability contexts (as nunet cap) and check envelopes",
    "invoke": "invoke a DMS behavior and print its reply as JSON",
    "deploy": "deploy an ensemble (YAML) on the DMS network",
    "repl": "an interactive Python session with `dms` connected",
    "devnet": "run an embedded DMS devnet and grant keys on it",
    "serve": "run the gateway: interLink's plugin API, offloading pods to the DMS",
    "pods": "list a running gateway's pods with their CPU and memory usage",
    "logs": "print what a deployment's allocations wrote (stdout and stderr)",
    "agent": "hold the key unlocked for this session, as ssh-agent does",
}
"""Each command's line in ``dmsgw --help``; its family's parser uses the same line."""


def _register_of(module: str) -> Register:
    register: Register = importlib.import_module(f".{module}", __name__).register
    return register


def summary(command: str) -> str:
    """The one line ``--help`` gives ``command`` (families pass it to their parser)."""
    return SUMMARIES[command]


class _Parser(argparse.ArgumentParser):
    """A parser that refuses an argument it does not know with its own usage: argparse leaves
    a sub-command's unknown arguments to the top-level parser, whose usage (``dmsgw [-h]
    COMMAND``) says nothing of the command that was typed (its sub-parsers are made of the
    same class)."""

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        parsed, extra = super().parse_known_args(args, namespace)
        if extra:
            self.error(f"unrecognized arguments: {' '.join(extra)}")
        return parsed, extra


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser of the family that has ``command``; without one (``dmsgw --help``, a
    mistyped command), every command by its summary alone, importing no family."""
    parser: argparse.ArgumentParser = _Parser(
        prog="dmsgw",
        description="dms-gateway: speak NuNet DMS behaviors under your own DID and capabilities.",
    )
    parser.add_argument("--version", action="version", version=f"dmsgw {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    if command in COMMANDS:
        _register_of(COMMANDS[command])(sub)
    else:
        for name in COMMANDS:
            sub.add_parser(name, help=summary(name), add_help=False)
    return parser


def dispatch(words: list[str]) -> int:
    """Parse ``words`` and run the command, an expected failure as one line and status 2."""
    parser = build_parser(words[0] if words and not words[0].startswith("-") else None)
    args = parser.parse_args(words)
    handler: Handler = args.handler
    try:
        return handler(args)
    except DmsgwError as exc:
        print(f"dmsgw: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("dmsgw: interrupted", file=sys.stderr)
        return 130


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    from .agent import forward

    try:
        forwarded = forward(words)
        return dispatch(words) if forwarded is None else forwarded
    except DmsgwError as exc:
        print(f"dmsgw: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return _pipe_closed()


def _pipe_closed() -> int:
    """The reader of stdout went away: stop writing (also at exit, when Python flushes
    stdout) and exit as a process killed by SIGPIPE would, without a traceback."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return 128 + 13


if __name__ == "__main__":
    raise SystemExit(main())
