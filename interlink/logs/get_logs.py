"""``/getLogs`` of one known pod: the logs of the run the kubelet would serve, from the DMS
while it has them, else from the copy the gateway kept when it saw the run end (decisions 14
and 69); while the DMS does not answer, from that copy or where the DMS last wrote them
(decisions 116 and 140). The files come from :mod:`~dmsgw.interlink.logs.dms_logs`, the
kept copies from :mod:`~dmsgw.interlink.logs.kept_logs`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path

from ...behaviors.node import Invoke
from ...transport.rest import (
    DMSError,
    DMSErrorKind,
    DMSRequestError,
    DMSTimeoutError,
    TransportError,
)
from ..plugin_errors import BackendUnavailable, PluginRequestError, UnknownPodError
from ..records.container_runs import Runs
from ..records.pod_record import PodRecord, request_data
from ..records.snapshots import Snapshots
from ..translate import allocation_key
from ..wire import k8s
from ..wire.bodies import LogStruct
from .dms_logs import LOG_FILES, Fetch, fetched_logs, read_logs
from .kept_logs import KeptLogs, NoRunError, kept_fetch, wanted_run

__all__ = ["pod_logs"]

log = logging.getLogger(__name__)


async def pod_logs(
    record: PodRecord,
    request: LogStruct,
    invoke: Invoke,
    kept_logs: KeptLogs,
    snapshots: Snapshots,
) -> AsyncIterator[bytes]:
    """The logs of the run the request asks for (:func:`wanted_run`): from the DMS while
    its deployment is the pod's current one and the DMS has them, else as the gateway kept
    them when it saw the run end (decision 69)."""
    container = request.container_name or request_data(record).pod.spec.containers[0].name
    runs = Runs.from_map(record.runs.get(container))
    pod_name = f"{record.namespace}/{record.name}"
    try:
        shown = _shown(snapshots, record, container)
        run = wanted_run(
            shown, runs, previous=request.opts.previous, ensemble_id=record.ensemble_id
        )
    except NoRunError as exc:  # the caller's mistake: 400, as the kubelet answers
        raise PluginRequestError(f"Opts.Previous: pod {pod_name} {exc}") from None
    kept = kept_logs.directory(record.uid, container, run)
    here = run > runs.earlier_runs and bool(record.ensemble_id)  # in the current ensemble
    if run > runs.latest and not record.ensemble_id:  # the kubelet's 400 too
        raise PluginRequestError(f"pod {pod_name} is waiting to start: not deployed yet")
    if here:
        what = f"run {run} of container {container!r} of pod {pod_name}"
        fetch = _dms_fetch(invoke, record.ensemble_id, container, runs, kept, what)
    elif kept is not None:
        fetch = kept_fetch(kept)
    else:
        raise UnknownPodError(
            f"the logs of run {run} of container {container!r} of pod {pod_name} are no longer kept"
        )
    opts = request.opts
    if not here or run < runs.latest:  # an ended run: nothing more to follow
        opts = opts.model_copy(update={"follow": False})

    def running() -> bool:
        shown = _shown(snapshots, record, container)
        return shown is not None and shown.state.terminated is None

    part = run - runs.earlier_runs if here else None
    async for chunk in read_logs(fetch, opts, running=running, run=part):
        yield chunk


def _shown(snapshots: Snapshots, record: PodRecord, container: str) -> k8s.ContainerStatus | None:
    """The container's status as ``/status`` last showed it."""
    snapshot = snapshots.get(record.uid)
    statuses = [
        *(snapshot.containers if snapshot else ()),
        *(snapshot.init_containers if snapshot else ()),
    ]
    return next((s for s in statuses if s.name == container), None)


def _dms_fetch(
    invoke: Invoke, ensemble: str, container: str, runs: Runs, kept: Path | None, what: str
) -> Fetch:
    """The allocation's log files from the DMS, by its key (no manifest needed). When the
    DMS no longer has them (it forgot the deployment, or removed its files), the copy
    ``kept`` of the run asked for. When the DMS does not answer, ``kept`` too, else the
    files where the DMS last wrote them (``runs.log_dir``: the live run up to then); with
    neither, a 503 naming ``what`` was asked for (decisions 116 and 140)."""
    allocation = allocation_key(container)
    written = Path(runs.log_dir) if runs.log_dir else None

    @contextlib.asynccontextmanager
    async def fetch() -> AsyncIterator[Path]:
        async with contextlib.AsyncExitStack() as stack:
            try:
                directory = await _within(
                    stack.enter_async_context(fetched_logs(invoke, ensemble, allocation)),
                    SILENT_AFTER_S,
                )
            except (DMSError, TransportError, TimeoutError) as exc:
                if _answered(exc) and kept is None:  # it has none: the client's 404
                    raise UnknownPodError(
                        f"the DMS no longer knows deployment {ensemble}, nor its logs ({exc}), "
                        "and the gateway kept none of this run"
                    ) from None
                stand_in = kept or _last_written(written, exc, what)
            else:
                if kept is None or _has_logs(directory):
                    yield directory
                    return
                # a DMS that shut the deployment down may have removed its files (the devnet
                # does): the run's kept copy then stands in
                stand_in = kept
        yield stand_in

    return fetch


def _last_written(written: Path | None, exc: Exception, what: str) -> Path:
    """Where the DMS last wrote the logs of ``what``, read while it does not answer; a 503
    saying why when the gateway never saw them written or they are gone."""
    if written is None:
        raise BackendUnavailable(_silent(exc, what, "the gateway has not seen them written"))
    if not _has_logs(written):
        raise BackendUnavailable(_silent(exc, what, f"they are gone from {written}"))
    log.warning("the DMS does not answer (%s): %s read where it last wrote them", _why(exc), what)
    return written


def _has_logs(directory: Path) -> bool:
    """Whether ``directory`` holds either of the allocation's log files."""
    return any((directory / name).exists() for name in LOG_FILES)


SILENT_AFTER_S = 10.0
"""How long the DMS may take to write a run's logs before it counts as silent, and the
gateway's copy of the run, or the files where the DMS last wrote them, is served instead:
well within the route's deadline (30 s by default), so that a DMS that takes the connection
and never answers still leaves the logs readable and its silence named."""


async def _within(step: Awaitable[Path], seconds: float | None) -> Path:
    """``step``, given up after ``seconds`` (``None``: its own timeouts only)."""
    async with asyncio.timeout(seconds):
        return await step


def _answered(exc: Exception) -> bool:
    """Whether the DMS answered (an error of its own, or a refusal the preflight explains),
    rather than stayed silent: unreachable, a reply that is not the DMS API, or no reply
    before the message expired."""
    if isinstance(exc, DMSTimeoutError):
        return exc.kind == DMSErrorKind.REFUSED
    return isinstance(exc, DMSRequestError) or not isinstance(exc, TransportError | TimeoutError)


def _silent(exc: Exception, what: str, where: str) -> str:
    """Why the logs of ``what`` cannot be served while the DMS is silent: ``where`` they are
    not."""
    return (
        f"the DMS does not answer ({_why(exc)}): the logs of {what} are on the DMS's host, "
        f"{where}, and the gateway keeps only the runs it saw end (ask again once the DMS "
        "answers)"
    )


def _why(exc: Exception) -> str:
    """What the DMS's silence looked like (a wait given up says nothing of itself)."""
    return str(exc) or f"no answer within {SILENT_AFTER_S:g} s"
