"""What the HTTP layer asks of the gateway (:class:`PluginBackend`), and the errors by which the
backend tells it how to answer: :class:`BackendUnavailable` is a 503, :class:`UnknownPodError`
a 404, :class:`PodBeingDeletedError` a 409, and :class:`BackendGaveUpError` ends ``dmsgw
serve`` with an error."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Protocol

from ..wire import k8s
from ..wire.bodies import CreateStruct, LogStruct, PingResponse, PodStatus, RetrievedPodData
from ..wire.parsing import PodRef


class PluginBackend(Protocol):
    """What the gateway actors provide to the HTTP layer.

    Every call but :meth:`logs` runs under the server's deadline and is *cancelled* when it
    expires, so each must be safe to cancel (idempotent by pod UID, state persisted before it
    is acted on). A :class:`~dmsgw.errors.DmsgwError` becomes a 500 with its message,
    :class:`BackendUnavailable` a 503, :class:`UnknownPodError` a 404.

    A backend may also have ``gave_up``, an :class:`asyncio.Future` that completes with a
    reason when it can no longer serve (its root supervisor gave up): :class:`Serve` then
    reports not ready, shuts down and raises :class:`BackendGaveUpError`. And it may have
    ``pod_report``, a :class:`~dmsgw.interlink.reports.pod_report.PodReport`: the operator port then
    serves ``/pods``, ``/stats/summary`` and the per-pod series of ``/metrics`` from it.
    """

    async def create(self, pods: list[RetrievedPodData]) -> list[CreateStruct]:
        """Accept the pods (one per call since interLink 0.5), one ``CreateStruct`` each, in
        order. Must not wait for the DMS: record the pod and deploy in the background."""
        ...

    async def delete(self, pod: k8s.Pod) -> None:
        """Forget the pod and shut its ensemble down. Idempotent: interLink never retries, and
        an unknown UID is not an error."""
        ...

    async def status(self, pods: list[PodRef]) -> list[PodStatus]:
        """The pods' statuses from snapshots, without a DMS round trip. Unknown UIDs are the
        backend's to answer (re-adopted through the ``JobID`` annotation, or failed; the
        whole pod is :meth:`PodRef.pod`)."""
        ...

    def statuses_at_once(self, uids: Sequence[str]) -> bytes | None:
        """The ``/status`` reply naming ``uids``, if the backend has every one of them at
        hand (``None``: :meth:`status` answers). It awaits nothing, so it needs no deadline:
        nearly every poll is of known pods, and this answers it at the cost of a lookup."""
        ...

    async def ping(self) -> PingResponse:
        """Capacity and taints for the ping (``/status`` with ``[]``), answered 200 whenever
        the backend serves: an unreachable DMS is a taint. Raise :class:`BackendUnavailable`
        only when the backend itself cannot serve."""
        ...

    def logs(self, request: LogStruct) -> AsyncIterator[bytes]:
        """The log bytes, in chunks. With ``Follow`` it keeps yielding until the container
        ends. Raise :class:`UnknownPodError` from the call itself (not from the iterator) to get a
        404 before any byte is sent; the iterator is closed when the client goes away."""
        ...

    async def close(self) -> None:
        """Release everything; called once, after the plugin server has drained."""
        ...
