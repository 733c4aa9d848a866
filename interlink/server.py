"""The interLink plugin API over HTTP, the operator endpoints beside it, and the runner of both.

interLink 0.6.2 calls its plugin (us) on four routes with JSON bodies, GET ones included, and
counts anything but exactly HTTP 200 as a failure whose text it copies into the pod's status
(its ``ReqWithError``). So every answer here is either the Go
type's JSON with 200, or a status code with **one line of plain text** that names the problem:
a body that does not parse (400, the :class:`~dmsgw.interlink.parsing.PluginRequestError`
path and reason), a body over the size limit (413), a missing or wrong bearer token (401), an
unknown pod on ``/getLogs`` (404), the DMS being unreachable or a call outliving the deadline
(503), a backend failure (500, never a traceback; bugs are logged with theirs).

interLink waits at most 120 s for response headers, so every backend call except the log
stream's body runs under a server-side deadline (``deadline_s``): a stuck call is cancelled and
answered 503 long before interLink gives up. ``/getLogs`` with ``Follow`` sends its headers at
once and then one write per chunk, so lines reach ``kubectl logs -f`` as they arrive.

The server listens on a unix socket or on loopback; a non-loopback address is refused unless a
bearer token is configured, and then every plugin request must carry it. interLink 0.6.2 itself
sends no ``Authorization`` to its plugin (interLink#336), so a token only makes sense behind a
proxy that adds it. The operator app (``/healthz``, ``/readyz``, ``/metrics``) listens on its own
address; off loopback it too needs the token, which ``/metrics`` then requires (the probes
never do: they change nothing and tell no secret).

Before any route runs, every request passes the front door (:func:`admit`): a request from a
web page (it carries ``Origin``) is refused 403, and one without a verified token must name in
``Host`` the address it arrived at (421 otherwise), so that neither a cross-site POST nor a
DNS-rebinding page can reach a loopback gateway that runs commands. Plugin bodies must be
``application/json`` (415), as interLink sends them, and arrive within ``body_timeout_s``
(408); a client that goes away mid-body is a 499 logged at INFO, not a server error.

What the gateway actors implement is :class:`PluginBackend`; :class:`Serve` runs the two apps
over one until SIGTERM/SIGINT and then shuts down in order (stop accepting, drain, close).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hmac
import ipaddress
import logging
import os
import re
import signal
import socket
import stat
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, Protocol, TypeVar

from aiohttp import web
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    generate_latest,
)

from ..errors import DmsgwError
from . import k8s
from .apimachinery import wire_json
from .bodies import (
    CreateStruct,
    LogStruct,
    PingResponse,
    PodStatus,
    RetrievedPodData,
    encode_pod_statuses,
)
from .parsing import (
    PluginRequestError,
    PodRef,
    TooManyPodsError,
    in_turns,
    parse_create_body,
    parse_delete_body,
    parse_logs_body,
    read_status_body,
)

__all__ = [
    "CLIENT_GONE",
    "DEFAULT_BODY_TIMEOUT_S",
    "DEFAULT_DEADLINE_S",
    "DEFAULT_MAX_BODY_BYTES",
    "DEFAULT_OPERATOR_PORT",
    "DEFAULT_PLUGIN_PORT",
    "DEFAULT_SHUTDOWN_GRACE_S",
    "MAX_DEADLINE_S",
    "SESSION_HEADER",
    "AddressError",
    "BackendFactory",
    "BackendUnavailable",
    "Health",
    "ListenAddress",
    "LoopStalls",
    "Metrics",
    "MetricsError",
    "PluginBackend",
    "PluginServer",
    "Serve",
    "ServeError",
    "ServeInfo",
    "ServerOptions",
    "UnknownPodError",
    "admit",
    "host_is_local",
    "operator_app",
    "require_token_for",
]

log = logging.getLogger("dmsgw.plugin")

SESSION_HEADER = "InterLink-Http-Session"
DEFAULT_PLUGIN_PORT = 4000
DEFAULT_OPERATOR_PORT = 4001
DEFAULT_MAX_BODY_BYTES = 8 * 1024 * 1024
DEFAULT_DEADLINE_S = 30.0
# interLink's ResponseHeaderTimeout is 120 s; leave room for the network and the API's own work.
MAX_DEADLINE_S = 110.0
DEFAULT_SHUTDOWN_GRACE_S = 20.0
# interLink writes each body at once; a client that trickles one holds a connection open.
DEFAULT_BODY_TIMEOUT_S = 10.0
HEALTH_PING_TIMEOUT_S = 5.0
STALL_PROBE_S = 0.1
CLIENT_GONE = 499  # nginx's "client closed request": counted apart from the server's errors
_TEXT = "text/plain; charset=utf-8"

T = TypeVar("T")
_Metric = TypeVar("_Metric", Counter, Gauge, Histogram)


# --- errors --------------------------------------------------------------------------------


class BackendUnavailable(DmsgwError):  # noqa: N818 (the name the actors use)
    """The DMS cannot be reached. The ping answers 503 with this message, so interLink marks
    the virtual node not ready instead of advertising capacity it cannot serve."""


class UnknownPodError(DmsgwError):
    """The backend has no such pod (``/getLogs`` of a pod it never saw): answered 404."""


class BackendGaveUpError(DmsgwError):
    """The backend's supervision gave up: ``dmsgw serve`` ends with a non-zero status, so that
    its service manager starts it again and crash-only recovery takes over."""


class ServeError(DmsgwError):
    """The server cannot start as configured (address in use, non-loopback without a token…)."""


class AddressError(DmsgwError, ValueError):
    """A listen address that is neither a unix socket path nor ``host:port``."""


class MetricsError(DmsgwError):
    """A metric registered twice with a different kind or labels."""


class _StatusError(Exception):
    """An answer other than 200, decided before or instead of calling the backend."""

    def __init__(
        self,
        status: int,
        message: str,
        headers: Mapping[str, str] | None = None,
        *,
        close: bool = False,
    ):
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = dict(headers or {})
        self.close = close  # the connection cannot be trusted for a next request


class _ClientGone(Exception):  # noqa: N818 (an event, not an error of ours)
    """The client closed the connection before its request was read."""


# --- the backend ---------------------------------------------------------------------------


class PluginBackend(Protocol):
    """What the gateway actors provide to the HTTP layer.

    Every call but :meth:`logs` runs under the server's deadline and is *cancelled* when it
    expires, so each must be safe to cancel (idempotent by pod UID, state persisted before it
    is acted on). A :class:`~dmsgw.errors.DmsgwError` becomes a 500 with its message,
    :class:`BackendUnavailable` a 503, :class:`UnknownPodError` a 404.

    A backend may also have ``gave_up``, an :class:`asyncio.Future` that completes with a
    reason when it can no longer serve (its root supervisor gave up): :class:`Serve` then
    reports not ready, shuts down and raises :class:`BackendGaveUpError`.
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

    async def ping(self) -> PingResponse:
        """Capacity for the ping (``/status`` with ``[]``); raise :class:`BackendUnavailable`
        when the DMS cannot be reached."""
        ...

    def logs(self, request: LogStruct) -> AsyncIterator[bytes]:
        """The log bytes, in chunks. With ``Follow`` it keeps yielding until the container
        ends. Raise :class:`UnknownPodError` from the call itself (not from the iterator) to get a
        404 before any byte is sent; the iterator is closed when the client goes away."""
        ...

    async def close(self) -> None:
        """Release everything; called once, after the plugin server has drained."""
        ...


