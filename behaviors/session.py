"""``dmsgw.connect()``: a DMS client for a REPL, a script or a test, in one call.

It loads the gateway's identity (a ``nunet key`` file) and capability context (a ``nunet cap``
file), starts a :class:`~dmsgw.behaviors.node.NodeActor` on an event loop — a private one on a
background thread, unless the caller hands in its own — and returns a :class:`Node` whose
namespaces mirror the behavior paths. Calls return results in plain code and awaitables where
an event loop runs in the calling thread.

The facade offers the behaviors of one DMS version (``dms_version``): the newest by default,
one named, or ``"auto"``, the version learned from the DMS (:meth:`Node.learn_version`).

With no URL given or in ``$DMSGW_DMS_URL`` it talks to node 0 of a running ``dmsgw devnet up``
(:mod:`dmsgw.devnet_files.devnet_record`), else to ``http://127.0.0.1:9999``. A node on its private
loop is closed by ``with``/``async with``, :meth:`Node.close`, or at the latest when it is garbage
collected or the interpreter exits, so a script that forgets to close leaves no warnings.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import weakref
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

from ..clock import Clock, system_clock
from ..devnet_files import devnet_record
from ..devnet_files.devnet_record import RunningDevnet, grant_command
from ..errors import DmsgwError
from ..keys.crypto import PrivKey
from ..keys.loading import load_capabilities, load_dms_model, load_key
from ..keys.ucan.context import CapabilityContext
from ..transport.rest import DEFAULT_URL, RestTransport, Transport
from ..transport.security import SecurityContext
from .catalog import DMS_VERSIONS, NEWEST_DMS, Behavior, Rep, Req
from .dms_version import learn_dms_version
from .node import GrantHint, NodeActor, NodeClient, NotGrantedError, dms_grant_hint
from .typed_client import build_namespaces, invoke_by_name, run

log = logging.getLogger(__name__)

URL_ENV = "DMSGW_DMS_URL"
LEARN_VERSION = "auto"
"""``connect(dms_version=…)``: learn the version from the DMS."""


class ConnectSettingError(DmsgwError):
    """A connection setting that cannot work (the message names it and where it came from)."""


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
        behavior: Behavior[Req, Rep],
        payload: Req | None,
        *,
        to: str | None,
        timeout_s: float | None,
    ) -> Rep:
        return await self.client.invoke(behavior, payload, to=to, timeout_s=timeout_s)

    async def broadcast(
        self, behavior: Behavior[Req, Rep], payload: Req | None, *, timeout_s: float | None
    ) -> list[Rep]:
        return await self.client.broadcast(behavior, payload, timeout_s=timeout_s)


async def _stop(runtime: _Runtime, transport: Transport) -> None:
    """Stop the node actor and close connections, on the node's loop."""
    if runtime.actor.stop():
        await runtime.actor.wait_stopped()
    await transport.close()


