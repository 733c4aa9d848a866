"""interLink's plugin API over HTTP: ``/create``, ``/delete``, ``/status`` and ``/getLogs``.

interLink 0.6.2 calls its plugin (us) on four routes with JSON bodies, GET ones included, and
counts anything but exactly HTTP 200 as a failure whose text it copies into the pod's status
(its ``ReqWithError``). So every answer here is either the Go type's JSON with 200, or a status
code with one line of plain text that names the problem: a body that does not parse (400, the
:class:`~dmsgw.interlink.wire.parsing.PluginRequestError` path and reason), a body over the size
limit (413), a missing or wrong bearer token (401), an unknown pod on ``/getLogs`` (404), the
DMS being unreachable or a call outliving the deadline (503), a backend failure (500, never a
traceback; bugs are logged with theirs).

interLink waits at most 120 s for response headers, so every backend call except the log
stream's body runs under a server-side deadline (``deadline_s``): a stuck call is cancelled and
answered 503 long before interLink gives up. ``/getLogs`` with ``Follow`` sends its headers at
once and then one write per chunk, so lines reach ``kubectl logs -f`` as they arrive. Bodies
must arrive within ``body_timeout_s`` (408); a client that goes away mid-body is a 499 logged at
INFO, not a server error.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

from aiohttp import web

from ...actors.turns import take_turn
from ...errors import DmsgwError
from ..plugin_errors import (
    BackendUnavailable,
    PluginRequestError,
    PodBeingDeletedError,
    TooManyPodsError,
    UnknownPodError,
)
from ..wire.bodies import LogStruct, encode_pod_statuses
from ..wire.parsing import (
    in_turns,
    parse_create_body,
    parse_delete_body,
    parse_logs_body,
    read_status_body,
    remembered_uids,
)
from .backend import PluginBackend
from .front_door import (
    CLIENT_GONE,
    ClientGone,
    StatusError,
    admit,
    one_line,
    refusal,
    require_json,
    text_response,
)
from .metrics import Metrics
from .options import ServerOptions
from .plugin_requests import PluginRequests

log = logging.getLogger("dmsgw.plugin")

SESSION_HEADER = "InterLink-Http-Session"

_TEXT = "text/plain; charset=utf-8"

T = TypeVar("T")
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

AT_ONCE_MAX_PODS = 256
"""Pods a ``/status`` body may name to be answered at once from the backend's kept entries
(a lookup and a join of each one's kept JSON: under a millisecond for the lot;
bench/README.md, "A pod's /status entry")."""


def _json(body: bytes) -> web.Response:
    return web.Response(body=body, content_type="application/json")


class PluginServer:
    """The plugin routes over a :class:`PluginBackend`: ``POST /create``, ``POST /delete``,
    ``GET``/``POST /status`` (``[]`` is the ping) and ``GET``/``POST /getLogs``."""

    def __init__(self, backend: PluginBackend, options: ServerOptions, metrics: Metrics) -> None:
        self._backend = backend
        self._options = options
        self._stopping = asyncio.Event()
        self._requests = metrics.collector(PluginRequests)
        self._methods: dict[str, set[str]] = {}  # the routes' paths, and the methods of each

    def app(self) -> web.Application:
        app = web.Application(client_max_size=self._options.max_body_bytes)
        routes: list[tuple[str, str, Handler]] = [
            ("POST", "/create", self._create),
            ("POST", "/delete", self._delete),
            *((method, "/status", self._status) for method in ("GET", "POST")),
            *((method, "/getLogs", self._logs) for method in ("GET", "POST")),
        ]
        for method, path, handler in routes:
            app.router.add_route(method, path, self._observed(path, handler))
            self._methods.setdefault(path, set()).add(method)
        app.router.add_route("*", "/{path:.*}", self._observed("unmatched", self._unmatched))
        app.on_shutdown.append(self._on_shutdown)
        return app

    async def _on_shutdown(self, _: web.Application) -> None:
        """Ends the log streams that follow, so that draining does not wait for them."""
        self._stopping.set()

    # every route's wrapper: the front door, the errors' answers, metrics, the request log

    def _observed(self, route: str, handler: Handler) -> Handler:
        """``handler`` behind the front door, anything it raises answered as one line of text,
        and the request counted, timed and logged under ``route`` (a path, never the raw one:
        a scan of random URLs must not make one time series per URL). A wrapper per route
        rather than an aiohttp middleware, which costs every request two more coroutines
        (aiohttp adds one of its own) and a lookup: a poll of a known pod is answered in a
        few microseconds, and these were a fifth of what the gateway added to aiohttp's own."""
        token = self._options.plugin_token

        async def observed(request: web.Request) -> web.StreamResponse:
            started = time.perf_counter()
            in_flight, answers = self._requests.of(route, request.method)
            in_flight.count += 1
            status, error = CLIENT_GONE, "cancelled: the client went away"
            try:
                try:
                    admit(request, token)
                    response = await handler(request)
                except Exception as exc:
                    response = _error_answer(request, exc)
                status = response.status
                if status >= 400 and isinstance(response, web.Response):
                    error = response.text or ""
                return response
            finally:
                elapsed = time.perf_counter() - started
                in_flight.count -= 1
                answers.answered(status, elapsed)
                _log_request(request, route, status, elapsed, error if status >= 400 else "")

        return observed

    async def _unmatched(self, request: web.Request) -> web.StreamResponse:
        """Any other path (404), or a route's path with another method (405, naming those
        it takes), as aiohttp's router would answer them."""
        allowed = self._methods.get(request.path)
        if allowed:
            raise StatusError(405, "405: Method Not Allowed", {"Allow": ",".join(sorted(allowed))})
        raise StatusError(404, "404: Not Found")

    async def _body(self, request: web.Request) -> bytes:
        """The whole JSON body, GET ones included (a keep-alive connection breaks if one is
        left), within ``body_timeout_s``: a client that trickles its body is cut off."""
        require_json(request)
        limit = self._options.max_body_bytes
        length = request.content_length
        if length is not None and length > limit:
            raise StatusError(413, f"body: {length} bytes is over the {limit}-byte limit")
        timeout_s = self._options.body_timeout_s
        try:
            if request.content.is_eof():  # it came whole with the headers, as a poll's does
                return await request.read()  # nothing to wait for: no timer to arm
            async with asyncio.timeout(timeout_s):
                return await request.read()
        except TimeoutError:
            raise StatusError(
                408, f"body: not received within {timeout_s:g} s", close=True
            ) from None
        except web.HTTPRequestEntityTooLarge:
            raise StatusError(413, f"body: over the {limit}-byte limit") from None
        except ConnectionResetError:
            raise ClientGone from None

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
            raise StatusError(
                503,
                f"{what}: no answer within the gateway's {deadline:g} s deadline; "
                "the DMS or the gateway's store is not answering",
            ) from None

    # routes

    async def _create(self, request: web.Request) -> web.Response:
        raw = await self._body(request)
        await take_turn()  # validating a pod is heavy, and interLink may send many at once
        pods = parse_create_body(raw)
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
        return text_response(200, f"pod {meta.namespace}/{meta.name} ({meta.uid}) deleted")

    async def _status(self, request: web.Request) -> web.Response:
        raw = await self._body(request)
        known = self._known_statuses(remembered_uids(raw))
        if known is not None:
            return _json(known)
        return await self._within_deadline("status", self._status_of(raw))

    def _known_statuses(self, uids: list[str] | None) -> bytes | None:
        """The reply naming ``uids`` (those of a body read before, or just read) when the
        backend has every one at hand: the poll of a live pod, nearly every request, and the
        first poll of one after its JSON changed. Bodies of many pods go the long way, which
        gives the event loop a turn every few pods."""
        if not uids or len(uids) > AT_ONCE_MAX_PODS:  # [] is the ping
            return None
        return self._backend.statuses_at_once(uids)

    async def _status_of(self, raw: bytes) -> web.Response:
        """The reply to a ``/status`` body, reading it included (a body of thousands of
        pods is work too): the ping for ``[]``, else each pod's status."""
        pods = await read_status_body(raw)
        if not pods:
            return await self._ping()
        known = self._known_statuses([ref.uid for ref in pods])
        if known is not None:
            return _json(known)
        statuses = await self._backend.status(pods)
        async for status in in_turns(statuses):
            status.wire()  # written once and kept: the thousands a body may ask for, in turns
        return _json(encode_pod_statuses(statuses))

    async def _ping(self) -> web.Response:
        if self._stopping.is_set():
            raise StatusError(503, "not ready: the gateway is shutting down")
        answer = await self._backend.ping()
        return _json(answer.to_json())

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


