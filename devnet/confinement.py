"""What keeps the host safe from a devnet's allocations, which run as host processes.

* **Who they run as** (:class:`RunAs`): a devnet started as root runs every allocation process
  (set-up, provision scripts, command, health checks) as an unprivileged user — by default a
  user and group of the pod's own (:class:`Identities`), else the one it was told — with no
  supplementary groups and ``no_new_privs``, so that neither the command nor anything it
  executes (a set-user-ID ``sudo``) gets root back, and no pod reads another's files or
  ``/proc``. What the allocation must write (its sandbox's ``work``, ``rootfs``, volumes,
  scripts and keys) is given to that user. A devnet that is not root cannot switch users:
  its allocations run as its own user.
* **Dying with the devnet**: each allocation is a process group (a session of its own) whose
  main process gets the parent-death signal (SIGKILL), set between ``fork`` and ``exec``
  (:func:`child_setup`); the :class:`Watchdog` kills what the main process left behind and
  removes the working directory once the devnet is gone, however it went.
* **Stale working directories** of devnets that died anyway (the watchdog killed too) are
  named after their owner, ``dmsgw-devnet-<pid>.<start time>-…``, and removed by the next
  devnet that starts once that process no longer exists (:func:`stale_work_dirs`);
  a live devnet's, in this process or another, is left alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import dataclasses
import grp
import hashlib
import logging
import os
import pwd
import re
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from ..devnet_files.devnet_record import process_start_time
from ..errors import DmsgwError
from .tools import tool

log = logging.getLogger(__name__)

WORK_DIR_PREFIX = "dmsgw-devnet-"
_OWNED = re.compile(rf"{re.escape(WORK_DIR_PREFIX)}(\d+)\.(\d+)-")
"""A working directory's name: its owner's PID and start time (clock ticks since boot)."""
NOBODY = 65534
"""The overflow user and group ID, for a host whose user database lacks ``nobody``."""
_PR_SET_PDEATHSIG = 1
_PR_SET_NO_NEW_PRIVS = 38
_LIBC = ctypes.CDLL(None, use_errno=True)
_prctl = _LIBC.prctl
"""Resolved once, here: a child between ``fork`` and ``exec`` only calls it."""
_setns = _LIBC.setns
_CLONE_NEWNET = 0x40000000
_WATCHDOG = Path(__file__).with_name("watchdog.py")


class ConfinementError(DmsgwError):
    """The devnet cannot run allocations as asked (the message says what to change)."""


@dataclasses.dataclass(frozen=True)
class RunAs:
    """The user and group an allocation's processes run as."""

    uid: int
    gid: int

    def describe(self) -> str:
        return f"uid {self.uid} ({_user_name(self.uid)}), gid {self.gid} ({_group_name(self.gid)})"

    def popen_options(self) -> dict[str, Any]:
        """``subprocess`` options that switch a child to this user: real, effective and saved
        IDs alike (so that it cannot switch back), no supplementary groups."""
        return {"user": self.uid, "group": self.gid, "extra_groups": []}

    def setpriv(self) -> list[str]:
        """``setpriv`` dropping to this user, for a shell that must set up as root first
        (mounts) and run the rest unprivileged; the parent-death signal, which the change
        of user clears, is set again."""
        return [
            tool("setpriv"),
            f"--reuid={self.uid}",
            f"--regid={self.gid}",
            "--clear-groups",
            "--no-new-privs",
            "--pdeathsig=KILL",
            "--",
        ]

    def give(self, path: Path) -> None:
        """Make ``path`` (a file or directory the allocation must write) this user's; a
        symbolic link is never followed."""
        os.chown(path, self.uid, self.gid, follow_symlinks=False)

    def can_enter(self, directory: Path) -> bool:
        """Whether this user (with no supplementary group) may pass through ``directory``."""
        return self.permits(directory, 0o1)

    def permits(self, path: Path, access: int) -> bool:
        """Whether this user (with no supplementary group) has every one of the ``access``
        bits (``0o4`` read, ``0o2`` write, ``0o1`` execute or enter) on ``path``."""
        st = path.stat()
        shift = 6 if st.st_uid == self.uid else 3 if st.st_gid == self.gid else 0
        return (st.st_mode >> shift) & access == access


