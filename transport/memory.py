"""An in-memory transport: the DMS REST API's semantics without sockets, for tests.

It speaks to anything that answers the API's routes as ``(status, body)`` — the embedded
devnet's :class:`~dmsgw.devnet.rest_api.DmsApi` — and shares everything else with
:class:`~dmsgw.transport.rest.RestTransport` (handle caching, status codes to typed errors,
reply decoding), so code tested over it behaves as over HTTP.
"""

from __future__ import annotations

from typing import Protocol

from . import envelope as env
from .envelope import Envelope
from .rest import API_PREFIX, RestTransport


class ApiEndpoint(Protocol):
    """The DMS API's routes on bytes: ``call("POST", "/api/v1/actor/invoke", body)``."""

    async def call(self, method: str, path: str, body: bytes | None) -> tuple[int, bytes]: ...


class MemoryTransport(RestTransport):
    """:class:`RestTransport` whose requests go straight to ``endpoint``."""

    def __init__(self, endpoint: ApiEndpoint) -> None:
        super().__init__("memory://dms")
        self._endpoint = endpoint

    async def _request(
        self, method: str, path: str, envelope: Envelope | None, what: str
    ) -> tuple[int, bytes]:
        body = env.wire(envelope) if envelope is not None else None
        return await self._endpoint.call(method, API_PREFIX + path, body)

    async def close(self) -> None:
        """Nothing to close: no connections."""
