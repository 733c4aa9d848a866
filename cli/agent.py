"""``dmsgw agent``: unlock the key once per session and run the commands that need it, as
``ssh-agent`` holds a key for a session.

``dmsgw agent start`` asks for the passphrase once; a process of the user's own then holds the
unlocked key, with every command's modules already imported, on a unix socket until its time to
live runs out. A command that needs the key (:data:`AGENT_COMMANDS`) finds the socket and hands
the agent its words, environment, working directory and its own stdin, stdout and stderr
(``SCM_RIGHTS``); the agent forks, the child takes them over and runs the command as the command
itself would have, and the client waits for its exit status. The client so pays a Python start
and one socket, not the imports and the key's unlock. Without an agent, or with
``DMSGW_AGENT=off``, every command runs in its own process as before.

Who may use it: the socket is 0600 in a 0700 directory of the user's own, and the agent asks the
kernel who connected (``SO_PEERCRED``) and refuses any other user; the client likewise refuses an
agent run by another user. Anyone who can run code as this user can use the key while the agent
runs, as with ``ssh-agent``: decision 088 says why that is the trade.

This module is imported by every ``dmsgw`` start, so its top level imports nothing heavy; the
agent's own side imports the rest when it starts.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import stat
import struct
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from ..errors import DmsgwError
from . import summary

AGENT_COMMANDS = frozenset({"invoke", "deploy", "repl", "whoami", "logs"})
"""The commands an agent runs: those that unlock the key."""

SOCKET_ENV = "DMSGW_AGENT_SOCK"
"""Where the agent listens, when not in the default place (:func:`socket_path`)."""

AGENT_ENV = "DMSGW_AGENT"
"""``off``: run every command in its own process, even while an agent runs."""

DEFAULT_TTL = "1h"

_HEADER = struct.Struct("!I")
_MAX_REQUEST = 4 << 20
"""A request is words, environment and a directory: a few KiB; more is not a client of ours."""

Clock = Callable[[], float]


class AgentError(DmsgwError):
    """The agent cannot be started, reached or trusted."""


# --- where ---------------------------------------------------------------------------------


def socket_path(env: Mapping[str, str] = os.environ) -> Path:
    """``$DMSGW_AGENT_SOCK``, else ``$XDG_RUNTIME_DIR/dmsgw/agent.sock`` (the user's own
    runtime directory), else ``dmsgw-<uid>/agent.sock`` in the temporary directory."""
    if env.get(SOCKET_ENV):
        return Path(env[SOCKET_ENV])
    runtime = env.get("XDG_RUNTIME_DIR", "")
    if os.path.isabs(runtime):
        return Path(runtime) / "dmsgw" / "agent.sock"
    return Path(env.get("TMPDIR") or "/tmp") / f"dmsgw-{os.getuid()}" / "agent.sock"


def private_directory(directory: Path) -> Path:
    """``directory``, made 0700 if missing; refused unless it is a real directory of this user
    that no one else may enter (a directory planted in ``/tmp`` by someone else would let them
    replace the socket)."""
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        found = directory.lstat()
    except OSError as exc:
        raise AgentError(f"cannot make the agent's directory {directory}: {exc}") from None
    if not stat.S_ISDIR(found.st_mode) or found.st_uid != os.getuid():
        raise AgentError(f"{directory} is not a directory of this user's: refusing to use it")
    if found.st_mode & 0o077:
        raise AgentError(
            f"{directory} may be entered by other users (mode {found.st_mode & 0o777:o}): "
            f"run chmod 700 {directory}, or set ${SOCKET_ENV} to a socket in a private directory"
        )
    return directory


# --- the client's side ---------------------------------------------------------------------


def forward(words: Sequence[str], env: Mapping[str, str] = os.environ) -> int | None:
    """Run ``words`` through the running agent and return its exit status; ``None`` when no
    agent takes it (none runs, the command needs no key, or ``DMSGW_AGENT=off``), and the
    caller runs the command itself."""
    if not words or words[0] not in AGENT_COMMANDS or env.get(AGENT_ENV) == "off":
        return None
    conn = _connect(socket_path(env))
    if conn is None:
        return None
    with conn:
        request = {"argv": list(words), "cwd": os.getcwd(), "env": dict(env)}
        _send(conn, request, fds=_standard_fds())
        return _await_exit(_Lines(conn))


def _connect(path: Path) -> socket.socket | None:
    """A connection to an agent of this user's at ``path``, or ``None`` (none listens)."""
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(str(path))
    except OSError:
        conn.close()
        return None
    if peer_uid(conn) != os.getuid():
        conn.close()
        print(f"dmsgw: warning: {path} is served by another user: not using it", file=sys.stderr)
        return None
    return conn


