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

from aiohttp import web

from dmsgw.clock import NS_PER_SECOND
from dmsgw.devnet.node import DmsNode
from dmsgw.transport import envelope as env
from dmsgw.transport.envelope import Envelope
from dmsgw.transport.gojson import marshal

API = "/api/v1/actor"
NODE_KEY = web.AppKey("node", DmsNode)
EARLY_TIMEOUT_KEY = web.AppKey("early_timeout", bool)


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


async def _read_envelope(request: web.Request) -> Envelope | web.Response:
    try:
        return env.decode(await request.read())
    except env.EnvelopeError as exc:
        return _error(400, str(exc).removeprefix("unmarshal: "))


def _seconds_left(node: DmsNode, msg: Envelope) -> float:
    return max(0.0, (msg.opt.exp - node.clock()) / NS_PER_SECOND)


async def health(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def handle(request: web.Request) -> web.Response:
    node = request.app[NODE_KEY]
    return web.Response(body=marshal(node.handle), content_type="application/json")


async def send(request: web.Request) -> web.Response:
    node = request.app[NODE_KEY]
    msg = await _read_envelope(request)
    if isinstance(msg, web.Response):
        return msg
    if not await node.network.send(
        node.peer_id, msg.to.addr.host, msg.to.addr.inbox, marshal(msg), msg.be
    ):
        return _error(500, f"failed to send message to {msg.to.id}: peer unreachable")
    return web.json_response({"message": "message sent"})


async def invoke(request: web.Request) -> web.Response:
    node = request.app[NODE_KEY]
    msg = await _read_envelope(request)
    if isinstance(msg, web.Response):
        return msg
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
        timeout = (
            0.0 if request.app[EARLY_TIMEOUT_KEY] and replies.empty() else _seconds_left(node, msg)
        )
        try:
            data = (
                await asyncio.wait_for(replies.get(), timeout) if timeout else replies.get_nowait()
            )
        except (TimeoutError, asyncio.QueueEmpty):
            return _error(408, "request timeout")
    finally:
        node.network.unregister(node.peer_id, inbox)
    try:
        reply = env.decode(data)
    except env.EnvelopeError:
        return _error(408, "request timeout")  # the DMS skips undecodable replies and waits on
    return web.Response(body=marshal(reply), content_type="application/json")


async def broadcast(request: web.Request) -> web.Response:
    node = request.app[NODE_KEY]
    msg = await _read_envelope(request)
    if isinstance(msg, web.Response):
        return msg
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
        if not request.app[EARLY_TIMEOUT_KEY]:
            await asyncio.sleep(_seconds_left(node, msg))
    finally:
        node.network.unregister(node.peer_id, inbox)
    body = "[" + ",".join(marshal(e).decode() for e in collected) + "]" if collected else "null"
    return web.Response(text=body, content_type="application/json")


def make_app(node: DmsNode, *, early_timeout: bool = False) -> web.Application:
    app = web.Application(client_max_size=16 * 1024 * 1024)
    app[NODE_KEY] = node
    app[EARLY_TIMEOUT_KEY] = early_timeout
    app.router.add_get("/health", health)
    app.router.add_get(API + "/handle", handle)
    app.router.add_post(API + "/send", send)
    app.router.add_post(API + "/invoke", invoke)
    app.router.add_post(API + "/broadcast", broadcast)
    return app
