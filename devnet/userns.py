"""Pods kept apart without root: a user namespace per allocation, and the init of its PID
namespace.

A devnet run by an ordinary user cannot give each pod a user ID of its own, nor make
network namespaces linked to a hub (:mod:`.netns`). Where the kernel lets an ordinary user
make user namespaces, every allocation process starts in new **user, mount and PID
and network namespaces**, set up as the namespaces' root (this user outside) and then run as
this user again, with no capability, in a nested user namespace:

* a fresh ``/proc`` shows only the allocation's own processes: no other pod's environment,
  command line or working directory, nor the devnet's and the gateway's (they run as the
  same user, which the kernel would otherwise let read them);
* a ``tmpfs`` hides the devnet's working directory (every pod's sandbox, volumes and logs),
  this user's home (the gateway's state and its plugin API's socket) and runtime directory;
  the allocation's own sandbox and the volumes it declares are bound back at their paths.
  The mounts belong to a more privileged user namespace than the pod's, so it cannot
  remove them;
* the allocation's network namespace holds its loopback alone: nothing that listens on the
  host, the gateway's operator port or the nodes' APIs among them. The devnet's relays of its
  public ports and its HTTP checks connect from inside through a :class:`Connector`.

What still holds for every process of this user: files outside the hidden directories that
the user may read.

PID 1 of an allocation's PID namespace is its set-up shell, which stays there as its init
(:func:`init_steps`): ``unshare --fork`` stands between the devnet and the namespace and does
not pass signals on, and a namespace's init gets from outside only the signals it handles, so
the shell handles ``docker stop``'s SIGTERM (and the other signals a process is sent) by
passing it to the command, and exits with the command's status. The devnet signals that
init (:func:`init_of`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import shlex
import socket
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

from .tools import SETUP_ENVIRONMENT, SYSTEM_PATH, have, tool

FORWARDED = ("TERM", "INT", "HUP", "QUIT", "USR1", "USR2")
"""The signals an allocation's init passes on to its command."""
FIRST_KEPT_FD = 10
"""The wrapper's descriptors on the directories it binds back (``bash``'s: ``sh`` has nine)."""


def init_steps(command: str) -> list[str]:
    """Shell lines that start ``command`` (a shell command line) as the child of this shell,
    the init of a PID namespace, and pass each of :data:`FORWARDED` on to it until it ends,
    then exit with its status (``128 + N`` when signal ``N`` ended it, as Docker reports it).
    A shell starts what it runs in the background with SIGINT and SIGQUIT ignored: the
    command's ``env`` gives them back their default (:mod:`.sandbox`)."""
    steps = ["set +e", "child="]
    steps += [f'trap \'[ -z "$child" ] || kill -{s} "$child"\' {s}' for s in FORWARDED]
    steps += [f"{command} &", "child=$!"]
    steps += ['while :; do wait "$child"; s=$?; kill -0 "$child" 2>/dev/null || exit "$s"; done']
    return steps


def init_of(pid: int) -> int | None:
    """The init of the PID namespace ``unshare --fork`` (process ``pid``) made: its only
    child (``None``: not started yet, or gone)."""
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return None
    return int(children[0]) if children else None


