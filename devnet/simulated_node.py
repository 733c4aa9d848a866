"""A simulated DMS node: its identity, its capability context, its root and child actors.

The root actor answers the DMS's behaviors under the node's key (its handle is what
``/api/v1/actor/handle`` returns). Child actors — one orchestrator per deployment, one actor
per allocation — get an ephemeral key and their own inbox on the node's host, and act for the
node's DID with the node's capability context, as DMS child actors do. Work that outlives a
message (deploying, watching a process) runs in tasks the node owns and cancels when it stops.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Coroutine
from typing import Any

from ..clock import Clock, system_clock
from ..keys.crypto import Ed25519PrivKey, PrivKey
from ..keys.did import DID
from ..keys.id import ID
from ..keys.peer import peer_id_from_public_key
from ..keys.trust import provider_from_private_key
from ..keys.ucan.context import CapabilityContext
from ..transport.envelope import Address, Envelope, Handle
from ..transport.security import SecurityContext
from .basic_actor import BasicActor, Dropped, Handler, Journal
from .network import Network
from .protocol import catalog_spec

log = logging.getLogger(__name__)

CANCEL_AGAIN_S = 1.0
"""How long a stopping node waits on a cancelled task before cancelling it again."""


class DmsNode:
    """One simulated DMS: a root actor on ``network`` under ``key``."""

    def __init__(
        self,
        key: PrivKey,
        network: Network,
        *,
        name: str = "dms",
        capabilities: CapabilityContext | None = None,
        clock: Clock = system_clock,
    ) -> None:
        self.name = name
        self.key = key
        self.network = network
        self.clock = clock
        self.peer_id = peer_id_from_public_key(key.public_key())
        self.capabilities = capabilities or CapabilityContext(
            provider_from_private_key(key), name="dms", clock=clock
        )
        self.journal = Journal(name)
        self.root = BasicActor(
            Handle.from_public_key(key.public_key()),
            SecurityContext(key, self.capabilities, clock=clock),
            network,
            self.journal,
            clock,
        )
        self.root.start()
        self._children: dict[str, BasicActor] = {}
        self._tasks: set[asyncio.Task[Any]] = set()

    @property
    def handle(self) -> Handle:
        return self.root.handle

    @property
    def did(self) -> DID:
        return self.root.did

    @property
    def security(self) -> SecurityContext:
        return self.root.security

    @property
    def dropped(self) -> list[Dropped]:
        return self.journal.dropped

    @property
    def handled(self) -> int:
        return self.journal.handled

    def add_behavior(self, name: str, handler: Handler) -> None:
        """Serve the catalog behavior ``name`` on the root actor."""
        self.root.add_behavior(catalog_spec(name), handler)

    def behaviors(self) -> list[str]:
        return self.root.behaviors()

    def fail_behavior(self, name: str, error: str | None) -> None:
        """Fault injection: ``name`` is dropped with ``error`` (``None`` restores it)."""
        if error is None:
            self.journal.failing.pop(name, None)
        else:
            self.journal.failing[name] = error

    async def receive(self, data: bytes) -> None:
        await self.root.receive(data)

    async def send_reply(self, msg: Envelope, payload: Any) -> None:
        await self.root.reply(msg, payload)

    # --- child actors and tasks ----------------------------------------------------------

    def spawn_actor(self, inbox: str) -> BasicActor:
        """A child actor at ``inbox`` with a fresh key, acting for the node's DID."""
        key = Ed25519PrivKey(os.urandom(32))
        actor_id = ID.from_public_key(key.public_key())
        handle = Handle(actor_id, self.did, Address(self.peer_id, inbox))
        security = SecurityContext(key, self.capabilities, clock=self.clock, id=actor_id)
        actor = BasicActor(handle, security, self.network, self.journal, self.clock)
        actor.start()
        self._children[inbox] = actor
        return actor

    def child(self, inbox: str) -> BasicActor | None:
        return self._children.get(inbox)

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]:
        """Run ``coro`` as a task of this node; a failure is logged, never lost."""
        task = asyncio.get_running_loop().create_task(coro, name=f"{self.name}: {name}")
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("%s failed", task.get_name(), exc_info=task.exception())

    async def cancel_tasks(self, again_s: float = CANCEL_AGAIN_S) -> None:
        """Cancel and await every task of the node (a stopping DMS's goroutines). A task still
        running ``again_s`` after its cancel is named and cancelled again: one that lost the
        cancel (code that catches it, or a wait that swallows it) must not hold a stop forever."""
        while self._tasks:
            tasks = list(self._tasks)
            for task in tasks:
                task.cancel()
            _, pending = await asyncio.wait(tasks, timeout=again_s)
            for task in pending:
                log.warning("%s ignored its cancel: cancelling it again", task.get_name())

    def stop_actors(self) -> None:
        for actor in self._children.values():
            actor.stop()
        self._children.clear()
        self.root.stop()
