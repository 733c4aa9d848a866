"""How a running ``dmsgw devnet up`` is found by the other commands, without flags.

``devnet up`` records its process ID, seed and nodes' REST URLs in ``devnet.json`` in the
user's dmsgw state directory (``$XDG_STATE_HOME/dmsgw``, else ``~/.local/state/dmsgw``, where
the gateway keeps its database) once it serves, and removes the file when it stops. When no DMS
URL is configured (no ``--url``, no ``$DMSGW_DMS_URL``), :func:`dmsgw.connect` and the commands
built on it use node 0 of the devnet recorded there, if its process is still alive; ``devnet
grant`` takes its seed and checks ``--node`` against it. A record whose process has gone (a
devnet killed with SIGKILL) is ignored.

This module is imported by every client, so it imports nothing of the devnet itself.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shlex
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

STATE_FILE = "devnet.json"
GATEWAY_CAPABILITIES = ("/dms/node", "/public", "/broadcast")
"""What a gateway key is granted on a devnet for every client feature to work: the node's
behaviors, ``/public/hello`` and friends, and broadcasts (on :data:`GATEWAY_TOPICS`)."""
GATEWAY_TOPICS = ("/nunet",)


def state_dir(env: Mapping[str, str] | None = None) -> Path:
    """``$XDG_STATE_HOME/dmsgw``, else ``~/.local/state/dmsgw`` (a relative
    ``$XDG_STATE_HOME`` is ignored, as the XDG rules say)."""
    env = os.environ if env is None else env
    base = env.get("XDG_STATE_HOME", "")
    root = Path(base) if os.path.isabs(base) else Path("~/.local/state").expanduser()
    return root / "dmsgw"


@dataclasses.dataclass(frozen=True)
class RunningDevnet:
    """What a running ``dmsgw devnet up`` recorded about itself."""

    pid: int
    seed: str
    urls: tuple[str, ...]
    started: int | None = dataclasses.field(default=None, compare=False)
    """When the process started (:func:`process_start_time`): a PID the kernel gave to
    another process since does not pass for the devnet (``None``: not recorded)."""

    def node_index(self, url: str) -> int | None:
        """Which node serves ``url`` (``None``: not this devnet)."""
        wanted = url.rstrip("/")
        for i, mine in enumerate(self.urls):
            if mine.rstrip("/") == wanted:
                return i
        return None


def record(seed: str, urls: Sequence[str], *, path: Path | None = None) -> Path:
    """Write the record for this process (:func:`running` before it tells the devnet this one
    replaces, for :func:`forget` to put back: a second devnet that stops must not leave the
    first one's commands without a DMS)."""
    target = path or state_dir() / STATE_FILE
    pid = os.getpid()
    _write(target, RunningDevnet(pid, seed, tuple(urls), process_start_time(pid)))
    return target


def _write(target: Path, devnet: RunningDevnet) -> None:
    """Write ``devnet``'s record atomically: a reader never sees half a file."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fields = {"pid": devnet.pid, "started": devnet.started, "seed": devnet.seed}
    text = json.dumps({**fields, "urls": list(devnet.urls)})
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".devnet-", suffix=".json")
    try:
        with os.fdopen(fd, "w") as out:
            out.write(text + "\n")
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def forget(*, path: Path | None = None, previous: RunningDevnet | None = None) -> None:
    """Remove the record if this process wrote it (a newer devnet's record stays); the devnet
    recorded before this one (``previous``: :func:`running` before :func:`record`) is
    recorded again if it still runs."""
    target = path or state_dir() / STATE_FILE
    found = _read(target)
    if found is None or found.pid != os.getpid():
        return
    if previous is not None and _still(previous):
        _write(target, previous)
        return
    with contextlib.suppress(FileNotFoundError):
        target.unlink()


def _still(devnet: RunningDevnet) -> bool:
    """Whether ``devnet``'s process still runs (the same process, not a reused PID)."""
    if not _alive(devnet.pid):
        return False
    return devnet.started is None or process_start_time(devnet.pid) == devnet.started


def running(*, path: Path | None = None) -> RunningDevnet | None:
    """The devnet recorded in the state directory, if its process is alive."""
    found = _read(path or state_dir() / STATE_FILE)
    return found if found is not None and _still(found) else None


def _read(path: Path) -> RunningDevnet | None:
    """The record, or ``None`` when there is none or it is not one (garbled, foreign)."""
    try:
        data = json.loads(path.read_text())
        pid, seed, urls = data["pid"], data["seed"], data["urls"]
    except (OSError, ValueError, TypeError, KeyError):
        return None
    valid = isinstance(pid, int) and isinstance(seed, str) and isinstance(urls, list)
    if not valid or not all(isinstance(u, str) for u in urls):
        return None
    started = data.get("started")
    return RunningDevnet(pid, seed, tuple(urls), started if isinstance(started, int) else None)


def process_start_time(pid: int) -> int | None:
    """When process ``pid`` started (clock ticks since boot), ``None`` if there is none: with
    the PID, it names one process, whereas a PID alone is reused once its process ends."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[19])


def _alive(pid: int) -> bool:
    if pid <= 0:  # kill(0 or -N) would signal a whole process group
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


def grant_command(
    seed: str,
    node: int,
    caps: Sequence[str],
    topics: Sequence[str],
    *,
    anchor: str | None,
    cap_dir: Path | None = None,
    subject: str = "",
) -> str:
    """The ``dmsgw devnet grant`` command that grants ``caps`` (on ``topics``) and anchors
    them in the gateway's context ``anchor``; ``cap_dir`` only when it is not the default,
    ``subject`` (the gateway's DID) when no context file names it."""
    argv = ["dmsgw", "devnet", "grant", "--seed", seed, "--node", str(node)]
    for cap in caps:
        argv += ["--cap", cap]
    for topic in topics:
        argv += ["--topic", topic]
    if anchor is not None:
        argv += ["--anchor", anchor]
    if cap_dir is not None:
        argv += ["--cap-dir", str(cap_dir)]
    return shlex.join(argv) + (f" {subject}" if subject else "")
