"""A simulated DMS's local REST API (``/api/v1/actor/...``, ``/health``), as the DMS serves it.

Same routes, bodies and status codes as ``api/actor.go``: the API only carries envelopes; an
``invoke`` waits on the sender's inbox for the first reply until the envelope expires, then
answers 408 — which is all a sender ever learns of a message the DMS refused. With
``early_timeout`` the 408 comes as soon as delivery is over and no reply was produced (same
answer, sooner; for fast tests).
"""

from __future__ import annotations

import asyncio
import contextlib
import json

from aiohttp import web

from ..clock import NS_PER_SECOND
from ..gojson import marshal
from ..transport import envelope as env
from ..transport.envelope import Envelope
from .simulated_node import DmsNode

API = "/api/v1/actor"


Reply = tuple[int, bytes]


def _error(status: int, message: str) -> Reply:
    return status, json.dumps({"error": message}).encode()


def _ok(body: bytes) -> Reply:
    return 200, body


def _seconds_left(node: DmsNode, msg: Envelope) -> float:
    return max(0.0, (msg.opt.exp - node.clock()) / NS_PER_SECOND)


class DmsApi:
    """The API's routes on bytes in, status and bytes out: served over HTTP by
    :func:`make_app`, and called directly by an in-memory transport in tests."""

    def __init__(self, node: DmsNode, *, early_timeout: bool = False) -> None:
        self.node = node
        self.early_timeout = early_timeout

    async def call(self, method: str, path: str, body: bytes | None) -> Reply:
        if (method, path) == ("GET", "/health"):
            return _ok(b'{"status":"ok"}')
        if (method, path) == ("GET", API + "/handle"):
            return _ok(marshal(self.node.handle))
        routes = {"/send": self.send, "/invoke": self.invoke, "/broadcast": self.broadcast}
        route = routes.get(path.removeprefix(API)) if method == "POST" else None
        if route is None or not path.startswith(API):
            return _error(404, f"no route {method} {path}")
        try:
            msg = env.decode(body or b"")
        except env.EnvelopeError as exc:
            return _error(400, str(exc).removeprefix("unmarshal: "))
        return await route(msg)

    async def send(self, msg: Envelope) -> Reply:
        node = self.node
        if not await node.network.send(
            node.peer_id, msg.to.addr.host, msg.to.addr.inbox, marshal(msg), msg.be
        ):
            return _error(500, f"failed to send message to {msg.to.id}: peer unreachable")
        return _ok(b'{"message":"message sent"}')

    async def invoke(self, msg: Envelope) -> Reply:
        node = self.node
        replies: asyncio.Queue[bytes] = asyncio.Queue()

        async def on_reply(data: bytes) -> None:
            replies.put_nowait(data)

        inbox = msg.from_.addr.inbox
        node.network.register(node.peer_id, inbox, on_reply)
        try:
            delivered = await node.network.send(
                node.peer_id, msg.to.addr.host, msg.to.addr.inbox, marshal(msg), msg.be
            )
            if not delivered:
                return _error(500, f"failed to send message to {msg.to.id}: peer unreachable")
            early = self.early_timeout and replies.empty()
            timeout = 0.0 if early else _seconds_left(node, msg)
            try:
                if not timeout:
                    data = replies.get_nowait()
                else:
                    async with asyncio.timeout(timeout):
                        data = await replies.get()
            except (TimeoutError, asyncio.QueueEmpty):
                return _error(408, "request timeout")
        finally:
            node.network.unregister(node.peer_id, inbox)
        try:
            reply = env.decode(data)
        except env.EnvelopeError:
            return _error(408, "request timeout")  # the DMS skips undecodable replies
        return _ok(marshal(reply))

    async def broadcast(self, msg: Envelope) -> Reply:
        node = self.node
        if not msg.is_broadcast():
            return _error(400, "message is not a broadcast message")
        collected: list[Envelope] = []

        async def on_reply(data: bytes) -> None:
            with contextlib.suppress(env.EnvelopeError):  # the DMS skips undecodable replies
                collected.append(env.decode(data))

        inbox = msg.from_.addr.inbox
        node.network.register(node.peer_id, inbox, on_reply)
        try:
            await node.network.publish(node.peer_id, msg.opt.topic, marshal(msg), msg.be)
            if not self.early_timeout:
                await asyncio.sleep(_seconds_left(node, msg))  # the DMS collects until expiry
        finally:
            node.network.unregister(node.peer_id, inbox)
        if not collected:
            return _ok(b"null")  # Go marshals an empty reply list as null
        return _ok(b"[" + b",".join(marshal(e) for e in collected) + b"]")


API_KEY = web.AppKey("api", DmsApi)


async def _serve(request: web.Request) -> web.Response:
    api = request.app[API_KEY]
    body = await request.read() if request.method == "POST" else None
    status, data = await api.call(request.method, request.path, body)
    return web.Response(status=status, body=data, content_type="application/json")


def make_app(node: DmsNode, *, early_timeout: bool = False) -> web.Application:
    app = web.Application(client_max_size=16 * 1024 * 1024)
    app[API_KEY] = DmsApi(node, early_timeout=early_timeout)
    app.router.add_get("/health", _serve)
    app.router.add_get(API + "/handle", _serve)
    for route in ("/send", "/invoke", "/broadcast"):
        app.router.add_post(API + route, _serve)
    return app
