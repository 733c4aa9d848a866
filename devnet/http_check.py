"""An allocation's ``http`` health check, made as the allocation sees it.

The DMS's check GETs the endpoint (a path alone means ``http://127.0.0.1<path>``: the
container's own loopback) and judges the status or the body. For an allocation with a network
namespace of its own (:mod:`.netns`) that loopback is the namespace's, so the request is made
from a thread that joined it (or, on a devnet that is not root, on connections its run's
:class:`~.userns.Connector` makes there); otherwise from the host, whose network the
allocation shares.
The request is a plain blocking ``urllib`` one on that thread, so that one code path serves
both.
"""

from __future__ import annotations

import asyncio
import functools
import http.client
import urllib.error
import urllib.parse
import urllib.request

from ..behaviors.ensemble import HealthCheckManifest
from .netns import AllocationNamespace, in_namespace
from .userns import Connector

HTTP_BODY_LIMIT = 1 << 20
"""How much of an HTTP health check's body is searched for the expected text."""


async def http_check(
    check: HealthCheckManifest,
    timeout_s: float,
    namespace: AllocationNamespace | None,
    connector: Connector | None = None,
) -> str:
    """GET the check's endpoint as the allocation sees it: from its network ``namespace``
    when it has one (its 127.0.0.1 is its own), or through the ``connector`` into it, else
    from the host."""
    url = check.endpoint if "://" in check.endpoint else f"http://127.0.0.1{check.endpoint}"
    opener = _OPENER if connector is None else _opener_through(connector)
    try:
        get = functools.partial(_http_get, opener, url, timeout_s)
        status, body = await (in_namespace(namespace, get) if namespace else asyncio.to_thread(get))
    except (OSError, http.client.HTTPException, ValueError) as exc:
        return f"health check GET {url} failed: {exc or type(exc).__name__}"
    kind, expected = check.response.type, check.response.value
    if kind == "status" and expected:
        return "" if str(status) == expected else f"GET {url}: status {status}, not {expected}"
    if not 200 <= status < 300:
        return f"GET {url}: status {status}"
    if expected and expected not in body:
        return f"GET {url}: the body lacks {expected!r}"
    return ""


_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))
"""Follows redirects (up to 10, as Go's ``http.Get``) and uses no proxy: the check is made
from where the allocation is."""


def _opener_through(connector: Connector) -> urllib.request.OpenerDirector:
    """:data:`_OPENER`, but connecting through ``connector`` (inside the allocation's network
    namespace)."""

    class Inside(http.client.HTTPConnection):
        def connect(self) -> None:
            self.sock = connector.connect(self.host, self.port)
            self.sock.settimeout(self.timeout)

    class InsideTLS(http.client.HTTPSConnection):
        def connect(self) -> None:
            sock = connector.connect(self.host, self.port)
            sock.settimeout(self.timeout)
            self.sock = self._context.wrap_socket(sock, server_hostname=self.host)  # type: ignore[attr-defined]

    class Handler(urllib.request.HTTPHandler, urllib.request.HTTPSHandler):
        def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
            return self.do_open(Inside, req)

        def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
            return self.do_open(InsideTLS, req)

    return urllib.request.build_opener(urllib.request.ProxyHandler({}), Handler)


def _http_get(opener: urllib.request.OpenerDirector, url: str, timeout_s: float) -> tuple[int, str]:
    """The status and (the first :data:`HTTP_BODY_LIMIT` bytes of) the body of ``GET url``,
    redirects followed (blocking: a thread of its own may be in the allocation's network
    namespace)."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"not an http(s) URL: {url!r}")
    try:
        response = opener.open(url, timeout=timeout_s)
    except urllib.error.HTTPError as answered:  # a 4xx or 5xx is an answer to judge
        response = answered
    with response:
        return response.status, response.read(HTTP_BODY_LIMIT).decode(errors="replace")