def _shut_down(runtime: _Runtime, transport: Transport, loop_thread: _LoopThread) -> None:
    """Close a node on its private loop, then end the loop's thread."""
    if threading.current_thread() is loop_thread.thread:  # collected on its own loop
        task = loop_thread.loop.create_task(_stop(runtime, transport))
        task.add_done_callback(lambda _: loop_thread.loop.stop())
        return
    if loop_thread.thread.is_alive():
        asyncio.run_coroutine_threadsafe(_stop(runtime, transport), loop_thread.loop).result()
        loop_thread.stop()


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
        # On a private loop, closing runs once: when asked, or when the node is collected or
        # the interpreter exits (before daemon threads stop), whichever comes first.
        self._closer = (
            weakref.finalize(self, _shut_down, runtime, transport, loop_thread)
            if loop_thread is not None
            else None
        )
        self.url = url
        self._version = NEWEST_DMS
        self._namespaces = build_namespaces(runtime)
        self.__dict__.update(self._namespaces)

    @property
    def dms_version(self) -> str:
        """The DMS version whose behaviors the facade and :meth:`invoke` offer."""
        return self._version

    def use_version(self, version: str) -> None:
        """Offer the behaviors of DMS ``version`` (one of ``DMS_VERSIONS``)."""
        if version not in DMS_VERSIONS:
            raise _unknown_version(version)
        for name in self._namespaces:
            del self.__dict__[name]
        self._version = version
        self._namespaces = build_namespaces(self._runtime, version)
        self.__dict__.update(self._namespaces)

    def learn_version(self) -> Any:
        """Ask the DMS which version it is, and offer its behaviors from then on."""

        async def learn() -> str:
            version = await learn_dms_version(self._runtime.client.invoke, self.url)
            self.use_version(version)
            return version

        return run(self._runtime, learn, "learning the DMS's version")

    @property
    def did(self) -> str:
        """The gateway's DID: what the DMS operator grants capabilities to."""
        return self._security.did.uri

    def invoke(self, behavior: str, payload: Any = None, **options: Any) -> Any:
        """Invoke any behavior by name; ``payload`` may be a model, a dict or JSON text.
        Options: ``to=`` (peer ID, DID or handle JSON), ``timeout=`` (seconds)."""
        return invoke_by_name(self._runtime, behavior, payload, version=self._version, **options)

    def handle(self) -> Any:
        """The DMS's root handle (ID, DID, peer ID)."""
        return run(self._runtime, lambda: self._transport.handle(), "handle")

    def close(self) -> None:
        """Stop the node actor and close connections (idempotent)."""
        if self._closer is None:
            raise DmsgwError("this Node runs on your event loop: use `await node.aclose()`")
        self._closer()

    async def aclose(self) -> None:
        """Stop the node actor and close connections, from any event loop."""
        if self._closer is None:
            await _stop(self._runtime, self._transport)
        else:
            await asyncio.to_thread(self._closer)

    def __enter__(self) -> Node:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    async def __aenter__(self) -> Node:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"<dmsgw.Node {self.did} -> {self.url}>"

    def __getattr__(self, name: str) -> Any:
        # Only reached for names that are not behavior namespaces: say what there is.
        namespaces = ", ".join(
            sorted(k for k in self.__dict__ if not k.startswith("_") and k != "url")
        )
        raise AttributeError(
            f"DMS {self._version} has no behavior namespace {name!r} (there are: {namespaces})"
        )

    def __dir__(self) -> list[str]:
        methods = {"did", "invoke", "handle", "close", "aclose", "url", "dms_version"}
        methods |= {"use_version", "learn_version"}
        return sorted({*self.__dict__, *methods} - {k for k in self.__dict__ if k.startswith("_")})


def resolve_url(url: str | None) -> tuple[str, RunningDevnet | None]:
    """The DMS to talk to — ``url``, else ``$DMSGW_DMS_URL``, else node 0 of a running
    ``dmsgw devnet up``, else :data:`DEFAULT_URL` — and the running devnet it belongs to."""
    devnet = devnet_record.running()
    if url:
        chosen, source = url, "the DMS URL"
    elif os.environ.get(URL_ENV):
        chosen, source = os.environ[URL_ENV], f"${URL_ENV}"
    elif devnet is not None:
        chosen, source = devnet.urls[0], "the running devnet's URL"
    else:
        chosen, source = DEFAULT_URL, "the default DMS URL"
    parts = urlsplit(chosen)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConnectSettingError(
            f"{source} {chosen!r} is not a URL: expected http://host:port, e.g. {DEFAULT_URL}"
        )
    in_devnet = devnet is not None and devnet.node_index(chosen) is not None
    return chosen, devnet if in_devnet else None


def grant_hint(
    did: str, context: str | None, cap_dir: Path | None, url: str, devnet: RunningDevnet | None
) -> GrantHint:
    """The command that grants a missing capability where the gateway is: ``dmsgw devnet
    grant`` on a running devnet, ``nunet cap grant`` (then ``dmsgw cap anchor``) on a DMS.
    ``context`` is the gateway's context file (``None``: a context object in memory)."""
    node = devnet.node_index(url) if devnet is not None else None
    if devnet is not None and node is not None:
        seed = devnet.seed
        keep = "" if context else " and add the token list it prints to your context"

        def on_devnet(b: Behavior[Any, Any]) -> str:
            topics = (b.topic,) if b.broadcast else ()
            command = grant_command(
                seed,
                node,
                (b.capability,),
                topics,
                anchor=context,
                cap_dir=cap_dir,
                subject="" if context else did,
            )
            return f"grant it on the devnet with `{command}`{keep}"

        return on_devnet
    on_dms = dms_grant_hint(did)
    if context is None:
        return on_dms
    where = f" --cap-dir {cap_dir}" if cap_dir is not None else ""
    return lambda b: (
        f"{on_dms(b)}; then add the token list it prints here with "
        f"`dmsgw cap anchor --context {context}{where} --provide '<token list JSON>'`"
    )


