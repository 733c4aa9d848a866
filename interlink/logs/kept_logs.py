"""The logs of container runs that the gateway keeps itself, as a kubelet keeps the logs of
terminated containers until their pod is deleted (decision 69).

The DMS forgets a deployment's logs with the deployment: a failed provisioning it reverts, an
ensemble shut down for a restart, a DMS that restarted without it. So each time a pod's
follower sees a run of a container end, it copies that run's part of the allocation's
``stdout.log`` and ``stderr.log`` here (:meth:`KeptLogs.keep`), and ``/getLogs`` serves the
copy once the DMS no longer has it. What is kept, and for how long:

* per container, the two newest runs seen to end (what ``Previous`` and a terminated or
  back-off container's logs need; the kubelet keeps one dead container per container);
* of each run, the last :data:`KEPT_RUN_BYTES` of each file, cut at a line (the kubelet
  rotates a container's log at its ``containerLogMaxSize``, ``10Mi`` by default);
* until the pod is deleted (:meth:`KeptLogs.forget`), across restarts of the gateway.

The copies are the gateway's private state, beside its state file: directories 0700, files
0600 (a pod's output may hold its secrets). One directory per kept run,
``<root>/<pod UID hex>/<container name hex>/<run>``, holding the two files as the DMS wrote
them (the wrapper's markers included; readers leave them out), with the source's
modification time. A run is numbered over the pod's life, first run 1
(:attr:`~dmsgw.interlink.records.container_runs.Runs.latest`).

The runs of one allocation share its files: the wrapper writes a start marker on both at the
start of each run (:func:`~dmsgw.interlink.logs.dms_logs.run_part`), so the part of any run can be
cut out. A container that is not wrapped has no markers, and its files are kept whole.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

from ..records.container_runs import Runs
from ..wire import k8s
from .dms_logs import LOG_FILES, Fetch, run_part

__all__ = ["KEPT_RUN_BYTES", "KEPT_RUNS", "KeptLogs", "NoRunError", "kept_fetch", "wanted_run"]

KEPT_RUN_BYTES = 10 * 1024 * 1024
"""The most of each file of one run that is kept: its end."""
KEPT_RUNS = 2
"""The runs kept per container: the newest seen to end."""

_PRIVATE_DIR = 0o700
_PRIVATE_FILE = 0o600


class NoRunError(ValueError):
    """The container has no run that a log request asks for (the caller's mistake)."""


def wanted_run(
    status: k8s.ContainerStatus | None, runs: Runs, *, previous: bool, ensemble_id: str = ""
) -> int:
    """The run (numbered over the pod's life) whose logs a request for a container in
    ``status`` asks for, by the kubelet's rule: ``previous`` asks for the run its
    ``lastState`` shows, else the running or terminated run, or a waiting container's last
    one (one that never ran: the run to come). A waiting container's last run is the
    newest, which has ended; a running or terminated one's the run before it. Raises
    :class:`NoRunError` when ``previous`` finds none."""
    waiting = status is None or status.state.waiting is not None
    # A run the DMS shows before its markers were read is the first.
    latest = runs.latest if waiting else max(runs.latest, 1)
    if _unseen_run(status, runs, ensemble_id):
        latest = runs.latest + 1
    if previous:
        ran_before = status is not None and status.last_state.terminated is not None
        run = latest if waiting else latest - 1
        if not ran_before or run < 1:
            raise NoRunError("has no previous run")
        return run
    if waiting and (status is None or status.last_state.terminated is None):
        return latest + 1  # the run to come: whatever the DMS has of it so far
    return latest


def _unseen_run(status: k8s.ContainerStatus | None, runs: Runs, ensemble_id: str) -> bool:
    """The container shows running in the current deployment (``ensemble_id``) while none of
    its runs there has shown its start marker: that run is the deployment's first, after the
    earlier deployments' runs (decision 118). A status shown before the pod moved on to its
    next deployment names an earlier one's allocation, and its run is counted already."""
    if status is None or status.state.running is None or runs.started or not ensemble_id:
        return False
    return status.container_id.startswith(f"dms://{ensemble_id}_")


def _copy_part(source: Path, target: Path, part: tuple[int, int]) -> None:
    """Copy the last :data:`KEPT_RUN_BYTES` of ``part`` of ``source`` to ``target`` (from a
    line's start), with the source's modification time. Blocking."""
    begin, end = part
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, _PRIVATE_FILE)
    with open(fd, "wb") as out:
        if end <= begin:
            return
        with source.open("rb") as f:
            start = max(begin, end - KEPT_RUN_BYTES)
            f.seek(start)
            data = f.read(end - start)
        if start > begin:  # cut at the first whole line
            data = data[data.find(b"\n") + 1 :]
        out.write(data)
    with contextlib.suppress(OSError):
        stat = source.stat()
        os.utime(target, ns=(stat.st_atime_ns, stat.st_mtime_ns))