# --- listen addresses ----------------------------------------------------------------------

_HOSTNAME = re.compile(r"(?=.{1,253}\Z)([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.?)+")
_UNIX_PATH_MAX = 107  # sun_path is 108 bytes with its NUL


@dataclasses.dataclass(frozen=True)
class ListenAddress:
    """Where a server listens: a unix socket ``path``, else ``host``:``port``."""

    host: str = "127.0.0.1"
    port: int = DEFAULT_PLUGIN_PORT
    path: Path | None = None

    @classmethod
    def parse(cls, text: str, *, default_port: int = DEFAULT_PLUGIN_PORT) -> ListenAddress:
        """``unix:///run/dmsgw.sock``, ``/run/dmsgw.sock``, ``127.0.0.1:4000``, ``[::1]:4000``,
        ``4000`` (loopback) or ``http://127.0.0.1:4000`` (interLink's own spelling)."""
        text = text.strip()
        if not text:
            raise AddressError("empty address: give a unix socket path or host:port")
        if text.startswith("unix://"):
            return cls._unix(text.removeprefix("unix://"), text)
        if text.startswith(("/", "./", "~")):
            return cls._unix(text, text)
        rest = text.removeprefix("http://")
        if "/" in rest.rstrip("/"):
            raise AddressError(f"{text!r}: an address has no path; use host:port")
        return cls._tcp(rest.rstrip("/"), text, default_port)

    @classmethod
    def _unix(cls, path: str, text: str) -> ListenAddress:
        if not path:
            raise AddressError(f"{text!r}: the unix socket path is empty")
        resolved = Path(path).expanduser()
        if len(os.fsencode(resolved)) > _UNIX_PATH_MAX:
            raise AddressError(
                f"{text!r}: a unix socket path is at most {_UNIX_PATH_MAX} bytes long"
            )
        return cls(path=resolved)

    @classmethod
    def _tcp(cls, rest: str, text: str, default_port: int) -> ListenAddress:
        if rest.isdigit():
            host, port_text = "127.0.0.1", rest
        elif rest.startswith("["):
            host, sep, port_text = rest[1:].partition("]:")
            if not sep:
                raise AddressError(f"{text!r}: expected [IPv6]:port")
        elif rest.count(":") == 1:
            host, _, port_text = rest.partition(":")
        elif ":" in rest:
            raise AddressError(f"{text!r}: write an IPv6 address in brackets, [::1]:port")
        else:
            host, port_text = rest, str(default_port)
        return cls(host=_check_host(host, text), port=_check_port(port_text, text))

    @property
    def is_unix(self) -> bool:
        return self.path is not None

    @property
    def is_loopback(self) -> bool:
        """A unix socket counts as loopback: only local processes allowed by its file mode
        reach it. A host name other than ``localhost`` is not trusted to stay local."""
        if self.path is not None:
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False

    @property
    def url(self) -> str:
        """``unix:///path`` or ``http://host:port``: what interLink's ``SidecarURL`` names."""
        if self.path is not None:
            return f"unix://{self.path}"
        return f"http://{self}"

    def endpoint(self, route: str) -> str:
        """How to reach ``route`` here, for people: a URL, or a ``curl --unix-socket`` line."""
        if self.path is not None:
            return f"curl --unix-socket {self.path} http://localhost{route}"
        return f"http://{self}{route}"

    def __str__(self) -> str:
        if self.path is not None:
            return f"unix://{self.path}"
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


