"""A container's runs as its wrapper's markers tell them, read from the DMS's copy of its
stderr (:mod:`..pods.run_markers`), and the logs of the runs that ended copied to the gateway's keep
(:mod:`..logs.kept_logs`) on the way: the follower's one read of a container's log."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine, Mapping
from pathlib import Path
from typing import Any

from ...behaviors.node import Invoke
from ...errors import DmsgwError
from ..logs.dms_logs import STDERR_LOG, fetched_logs, new_lines
from ..logs.kept_logs import KEPT_RUNS, KeptLogs
from ..records.container_runs import Runs
from ..translate import allocation_key
from ..translate.run_markers import markers, probe_markers

log = logging.getLogger(__name__)

MARKER_READ_LIMIT = 1 << 20
"""At most this much of a container's new stderr is read for the wrapper's markers at once
(a container that wrote more between two reads may have runs go uncounted)."""


async def read_runs(
    invoke: Invoke,
    ensemble_id: str,
    container: str,
    runs: Runs,
    *,
    uid: str,
    at_ns: int = 0,
    kept: KeptLogs | None = None,
) -> Runs | None:
    """``runs`` after the markers that the container's stderr gained since the last read
    (made at ``at_ns``); ``None`` when the log cannot be had (pod ``uid`` names it in the log
    message). The runs that the markers show ending are copied to ``kept`` meanwhile."""
    try:
        async with fetched_logs(invoke, ensemble_id, allocation_key(container)) as directory:
            text, read_to = await new_lines(directory / STDERR_LOG, runs.read_to, MARKER_READ_LIMIT)
            now = runs.read(markers(text), read_to, at_ns=at_ns).read_probes(probe_markers(text))
            now = now._replace(log_dir=str(directory))
            if kept is not None:
                await _keep_ended(kept, uid, container, directory, runs, now)
    except (DmsgwError, OSError) as exc:
        log.info("pod %s: log of %s unavailable: %s", uid, container, exc)
        return None
    return now


async def _keep_ended(
    kept: KeptLogs, uid: str, container: str, directory: Path, before: Runs, now: Runs
) -> None:
    """Copy the runs that ended since ``before`` (the newest :data:`KEPT_RUNS` of them) from
    the allocation's log files in ``directory``: the i-th run of the files is the pod's
    ``earlier_runs + i``-th. The runs ``before`` names (what the pod's status shows until
    these are reported: its last ended one and the one before) are spared meanwhile."""
    first = max(before.ended + 1, now.ended - KEPT_RUNS + 1)
    shown = before.earlier_runs + before.ended - 1 if before.ended else None
    for part in range(first, now.ended + 1):
        await kept.keep(uid, container, now.earlier_runs + part, directory, part, shown)


async def read_together(reads: list[Coroutine[Any, Any, Runs | None]]) -> list[Runs | None]:
    """The reads' results, made together (``asyncio.gather``); a lone read is awaited as it
    is: most polls read one log or none, and a task of its own was three more turns of the
    loop for it."""
    if len(reads) <= 1:
        return [await read for read in reads]
    return list(await asyncio.gather(*reads))


async def keep_last_runs(
    invoke: Invoke, kept: KeptLogs, uid: str, ensemble_id: str, runs: Mapping[str, Any]
) -> None:
    """Keep each container's last ended run of ``ensemble_id`` before the ensemble is shut
    down (a DMS may remove its files then: the devnet does), again if it was kept on the way:
    its exit marker on stderr may have been read before the last of its stdout reached the
    file. ``runs`` is the record's ledger by container; a log the DMS cannot give is left as
    it is."""
    for container, ledger in runs.items():
        now = Runs.from_map(ledger)
        run = now.earlier_runs + now.ended
        if now.ended < 1:
            continue
        try:
            async with fetched_logs(invoke, ensemble_id, allocation_key(container)) as directory:
                await kept.keep(uid, container, run, directory, now.ended)
        except (DmsgwError, OSError) as exc:
            log.info("pod %s: the last run of %s was not kept: %s", uid, container, exc)