def _standard_fds() -> list[int]:
    """This process's stdin, stdout and stderr, each replaced by ``/dev/null`` when closed."""
    fds = []
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
            fds.append(fd)
        except OSError:
            fds.append(os.open(os.devnull, os.O_RDWR))
    return fds


def _await_exit(lines: _Lines) -> int:
    """Wait for the command's exit status; Ctrl-C here is passed on to the command."""
    pid = 0
    while True:
        try:
            message = lines.next()
        except KeyboardInterrupt:
            if pid:
                os.kill(pid, signal.SIGINT)
            continue
        if message is None:
            raise AgentError("the agent ended the command without its exit status")
        if "error" in message:
            raise AgentError(str(message["error"]))
        if "pid" in message:
            pid = int(str(message["pid"]))
        if "exit" in message:
            return int(str(message["exit"]))


def peer_uid(conn: socket.socket) -> int:
    """The user ID of the process at the other end of a unix socket, as the kernel tells it."""
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return int(struct.unpack("3i", creds)[1])


# --- the wire: a length-prefixed JSON request (with the fds), JSON lines back ---------------


def _send(conn: socket.socket, message: Mapping[str, object], *, fds: Sequence[int] = ()) -> None:
    body = json.dumps(message).encode()
    header = _HEADER.pack(len(body))
    if fds:
        socket.send_fds(conn, [header], list(fds))
    else:
        conn.sendall(header)
    conn.sendall(body)


def _receive(conn: socket.socket) -> tuple[dict[str, object], list[int]]:
    """One request and the descriptors sent with its header."""
    header, fds, _flags, _addr = socket.recv_fds(conn, _HEADER.size, 3)
    if len(header) != _HEADER.size:
        raise AgentError("a request ended before its header")
    (size,) = _HEADER.unpack(header)
    if size > _MAX_REQUEST:
        raise AgentError(f"a request of {size} bytes (at most {_MAX_REQUEST})")
    body = b""
    while len(body) < size:
        chunk = conn.recv(size - len(body))
        if not chunk:
            raise AgentError("a request ended before its body")
        body += chunk
    message = json.loads(body)
    if not isinstance(message, dict):
        raise AgentError("a request is a JSON object")
    return message, list(fds)


def _reply(conn: socket.socket, message: Mapping[str, object]) -> None:
    conn.sendall(json.dumps(message).encode() + b"\n")


class _Lines:
    """The JSON lines an agent answers with."""

    def __init__(self, conn: socket.socket) -> None:
        self._file = conn.makefile("rb")

    def next(self) -> dict[str, object] | None:
        line = self._file.readline()
        return json.loads(line) if line else None


# --- the agent's side ----------------------------------------------------------------------


