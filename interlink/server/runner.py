"""Running the plugin and operator apps over one backend, from start to an orderly stop.

:class:`Serve` runs the two apps over one :class:`~.backend.PluginBackend` until SIGTERM/SIGINT
(or until the backend gives up) and then shuts down in order: stop accepting, drain, close.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import signal
import threading
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

from ..plugin_errors import BackendGaveUpError
from .backend import PluginBackend
from .listening import ListenAddress, Listener
from .metrics import LoopStalls, Metrics
from .operator_port import Health, Pods, operator_app
from .options import ServerOptions
from .routes import PluginServer

log = logging.getLogger("dmsgw.plugin")

BackendFactory = Callable[[Metrics], Awaitable[PluginBackend]]


@dataclasses.dataclass(frozen=True)
class ServeInfo:
    """Where the servers actually listen (a port 0 is replaced by the one bound)."""

    plugin: ListenAddress
    operator: ListenAddress

    @property
    def healthz(self) -> str:
        return self.operator.endpoint("/healthz")

    @property
    def metrics(self) -> str:
        return self.operator.endpoint("/metrics")


@contextlib.contextmanager
def _stop_on_signals(stop: asyncio.Event) -> Iterator[None]:
    """SIGTERM and SIGINT set ``stop``; the previous handlers come back afterwards."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    loop = asyncio.get_running_loop()
    signals = (signal.SIGTERM, signal.SIGINT)
    previous = {sig: signal.getsignal(sig) for sig in signals}
    for sig in signals:
        loop.add_signal_handler(sig, _on_signal, stop, sig)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            loop.remove_signal_handler(sig)
            if handler is not None:
                signal.signal(sig, handler)


def _on_signal(stop: asyncio.Event, sig: signal.Signals) -> None:
    log.info("%s received: stopping", sig.name, extra={"signal": sig.name})
    stop.set()


class Serve:
    """Runs the plugin and operator servers over a backend until SIGTERM/SIGINT or ``stop``.

    Start order: operator app (so that probes answer while the backend starts, e.g. an
    embedded devnet), backend, plugin app. Stop order: the plugin app stops accepting, lets
    in-flight requests finish within ``shutdown_grace_s`` (log streams end at once), then the
    backend is closed, then the operator app stops.
    """

    def __init__(
        self, factory: BackendFactory, options: ServerOptions, *, metrics: Metrics | None = None
    ) -> None:
        self._factory = factory
        self._options = options
        self.metrics = metrics if metrics is not None else Metrics()

    async def run(
        self,
        *,
        started: Callable[[ServeInfo], None] | None = None,
        stop: asyncio.Event | None = None,
    ) -> None:
        stop = stop if stop is not None else asyncio.Event()
        options = self._options
        health, pods = Health(), Pods()
        async with contextlib.AsyncExitStack() as stack:
            stack.enter_context(_stop_on_signals(stop))
            watch = asyncio.ensure_future(LoopStalls(self.metrics).watch())
            stack.push_async_callback(_cancelled, watch)
            self.metrics.registry.register(pods)
            stack.callback(self.metrics.registry.unregister, pods)
            operator_server = operator_app(
                health, self.metrics, metrics_token=options.metrics_token, pods=pods
            )
            operator = await Listener.start(operator_server, options.operator_listen, grace_s=1.0)
            stack.push_async_callback(operator.stop)
            backend = await self._factory(self.metrics)
            stack.push_async_callback(_close_backend, backend)
            server = PluginServer(backend, options, self.metrics)
            plugin = await Listener.start(server.app(), options.listen, options.shutdown_grace_s)
            stack.push_async_callback(plugin.stop)
            health.serving(backend)
            pods.serving(getattr(backend, "pod_report", None))
            info = ServeInfo(plugin.address, operator.address)
            log.info(
                "listening on %s",
                info.plugin,
                extra={"listen": str(info.plugin), "operator": str(info.operator)},
            )
            if started is not None:
                started(info)
            gave_up = await _serving(stop, backend)
            health.stopping()
        log.info("stopped")
        if gave_up is not None:
            raise BackendGaveUpError(gave_up)


async def _serving(stop: asyncio.Event, backend: PluginBackend) -> str | None:
    """Until SIGTERM/SIGINT (``None``) or the backend gives up (its reason)."""
    gave_up: asyncio.Future[str] | None = getattr(backend, "gave_up", None)
    stopping: asyncio.Future[Any] = asyncio.ensure_future(stop.wait())
    waits = {stopping} if gave_up is None else {stopping, gave_up}
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopping.cancel()
    if gave_up is None or not gave_up.done():
        return None
    log.critical("the backend gave up: %s; stopping with an error", gave_up.result())
    return gave_up.result()


async def _cancelled(task: asyncio.Future[None]) -> None:
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def _close_backend(backend: PluginBackend) -> None:
    log.info("draining done; closing the backend")
    await backend.close()