def _user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return "no name"


def _group_name(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return "no name"


def unprivileged() -> RunAs:
    """``nobody`` with the group ``nogroup`` (else ``nobody``'s own), or 65534:65534."""
    try:
        user = pwd.getpwnam("nobody")
    except KeyError:
        return RunAs(NOBODY, NOBODY)
    try:
        gid = grp.getgrnam("nogroup").gr_gid
    except KeyError:
        gid = user.pw_gid
    return RunAs(user.pw_uid, gid)


def parse_run_as(text: str) -> RunAs:
    """``USER[:GROUP]``, by name or number (the group defaults to the user's own)."""
    user_text, _, group_text = text.partition(":")
    try:
        user = pwd.getpwuid(int(user_text)) if user_text.isdigit() else pwd.getpwnam(user_text)
    except KeyError:
        if not user_text.isdigit():
            raise ConfinementError(f"run as {text!r}: no user {user_text!r} on this host") from None
        uid, gid = int(user_text), int(user_text)
    else:
        uid, gid = user.pw_uid, user.pw_gid
    if group_text:
        try:
            gid = int(group_text) if group_text.isdigit() else grp.getgrnam(group_text).gr_gid
        except KeyError:
            raise ConfinementError(
                f"run as {text!r}: no group {group_text!r} on this host"
            ) from None
    return RunAs(uid, gid)


def choose_run_as(wanted: RunAs | None) -> RunAs | None:
    """Who allocations run as when not each pod as its own (``None``: as this process's
    user). As root: ``wanted``, by default :func:`unprivileged` (the user a working directory
    must let pass, as it must each pod's), never root itself; otherwise only this process's
    own user can be had."""
    if os.geteuid() != 0:
        if wanted is not None and (wanted.uid, wanted.gid) != (os.geteuid(), os.getegid()):
            raise ConfinementError(
                f"running allocations as {wanted.describe()} needs root; this devnet runs as "
                f"uid {os.geteuid()}, so its allocations run as that user"
            )
        return None
    chosen = wanted or unprivileged()
    if chosen.uid == 0 or chosen.gid == 0:
        raise ConfinementError(
            f"allocations never run as root (asked: {chosen.describe()}): name an unprivileged user"
        )
    return chosen


def describe_run_as(run_as: RunAs | None) -> str:
    """Who allocations run as, in the words of the devnet's start log line."""
    if run_as is not None:
        return f"allocations run as {run_as.describe()}"
    return (
        f"allocations run as this process's user (uid {os.geteuid()}): not root, so it "
        f"cannot switch them to an unprivileged one"
    )


def join_network_namespace(fd: int) -> None:
    """``setns`` into the network namespace open as ``fd``: the calling thread's (between
    ``fork`` and ``exec``: the process's). Python 3.11 has no ``os.setns``."""
    if _setns(fd, _CLONE_NEWNET) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"cannot join a network namespace: {os.strerror(errno)}")


def child_setup(
    parent: int, cgroup_procs: Sequence[int] = (), network: int | None = None
) -> Callable[[], None]:
    """The ``preexec_fn`` of every allocation process: it joins the network namespace open as
    ``network`` (if any: the allocation's, :mod:`.netns`; this needs root, so it is only given
    where the process starts as root), the control groups whose ``cgroup.procs`` the devnet
    opened as ``cgroup_procs`` (so that its limits hold from the first page it takes; ``0``
    names the writer), gets SIGKILL when the thread that started it (the devnet's event loop)
    ends, ``no_new_privs``, and dies at once if the devnet is already gone (it may die between
    ``fork`` and the ``prctl``). It runs after the switch of user (which would clear the
    parent-death signal) and calls nothing that takes a lock."""

    def setup() -> None:
        if network is not None:
            join_network_namespace(network)
        for fd in cgroup_procs:
            os.write(fd, b"0")
        _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        _prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
        if os.getppid() != parent:
            os.kill(os.getpid(), signal.SIGKILL)

    return setup


# --- an identity per pod ---------------------------------------------------------------------