class Agent:
    """Holds a key (already kept by the key store, :meth:`KeyStore.hold`) and serves the
    commands of its user on ``listener`` until ``expires_at`` on ``clock``, or a stop."""

    def __init__(
        self, listener: socket.socket, *, key: str, expires_at: float, clock: Clock
    ) -> None:
        self._listener = listener
        self._key = key
        self._expires_at = expires_at
        self._clock = clock
        self._stopped = False

    def run(self) -> None:
        """Serve until the time to live runs out or a stop arrives; then remove the socket.
        Commands already running go on to their end (they are processes of their own)."""
        path = self._listener.getsockname()
        try:
            while not self._stopped and self._clock() < self._expires_at:
                self._listener.settimeout(min(1.0, self._expires_at - self._clock()))
                try:
                    conn, _ = self._listener.accept()
                except TimeoutError:
                    continue
                with conn:
                    self._serve(conn)
        finally:
            self._listener.close()
            _unlink(path)

    def _serve(self, conn: socket.socket) -> None:
        conn.settimeout(5.0)
        if peer_uid(conn) != os.getuid():
            _reply(conn, {"error": "this agent serves only its own user"})
            return
        try:
            request, fds = _receive(conn)
        except (AgentError, OSError, ValueError) as exc:
            _reply(conn, {"error": f"a bad request: {exc}"})
            return
        try:
            self._answer(conn, request, fds)
        finally:
            for fd in fds:
                os.close(fd)

    def _answer(self, conn: socket.socket, request: dict[str, object], fds: list[int]) -> None:
        op = request.get("op")
        if op == "status":
            _reply(conn, self.status())
        elif op == "stop":
            self._stopped = True
            _reply(conn, {"stopped": True})
        elif isinstance(request.get("argv"), list) and len(fds) == 3:
            self._run_forked(conn, request, fds)
        else:
            _reply(conn, {"error": "a request names an op or brings argv and three fds"})

    def _run_forked(self, conn: socket.socket, request: dict[str, object], fds: list[int]) -> None:
        """Run the request's command in a child that takes over the client's stdin, stdout,
        stderr, environment and directory; the child reports its pid and its exit status."""
        argv = request["argv"]
        words = [str(word) for word in argv] if isinstance(argv, list) else []
        if not words or words[0] not in AGENT_COMMANDS:
            _reply(conn, {"error": f"the agent runs only {', '.join(sorted(AGENT_COMMANDS))}"})
            return
        if os.fork() != 0:
            return
        try:
            self._listener.close()
            status = _child(conn, words, request, fds)
        except BaseException:  # the child must never return into the agent's loop
            status = 70
        os._exit(status)

    def status(self) -> dict[str, object]:
        return {
            "pid": os.getpid(),
            "key": self._key,
            "expires_in_s": max(0.0, self._expires_at - self._clock()),
        }