@dataclasses.dataclass(frozen=True)
class UserNamespaces:
    """How a devnet that is not root runs each allocation: ``uid``/``gid`` (its own user,
    which the allocation stays), ``hidden`` (directories no allocation sees: the devnet's
    working directory, this user's home and runtime directory)."""

    uid: int
    gid: int
    hidden: tuple[Path, ...]

    @classmethod
    def for_this_user(cls, work_dir: Path, state_dir: Path) -> UserNamespaces:
        """Hiding ``work_dir``, ``state_dir`` (the gateway's), the home and the runtime
        directory of this process's user."""
        runtime = Path(os.environ.get("XDG_RUNTIME_DIR") or f"/run/user/{os.geteuid()}")
        hidden = (work_dir, state_dir, Path.home(), runtime)
        return cls(os.geteuid(), os.getegid(), tuple(dict.fromkeys(hidden)))

    async def probe(self) -> tuple[bool, bool]:
        """Whether this kernel lets this user make the namespaces, and a network namespace
        among them (``ip`` must be installed to bring its loopback up)."""
        if os.geteuid() == 0 or not have("unshare", "mount", "bash", "nsenter", "true"):
            return False, False
        results = []
        for network in (False, True) if have("ip") else (False,):
            proc = await asyncio.create_subprocess_exec(
                *self.wrap([tool("true")], keep=(), network=network),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.DEVNULL,
                env=SETUP_ENVIRONMENT,
            )
            results.append(await proc.wait() == 0)
        return results[0], len(results) == 2 and results[1]

    def drop(self) -> list[str]:
        """A nested user namespace in which the namespace's root is this user again, with no
        capability: what runs the allocation's own processes."""
        return [
            tool("unshare"),
            "--user",
            f"--map-user={self.uid}",
            f"--map-group={self.gid}",
            "--",
        ]

    def wrap(self, argv: Sequence[str], keep: Sequence[Path], network: bool) -> list[str]:
        """``argv`` (the allocation's set-up and command) started in new user, mount and PID
        namespaces (and a network namespace if ``network``), with :attr:`hidden` hidden but
        for the directories in ``keep``, and run as this user by :meth:`drop`."""
        mount = tool("mount")
        kept = sorted(
            (p for p in dict.fromkeys(keep) if self._under_hidden(p) and p.is_dir()),
            key=lambda p: len(p.parts),
        )  # a directory before those it holds
        steps = ["set -e", f"{mount} -t proc proc /proc"]
        if network:
            steps.append(f"{tool('ip')} link set lo up")
        steps += [f"exec {FIRST_KEPT_FD + i}< {shlex.quote(str(p))}" for i, p in enumerate(kept)]
        steps += [
            f"{mount} -t tmpfs -o size=1m,mode=0755 dmsgw-hidden {shlex.quote(str(h))}"
            for h in self._outermost_hidden()
        ]
        for i, path in enumerate(kept):
            quoted = shlex.quote(str(path))
            steps.append(f"{tool('mkdir')} -p {quoted}")
            steps.append(
                f"{mount} --no-canonicalize --bind /proc/self/fd/{FIRST_KEPT_FD + i} {quoted}"
            )
            steps.append(f"exec {FIRST_KEPT_FD + i}<&-")
        steps += init_steps(shlex.join(self.drop()) + ' "$@"')
        unshare = [tool("unshare"), "--user", "--map-root-user", "--mount"]
        unshare += ["--propagation", "private", "--pid", "--fork", "--kill-child"]
        unshare += ["--net"] if network else []
        return [*unshare, "--", tool("bash"), "-c", "\n".join(steps), "dmsgw-pod", *argv]

    def enter(self, init: int, argv: Sequence[str], network: bool) -> list[str]:
        """``argv`` (a health check) run in the namespaces of the allocation whose init is
        process ``init``, as the allocation runs (this user, no capability). This user is
        the namespace's root already: its credentials are kept (``setgroups`` is denied
        there). ``nsenter`` forks into the PID namespace (the mount namespace's ``/proc`` is
        that namespace's): the check is a process group to kill whole."""
        spaces = ["--user", "--preserve-credentials", "--mount", "--pid"]
        spaces += ["--net"] if network else []
        return [tool("nsenter"), "--target", str(init), *spaces, "--", *self.drop(), *argv]

    def enter_network(self, pid: int, argv: Sequence[str]) -> list[str]:
        """``argv`` (the devnet's own program) run in the user and network namespaces of
        process ``pid``, as their root (this user outside)."""
        spaces = ["--user", "--preserve-credentials", "--net"]
        return [tool("nsenter"), "--target", str(pid), *spaces, "--", *argv]

    def _under_hidden(self, path: Path) -> bool:
        return any(path.is_relative_to(h) for h in self.hidden)

    def _outermost_hidden(self) -> list[Path]:
        """The hidden directories that exist, but those inside another (hidden with it) and
        any holding the system's programs (a home of ``/``)."""
        system = [Path(d) for d in SYSTEM_PATH.split(":")]
        present = [
            h
            for h in self.hidden
            if h.is_dir() and not any(d.is_relative_to(h) for d in system)  # never `/`
        ]
        return [h for h in present if not any(h != o and h.is_relative_to(o) for o in present)]

    def describe(self, network: bool) -> str:
        """The mode, for the devnet's start log line."""
        which = "and network " if network else ""
        return (
            f"each allocation has user, mount, PID {which}namespaces of its own (not root), "
            f"hiding {', '.join(map(str, self.hidden))}"
        )


