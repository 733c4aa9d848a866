"""The ``dmsgw`` command: one sub-command family per module (``cli_key``, ``cli_cap``, …).

Every expected failure is a :class:`~dmsgw.errors.DmsgwError`; it is printed as one line
``dmsgw: error: <reason>`` with exit code 2, never as a traceback. Output into a pipe that
closes early (``dmsgw … | head``) ends the command quietly, as a shell tool does.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence

from dmsgw import __version__
from dmsgw.errors import DmsgwError

Handler = Callable[[argparse.Namespace], int]


def _families() -> list[Callable[[argparse._SubParsersAction[argparse.ArgumentParser]], None]]:
    from dmsgw import cli_cap, cli_client, cli_devnet, cli_key, cli_serve

    return [
        cli_key.register,
        cli_cap.register,
        cli_client.register,
        cli_devnet.register,
        cli_serve.register,
    ]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dmsgw",
        description="dms-gateway: speak NuNet DMS behaviors under your own DID and capabilities.",
    )
    parser.add_argument("--version", action="version", version=f"dmsgw {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for register in _families():
        register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
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