def _check_host(host: str, text: str) -> str:
    if not host:
        raise AddressError(f"{text!r}: give a host (0.0.0.0 for every interface)")
    if host == "localhost":  # one socket, not one per address localhost resolves to
        return "127.0.0.1"
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        pass
    if not _HOSTNAME.fullmatch(host):
        raise AddressError(f"{text!r}: {host!r} is neither an IP address nor a host name")
    return host


def _check_port(port_text: str, text: str) -> int:
    if not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise AddressError(f"{text!r}: the port must be a number from 0 to 65535")
    return int(port_text)


def require_token_for(listen: ListenAddress, token: str | None) -> None:
    """The one rule for exposure: off loopback, a listener needs a bearer token."""
    if not listen.is_loopback and not token:
        raise ServeError(
            f"listening on {listen}, which is not loopback, needs a bearer token "
            "(set DMSGW_TOKEN or token_file), or listen on a unix socket or 127.0.0.1"
        )


# --- the front door --------------------------------------------------------------------------

_UNIX_HOSTS = frozenset({"unix", "localhost"})  # what interLink and curl --unix-socket send


def admit(request: web.Request, token: str | None) -> None:
    """Refuses, before any route runs, a request the gateway must not serve.

    A browser adds ``Origin`` to every request a page makes that could change something
    (cross-site or not; a top-level navigation GET has none); interLink, curl and probes
    never send it, so its presence means a web page, refused 403. With ``token`` the request
    must carry it (401); without, nothing vouches for the caller but where it connected, so
    its ``Host`` must name that address (421): a DNS-rebinding page reaches a loopback port
    under its own host name, which it cannot change.
    """
    if "Origin" in request.headers:
        raise _StatusError(
            403, "origin: requests from web pages (with an Origin header) are refused"
        )
    if token is not None:
        _check_bearer(request, token)
        return
    host = request.headers.get("Host")
    transport = request.transport
    if transport is None:
        raise _ClientGone
    sockname = transport.get_extra_info("sockname")
    if host is None or not host_is_local(host, sockname):
        given = "no Host header" if host is None else f"Host {_shown(host)}"
        raise _StatusError(
            421, f"host: {given} does not name this gateway; use {_expected_hosts(sockname)}"
        )


def _check_bearer(request: web.Request, token: str) -> None:
    scheme, _, value = request.headers.get("Authorization", "").partition(" ")
    challenge = {"WWW-Authenticate": "Bearer"}
    if scheme.lower() != "bearer" or not value.strip():
        raise _StatusError(
            401, "authorization: send the gateway's token as Authorization: Bearer", challenge
        )
    if not hmac.compare_digest(value.strip().encode(), token.encode()):
        raise _StatusError(401, "authorization: wrong bearer token", challenge)


def host_is_local(host: str, sockname: object) -> bool:
    """Whether ``host`` (a ``Host`` header) names the local end of the connection,
    ``sockname``: its IP address and port, ``localhost`` when that is loopback, and ``unix``
    or ``localhost`` for a unix socket (whatever port)."""
    names, port = _local_names(sockname)
    name, given_port = _split_host(host)
    if name is None or name not in names:
        return False
    return port is None or given_port == port


