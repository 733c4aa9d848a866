"""The operator app: ``/healthz``, ``/readyz``, ``/metrics``, ``/pods``,
``/pods/{namespace}/{name}`` and ``/stats/summary`` on their own address.

Off loopback the operator app too needs the token, which every route but the probes then
requires (the probes change nothing and tell no secret; the pods' names and usage are the
operator's). Live while the process answers at all; ready while serving and the backend's ping
succeeds (a DMS outage leaves it ready, the node's taints in the report). ``/pods`` (the pods,
their usage and endpoints, :mod:`..pod_view`), one pod's object
and ``/stats/summary`` (the kubelet's summary) answer 503 until the backend serves, and each
read of them or of ``/metrics`` first refreshes the pods' usage (:class:`~..pod_report.PodReport`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, Literal

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST
from prometheus_client.core import Metric

from ...errors import DmsgwError
from ..plugin_errors import BackendUnavailable
from ..reports.pod_report import PodReport
from ..wire.bodies import PingResponse
from .backend import PluginBackend
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

HEALTH_PING_TIMEOUT_S = 0.5
"""How long ``/readyz`` waits for the backend's ping: under the kubelet's default probe
timeout (1 s). A ping still gathering then (a slow DMS) leaves the gateway ready."""


class Health:
    """What ``/healthz`` and ``/readyz`` report.

    Live while the process answers at all (a liveness probe must not restart the gateway
    because the DMS is down); ready while serving and the backend's ping succeeds (it is
    cached by the backend, and bounded here by a short timeout). The ping's taints, if any,
    are reported beside (``degraded``, ``taints``).
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
        reason, ping = await self._ping()
        body: dict[str, Any] = {"status": self.stage, "live": True, "ready": reason is None}
        if reason is not None:
            body["reason"] = reason
        if ping is not None and ping.status not in (None, "ok"):
            # Still ready: a DMS outage taints the virtual node, it does not stop the gateway
            # serving interLink (decision 85).
            body["degraded"] = ping.status
        if ping is not None and ping.taints:
            body["taints"] = [f"{t.key}={t.value}:{t.effect}" for t in ping.taints]
        body["uptime_s"] = round(time.monotonic() - self._since, 3)
        return body

    async def _ping(self) -> tuple[str | None, PingResponse | None]:
        """Why the gateway is not ready (``None``: it is), and the backend's ping."""
        if self.stage != "serving" or self._backend is None:
            return f"the gateway is {self.stage}", None
        try:
            async with asyncio.timeout(self._ping_timeout_s):
                return None, await self._backend.ping()
        except BackendUnavailable as exc:
            return one_line(str(exc)), None
        except TimeoutError:  # the DMS is slow to answer the gathering: a degraded node
            late = f"degraded: the backend's ping took over {self._ping_timeout_s:g} s"
            return None, PingResponse(status=late)
        except DmsgwError as exc:
            return one_line(str(exc)), None
        except Exception as exc:
            log.exception("bug in the backend's ping")
            return f"internal error ({type(exc).__name__})", None


class Pods:
    """The backend's :class:`PodReport` once it serves (``None`` before, or for a backend
    without one), and the Prometheus collector of its per-pod series (none until then)."""

    def __init__(self) -> None:
        self.report: PodReport | None = None

    def serving(self, report: PodReport | None) -> None:
        self.report = report

    async def refresh(self) -> None:
        """Fresh usage before a read; a failure is logged and the last usage served (the
        page must answer: usage it lacks is absent, not an error)."""
        if self.report is None:
            return
        try:
            await self.report.refresh()
        except Exception:
            log.exception("bug refreshing the pods' usage")

    def describe(self) -> list[Metric]:
        return []  # built on scrape: nothing to check at registration

    def collect(self) -> Iterator[Metric]:
        if self.report is not None:
            yield from self.report.collect()

    def required(self) -> PodReport:
        """The report, or a 503 naming why there is none."""
        if self.report is None:
            raise StatusError(503, "pods: the gateway is not serving yet")
        return self.report


_PROBES = frozenset({"/healthz", "/readyz"})
OPERATOR_ROUTES = (
    "/healthz",
    "/readyz",
    "/metrics",
    "/pods",
    "/pods/{namespace}/{name}",
    "/stats/summary",
)
"""Every route of the operator app, in the order ``dmsgw serve --help`` names them."""


def operator_app(
    health: Health,
    metrics: Metrics,
    *,
    metrics_token: str | None = None,
    pods: Pods | None = None,
) -> web.Application:
    """``/healthz`` (always 200 while live), ``/readyz`` (200 or 503), ``/metrics``, ``/pods``
    and ``/stats/summary`` (which require ``metrics_token`` if given), behind the same front
    door as the plugin API."""
    pods = pods if pods is not None else Pods()

    @web.middleware
    async def front_door(
        request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        try:
            admit(request, None if request.path in _PROBES else metrics_token)
            return await handler(request)
        except StatusError as problem:
            return refusal(problem)
        except ClientGone:
            return text_response(CLIENT_GONE, "client closed the connection")

    async def healthz(_: web.Request) -> web.Response:
        return web.json_response(await health.report())

    async def readyz(_: web.Request) -> web.Response:
        report = await health.report()
        return web.json_response(report, status=200 if report["ready"] else 503)

    async def metrics_page(_: web.Request) -> web.Response:
        await pods.refresh()
        return web.Response(body=metrics.render(), headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def pod_list(_: web.Request) -> web.Response:
        report = pods.required()
        await pods.refresh()
        return web.json_response(report.views())

    async def pod_page(request: web.Request) -> web.Response:
        namespace, name = request.match_info["namespace"], request.match_info["name"]
        report = pods.required()
        await pods.refresh()
        view = report.view(namespace, name)
        if view is None:
            return text_response(404, f"the gateway has no pod {namespace}/{name}")
        return web.json_response(view)

    async def summary(_: web.Request) -> web.Response:
        report = pods.required()
        await pods.refresh()
        return web.json_response(report.summary())

    app = web.Application(middlewares=[front_door])
    app.router.add_route("GET", "/healthz", healthz)
    app.router.add_route("GET", "/readyz", readyz)
    app.router.add_route("GET", "/metrics", metrics_page)
    app.router.add_route("GET", "/pods", pod_list)
    app.router.add_route("GET", "/pods/{namespace}/{name}", pod_page)
    app.router.add_route("GET", "/stats/summary", summary)
    return app
