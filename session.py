"""``dmsgw.connect()``: a DMS client for a REPL, a script or a test, in one call.

It loads the gateway's identity (a ``nunet key`` file) and capability context (a ``nunet cap``
file), starts a :class:`~dmsgw.actors.node.NodeActor` on an event loop — a private one on a
background thread, unless the caller hands in its own — and returns a :class:`Node` whose
namespaces mirror the behavior paths. Calls return results in plain code and awaitables where
an event loop runs in the calling thread.
"""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path
from types import TracebackType
from typing import Any

from dmsgw.actors.node import NodeActor, NodeClient
from dmsgw.behaviors.catalog import Behavior, WireModel
from dmsgw.behaviors.client import build_namespaces, invoke_by_name, run
from dmsgw.clock import Clock, system_clock
from dmsgw.errors import DmsgwError
from dmsgw.keys.crypto import PrivKey
from dmsgw.keys.keystore import KeyStore, read_passphrase
from dmsgw.keys.trust import provider_from_private_key
from dmsgw.keys.ucan.context import CapabilityContext
from dmsgw.keys.ucan.store import default_cap_dir, load_context
from dmsgw.transport.envelope import Handle
from dmsgw.transport.rest import DEFAULT_URL, RestTransport, Transport
from dmsgw.transport.security import SecurityContext

DEFAULT_KEY_NAME = "dmsgw"
URL_ENV = "DMSGW_DMS_URL"