def _check_version(setting: str, loop: asyncio.AbstractEventLoop | None) -> None:
    """Refuse a ``dms_version`` setting that cannot work, saying which would."""
    if setting == LEARN_VERSION and loop is not None:
        raise ConnectSettingError(
            f"dms_version={LEARN_VERSION!r} blocks, which it cannot on your event loop: "
            "connect without it, then `await node.learn_version()`"
        )
    if setting not in (*DMS_VERSIONS, LEARN_VERSION):
        raise _unknown_version(setting)


def _unknown_version(setting: str) -> ConnectSettingError:
    return ConnectSettingError(
        f"DMS version {setting!r} is not one this client speaks: "
        f"{', '.join(DMS_VERSIONS)} (or {LEARN_VERSION!r} to ask the DMS)"
    )


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
    dms_version: str | None = None,
) -> Node:
    """Connect to the DMS at ``url`` (default ``$DMSGW_DMS_URL``, else a running ``dmsgw
    devnet up``'s node 0, else http://127.0.0.1:9999).

    ``key``: a key name in ``key_dir`` (default ``dmsgw``; passphrase from ``passphrase``,
    ``$DMS_PASSPHRASE`` or a prompt) or a private key. ``context``: the capability context's
    name in ``cap_dir`` (default: the key's name; an empty one if there is no such file) or a
    context. ``dms_context``: the DMS's own context (default ``dms.cap`` if present), used to
    explain refusals. ``loop``: run on this event loop instead of a private one (then close
    it yourself: ``async with`` or ``await node.aclose()``). ``dms_version``: offer that DMS
    version's behaviors (default: the newest), or ``"auto"`` to ask the DMS (on a private
    loop only; on yours, ``await node.learn_version()``).
    """
    if dms_version is not None:
        _check_version(dms_version, loop)
    if transport is None:
        target_url, devnet = resolve_url(url)
    else:  # the transport knows where it goes: the URL only names it
        target_url, devnet = url or str(getattr(transport, "base_url", DEFAULT_URL)), None
    kdir = Path(key_dir) if key_dir is not None else None
    cdir = Path(cap_dir) if cap_dir is not None else None
    name, private_key = load_key(key, kdir, passphrase)
    capabilities = load_capabilities(context, name, private_key, cdir, clock)
    security = SecurityContext(private_key, capabilities, clock=clock)
    model = load_dms_model(dms_context, cdir, clock)
    context_file = context if isinstance(context, str) else None
    if context is None and not isinstance(key, PrivKey):
        context_file = name  # the context named after the key, as for every key file
    hint = grant_hint(security.did.uri, context_file, cdir, target_url, devnet)
    wire = transport or RestTransport(target_url)
    loop_thread = None if loop is not None else _LoopThread()
    actor_loop = loop if loop is not None else loop_thread.loop  # type: ignore[union-attr]
    actor = NodeActor.start(security, wire, clock=clock, loop=actor_loop)
    client = NodeClient(
        actor,
        wire,
        security,
        dms_model=model,
        clock=clock,
        grant_hint=hint,
        delegation_only=devnet is not None,
    )
    node = Node(_Runtime(actor_loop, client), security, wire, target_url, loop_thread)
    if dms_version == LEARN_VERSION:  # on a private loop: close it if the DMS is refused
        try:
            node.learn_version()
        except NotGrantedError:
            log.info(
                "not granted the questions that tell the DMS's version: offering DMS %s's "
                "behaviors",
                NEWEST_DMS,
            )
        except BaseException:
            node.close()
            raise
    elif dms_version is not None:
        node.use_version(dms_version)
    return node