IDENTITY_BASE = 1_879_048_192
"""The first user and group ID the devnet gives a pod (``0x70000000``): far above the
ranges of a host's users, system accounts and the ``subuid`` ranges tools hand out."""
IDENTITY_COUNT = 1 << 20
CLAIMS_DIR = Path("/run/dmsgw-identities")
"""Where a root devnet records the IDs it gave (one file per ID, naming the devnet that holds
it), so that concurrent devnets never give one ID twice and the next devnet frees those a
dead one held."""


class Identities:
    """A user and group ID of its own for each ensemble (pod) of a root devnet: the
    allocations of one ensemble share it (as a pod's containers share its volumes), no two
    ensembles ever do, on this devnet or another of the host.

    An ID is claimed by creating its file in :data:`CLAIMS_DIR` exclusively (the kernel
    refuses a second), and freed when the last of its allocations lets go of it — once their
    files are removed, so that no later pod gets an ID that still owns a file."""

    def __init__(self, owner: str, directory: Path = CLAIMS_DIR) -> None:
        self.owner = owner
        """The devnet's working directory's name: who holds the IDs it claims."""
        self.directory = directory
        self._by_ensemble: dict[str, RunAs] = {}
        self._holders: dict[str, set[str]] = {}
        start = hashlib.sha256(owner.encode()).digest()[:4]
        self._next = int.from_bytes(start, "big") % IDENTITY_COUNT  # devnets start apart

    def remove_stale(self) -> None:
        """Free the IDs that devnets which no longer run held (SIGKILLed: their watchdog
        removed their files, not their claims)."""
        with contextlib.suppress(OSError):
            for claim in self.directory.iterdir():
                with contextlib.suppress(OSError):
                    if owner_gone(claim.read_text()):
                        claim.unlink()

    def claim(self, ensemble_id: str, allocation_id: str) -> RunAs:
        """The identity of ``ensemble_id``, held by ``allocation_id`` until :meth:`release`
        (a new one costs a file created: quick enough for the event loop)."""
        held = self._by_ensemble.get(ensemble_id)
        if held is None:
            held = self._by_ensemble[ensemble_id] = self._claim_new()
        self._holders.setdefault(ensemble_id, set()).add(allocation_id)
        return held

    def _claim_new(self) -> RunAs:
        self.directory.mkdir(mode=0o700, exist_ok=True)
        for _ in range(IDENTITY_COUNT):
            uid = IDENTITY_BASE + self._next
            self._next = (self._next + 1) % IDENTITY_COUNT
            if self._take(self.directory / str(uid)):
                return RunAs(uid, uid)
        raise ConfinementError(f"every one of the {IDENTITY_COUNT} pod identities is held")

    def _take(self, claim: Path) -> bool:
        """Create ``claim`` (or take it from a devnet that no longer runs)."""
        for _ in range(2):
            try:
                fd = os.open(claim, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            except FileExistsError:
                with contextlib.suppress(OSError):
                    if owner_gone(claim.read_text()):
                        claim.unlink()
                        continue
                return False
            with os.fdopen(fd, "w") as f:
                f.write(self.owner)
            return True
        return False

    def release(self, allocation_id: str) -> None:
        """``allocation_id`` no longer needs its identity; the last holder frees it."""
        for ensemble_id, holders in list(self._holders.items()):
            holders.discard(allocation_id)
            if not holders:
                del self._holders[ensemble_id]
                run_as = self._by_ensemble.pop(ensemble_id)
                with contextlib.suppress(OSError):
                    (self.directory / str(run_as.uid)).unlink()

    def release_all(self) -> None:
        """The devnet stops: free every ID it holds."""
        for allocation_id in {a for h in self._holders.values() for a in h}:
            self.release(allocation_id)

    @staticmethod
    def describe() -> str:
        return (
            f"each pod runs as a user and group of its own (from {IDENTITY_BASE}, recorded "
            f"in {CLAIMS_DIR})"
        )


# --- working directories ----------------------------------------------------------------------


_SHELLS = frozenset({"sh", "bash", "/bin/sh", "/bin/bash", "/usr/bin/sh", "/usr/bin/bash"})


def unreachable_command(command: Sequence[str], path: str, run_as: RunAs) -> str:
    """Why an allocation's command was not found (exit 127), when that is because this host
    has it where the allocation's user cannot go (a tool in ``/root/.local/bin`` on the
    devnet's ``PATH``, run as ``nobody``); ``""`` when it is not that. The command is the
    program, or the first word of a ``sh -c`` script."""
    name = command[0] if command else ""
    if name in _SHELLS and len(command) >= 3 and command[1] == "-c":
        words = command[2].split()
        name = words[0] if words else ""
    if not name or "/" in name:
        return ""
    for directory in path.split(os.pathsep):
        found = Path(directory or ".") / name
        if not (found.is_file() and os.access(found, os.X_OK)):
            continue
        blocked = next((d for d in reversed(found.parents) if not run_as.can_enter(d)), None)
        if blocked is None:
            return ""
        return (
            f"dmsgw devnet: {name} is {found} on this host, but the allocation runs as "
            f"{run_as.describe()}, who cannot enter {blocked}, so its shell did not find it "
            f"(exit 127): install it where every user can run it (e.g. /usr/local/bin)"
        )
    return ""


def check_reachable(parent: Path | None, run_as: RunAs) -> None:
    """Refuse a place for the working directory that the allocations' user cannot reach:
    every one of them would fail to start, saying only that it cannot change directory."""
    where = (parent or Path(tempfile.gettempdir())).resolve()
    for directory in (*reversed(where.parents), where):
        if not run_as.can_enter(directory):
            raise ConfinementError(
                f"the devnet's working directory would be under {where}, but its allocations "
                f"run as {run_as.describe()}, who cannot enter {directory}: choose another "
                f"place (TMPDIR), e.g. /tmp"
            )


def make_work_dir(parent: Path | None = None) -> Path:
    """A new working directory under ``parent`` (default: the temporary directory), named
    after this process, so that another devnet can tell whether its owner still lives."""
    pid = os.getpid()
    prefix = f"{WORK_DIR_PREFIX}{pid}.{process_start_time(pid)}-"
    return Path(tempfile.mkdtemp(prefix=prefix, dir=parent))


def owner_gone(name: str) -> bool:
    """Whether ``name`` is named after a devnet (as :func:`make_work_dir` names) that no
    longer runs."""
    owner = _OWNED.match(name)
    if owner is None:
        return False
    pid, started = int(owner.group(1)), int(owner.group(2))
    return process_start_time(pid) != started


def stale_work_dirs(parent: Path | None = None) -> Iterator[Path]:
    """Working directories under ``parent`` whose devnet process no longer exists."""
    where = parent or Path(tempfile.gettempdir())
    with contextlib.suppress(OSError):
        for entry in where.iterdir():
            if entry.is_dir() and not entry.is_symlink() and owner_gone(entry.name):
                yield entry


# --- the watchdog -----------------------------------------------------------------------------


class Watchdog:
    """The devnet's side of :mod:`dmsgw.devnet.watchdog`: the pipe it is told through."""

    def __init__(self, work_dir: Path) -> None:
        self.work_dir = work_dir
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Start the watchdog (in a session of its own, so that a terminal's Ctrl-C or hang-up
        does not end it before the devnet)."""
        argv = [sys.executable, "-I", "-S", str(_WATCHDOG), str(self.work_dir)]
        self._proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            cwd="/",
            start_new_session=True,
        )

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def watch(self, pgid: int) -> None:
        self._tell(f"+{pgid}\n")

    def forget(self, pgid: int) -> None:
        self._tell(f"-{pgid}\n")

    def _tell(self, line: str) -> None:
        """One short line on the pipe (a write this small is atomic and never blocks long:
        the watchdog reads as it comes)."""
        if self._proc is None or self._proc.stdin is None:
            return
        try:
            self._proc.stdin.write(line.encode())
            self._proc.stdin.flush()
        except (BrokenPipeError, ValueError):
            log.warning("devnet watchdog is gone: allocations may outlive a devnet crash")

    async def close(self) -> None:
        """The devnet stopped cleanly: end the watchdog (it finds nothing left to kill)."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.stdin is not None:
            with contextlib.suppress(BrokenPipeError):
                proc.stdin.close()
        await asyncio.to_thread(proc.wait)
