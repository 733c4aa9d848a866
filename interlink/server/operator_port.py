"""The operator app: ``/healthz``, ``/readyz``, ``/metrics`` and ``/pods/{namespace}/{name}`` on
their own address.

Off loopback the operator app too needs the token, which ``/metrics`` and ``/pods/…`` then
require (the probes never do: they change nothing and tell no secret; a pod's view names where
its services listen). Live while the process answers at all; ready
while serving and the backend's ping succeeds.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, Literal

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST

from ...errors import DmsgwError
from .backend import BackendUnavailable, PluginBackend
from .front_door import (
    CLIENT_GONE,
    ClientGone,
    StatusError,
    admit,
    one_line,
    refusal,
    text_response,
)
from .metrics import Metrics

log = logging.getLogger("dmsgw.plugin")

HEALTH_PING_TIMEOUT_S = 5.0


class Health:
    """What ``/healthz`` and ``/readyz`` report.

    Live while the process answers at all (a liveness probe must not restart the gateway
    because the DMS is down); ready while serving and the backend's ping succeeds (it is
    cached by the backend, and bounded here by a short timeout).
    """

    def __init__(self, ping_timeout_s: float = HEALTH_PING_TIMEOUT_S) -> None:
        self.stage: Literal["starting", "serving", "stopping"] = "starting"
        self._backend: PluginBackend | None = None
        self._ping_timeout_s = ping_timeout_s
        self._since = time.monotonic()

    def serving(self, backend: PluginBackend) -> None:
        self.stage, self._backend = "serving", backend

    def stopping(self) -> None:
        self.stage = "stopping"

    async def report(self) -> dict[str, Any]:
        reason = await self._not_ready_because()
        body: dict[str, Any] = {"status": self.stage, "live": True, "ready": reason is None}
        if reason is not None:
            body["reason"] = reason
        body["uptime_s"] = round(time.monotonic() - self._since, 3)
        return body

    async def _not_ready_because(self) -> str | None:
        if self.stage != "serving" or self._backend is None:
            return f"the gateway is {self.stage}"
        try:
            async with asyncio.timeout(self._ping_timeout_s):
                await self._backend.ping()
        except BackendUnavailable as exc:
            return one_line(str(exc))
        except TimeoutError:
            return f"the backend's ping took over {self._ping_timeout_s:g} s"
        except DmsgwError as exc:
            return one_line(str(exc))
        except Exception as exc:
            log.exception("bug in the backend's ping")
            return f"internal error ({type(exc).__name__})"
        return None


PodView = Callable[[str, str], dict[str, Any] | None]
"""A pod's JSON by namespace and name (:func:`~dmsgw.interlink.endpoints.pod_view`), or
``None`` when the gateway has no such pod."""


def operator_app(
    health: Health,
    metrics: Metrics,
    *,
    metrics_token: str | None = None,
    pod_view: PodView | None = None,
) -> web.Application:
    """``/healthz`` (always 200 while live), ``/readyz`` (200 or 503), ``/metrics`` and
    ``/pods/{namespace}/{name}`` (which require ``metrics_token`` if given; a pod is 404 until
    ``pod_view`` knows it), behind the same front door as the plugin API."""

    @web.middleware
    async def front_door(
        request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        try:
            guarded = request.path == "/metrics" or request.path.startswith("/pods/")
            admit(request, metrics_token if guarded else None)
        except StatusError as problem:
            return refusal(problem)
        except ClientGone:
            return text_response(CLIENT_GONE, "client closed the connection")
        return await handler(request)

    async def healthz(_: web.Request) -> web.Response:
        return web.json_response(await health.report())

    async def readyz(_: web.Request) -> web.Response:
        report = await health.report()
        return web.json_response(report, status=200 if report["ready"] else 503)

    async def metrics_page(_: web.Request) -> web.Response:
        return web.Response(body=metrics.render(), headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def pod_page(request: web.Request) -> web.Response:
        namespace, name = request.match_info["namespace"], request.match_info["name"]
        view = pod_view(namespace, name) if pod_view is not None else None
        if view is None:
            return text_response(404, f"the gateway has no pod {namespace}/{name}")
        return web.json_response(view)

    app = web.Application(middlewares=[front_door])
    app.router.add_route("GET", "/healthz", healthz)
    app.router.add_route("GET", "/readyz", readyz)
    app.router.add_route("GET", "/metrics", metrics_page)
    app.router.add_route("GET", "/pods/{namespace}/{name}", pod_page)
    return app
