"""``/getLogs`` of one known pod: the logs of the run the kubelet would serve, from the DMS
while it has them, else from the copy the gateway kept when it saw the run end (decisions 14
and 69). The files come from :mod:`~dmsgw.interlink.logs.dms_logs`, the kept copies from
:mod:`~dmsgw.interlink.logs.kept_logs`.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

from ...behaviors.node import Invoke
from ...transport.rest import DMSError
from ..plugin_errors import PluginRequestError, UnknownPodError
from ..records.container_runs import Runs
from ..records.pod_record import PodRecord, request_data
from ..records.snapshots import Snapshots
from ..translate import allocation_key
from ..wire import k8s
from ..wire.bodies import LogStruct
from .dms_logs import LOG_FILES, Fetch, fetched_logs, read_logs
from .kept_logs import KeptLogs, NoRunError, kept_fetch, wanted_run

__all__ = ["pod_logs"]


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
        run = wanted_run(_shown(snapshots, record, container), runs, previous=request.opts.previous)
    except NoRunError as exc:  # the caller's mistake: 400, as the kubelet answers
        raise PluginRequestError(f"Opts.Previous: pod {pod_name} {exc}") from None
    kept = kept_logs.directory(record.uid, container, run)
    here = run > runs.earlier_runs and bool(record.ensemble_id)  # in the current ensemble
    if run > runs.latest and not record.ensemble_id:  # the kubelet's 400 too
        raise PluginRequestError(f"pod {pod_name} is waiting to start: not deployed yet")
    if here:
        fetch = _dms_fetch(invoke, record.ensemble_id, container, kept)
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


def _dms_fetch(invoke: Invoke, ensemble: str, container: str, kept: Path | None) -> Fetch:
    """The allocation's log files from the DMS, by its key (no manifest needed); when the
    DMS no longer has them (it forgot the deployment, or removed its files), the copy
    ``kept`` of the run asked for."""
    allocation = allocation_key(container)

    @contextlib.asynccontextmanager
    async def fetch() -> AsyncIterator[Path]:
        try:
            async with fetched_logs(invoke, ensemble, allocation) as directory:
                if kept is None or any((directory / name).exists() for name in LOG_FILES):
                    yield directory
                    return
                # a DMS that shut the deployment down may have removed its files (the devnet
                # does): the run's kept copy then stands in
        except DMSError as exc:
            if kept is None:  # the DMS answered it has none: the client's 404
                raise UnknownPodError(
                    f"the DMS no longer knows deployment {ensemble}, nor its logs ({exc}), "
                    "and the gateway kept none of this run"
                ) from None
        yield kept

    return fetch
