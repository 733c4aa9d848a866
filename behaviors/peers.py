"""Payloads of ``/dms/node/peers/*`` (``dms/node/behaviors_peers.go``).

These Go structs have no JSON tags except ``PeerAddrInfoResponse``, so the keys are the Go
field names (``Peers``, ``Host``, ``RTT`` …).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from ..gojson import INT64, PLAIN, STRING, GoStruct, MapOf, SliceOf, StructOf, go_field
from .gotime import GO_TIME, ZERO_TIME

__all__ = [
    "PeerAddrInfoResponse",
    "PeerConnectRequest",
    "PeerConnectResponse",
    "PeerDHTResponse",
    "PeerInfo",
    "PeerScoreResponse",
    "PeersListResponse",
    "PingRequest",
    "PingResponse",
]


@dataclasses.dataclass(frozen=True, slots=True)
class PeersListResponse(GoStruct):
    """The peers of the DMS's pubsub (``Peers`` are libp2p peer IDs)."""

    GO_NAME = "PeersListResponse"
    peers: tuple[str, ...] | None = go_field("Peers", SliceOf(STRING), default=None)


@dataclasses.dataclass(frozen=True, slots=True)
class PeerAddrInfoResponse(GoStruct):
    """``/dms/node/peers/self``: the DMS's peer ID and its listen multiaddresses (one string)."""

    GO_NAME = "PeerAddrInfoResponse"
    id: str = go_field("id", STRING, default="")
    listen_addr: str = go_field("listen_addr", STRING, default="")


@dataclasses.dataclass(frozen=True, slots=True)
class PingRequest(GoStruct):
    GO_NAME = "PingRequest"
    host: str = go_field("Host", STRING, default="")


@dataclasses.dataclass(frozen=True, slots=True)
class PingResponse(GoStruct):
    """Round-trip time in milliseconds, or why the ping failed."""

    GO_NAME = "PingResponse"
    error: str = go_field("Error", STRING, default="")
    rtt: int = go_field("RTT", INT64, default=0)


@dataclasses.dataclass(frozen=True, slots=True)
class PeerInfo(GoStruct):
    """``kbucket.PeerInfo`` (go-libp2p-kbucket; its exported fields, no JSON tags)."""

    GO_NAME = "PeerInfo"
    id: str = go_field("Id", STRING, default="")
    mode: int = go_field("Mode", INT64, default=0)
    last_useful_at: str = go_field("LastUsefulAt", GO_TIME, default=ZERO_TIME)
    last_successful_outbound_query_at: str = go_field(
        "LastSuccessfulOutboundQueryAt", GO_TIME, default=ZERO_TIME
    )
    added_at: str = go_field("AddedAt", GO_TIME, default=ZERO_TIME)


@dataclasses.dataclass(frozen=True, slots=True)
class PeerDHTResponse(GoStruct):
    """The DMS's DHT routing table."""

    GO_NAME = "PeerDHTResponse"
    peers: tuple[PeerInfo, ...] | None = go_field(
        "Peers", SliceOf(StructOf(PeerInfo)), default=None
    )


@dataclasses.dataclass(frozen=True, slots=True)
class PeerConnectRequest(GoStruct):
    """``Address`` is a multiaddress ending in ``/p2p/<peer ID>``."""

    GO_NAME = "PeerConnectRequest"
    address: str = go_field("Address", STRING, default="")


@dataclasses.dataclass(frozen=True, slots=True)
class PeerConnectResponse(GoStruct):
    """``Status`` is ``"CONNECTED"`` on success."""

    GO_NAME = "PeerConnectResponse"
    status: str = go_field("Status", STRING, default="")
    error: str = go_field("Error", STRING, default="")


@dataclasses.dataclass(frozen=True, slots=True)
class PeerScoreResponse(GoStruct):
    """Gossipsub scores by peer ID; each snapshot is kept as plain JSON (``network`` type)."""

    GO_NAME = "PeerScoreResponse"
    score: Mapping[str, Any] | None = go_field("Score", MapOf(PLAIN), default=None)
