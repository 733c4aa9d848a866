"""A simulated DMS actor: its handle, its security context, and the DMS receive path.

What arrives is handled exactly as a DMS handles it (``actor/basic.go``, ``dispatch.go``,
``security.go``): decode, check it is addressed to this actor, verify expiry and signature over
the canonical re-encoding, look the behavior up by exact name, consume + require capabilities
with the same :class:`~dmsgw.transport.security.SecurityContext` the gateway uses, then run the
handler and reply to ``opt.cont``. Anything that fails is dropped and logged — the sender hears
nothing, as from a DMS.

A node's root actor and its child actors (an orchestrator per deployment, an actor per
allocation) are all :class:`BasicActor` s: children have their own ephemeral key and inbox and act
for the node's DID, as DMS child actors do.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from ..clock import NS_PER_SECOND, Clock
from ..errors import DmsgwError
from ..keys.did import DID
from ..transport import envelope as env
from ..transport.envelope import Envelope, Handle
from ..transport.security import SecurityContext, SecurityError
from .network import Network
from .protocol import REPLY_PREFIX, Spec

log = logging.getLogger(__name__)

Handler = Callable[[Envelope, Any], Awaitable[Any]]
"""``handler(message, decoded request) -> reply payload`` (``None``: no reply)."""


class InvokeError(DmsgwError):
    """A node-to-node invocation that got no reply in time (or could not be sent)."""


@dataclasses.dataclass(frozen=True)
class Dropped:
    """A message a node refused, and the DMS's reason (what its log would say)."""

    behavior: str
    reason: str