class _LoopThread:
    """A private event loop on a daemon thread, for callers that have none."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()
        self.thread = threading.Thread(
            target=self._run, args=(ready,), name="dmsgw-client", daemon=True
        )
        self.thread.start()
        ready.wait()

    def _run(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(ready.set)
        self.loop.run_forever()

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join()
        self.loop.close()


class _Runtime:
    """Carries facade calls to the node client on its loop (the facade's ``Invoker``)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, client: NodeClient) -> None:
        self.loop = loop
        self.client = client
        self.actor = client.actor

    async def invoke(
        self,
        behavior: Behavior,
        payload: WireModel | None,
        *,
        to: str | None,
        timeout_s: float | None,
    ) -> Any:
        target = Handle.parse(to) if to is not None else None
        return await self.client.invoke(behavior, payload, to=target, timeout_s=timeout_s)

    async def broadcast(
        self, behavior: Behavior, payload: WireModel | None, *, timeout_s: float | None
    ) -> list[Any]:
        return await self.client.broadcast(behavior, payload, timeout_s=timeout_s)


class Node:
    """A connected DMS. Behaviors are methods on namespaces (``dms.peers.list()``); any
    behavior by name with :meth:`invoke`. Close it (or use ``with``) when done."""

    def __init__(
        self,
        runtime: _Runtime,
        security: SecurityContext,
        transport: Transport,
        url: str,
        loop_thread: _LoopThread | None,
    ) -> None:
        self._runtime = runtime
        self._security = security
        self._transport = transport
        self._loop_thread = loop_thread
        self.url = url
        self.__dict__.update(build_namespaces(runtime))

    @property
    def did(self) -> str:
        """The gateway's DID: what the DMS operator grants capabilities to."""
        return self._security.did.uri

    def invoke(self, behavior: str, payload: Any = None, **options: Any) -> Any:
        """Invoke any behavior by name; ``payload`` may be a model, a dict or JSON text.
        Options: ``to=`` (peer ID, DID or handle JSON), ``timeout=`` (seconds)."""
        return invoke_by_name(self._runtime, behavior, payload, **options)

    def handle(self) -> Any:
        """The DMS's root handle (ID, DID, peer ID)."""
        return run(self._runtime, lambda: self._transport.handle(), "handle")

    def close(self) -> None:
        """Stop the node actor and close connections (idempotent)."""
        if self._loop_thread is None:
            raise DmsgwError("this Node runs on your event loop: use `await node.aclose()`")
        if not self._loop_thread.thread.is_alive():
            return
        asyncio.run_coroutine_threadsafe(self.aclose(), self._loop_thread.loop).result()
        self._loop_thread.stop()

    async def aclose(self) -> None:
        """Stop the node actor and close connections, on the node's own loop."""
        if self._runtime.actor.stop():
            await self._runtime.actor.wait_stopped()
        await self._transport.close()

    def __enter__(self) -> Node:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<dmsgw.Node {self.did} -> {self.url}>"

    def __getattr__(self, name: str) -> Any:
        # Only reached for names that are not behavior namespaces: say what there is.
        namespaces = ", ".join(
            sorted(k for k in self.__dict__ if not k.startswith("_") and k != "url")
        )
        raise AttributeError(
            f"the DMS has no behavior namespace {name!r} (there are: {namespaces})"
        )

    def __dir__(self) -> list[str]:
        return sorted(
            {*self.__dict__, "did", "invoke", "handle", "close", "aclose", "url"}
            - {k for k in self.__dict__ if k.startswith("_")}
        )


def load_key(
    key: str | PrivKey | None, key_dir: Path | None, passphrase: str | None
) -> tuple[str, PrivKey]:
    if isinstance(key, PrivKey):
        return DEFAULT_KEY_NAME, key
    name = key or DEFAULT_KEY_NAME
    store = KeyStore(key_dir)
    secret = passphrase if passphrase is not None else read_passphrase(name, confirm=False)
    return name, store.priv_key(name, secret)


def load_capabilities(
    context: str | CapabilityContext | None,
    name: str,
    key: PrivKey,
    cap_dir: Path | None,
    clock: Clock,
) -> CapabilityContext:
    if isinstance(context, CapabilityContext):
        return context
    provider = provider_from_private_key(key)
    context_name = context or name
    path = (cap_dir or default_cap_dir()) / f"{context_name}.cap"
    if context is None and not path.exists():
        return CapabilityContext(provider, name=context_name, clock=clock)
    return load_context(context_name, provider, directory=cap_dir, clock=clock)


def load_dms_model(
    dms_context: str | CapabilityContext | None, cap_dir: Path | None, clock: Clock
) -> CapabilityContext | None:
    if isinstance(dms_context, CapabilityContext):
        return dms_context
    name = dms_context or "dms"
    path = (cap_dir or default_cap_dir()) / f"{name}.cap"
    if dms_context is None and not path.exists():
        return None
    return load_context(name, None, directory=cap_dir, clock=clock)


def connect(
    url: str | None = None,
    *,
    key: str | PrivKey | None = None,
    context: str | CapabilityContext | None = None,
    passphrase: str | None = None,
    key_dir: str | Path | None = None,
    cap_dir: str | Path | None = None,
    dms_context: str | CapabilityContext | None = None,
    transport: Transport | None = None,
    loop: asyncio.AbstractEventLoop | None = None,
    clock: Clock = system_clock,
) -> Node:
    """Connect to the DMS at ``url`` (default ``$DMSGW_DMS_URL`` or http://127.0.0.1:9999).

    ``key``: a key name in ``key_dir`` (default ``dmsgw``; passphrase from ``passphrase``,
    ``$DMS_PASSPHRASE`` or a prompt) or a private key. ``context``: the capability context's
    name in ``cap_dir`` (default: the key's name; an empty one if there is no such file) or a
    context. ``dms_context``: the DMS's own context (default ``dms.cap`` if present), used to
    explain refusals. ``loop``: run on this event loop instead of a private one.
    """
    kdir = Path(key_dir) if key_dir is not None else None
    cdir = Path(cap_dir) if cap_dir is not None else None
    name, private_key = load_key(key, kdir, passphrase)
    capabilities = load_capabilities(context, name, private_key, cdir, clock)
    security = SecurityContext(private_key, capabilities, clock=clock)
    model = load_dms_model(dms_context, cdir, clock)
    target_url = url or os.environ.get(URL_ENV) or DEFAULT_URL
    wire = transport or RestTransport(target_url)
    loop_thread = None if loop is not None else _LoopThread()
    actor_loop = loop if loop is not None else loop_thread.loop  # type: ignore[union-attr]
    actor = NodeActor.start(security, wire, clock=clock, loop=actor_loop)
    client = NodeClient(actor, wire, security, dms_model=model, clock=clock)
    return Node(_Runtime(actor_loop, client), security, wire, target_url, loop_thread)
