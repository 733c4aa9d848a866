"""RestTransport against a loopback aiohttp app speaking the DMS REST API's shapes."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from dmsgw.clock import FixedClock
from dmsgw.gojson import marshal
from dmsgw.keys.crypto import Ed25519PrivKey
from dmsgw.transport import envelope as env
from dmsgw.transport.rest import (
    DMSError,
    DMSErrorKind,
    DMSRequestError,
    DMSTimeoutError,
    RestTransport,
    TransportError,
)

NOW = FixedClock(1_795_000_000 * 10**9)
DMS_KEY = Ed25519PrivKey(bytes(range(32)))
DMS = env.Handle.from_public_key(DMS_KEY.public_key())


def _request(behavior: str = "/dms/node/peers/list") -> env.Envelope:
    return env.message(DMS, DMS, behavior, reply_to="/private/user/1", clock=NOW)


def _app(
    invoke_status: int = 200,
    broadcast_body: bytes = b"null",
    connections: list[object] | None = None,
    handle_fetches: list[object] | None = None,
) -> web.Application:
    async def handle(request: web.Request) -> web.Response:
        if handle_fetches is not None:
            handle_fetches.append(request)
        return web.Response(body=marshal(DMS), content_type="application/json")

    async def invoke(request: web.Request) -> web.Response:
        if connections is not None:
            connections.append(request.transport)
        received = env.decode(await request.read())
        if invoke_status != 200:
            return web.json_response({"error": "request timeout"}, status=invoke_status)
        reply = env.sign(env.reply_to(received, {"Peers": ["a"]}), DMS_KEY)
        return web.Response(body=marshal(reply), content_type="application/json")

    async def broadcast(_: web.Request) -> web.Response:
        return web.Response(body=broadcast_body, content_type="application/json")

    async def bad(_: web.Request) -> web.Response:
        return web.json_response({"error": "invalid request data"}, status=400)

    app = web.Application()
    app.router.add_get("/api/v1/actor/handle", handle)
    app.router.add_post("/api/v1/actor/invoke", invoke)
    app.router.add_post("/api/v1/actor/broadcast", broadcast)
    app.router.add_post("/api/v1/actor/send", bad)
    return app


async def _transport(app: web.Application) -> tuple[TestServer, RestTransport]:
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    return server, RestTransport(str(server.make_url("")))


async def test_handle_is_fetched_and_cached() -> None:
    server, transport = await _transport(_app())
    try:
        assert await transport.handle() == DMS
        assert await transport.handle() is await transport.handle()
    finally:
        await transport.close()
        await server.close()


async def test_callers_at_once_fetch_the_handle_once_and_a_refresh_fetches_again() -> None:
    fetched: list[object] = []
    server, transport = await _transport(_app(handle_fetches=fetched))
    try:
        handles = await asyncio.gather(*(transport.handle() for _ in range(10)))
        assert handles == [DMS] * 10 and len(fetched) == 1
        assert await transport.handle(refresh=True) == DMS
        assert len(fetched) == 2
    finally:
        await transport.close()
        await server.close()


async def test_invoke_returns_the_reply_envelope() -> None:
    server, transport = await _transport(_app())
    try:
        reply = await transport.invoke(_request())
        env.verify(reply, NOW())
        assert reply.payload() == {"Peers": ["a"]} and reply.be == "/private/user/1"
    finally:
        await transport.close()
        await server.close()


@pytest.mark.parametrize(
    ("status", "error", "fragment", "kind"),
    [
        (408, DMSTimeoutError, "preflight", DMSErrorKind.TIMEOUT),
        (500, DMSRequestError, "HTTP 500: request timeout", DMSErrorKind.OTHER),
    ],
)
async def test_http_errors_become_typed_errors(
    status: int, error: type[DMSError], fragment: str, kind: DMSErrorKind
) -> None:
    server, transport = await _transport(_app(invoke_status=status))
    try:
        with pytest.raises(error, match=fragment) as info:
            await transport.invoke(_request("/dms/node/peers/self"))
        assert "/dms/node/peers/self" in str(info.value)
        assert info.value.kind is kind
        with pytest.raises(DMSRequestError, match="HTTP 400: invalid request data"):
            await transport.send(_request())
    finally:
        await transport.close()
        await server.close()


@pytest.mark.parametrize(
    ("body", "count"),
    [(b"null", 0), (b"[]", 0)],
)
async def test_broadcast_accepts_go_null_as_no_replies(body: bytes, count: int) -> None:
    server, transport = await _transport(_app(broadcast_body=body))
    try:
        assert len(await transport.broadcast(_request("/broadcast/hello"))) == count
    finally:
        await transport.close()
        await server.close()


@pytest.mark.parametrize("body", [b"{", b'{"a":1}', json.dumps([{"nonce": -1}]).encode()])
async def test_broadcast_garbage_is_a_clear_error(body: bytes) -> None:
    server, transport = await _transport(_app(broadcast_body=body))
    try:
        with pytest.raises(TransportError, match="/broadcast/hello"):
            await transport.broadcast(_request("/broadcast/hello"))
    finally:
        await transport.close()
        await server.close()


async def test_unreachable_dms_names_the_url() -> None:
    server = TestServer(web.Application(), host="127.0.0.1")
    await server.start_server()
    url = str(server.make_url(""))
    await server.close()  # nothing listens there now
    transport = RestTransport(url)
    try:
        with pytest.raises(TransportError, match="cannot reach the DMS at"):
            await transport.handle()
    finally:
        await transport.close()


async def test_a_non_dms_server_is_reported() -> None:
    app = web.Application()

    async def handle(_: Any) -> web.Response:
        return web.Response(text="<html>hello</html>")

    app.router.add_get("/api/v1/actor/handle", handle)
    server, transport = await _transport(app)
    try:
        with pytest.raises(TransportError, match="did not answer a DMS handle"):
            await transport.handle()
    finally:
        await transport.close()
        await server.close()


async def test_requests_share_one_keep_alive_connection() -> None:
    """The reply is read to its end, so aiohttp pools the connection instead of closing it."""
    connections: list[object] = []
    server, transport = await _transport(_app(connections=connections))
    try:
        for _ in range(3):
            assert (await transport.invoke(_request())).be == "/private/user/1"
        assert len(connections) == 3 and len({id(c) for c in connections}) == 1
    finally:
        await transport.close()
        await server.close()


def _chunked_app() -> web.Application:
    async def invoke(request: web.Request) -> web.StreamResponse:
        received = env.decode(await request.read())
        body = marshal(env.sign(env.reply_to(received, {"Peers": ["a"] * 500}), DMS_KEY))
        resp = web.StreamResponse(headers={"Content-Type": "application/json"})
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        for start in range(0, len(body), 97):
            await resp.write(body[start : start + 97])
        await resp.write_eof()
        return resp

    app = web.Application()
    app.router.add_post("/api/v1/actor/invoke", invoke)
    return app


async def test_a_reply_in_many_chunks_is_read_whole() -> None:
    server, transport = await _transport(_chunked_app())
    try:
        reply = await transport.invoke(_request())
        assert reply.payload() == {"Peers": ["a"] * 500}
    finally:
        await transport.close()
        await server.close()


async def test_a_reply_over_the_size_limit_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("dmsgw.transport.rest.MAX_RESPONSE_BYTES", 1000)
    server, transport = await _transport(_chunked_app())
    try:
        with pytest.raises(TransportError, match="reply larger than 1000 bytes"):
            await transport.invoke(_request())
    finally:
        await transport.close()
        await server.close()
