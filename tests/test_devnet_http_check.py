"""The devnet's ``http`` health check judges what a DMS's would: redirects followed, as Go's
``http.Get`` follows them, and a 4xx/5xx answer is a failure naming its status."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from dmsgw.behaviors.ensemble import HealthCheckManifest
from dmsgw.devnet.http_check import http_check


@pytest.fixture
async def server() -> AsyncIterator[TestServer]:
    async def moved(_: web.Request) -> web.Response:
        raise web.HTTPFound("/ok")

    async def ok(_: web.Request) -> web.Response:
        return web.Response(text="all fine")

    async def down(_: web.Request) -> web.Response:
        return web.Response(status=503, text="not yet")

    app = web.Application()
    app.router.add_get("/moved", moved)
    app.router.add_get("/ok", ok)
    app.router.add_get("/down", down)
    async with TestServer(app, host="127.0.0.1") as running:
        yield running


async def _check(server: TestServer, path: str, **manifest: object) -> str:
    check = HealthCheckManifest(type="http", endpoint=str(server.make_url(path)), **manifest)
    return await http_check(check, 5.0, None)


async def test_a_redirect_is_followed_to_its_answer(server: TestServer) -> None:
    assert await _check(server, "/moved") == ""


async def test_an_error_status_fails_naming_it(server: TestServer) -> None:
    assert await _check(server, "/down") == f"GET {server.make_url('/down')}: status 503"


async def test_nothing_listening_fails_naming_the_url(unused_tcp_port: int) -> None:
    url = f"http://127.0.0.1:{unused_tcp_port}/"
    reason = await http_check(HealthCheckManifest(type="http", endpoint=url), 5.0, None)
    assert reason.startswith(f"health check GET {url} failed:")