def _local_names(sockname: object) -> tuple[frozenset[str], int | None]:
    """The host names a request to ``sockname`` may give, and the port it must give."""
    if isinstance(sockname, str | bytes):
        return _UNIX_HOSTS, None
    if not isinstance(sockname, tuple) or len(sockname) < 2:
        return frozenset(), None
    address = ipaddress.ip_address(str(sockname[0]).partition("%")[0])
    names = {_host_name(address)}
    mapped = getattr(address, "ipv4_mapped", None)  # a dual-stack socket's IPv4 peers
    if mapped is not None:
        names.add(_host_name(mapped))
    if address.is_loopback or (mapped is not None and mapped.is_loopback):
        names.add("localhost")
    return frozenset(names), int(sockname[1])


def _host_name(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str:
    return f"[{address}]" if address.version == 6 else str(address)


def _split_host(host: str) -> tuple[str | None, int]:
    """``name`` and port of a ``Host`` header (80 when it has none); IP literals are
    normalised (``[0::1]`` is ``[::1]``), names lowered; ``None`` if it is malformed."""
    if host.startswith("["):
        literal, bracket, rest = host[1:].partition("]")
        if not bracket or (rest and not rest.startswith(":")):
            return None, 0
        name, port_text = f"[{literal}]", rest[1:] if rest else ""
    else:
        name, _, port_text = host.partition(":")
    if port_text and not (port_text.isdigit() and len(port_text) <= 5):
        return None, 0
    try:
        name = _host_name(ipaddress.ip_address(name.strip("[]")))
    except ValueError:
        name = name.lower()
    return name, int(port_text) if port_text else 80


def _expected_hosts(sockname: object) -> str:
    names, port = _local_names(sockname)
    shown = sorted(names) if port is None else sorted(f"{name}:{port}" for name in names)
    return " or ".join(shown) or "the address the gateway listens on"


def _shown(text: str) -> str:
    """Text a client sent, quoted and cut short for an error line."""
    return repr(text if len(text) <= 60 else text[:57] + "...")


# --- options -------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ServerOptions:
    """How the plugin and operator servers behave; :mod:`dmsgw.interlink.config` builds one."""

    listen: ListenAddress = ListenAddress()
    operator_listen: ListenAddress = ListenAddress(port=DEFAULT_OPERATOR_PORT)
    token: str | None = dataclasses.field(default=None, repr=False)
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    deadline_s: float = DEFAULT_DEADLINE_S
    shutdown_grace_s: float = DEFAULT_SHUTDOWN_GRACE_S
    body_timeout_s: float = DEFAULT_BODY_TIMEOUT_S

    def __post_init__(self) -> None:
        require_token_for(self.listen, self.token)
        require_token_for(self.operator_listen, self.token)
        if self.body_timeout_s <= 0:
            raise ServeError(f"body_timeout_s must be above 0, not {self.body_timeout_s:g}")
        if self.max_body_bytes < 1:
            raise ServeError(f"max_body_bytes must be positive, not {self.max_body_bytes}")
        if not 0 < self.deadline_s <= MAX_DEADLINE_S:
            raise ServeError(
                f"deadline_s must be above 0 and at most {MAX_DEADLINE_S:g} s "
                f"(interLink waits 120 s for an answer), not {self.deadline_s:g}"
            )
        if self.shutdown_grace_s < 0:
            raise ServeError(f"shutdown_grace_s cannot be negative ({self.shutdown_grace_s:g})")

    @property
    def metrics_token(self) -> str | None:
        """What ``/metrics`` requires: the token when the operator port is off loopback,
        where anyone on the network could otherwise read the gateway's state."""
        return None if self.operator_listen.is_loopback else self.token


# --- metrics -------------------------------------------------------------------------------


class Metrics:
    """The Prometheus registry ``/metrics`` exposes, shared by the server and the backend.

    Names get the ``dmsgw_`` prefix; asking again for a metric with the same kind and labels
    returns the one already registered (so a backend restarted in-process keeps counting),
    while a clash of kind or labels is a :class:`MetricsError`.
    """

    PREFIX = "dmsgw_"

    def __init__(self, *, process: bool = True) -> None:
        self.registry = CollectorRegistry()
        self._metrics: dict[str, tuple[Counter | Gauge | Histogram, tuple[str, ...]]] = {}
        if process:  # RSS, CPU, open files: what the 10,000-pod budget is judged by
            ProcessCollector(registry=self.registry)

    def counter(self, name: str, documentation: str, labels: Sequence[str] = ()) -> Counter:
        return self._metric(Counter, name, documentation, labels)

    def gauge(self, name: str, documentation: str, labels: Sequence[str] = ()) -> Gauge:
        return self._metric(Gauge, name, documentation, labels)

    def histogram(
        self,
        name: str,
        documentation: str,
        labels: Sequence[str] = (),
        buckets: Sequence[float] = Histogram.DEFAULT_BUCKETS,
    ) -> Histogram:
        return self._metric(Histogram, name, documentation, labels, buckets=buckets)

    def render(self) -> bytes:
        """The text exposition format (``CONTENT_TYPE_LATEST``)."""
        return generate_latest(self.registry)

    def _metric(
        self,
        kind: type[_Metric],
        name: str,
        documentation: str,
        labels: Sequence[str],
        **options: Any,
    ) -> _Metric:
        full = name if name.startswith(self.PREFIX) else self.PREFIX + name
        entry = self._metrics.get(full)
        if entry is not None:
            metric, known = entry
            if isinstance(metric, kind) and known == tuple(labels):
                return metric
            raise MetricsError(
                f"metric {full} exists as a {type(metric).__name__.lower()} "
                f"with labels {list(known)}"
            )
        created = kind(full, documentation, labels, registry=self.registry, **options)
        self._metrics[full] = (created, tuple(labels))
        return created


# --- the plugin API ------------------------------------------------------------------------


def _one_line(message: str) -> str:
    return " ".join(message.split())


def _text(status: int, message: str, headers: Mapping[str, str] | None = None) -> web.Response:
    return web.Response(
        status=status, text=_one_line(message), content_type="text/plain", headers=headers
    )


def _refusal(problem: _StatusError) -> web.Response:
    response = _text(problem.status, problem.message, problem.headers)
    if problem.close:
        response.force_close()
    return response


def _json(body: bytes) -> web.Response:
    return web.Response(body=body, content_type="application/json")


def _route(request: web.Request) -> str:
    """The route's path for labels, never the raw path: a scan of random URLs must not
    create one time series per URL."""
    resource = request.match_info.route.resource
    return resource.canonical if resource is not None else "unmatched"


class PluginServer:
    """The plugin routes over a :class:`PluginBackend`: ``POST /create``, ``POST /delete``,
    ``GET``/``POST /status`` (``[]`` is the ping) and ``GET``/``POST /getLogs``."""

    def __init__(self, backend: PluginBackend, options: ServerOptions, metrics: Metrics) -> None:
        self._backend = backend
        self._options = options
        self._stopping = asyncio.Event()
        self._requests = metrics.counter(
            "plugin_requests", "Plugin API requests answered.", ("route", "method", "code")
        )
        self._latency = metrics.histogram(
            "plugin_request_duration_seconds",
            "Time to answer a plugin API request (to the end of a log stream).",
            ("route", "method"),
        )
        self._in_flight = metrics.gauge(
            "plugin_requests_in_flight", "Plugin API requests being answered.", ("route",)
        )
        # Routes and methods are the router's (never raw paths), so these stay small.
        self._by_route: dict[tuple[str, str], tuple[Gauge, Histogram]] = {}
        self._by_answer: dict[tuple[str, str, int], Counter] = {}

    def app(self) -> web.Application:
        app = web.Application(
            client_max_size=self._options.max_body_bytes, middlewares=[self._observe]
        )
        app.router.add_route("POST", "/create", self._create)
        app.router.add_route("POST", "/delete", self._delete)
        for method in ("GET", "POST"):
            app.router.add_route(method, "/status", self._status)
            app.router.add_route(method, "/getLogs", self._logs)
        app.on_shutdown.append(self._on_shutdown)
        return app

    async def _on_shutdown(self, _: web.Application) -> None:
        """Ends the log streams that follow, so that draining does not wait for them."""
        self._stopping.set()

    # middleware: auth, error mapping, metrics, the request log

    @web.middleware
    async def _observe(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        route = _route(request)
        started = time.perf_counter()
        in_flight, latency = self._series(route, request.method)
        in_flight.inc()
        status, error = CLIENT_GONE, "cancelled: the client went away"
        try:
            response = await self._answer(request, handler)
            status = response.status
            if status >= 400 and isinstance(response, web.Response):
                error = response.text or ""
            return response
        finally:
            elapsed = time.perf_counter() - started
            in_flight.dec()
            self._answered(route, request.method, status).inc()
            latency.observe(elapsed)
            _log_request(request, route, status, elapsed, error if status >= 400 else "")

    def _series(self, route: str, method: str) -> tuple[Gauge, Histogram]:
        """The in-flight gauge and latency histogram of a route and method, looked up once:
        ``labels()`` validates and locks on every call, and ``/status`` is called thousands
        of times a second."""
        key = (route, method)
        series = self._by_route.get(key)
        if series is None:
            series = (self._in_flight.labels(route), self._latency.labels(route, method))
            self._by_route[key] = series
        return series

    def _answered(self, route: str, method: str, status: int) -> Counter:
        key = (route, method, status)
        counter = self._by_answer.get(key)
        if counter is None:
            counter = self._requests.labels(route, method, str(status))
            self._by_answer[key] = counter
        return counter

    async def _answer(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        try:
            admit(request, self._options.token)
            return await handler(request)
        except _StatusError as problem:
            return _refusal(problem)
        except _ClientGone:
            return _text(CLIENT_GONE, "client closed the connection before its request was read")
        except TooManyPodsError as exc:
            return _text(413, str(exc))
        except PluginRequestError as exc:
            return _text(400, str(exc))
        except UnknownPodError as exc:
            return _text(404, str(exc))
        except BackendUnavailable as exc:
            return _text(503, f"not ready: {exc}")
        except DmsgwError as exc:
            return _text(500, str(exc))
        except web.HTTPException as exc:  # the router's 404 and 405
            allow = {"Allow": exc.headers["Allow"]} if "Allow" in exc.headers else None
            return _text(exc.status, f"{exc.status}: {exc.reason}", allow)
        except Exception as exc:
            log.exception("bug answering %s %s", request.method, request.path)
            return _text(500, f"internal error ({type(exc).__name__}); see the gateway's log")

    async def _body(self, request: web.Request) -> bytes:
        """The whole JSON body, GET ones included (a keep-alive connection breaks if one is
        left), within ``body_timeout_s``: a client that trickles its body is cut off."""
        _require_json(request)
        limit = self._options.max_body_bytes
        length = request.content_length
        if length is not None and length > limit:
            raise _StatusError(413, f"body: {length} bytes is over the {limit}-byte limit")
        timeout_s = self._options.body_timeout_s
        try:
            async with asyncio.timeout(timeout_s):
                return await request.read()
        except web.HTTPRequestEntityTooLarge:
            raise _StatusError(413, f"body: over the {limit}-byte limit") from None
        except TimeoutError:
            raise _StatusError(
                408, f"body: not received within {timeout_s:g} s", close=True
            ) from None
        except ConnectionResetError:
            raise _ClientGone from None

    async def _within_deadline(self, what: str, call: Awaitable[T]) -> T:
        """``call``, cancelled and answered 503 when it outlives the deadline, so that
        interLink always gets its headers before its own 120 s timeout."""
        deadline = self._options.deadline_s
        timer = asyncio.timeout(deadline)
        try:
            async with timer:
                return await call
        except TimeoutError:
            if not timer.expired():
                raise  # the backend's own timeout, not ours
            raise _StatusError(
                503,
                f"{what}: no answer within the gateway's {deadline:g} s deadline; "
                "the DMS or the gateway's store is not answering",
            ) from None

    # routes

    async def _create(self, request: web.Request) -> web.Response:
        pods = parse_create_body(await self._body(request))
        results = await self._within_deadline("create", self._backend.create(pods))
        if len(results) != len(pods):
            raise DmsgwError(
                f"create: the backend answered {len(results)} result(s) for {len(pods)} pod(s)"
            )
        # interLink <= 0.4 sent a one-element list but has always read one CreateStruct.
        return _json(results[0].to_json())

    async def _delete(self, request: web.Request) -> web.Response:
        pod = parse_delete_body(await self._body(request))
        await self._within_deadline("delete", self._backend.delete(pod))
        meta = pod.metadata
        return _text(200, f"pod {meta.namespace}/{meta.name} ({meta.uid}) deleted")

    async def _status(self, request: web.Request) -> web.Response:
        raw = await self._body(request)
        return await self._within_deadline("status", self._status_of(raw))

    async def _status_of(self, raw: bytes) -> web.Response:
        """The reply to a ``/status`` body, reading it included (a body of thousands of
        pods is work too): the ping for ``[]``, else each pod's status."""
        pods = await read_status_body(raw)
        if not pods:
            return await self._ping()
        statuses = await self._backend.status(pods)
        async for status in in_turns(statuses):
            status.wire()  # written once and kept: the thousands a body may ask for, in turns
        return _json(encode_pod_statuses(statuses))

    async def _ping(self) -> web.Response:
        if self._stopping.is_set():
            raise _StatusError(503, "not ready: the gateway is shutting down")
        answer = await self._backend.ping()
        return _json(wire_json(answer.to_wire()))

    async def _logs(self, request: web.Request) -> web.StreamResponse:
        query = parse_logs_body(await self._body(request))
        chunks = self._backend.logs(query)
        try:
            return await self._send_logs(request, query, chunks)
        finally:
            await _close(chunks)

    async def _send_logs(
        self, request: web.Request, query: LogStruct, chunks: AsyncIterator[bytes]
    ) -> web.StreamResponse:
        """Without ``Follow`` the first chunk is awaited (under the deadline) before the
        headers, so that a failure still gets its status code; with ``Follow`` the headers go
        at once, since the next line may be minutes away."""
        first: bytes | None = b""
        if not query.opts.follow:
            first = await self._within_deadline("getLogs", anext(chunks, None))
        response = web.StreamResponse(headers={"Content-Type": _TEXT})
        await response.prepare(request)
        try:
            if first:
                await response.write(first)
            if first is not None:
                await self._pump(chunks, response)
            await response.write_eof()
        except ConnectionResetError:
            log.debug("log stream of pod %s: the client went away", query.pod_uid)
        return response

    async def _pump(self, chunks: AsyncIterator[bytes], response: web.StreamResponse) -> None:
        """One write per chunk until the backend ends, or the server stops (the stream then
        ends cleanly instead of holding the drain until its timeout)."""
        stopping = asyncio.ensure_future(self._stopping.wait())
        try:
            while True:
                following = asyncio.ensure_future(anext(chunks, None))
                await asyncio.wait({following, stopping}, return_when=asyncio.FIRST_COMPLETED)
                if not following.done():
                    following.cancel()
                    await asyncio.gather(following, return_exceptions=True)
                    return
                chunk = _chunk_or_note(following)
                if chunk is None:
                    return
                await response.write(chunk)
        finally:
            stopping.cancel()


def _require_json(request: web.Request) -> None:
    """interLink sends every body as ``application/json``. A web page can send text/plain,
    a form or multipart without asking first (a CORS "simple" request), never JSON."""
    if "Content-Type" not in request.headers:
        raise _StatusError(415, "content-type: send the body as Content-Type: application/json")
    if request.content_type != "application/json":
        raise _StatusError(
            415,
            f"content-type: send the body as application/json, not {_shown(request.content_type)}",
        )


def _chunk_or_note(following: asyncio.Future[bytes | None]) -> bytes | None:
    """The next chunk; a backend failure after the headers went out cannot change the status
    any more, so it ends the stream with a last line saying why."""
    try:
        return following.result()
    except DmsgwError as exc:
        log.warning("log stream ended by the backend: %s", exc)
        return f"\ndmsgw: log stream ended: {_one_line(str(exc))}\n".encode()
    except Exception:
        log.exception("bug in a log stream")
        return b"\ndmsgw: log stream ended: internal error; see the gateway's log\n"


async def _close(chunks: AsyncIterator[bytes]) -> None:
    """Closes an async generator early (it may hold a DMS log subscription)."""
    aclose = getattr(chunks, "aclose", None)
    if aclose is not None:
        await aclose()


def _log_request(
    request: web.Request, route: str, status: int, elapsed_s: float, error: str
) -> None:
    """Every request, with interLink's session id; successful status polls (one per pod
    every 5 s) only at DEBUG, so that 10,000 pods do not flood the log."""
    if status >= 500:
        level = logging.ERROR
    elif status == CLIENT_GONE:  # the client's choice, not a fault of either side
        level = logging.INFO
    elif status >= 400:
        level = logging.WARNING
    elif route == "/status":
        level = logging.DEBUG
    else:
        level = logging.INFO
    if not log.isEnabledFor(level):
        return
    fields: dict[str, Any] = {
        "session": request.headers.get(SESSION_HEADER, ""),
        "method": request.method,
        "path": request.path,
        "status": status,
        "duration_ms": round(elapsed_s * 1000, 3),
    }
    if error:
        fields["error"] = error
    log.log(level, "%s %s %d", request.method, request.path, status, extra=fields)


# --- the operator app ----------------------------------------------------------------------


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
            return _one_line(str(exc))
        except TimeoutError:
            return f"the backend's ping took over {self._ping_timeout_s:g} s"
        except DmsgwError as exc:
            return _one_line(str(exc))
        except Exception as exc:
            log.exception("bug in the backend's ping")
            return f"internal error ({type(exc).__name__})"
        return None


def operator_app(
    health: Health, metrics: Metrics, *, metrics_token: str | None = None
) -> web.Application:
    """``/healthz`` (always 200 while live), ``/readyz`` (200 or 503), ``/metrics`` (which
    requires ``metrics_token`` if given), behind the same front door as the plugin API."""

    @web.middleware
    async def front_door(
        request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        try:
            admit(request, metrics_token if request.path == "/metrics" else None)
        except _StatusError as problem:
            return _refusal(problem)
        except _ClientGone:
            return _text(CLIENT_GONE, "client closed the connection")
        return await handler(request)

    async def healthz(_: web.Request) -> web.Response:
        return web.json_response(await health.report())

    async def readyz(_: web.Request) -> web.Response:
        report = await health.report()
        return web.json_response(report, status=200 if report["ready"] else 503)

    async def metrics_page(_: web.Request) -> web.Response:
        return web.Response(body=metrics.render(), headers={"Content-Type": CONTENT_TYPE_LATEST})

    app = web.Application(middlewares=[front_door])
    app.router.add_route("GET", "/healthz", healthz)
    app.router.add_route("GET", "/readyz", readyz)
    app.router.add_route("GET", "/metrics", metrics_page)
    return app


# --- the event loop's stalls ---------------------------------------------------------------


class LoopStalls:
    """How late the event loop wakes a timer, on ``/metrics``: the last probe's lateness and
    the longest seen. A timer fires late when a callback held the loop (a body parsed in one
    go, a garbage-collector pass, blocking I/O), and every request waited as long, probes
    included, so this is where an operator sees the next freeze."""

    def __init__(self, metrics: Metrics) -> None:
        self.last_s = 0.0
        self.longest_s = 0.0
        metrics.gauge(
            "event_loop_stall_seconds", "How late the event loop ran the last probe timer."
        ).set_function(lambda: self.last_s)
        metrics.gauge(
            "event_loop_stall_max_seconds",
            "The longest the event loop ran a probe timer late since the gateway started.",
        ).set_function(lambda: self.longest_s)

    def observe(self, late_s: float) -> None:
        """One probe's lateness (clock jitter can make it slightly negative: none)."""
        self.last_s = max(late_s, 0.0)
        self.longest_s = max(self.longest_s, self.last_s)

    async def watch(
        self, every_s: float = STALL_PROBE_S, *, clock: Callable[[], float] | None = None
    ) -> None:
        """Forever: sleep ``every_s`` and record how much later than due the loop woke us,
        on ``clock`` (the loop's own by default)."""
        now = clock if clock is not None else asyncio.get_running_loop().time
        while True:
            due = now() + every_s
            await asyncio.sleep(every_s)
            self.observe(now() - due)


# --- running both --------------------------------------------------------------------------

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


@dataclasses.dataclass
class _Listener:
    """One app bound to one address; removes its unix socket (if still its own) on stop."""

    runner: web.AppRunner
    address: ListenAddress
    inode: int | None

    @classmethod
    async def start(cls, app: web.Application, where: ListenAddress, grace_s: float) -> _Listener:
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=grace_s)
        await runner.setup()
        try:
            site: web.BaseSite
            if where.path is not None:
                _claim_socket_path(where.path)
                site = web.UnixSite(runner, str(where.path))
            else:
                site = web.TCPSite(runner, where.host, where.port)
            await site.start()
        except (OSError, ServeError) as exc:
            await runner.cleanup()
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise ServeError(f"cannot listen on {where}: {reason}") from None
        if where.path is not None:
            return cls(runner, where, where.path.stat().st_ino)
        return cls(runner, dataclasses.replace(where, port=runner.addresses[0][1]), None)

    async def stop(self) -> None:
        await self.runner.cleanup()
        path = self.address.path
        if path is not None:
            with contextlib.suppress(FileNotFoundError):
                if path.stat().st_ino == self.inode:
                    path.unlink()


def _claim_socket_path(path: Path) -> None:
    """A stale socket (its server died) is removed; a live one, or any other file, is not."""
    if not path.parent.is_dir():
        raise ServeError(f"directory {path.parent} does not exist")
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):
        raise ServeError(f"{path} exists and is not a socket")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        try:
            probe.connect(str(path))
        except (ConnectionRefusedError, FileNotFoundError):
            path.unlink(missing_ok=True)
            return
    raise ServeError(f"another process is listening on {path}")


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
        health = Health()
        async with contextlib.AsyncExitStack() as stack:
            stack.enter_context(_stop_on_signals(stop))
            watch = asyncio.ensure_future(LoopStalls(self.metrics).watch())
            stack.push_async_callback(_cancelled, watch)
            operator_server = operator_app(
                health, self.metrics, metrics_token=options.metrics_token
            )
            operator = await _Listener.start(operator_server, options.operator_listen, grace_s=1.0)
            stack.push_async_callback(operator.stop)
            backend = await self._factory(self.metrics)
            stack.push_async_callback(_close_backend, backend)
            server = PluginServer(backend, options, self.metrics)
            plugin = await _Listener.start(server.app(), options.listen, options.shutdown_grace_s)
            stack.push_async_callback(plugin.stop)
            health.serving(backend)
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