class Journal:
    """A node's log of refused messages, and the behaviors told to fail (fault injection)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.dropped: list[Dropped] = []
        self.failing: dict[str, str] = {}
        self.handled = 0

    def drop(self, behavior: str, reason: str) -> None:
        self.dropped.append(Dropped(behavior, reason))
        log.info("%s dropped %s: %s", self.name, behavior or "a message", reason)


class BasicActor:
    """One actor on ``network``, reachable at ``handle.addr``."""

    def __init__(
        self,
        handle: Handle,
        security: SecurityContext,
        network: Network,
        journal: Journal,
        clock: Clock,
    ) -> None:
        self.handle = handle
        self.security = security
        self.network = network
        self.journal = journal
        self.clock = clock
        self._behaviors: dict[str, tuple[Spec, Handler]] = {}
        self._waiting: dict[str, asyncio.Future[Envelope]] = {}
        self.running = False

    @property
    def did(self) -> DID:
        return self.handle.did

    @property
    def host(self) -> str:
        return self.handle.addr.host

    def start(self) -> None:
        self.network.register(self.host, self.handle.addr.inbox, self.receive)
        self.running = True

    def stop(self) -> None:
        self.network.unregister(self.host, self.handle.addr.inbox)
        self.running = False
        for future in self._waiting.values():
            if not future.done():
                future.set_exception(InvokeError("the actor stopped before a reply came"))
        self._waiting.clear()

    def add_behavior(self, spec: Spec, handler: Handler) -> None:
        self._behaviors[spec.name] = (spec, handler)
        if spec.topic:
            self.network.subscribe(spec.topic, self.host, self.receive)

    def remove_behavior(self, name: str) -> None:
        self._behaviors.pop(name, None)

    def behaviors(self) -> list[str]:
        return sorted(self._behaviors)

    # --- receiving ---------------------------------------------------------------------

    async def receive(self, data: bytes) -> None:
        """The DMS receive path for bytes arriving at this actor's inbox."""
        journal = self.journal
        try:
            msg = env.decode(data)
        except env.EnvelopeError as exc:
            journal.drop("", str(exc))
            return
        if not msg.is_broadcast() and msg.to.id != self.handle.id:
            journal.drop(msg.be, "message not addressed to this actor")
            return
        try:
            self.security.verify(msg)
        except env.EnvelopeError as exc:
            journal.drop(msg.be, str(exc))
            return
        waiting = self._waiting.get(msg.be)
        spec, handler = self._behaviors.get(msg.be, (Spec(msg.be), None))
        if waiting is None and handler is None:
            journal.drop(msg.be, "unknown behavior")
            return
        try:
            if msg.is_broadcast():
                self.security.require_broadcast(msg, spec.topic, [spec.capability])
            else:
                self.security.require(msg, [spec.capability])
        except SecurityError as exc:
            journal.drop(msg.be, str(exc))
            return
        try:
            if handler is not None:
                await self._dispatch(msg, spec, handler)
            elif waiting is not None and not waiting.done():
                waiting.set_result(msg)  # the reply an invoke waits for
        finally:
            self.security.discard(msg)  # the DMS behaviors' `defer msg.Discard()`

    async def _dispatch(self, msg: Envelope, spec: Spec, handler: Handler) -> None:
        journal = self.journal
        journal.handled += 1
        try:
            request = spec.decode(msg.msg or b"")
        except DmsgwError as exc:  # the DMS logs a bad payload and answers nothing
            journal.drop(msg.be, f"unmarshaling payload: {exc}")
            return
        failure = journal.failing.get(msg.be)
        if failure is not None:
            journal.drop(msg.be, failure)
            return
        try:
            reply = await handler(msg, request)
        except Exception as exc:  # a failing handler is logged by the DMS; the sender hears nothing
            log.exception("%s: handler of %s failed", journal.name, msg.be)
            journal.drop(msg.be, f"handler failed: {exc}")
            return
        if reply is not None and msg.opt.cont:
            await self.reply(msg, reply)

    # --- sending -----------------------------------------------------------------------

    async def reply(self, msg: Envelope, payload: Any) -> None:
        """``sendReply``: to the sender's inbox, on the request's ``cont``, same expiry (a
        broadcast was addressed to nobody, so its replies come from our own handle)."""
        if msg.is_broadcast():
            reply = env.message(self.handle, msg.from_, msg.opt.cont, payload, expire=msg.opt.exp)
        else:
            reply = env.reply_to(msg, payload)
        await self.send(reply)

    async def send(self, msg: Envelope, delegate: Sequence[str] = ()) -> bool:
        """Attach our tokens for ``msg.be`` (and delegate ``delegate`` to the receiver, for
        its replies), sign, and hand it to the network; False if the target is unreachable."""
        signed = self.security.provide(msg, [msg.be], delegate)
        target = msg.to.addr
        return await self.network.send(
            self.host, target.host, target.inbox, signed.to_json(), msg.be
        )

    def message(self, to: Handle, behavior: str, payload: Any, timeout_s: float) -> Envelope:
        """An unsigned envelope from us that lives ``timeout_s``."""
        expire = self.clock() + int(timeout_s * NS_PER_SECOND)
        return env.message(
            self.handle, to, behavior, payload, expire=expire, nonce=self.security.nonce()
        )

    async def invoke(self, to: Handle, behavior: str, payload: Any, timeout_s: float) -> Envelope:
        """``actor.Invoke``: send and wait for the reply until the message expires; the reply
        behavior is delegated to the receiver so that it may answer."""
        msg = self.message(to, behavior, payload, timeout_s)
        cont = f"{REPLY_PREFIX}{msg.nonce}"
        msg = dataclasses.replace(msg, opt=dataclasses.replace(msg.opt, cont=cont))
        future: asyncio.Future[Envelope] = asyncio.get_running_loop().create_future()
        self._waiting[cont] = future
        try:
            if not await self.send(msg, delegate=[cont]):
                raise InvokeError(f"{behavior}: failed to send message to {to.addr.host}")
            try:
                async with asyncio.timeout(timeout_s):
                    return await future
            except TimeoutError:
                raise InvokeError(f"{behavior}: failed to receive reply due to timeout") from None
        finally:
            self._waiting.pop(cont, None)

    async def publish(
        self, topic: str, behavior: str, payload: Any, timeout_s: float, reply_to: str
    ) -> int:
        """``actor.Publish``: a broadcast on ``topic`` with broadcast tokens."""
        msg = env.message(
            self.handle,
            Handle(),
            behavior,
            payload,
            expire=self.clock() + int(timeout_s * NS_PER_SECOND),
            reply_to=reply_to,
            topic=topic,
            nonce=self.security.nonce(),
        )
        signed = self.security.provide_broadcast(msg, [behavior])
        return await self.network.publish(self.host, topic, signed.to_json(), behavior)