def _holds(target: Path, size: int) -> bool:
    """Whether ``target`` holds ``size`` bytes already: a run kept again (before its ensemble
    stops) is copied only if its output grew since, never shortened by a later fetch."""
    try:
        return target.stat().st_size >= size
    except FileNotFoundError:
        return False


class KeptLogs:
    """The kept runs of every pod, under ``root`` (see the module)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    @classmethod
    def beside(cls, state: Path) -> KeptLogs:
        """The kept logs of the gateway whose state file is ``state``: a private directory
        beside it (for a state kept in memory, a private temporary one)."""
        if str(state) == ":memory:":
            return cls(Path(tempfile.mkdtemp(prefix="dmsgw-logs-")))
        return cls(state.parent / f"{state.name}.logs")

    def _container_dir(self, uid: str, container: str) -> Path:
        return self.root / uid.encode().hex() / container.encode().hex()

    def directory(self, uid: str, container: str, run: int) -> Path | None:
        """Where run ``run`` of ``container`` is kept (``None``: it is not)."""
        found = self._container_dir(uid, container) / str(run)
        return found if found.is_dir() else None

    async def keep(
        self,
        uid: str,
        container: str,
        run: int,
        source: Path,
        part: int | None,
        spare_from: int | None = None,
    ) -> None:
        """Keep run ``run`` of ``container``: the ``part``-th run in the log files in
        ``source`` (``None``: the files whole). Only the newest :data:`KEPT_RUNS` stay, but
        none from ``spare_from`` on: the runs the pod's published status may still name while
        the newer ones are being reported. Blocking work runs on a thread; the caller holds
        ``source`` (the DMS rewrites it on each request)."""
        await asyncio.to_thread(self._keep, uid, container, run, source, part, spare_from)

    def _keep(
        self,
        uid: str,
        container: str,
        run: int,
        source: Path,
        part: int | None,
        spare_from: int | None,
    ) -> None:
        home = self._container_dir(uid, container)
        for directory in (self.root, home.parent, home):
            directory.mkdir(mode=_PRIVATE_DIR, exist_ok=True)
            os.chmod(directory, _PRIVATE_DIR)
        target = home / str(run)
        target.mkdir(mode=_PRIVATE_DIR, exist_ok=True)
        for name in LOG_FILES:
            begin, end = run_part(source / name, part)
            if not _holds(target / name, min(end - begin, KEPT_RUN_BYTES)):
                _copy_part(source / name, target / name, (begin, end))
        kept = sorted((int(d.name) for d in home.iterdir() if d.name.isdigit()), reverse=True)
        for old in kept[KEPT_RUNS:]:
            if spare_from is None or old < spare_from:
                shutil.rmtree(home / str(old), ignore_errors=True)

    async def forget(self, uid: str) -> None:
        """Drop every kept run of pod ``uid`` (it was deleted)."""
        await asyncio.to_thread(shutil.rmtree, self.root / uid.encode().hex(), True)


def kept_fetch(directory: Path) -> Fetch:
    """A :data:`~dmsgw.interlink.logs.dms_logs.Fetch` of a kept run's files, in ``directory``."""

    @contextlib.asynccontextmanager
    async def fetch() -> AsyncIterator[Path]:
        yield directory

    return fetch
