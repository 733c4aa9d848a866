"""Public ports of the devnet's allocations, forwarded to their private ports.

A DMS node publishes an allocation's private port (``PortConfig.private``) on its public
address at ``PortConfig.public``. The devnet listens on each public port at its public address
and relays every TCP connection to the private port (an asyncio proxy, opened when the
allocation starts and closed when it is shut down, across restarts of its process). Where it
can, it gives each allocation a network namespace of its own first (:mod:`.netns`), ports or none:
the private port is then a port at the allocation's address, two allocations listen on one
private port as two containers do, and the public port is also opened at the gateway address
the allocations reach the host by, so that they reach each other's public ports. A devnet that
is not root gives each allocation a network namespace of its own inside its user namespaces
(:mod:`.userns`): the private port is then a port on the allocation's own loopback, reached
through its run's :class:`~.userns.Connector`. Elsewhere the allocations share the host's
network, a private port is one on the host's loopback, and a
second allocation on a private port in use is refused with the name of the first (when its
deployment is asked for, :meth:`AllocationNetworks.refusals`, and, should two deployments
race, when it starts), as a node without network namespaces would fail to bind it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import socket
from collections.abc import Mapping

from ..behaviors.ensemble import EnsembleConfigV1
from .netns import GATEWAY, AllocationNamespace, Hub, Namespaces
from .sandbox import SandboxError
from .userns import Connector

log = logging.getLogger(__name__)

RELAY_CHUNK = 1 << 16
LOOPBACK = "127.0.0.1"
_IP_FREEBIND = 15
"""``IP_FREEBIND`` (not in Python's ``socket``): listen at an address no interface has yet —
the gateway address exists only while some allocation's veth carries it."""
SHARED = "allocations share the host's network"


async def _relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Copy one direction until its end, then half-close the other side."""
    try:
        while chunk := await reader.read(RELAY_CHUNK):
            writer.write(chunk)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (ConnectionError, OSError):
        writer.close()


class _Forwarder:
    """One allocation's listeners and the connections they relay to ``target`` (the address
    its private ports are at)."""

    def __init__(
        self,
        allocation_id: str,
        target: str,
        hub: Hub | None = None,
        inside: bool = False,
    ) -> None:
        self.allocation_id = allocation_id
        self.target = target
        self.hub = hub
        """Where ``target`` is, and :data:`GATEWAY` (``None``: the host's network)."""
        self.inside = inside
        """Whether ``target`` is inside the allocation's network namespace of a devnet that is
        not root, reached through :attr:`connector`."""
        self.connector: Connector | None = None
        """The current run's way in (``None``: no run yet)."""
        self.servers: dict[str, list[asyncio.Server]] = {}
        """Listeners by address."""
        self.relays: set[asyncio.Task[None]] = set()

    async def listen(self, address: str, public: int, private: int) -> int:
        """Listen at ``address``:``public`` (0: any port); the port listened on."""

        async def accepted(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            task = asyncio.current_task()
            assert task is not None
            self.relays.add(task)
            try:
                await self._connect(reader, writer, private)
            finally:
                self.relays.discard(task)
                writer.close()

        try:
            if self.hub is not None and address == GATEWAY:
                sock = await self.hub.socket(functools.partial(_listening_socket, address, public))
            else:
                sock = _listening_socket(address, public)
            server = await asyncio.start_server(accepted, sock=sock)
        except OSError as exc:
            raise SandboxError(
                f"public port {public} cannot be opened on {address}: {exc.strerror or exc}"
            ) from exc
        self.servers.setdefault(address, []).append(server)
        return int(server.sockets[0].getsockname()[1])

    async def _connect(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, private: int
    ) -> None:
        try:
            if self.inside:  # no run, or no server yet: the client sees it closed
                if self.connector is None:
                    return
                sock = await asyncio.to_thread(self.connector.connect, self.target, private)
                sock.setblocking(False)
                inner_reader, inner_writer = await asyncio.open_connection(sock=sock)
            elif self.hub is None:
                inner_reader, inner_writer = await asyncio.open_connection(self.target, private)
            else:  # the allocation's address is routed in the hub only
                sock = await self.hub.socket(functools.partial(socket.socket, socket.AF_INET))
                sock.setblocking(False)
                try:
                    await asyncio.get_running_loop().sock_connect(sock, (self.target, private))
                except BaseException:
                    sock.close()
                    raise
                inner_reader, inner_writer = await asyncio.open_connection(sock=sock)
        except OSError:
            return  # nothing listens on the private port (yet): the client sees it closed
        try:
            await asyncio.gather(_relay(reader, inner_writer), _relay(inner_reader, writer))
        finally:
            inner_writer.close()

    async def close(self) -> None:
        servers = [server for listening in self.servers.values() for server in listening]
        for server in servers:
            server.close()
        for task in list(self.relays):
            task.cancel()
        for server in servers:
            with contextlib.suppress(Exception):
                await server.wait_closed()
        await asyncio.gather(*self.relays, return_exceptions=True)


def _listening_socket(address: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_IP, _IP_FREEBIND, 1)
        sock.bind((address, port))
    except OSError:
        sock.close()
        raise
    return sock


class AllocationNetworks:
    """The networks of the devnet's allocations (one object for all its nodes, which share
    the host): their namespaces (``namespaces``; ``None``: they share the host's network, and
    which allocation holds which private port is kept) and the forwarders of their public
    ports (at ``address``)."""

    def __init__(self, address: str = LOOPBACK, namespaces: Namespaces | None = None) -> None:
        self.address = address
        self.namespaces = namespaces
        self.private_loopback = False
        """Not root, but each allocation has a network namespace holding only its loopback
        (:mod:`.userns`), which the devnet reaches through its run's connector."""
        self._private: dict[int, str] = {}
        self._forwarders: dict[str, _Forwarder] = {}
        self._namespaces: dict[str, AllocationNamespace] = {}

    def describe(self) -> str:
        """The mode, for the devnet's start log line."""
        if self.namespaces is not None:
            return self.namespaces.describe()
        if self.private_loopback:
            return (
                "each allocation has a network namespace of its own holding only its loopback, "
                "which its public ports are relayed into"
            )
        return SHARED

    def enter_through(self, allocation_id: str, connector: Connector) -> None:
        """Relay ``allocation_id``'s public ports (if any) through ``connector``, its current
        run's."""
        forwarder = self._forwarders.get(allocation_id)
        if forwarder is not None:
            forwarder.connector = connector

    def public_ports(self, allocation_id: str) -> list[int]:
        """The public ports forwarded for ``allocation_id`` (none once it is closed)."""
        forwarder = self._forwarders.get(allocation_id)
        servers = forwarder.servers.get(self.address, []) if forwarder else []
        return [s.sockets[0].getsockname()[1] for s in servers]

    def namespace(self, allocation_id: str) -> AllocationNamespace | None:
        """``allocation_id``'s network namespace (``None``: it shares the host's network)."""
        return self._namespaces.get(allocation_id)

    def refusals(self, v1: EnsembleConfigV1) -> list[str]:
        """Why allocations of ``v1`` cannot listen on their private ports (one line each):
        on a shared network, a port another allocation holds."""
        if self.namespaces is not None or self.private_loopback:
            return []
        return [
            f"allocation {port.allocation}: {self._held(port.private, '')}"
            for _, node in sorted((v1.nodes or {}).items())
            for port in node.ports or ()
            if port.private in self._private
        ]

    def _held(self, private: int, allocation_id: str) -> str:
        """Why ``allocation_id`` cannot have ``private`` (``""``: it can)."""
        holder = self._private.get(private)
        if holder is None or holder == allocation_id:
            return ""
        return (
            f"private port {private} is already used by allocation {holder}: the devnet's {SHARED}"
        )

    async def open(self, allocation_id: str, mapping: Mapping[str, int]) -> None:
        """Give ``allocation_id`` its network — a namespace of its own wherever namespaces can
        be made, ports or none, so that no allocation reaches what listens on the host's
        loopback (the gateway's and the nodes' APIs) — and forward each ``public -> private``
        port of ``mapping`` (Go's ``map[int]int``, keys as strings) into it; idempotent for
        an allocation already opened. On a shared network, a private port another allocation
        holds refuses the allocation; a public port that cannot be bound refuses it anyway."""
        if allocation_id in self._forwarders or (self.namespaces is None and not mapping):
            return
        namespace = None
        if self.namespaces is not None:
            namespace = await self.namespaces.create(allocation_id)
        elif not self.private_loopback:
            for private in mapping.values():
                if why := self._held(private, allocation_id):
                    raise SandboxError(why)
            self._private.update(dict.fromkeys(mapping.values(), allocation_id))
        forwarder = (
            _Forwarder(allocation_id, namespace.address, self.namespaces.hub)
            if namespace is not None and self.namespaces is not None
            else _Forwarder(allocation_id, LOOPBACK, inside=self.private_loopback)
        )
        self._forwarders[allocation_id] = forwarder
        if namespace is not None:
            self._namespaces[allocation_id] = namespace
        try:
            for public, private in sorted(mapping.items()):
                port = await forwarder.listen(self.address, int(public), private)
                if namespace is not None:  # where the allocations reach the host
                    await forwarder.listen(GATEWAY, port, private)
        except BaseException:
            await self.close(allocation_id)
            raise
        if mapping:
            log.info(
                "devnet: %s reachable at %s",
                allocation_id,
                ", ".join(
                    f"{self.address}:{p} -> {forwarder.target}:{q}"
                    for p, q in sorted(mapping.items())
                ),
            )

    async def close(self, allocation_id: str) -> None:
        """Stop forwarding ``allocation_id``'s ports; remove its namespace, or give its
        private ports back."""
        forwarder = self._forwarders.pop(allocation_id, None)
        self._private = {p: a for p, a in self._private.items() if a != allocation_id}
        if forwarder is not None:
            await forwarder.close()
        namespace = self._namespaces.pop(allocation_id, None)
        if namespace is not None and self.namespaces is not None:
            await self.namespaces.remove(namespace)

    async def stop(self) -> None:
        """The devnet stops: every allocation's network is closed; remove the hub."""
        for allocation_id in list(self._forwarders):
            await self.close(allocation_id)
        if self.namespaces is not None:
            await self.namespaces.close()
            self.namespaces = None
