"""The ``dmsgw`` command: one sub-command family per module (:mod:`.key`, :mod:`.cap`, …).

Every expected failure is a :class:`~dmsgw.errors.DmsgwError`; it is printed as one line
``dmsgw: error: <reason>`` with exit code 2, never as a traceback. Output into a pipe that
closes early (``dmsgw … | head``) ends the command quietly, as a shell tool does.

A command imports only the family that has it (:data:`COMMANDS`): ``dmsgw invoke`` does not
pay for the gateway's configuration and servers that ``dmsgw serve`` needs (~0.5 s).
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
    "invoke": "client",
    "deploy": "client",
    "logs": "logs",
    "repl": "client",
    "devnet": "devnet",
    "serve": "serve",
    "pods": "pods",
}
"""Each command, and the module (family) whose ``register`` adds it."""


def _register_of(module: str) -> Register:
    register: Register = importlib.import_module(f".{module}", __name__).register
    return register


def _families() -> list[Register]:
    """Every family, in the order ``--help`` lists them."""
    return [_register_of(module) for module in dict.fromkeys(COMMANDS.values())]


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
    """The parser of every command, or only of the family that has ``command``."""
    parser: argparse.ArgumentParser = _Parser(
        prog="dmsgw",
        description="dms-gateway: speak NuNet DMS behaviors under your own DID and capabilities.",
    )
    parser.add_argument("--version", action="version", version=f"dmsgw {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    registers = [_register_of(COMMANDS[command])] if command in COMMANDS else _families()
    for register in registers:
        register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
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
