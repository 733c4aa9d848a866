"""A backend that answers the plugin API as the gateway would and records what it was asked,
with the bodies interLink sends (``tests/data/interlink``), and a ``Serve`` started over it on
loopback: what the tests of the plugin server, its front door and its operator port need.
Synchronisation uses the events the fake sets, never sleeps."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from dmsgw.interlink.plugin_errors import UnknownPodError
from dmsgw.interlink.server import ListenAddress, Metrics, Serve, ServeInfo, ServerOptions
from dmsgw.interlink.wire import k8s
from dmsgw.interlink.wire.bodies import (
    CreateStruct,
    LogStruct,
    PingResponse,
    PodStatus,
    ResourcesResponse,
    RetrievedPodData,
)
from dmsgw.interlink.wire.parsing import PodRef
from tests.support.pod_bodies import DATA, UID

# What interLink 0.6.2 sends with every plugin request (no Origin; Host is the address).
INTERLINK = {"Content-Type": "application/json"}


def body(name: str) -> bytes:
    """The sample body ``name`` of ``tests/data/interlink``, as interLink sends it."""
    return (DATA / name).read_bytes()


def waiting(name: str) -> k8s.ContainerStatus:
    """A container of the known pod, being created."""
    return k8s.ContainerStatus.model_validate(
        {"name": name, "ready": False, "restartCount": 0, "image": "busybox", "imageID": "",
         "state": {"waiting": {"reason": "ContainerCreating"}}}
    )  # fmt: skip


def failed(name: str) -> k8s.ContainerStatus:
    """A container of a pod the backend does not know, as the gateway reports it."""
    return k8s.ContainerStatus.model_validate(
        {"name": name, "ready": False, "restartCount": 0, "image": "", "imageID": "",
         "state": {"terminated": {"exitCode": 404, "reason": "NotFound"}}}
    )  # fmt: skip


class FakeBackend:
    """Answers like the gateway would, and records what it was asked."""

    def __init__(self) -> None:
        self.created: list[list[RetrievedPodData]] = []
        self.deleted: list[str] = []
        self.ping_error: Exception | None = None
        self.error: Exception | None = None
        self.hang = False
        self.cancelled = asyncio.Event()
        self.entered = asyncio.Event()
        self.release = asyncio.Event()
        self.follow_gate = asyncio.Event()
        self.logs_closed = asyncio.Event()
        self.closed = False

    async def create(self, pods: list[RetrievedPodData]) -> list[CreateStruct]:
        self.entered.set()
        if self.error is not None:
            raise self.error
        if self.hang:
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                self.cancelled.set()
                raise
        await self.release.wait()
        self.created.append(pods)
        return [
            CreateStruct(pod_uid=p.pod.metadata.uid, pod_jid=f"job-{p.pod.metadata.uid[:8]}")
            for p in pods
        ]

    async def delete(self, pod: k8s.Pod) -> None:
        if self.error is not None:
            raise self.error
        self.deleted.append(pod.metadata.uid)

    def statuses_at_once(self, uids: list[str]) -> None:
        return None

    async def status(self, pods: list[PodRef]) -> list[PodStatus]:
        if self.error is not None:
            raise self.error
        return [self._status(ref.pod()) for ref in pods]

    def _status(self, pod: k8s.Pod) -> PodStatus:
        meta = pod.metadata
        known = meta.uid == UID
        return PodStatus(
            name=meta.name,
            uid=meta.uid,
            namespace=meta.namespace,
            jid="job-0b8c6f6e" if known else "",
            containers=[waiting(c.name) if known else failed(c.name) for c in pod.spec.containers],
        )

    async def ping(self) -> PingResponse:
        if self.ping_error is not None:
            raise self.ping_error
        return PingResponse(
            status="ok", resources=ResourcesResponse(cpu="8", memory="16Gi", pods="100")
        )

    def logs(self, request: LogStruct) -> AsyncIterator[bytes]:
        if request.pod_uid != UID:
            raise UnknownPodError(f"no pod with uid {request.pod_uid}")
        return self._lines(request)

    async def _lines(self, request: LogStruct) -> AsyncIterator[bytes]:
        try:
            yield b"line 1\n"
            if request.opts.follow:
                await self.follow_gate.wait()
                yield b"line 2\n"
                if self.error is not None:
                    raise self.error
        finally:
            self.logs_closed.set()

    async def close(self) -> None:
        self.closed = True


def loopback_options(**overrides: Any) -> ServerOptions:
    """Server options whose plugin and operator ports are ephemeral loopback ones."""
    ports = {"listen": ListenAddress(port=0), "operator_listen": ListenAddress(port=0)}
    return ServerOptions(**(ports | overrides))


async def start_serve(
    backend: FakeBackend, options: ServerOptions
) -> tuple[asyncio.Task[None], ServeInfo, asyncio.Event]:
    """``Serve`` over ``backend`` started (its task, what it serves, the event that stops it);
    what stopped it from starting is raised."""
    started: asyncio.Future[ServeInfo] = asyncio.get_running_loop().create_future()
    stop = asyncio.Event()

    async def factory(_: Metrics) -> FakeBackend:
        return backend

    task = asyncio.create_task(Serve(factory, options).run(started=started.set_result, stop=stop))
    await asyncio.wait({started, task}, return_when=asyncio.FIRST_COMPLETED)
    if task.done():
        task.result()  # raises what stopped it from starting
    return task, started.result(), stop