# --- connections into an allocation's network without root ---------------------------------

CONNECTOR = r"""
import array, socket, sys
channel = socket.socket(fileno=int(sys.argv[1]))
for line in channel.makefile('rb'):
    host, _, port = line.decode().strip().rpartition(' ')
    try:
        made = socket.create_connection((host, int(port)), 5)
    except (OSError, ValueError) as exc:
        channel.sendall(b'e' + str(exc).encode()[:500])
        continue
    with made:
        fds = array.array('i', [made.fileno()])
        channel.sendmsg([b'k'], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)])
"""
"""The connector's program: one line ``HOST PORT`` asks for a connection made from inside the
allocation's network namespace; the answer is ``k`` with the connected socket, or ``e`` and
why not."""
CONNECTOR_ARGV = (sys.executable, "-I", "-c", CONNECTOR)
"""This interpreter, isolated from the environment and the user's site directory."""


class Connector:
    """Connections made from inside one run's network namespace, for a devnet that is not
    root: its relays of public ports and its HTTP checks. An ordinary user cannot move its
    own threads into another network namespace (``setns`` needs a capability in its own user
    namespace), but a process it starts in the allocation's user namespace can (the user owns
    it): a small Python program, entered there with ``nsenter`` and kept for the run, makes
    each connection and hands the socket back over a unix socket pair. It is the devnet's
    child, not the allocation's, so its memory is not counted against the allocation's."""

    def __init__(self, userns: UserNamespaces, unshare: int) -> None:
        self._userns = userns
        self._unshare = unshare
        """The run's process, ``unshare``: itself in the run's user and network namespaces."""
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._channel: socket.socket | None = None

    def connect(self, host: str, port: int) -> socket.socket:
        """A socket connected to ``host:port`` from inside the namespace (blocking: call it
        from a thread); :class:`OSError` says why not."""
        with self._lock:
            channel = self._channel or self._start()
            channel.sendall(f"{host} {port}\n".encode())
            message, fds, _, _ = socket.recv_fds(channel, 512, 1)
            if not message:
                self._stop()
                raise ConnectionRefusedError("the allocation's network is gone")
            if message[:1] != b"k" or not fds:
                raise ConnectionRefusedError(message[1:].decode(errors="replace"))
            return socket.socket(fileno=fds[0])

    def _start(self) -> socket.socket:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)  # one answer each
        with theirs:
            self._proc = subprocess.Popen(
                self._userns.enter_network(self._unshare, [*CONNECTOR_ARGV, str(theirs.fileno())]),
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                env=dict(SETUP_ENVIRONMENT),
            )
        self._channel = ours
        return ours

    def _stop(self) -> None:
        channel, self._channel = self._channel, None
        proc, self._proc = self._proc, None
        if channel is not None:
            channel.close()  # the connector reads its end and exits
        if proc is not None:
            proc.wait()

    def close(self) -> None:
        """The run ended: end the connector (blocking)."""
        with self._lock:
            self._stop()