def _child(
    conn: socket.socket, words: list[str], request: dict[str, object], fds: list[int]
) -> int:
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    environment = request.get("env")
    if isinstance(environment, dict):
        os.environ.clear()
        os.environ.update({str(k): str(v) for k, v in environment.items()})
    _reply(conn, {"pid": os.getpid()})
    try:
        os.chdir(str(request.get("cwd", "/")))
        sys.stdin = open(0, encoding="utf-8", errors="replace", closefd=False)  # noqa: SIM115
        sys.stdout = open(1, "w", buffering=1, encoding="utf-8", closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", buffering=1, encoding="utf-8", closefd=False)  # noqa: SIM115
        status = _dispatch(words)
    except SystemExit as exc:  # argparse's own exits: --help, a usage error
        status = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    except OSError as exc:
        print(f"dmsgw: error: {exc}", file=sys.stderr)
        status = 2
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    _reply(conn, {"exit": status})
    return status


def _dispatch(words: list[str]) -> int:
    from . import dispatch

    return dispatch(words)


def _unlink(path: object) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(str(path))


# --- the commands --------------------------------------------------------------------------


def _ask(op: str, env: Mapping[str, str] = os.environ) -> dict[str, object] | None:
    """An agent's answer to ``op``, or ``None`` when none listens."""
    conn = _connect(socket_path(env))
    if conn is None:
        return None
    with conn:
        _send(conn, {"op": op})
        return _Lines(conn).next()


def cmd_start(args: argparse.Namespace) -> int:
    from ..behaviors.units import UnitError, parse_go_duration
    from ..keys.keystore import KeyStore, validate_key_name

    try:
        ttl_s = parse_go_duration(args.ttl) / 1e9
    except UnitError as exc:
        raise AgentError(f"--ttl {args.ttl!r}: {exc}") from None
    if ttl_s <= 0:
        raise AgentError(f"--ttl {args.ttl!r}: a time to live is positive")
    path = socket_path()
    private_directory(path.parent)
    running = _ask("status")
    if running is not None:
        raise AgentError(f"an agent already runs (pid {running.get('pid')}, socket {path})")
    name = validate_key_name(args.key)
    KeyStore(args.key_dir).hold(name)
    _warm()
    listener = _listen(path)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # commands end on their own: no zombies
    agent = Agent(listener, key=name, expires_at=time.monotonic() + ttl_s, clock=time.monotonic)
    if args.foreground:
        print(f"dmsgw agent: holding key {name!r} for {args.ttl} on {path}", file=sys.stderr)
        agent.run()
        return 0
    return _daemonize(agent, name, args.ttl, path)


def _warm() -> None:
    """Import every family's modules (and the client's) before forking, so that no command
    run by the agent imports them again."""
    from . import COMMANDS, _register_of

    for module in dict.fromkeys(COMMANDS.values()):
        _register_of(module)


def _listen(path: Path) -> socket.socket:
    """The agent's socket, created 0600 (the umask is set before the file exists)."""
    _unlink(path)  # a stale socket of an agent that ended without removing it
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        listener.bind(str(path))
    finally:
        os.umask(old)
    listener.listen(16)
    return listener


def _daemonize(agent: Agent, name: str, ttl: str, path: Path) -> int:
    """Run ``agent`` in a detached child; print once it listens."""
    pid = os.fork()
    if pid:
        print(f"dmsgw agent: pid {pid} holds key {name!r} for {ttl} on {path}")
        return 0
    os.setsid()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.chdir("/")
    try:
        agent.run()
    finally:
        os._exit(0)


def cmd_status(args: argparse.Namespace) -> int:
    answer = _ask("status")
    if answer is None:
        print(f"no agent runs (socket {socket_path()})")
        return 1
    expires = float(str(answer.get("expires_in_s", 0)))
    print(f"pid {answer.get('pid')} holds key {answer.get('key')!r}, {expires:.0f} s left")
    return 0


def cmd_stop(args: argparse.Namespace) -> int:
    answer = _ask("stop")
    if answer is None:
        print(f"no agent runs (socket {socket_path()})")
        return 1
    print("dmsgw agent: stopped")
    return 0


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    agent = subparsers.add_parser(
        "agent",
        help=summary("agent"),
        description=(
            "Unlock a key once and let the commands that need it "
            f"({', '.join(sorted(AGENT_COMMANDS))}) run through this agent until its time to "
            f"live runs out. The socket is ${SOCKET_ENV}, else $XDG_RUNTIME_DIR/dmsgw/"
            f"agent.sock, else /tmp/dmsgw-<uid>/agent.sock; {AGENT_ENV}=off ignores it."
        ),
    )
    sub = agent.add_subparsers(dest="agent_command", metavar="ACTION", required=True)
    start = sub.add_parser("start", help="unlock the key (asks once) and serve in the background")
    start.add_argument("--key", default="dmsgw", metavar="NAME", help="key name (default: dmsgw)")
    start.add_argument(
        "--key-dir",
        type=Path,
        help="key directory (default: $DMSGW_KEY_DIR, else ~/.nunet/key, as nunet uses)",
    )
    start.add_argument(
        "--ttl", default=DEFAULT_TTL, help=f"how long it holds the key (default: {DEFAULT_TTL})"
    )
    start.add_argument("--foreground", action="store_true", help="serve in this process")
    start.set_defaults(handler=cmd_start)
    status = sub.add_parser("status", help="show the running agent (exit 1: none runs)")
    status.set_defaults(handler=cmd_status)
    stop = sub.add_parser("stop", help="stop the running agent")
    stop.set_defaults(handler=cmd_stop)
