"""Public ports of the devnet's allocations, forwarded to their private ports.

A DMS node publishes an allocation's private port (``PortConfig.private``) on its public
address at ``PortConfig.public``. The devnet's allocations are host processes sharing the
host's network, so a private port is a port on the host's loopback: the devnet listens on
each public port at its public address and relays every TCP connection to the private port
(an asyncio proxy, opened when the allocation starts and closed when it is shut down, across
restarts of its process). Two allocations that listen on one private port cannot both run on
a shared network: the second is refused with the name of the first, as a node without
network namespaces would fail to bind it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping

from .sandbox import SandboxError

log = logging.getLogger(__name__)

RELAY_CHUNK = 1 << 16
LOOPBACK = "127.0.0.1"


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
    """One allocation's listeners and the connections they relay."""

    def __init__(self, allocation_id: str) -> None:
        self.allocation_id = allocation_id
        self.servers: list[asyncio.Server] = []
        self.relays: set[asyncio.Task[None]] = set()

    async def listen(self, address: str, public: int, private: int) -> None:
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
            server = await asyncio.start_server(accepted, address, public)
        except OSError as exc:
            raise SandboxError(
                f"public port {public} cannot be opened on {address}: {exc.strerror or exc}"
            ) from exc
        self.servers.append(server)

    @staticmethod
    async def _connect(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, private: int
    ) -> None:
        try:
            inner_reader, inner_writer = await asyncio.open_connection(LOOPBACK, private)
        except OSError:
            return  # nothing listens on the private port (yet): the client sees it closed
        try:
            await asyncio.gather(_relay(reader, inner_writer), _relay(inner_reader, writer))
        finally:
            inner_writer.close()

    async def close(self) -> None:
        for server in self.servers:
            server.close()
        for task in list(self.relays):
            task.cancel()
        for server in self.servers:
            with contextlib.suppress(Exception):
                await server.wait_closed()
        await asyncio.gather(*self.relays, return_exceptions=True)


class HostNetwork:
    """The host network every allocation of the devnet shares: which allocation holds which
    private port, and the forwarders of their public ports (on ``address``)."""

    def __init__(self, address: str = LOOPBACK) -> None:
        self.address = address
        self._private: dict[int, str] = {}
        self._forwarders: dict[str, _Forwarder] = {}

    def public_ports(self, allocation_id: str) -> list[int]:
        """The public ports forwarded for ``allocation_id`` (none once it is closed)."""
        forwarder = self._forwarders.get(allocation_id)
        return [s.sockets[0].getsockname()[1] for s in forwarder.servers] if forwarder else []

    async def open(self, allocation_id: str, mapping: Mapping[str, int]) -> None:
        """Forward each ``public -> private`` port of ``mapping`` (Go's ``map[int]int``, keys
        as strings); idempotent for an allocation already forwarded. A private port another
        allocation holds, or a public port that cannot be bound, refuses the allocation."""
        if allocation_id in self._forwarders or not mapping:
            return
        for private in mapping.values():
            holder = self._private.get(private)
            if holder is not None and holder != allocation_id:
                raise SandboxError(
                    f"private port {private} is already used by allocation {holder}: the "
                    "devnet's allocations share the host's network"
                )
        forwarder = _Forwarder(allocation_id)
        try:
            for public, private in sorted(mapping.items()):
                await forwarder.listen(self.address, int(public), private)
        except SandboxError:
            await forwarder.close()
            raise
        self._forwarders[allocation_id] = forwarder
        self._private.update(dict.fromkeys(mapping.values(), allocation_id))
        log.info(
            "devnet: %s reachable at %s",
            allocation_id,
            ", ".join(f"{self.address}:{p} -> {q}" for p, q in sorted(mapping.items())),
        )

    async def close(self, allocation_id: str) -> None:
        """Stop forwarding ``allocation_id``'s ports and give its private ports back."""
        forwarder = self._forwarders.pop(allocation_id, None)
        self._private = {p: a for p, a in self._private.items() if a != allocation_id}
        if forwarder is not None:
            await forwarder.close()