def _error_answer(request: web.Request, error: Exception) -> web.Response:
    """The answer to what a route raised: a status code and one line of text naming the
    problem (a bug is logged with its traceback, and answered 500 without it)."""
    if isinstance(error, StatusError):
        return refusal(error)
    if isinstance(error, ClientGone):
        return text_response(
            CLIENT_GONE, "client closed the connection before its request was read"
        )
    for kind, status, prefix in _ANSWERED_ERRORS:
        if isinstance(error, kind):
            return text_response(status, prefix + str(error))
    log.error("bug answering %s %s", request.method, request.path, exc_info=error)
    return text_response(500, f"internal error ({type(error).__name__}); see the gateway's log")


_ANSWERED_ERRORS: tuple[tuple[type[Exception], int, str], ...] = (
    (TooManyPodsError, 413, ""),  # before PluginRequestError, which it is
    (PluginRequestError, 400, ""),
    (UnknownPodError, 404, ""),
    (PodBeingDeletedError, 409, ""),
    (BackendUnavailable, 503, "not ready: "),
    (DmsgwError, 500, ""),  # after the others, which are DmsgwErrors too
)
"""The errors a route raises on purpose, each with its status code and the prefix of its
line: the first kind that matches answers."""


def _chunk_or_note(following: asyncio.Future[bytes | None]) -> bytes | None:
    """The next chunk; a backend failure after the headers went out cannot change the status
    any more, so it ends the stream with a last line saying why."""
    try:
        return following.result()
    except DmsgwError as exc:
        log.warning("log stream ended by the backend: %s", exc)
        return f"\ndmsgw: log stream ended: {one_line(str(exc))}\n".encode()
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
