"""Replies of ``/public/*``, ``/broadcast/hello`` and the status discovery behaviors
(``dms/node/behaviors_public.go``).

The discovery reply is a Go map (``map[peer ID]DiscoveryStatus``), not a struct, so
:class:`DiscoveryStatusResponse` wraps the map and speaks JSON itself. Its ``p2p`` network
statistics and the DMS ``config`` are kept as plain JSON: their Go types belong to packages
this gateway does not mirror, so on re-encoding their keys come out sorted rather than in the
DMS's field order.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Self

from ..gojson import (
    BOOL,
    PLAIN,
    STRING,
    GoDecodeError,
    GoStruct,
    MapOf,
    SliceOf,
    StructOf,
    decode_plain,
    encode_any,
    go_field,
)
from ..keys.did import DID
from .resources import Resources

__all__ = [
    "DiscoveryNetwork",
    "DiscoveryResources",
    "DiscoveryStatus",
    "DiscoveryStatusResponse",
    "HelloResponse",
    "NetworkInterfaces",
    "PublicStatusResponse",
]


@dataclasses.dataclass(frozen=True, slots=True)
class HelloResponse(GoStruct):
    """The replying DMS's DID (``{"DID": {"uri": "did:key:…"}}``)."""

    GO_NAME = "HelloResponse"
    did: DID = go_field("DID", StructOf(DID), default=DID())


@dataclasses.dataclass(frozen=True, slots=True)
class PublicStatusResponse(GoStruct):
    """``Status`` ``"OK"`` with the machine's total resources, or ``"ERROR"``."""

    GO_NAME = "PublicStatusResponse"
    status: str = go_field("Status", STRING, default="")
    resources: Resources = go_field("Resources", StructOf(Resources), default=Resources())


@dataclasses.dataclass(frozen=True, slots=True)
class NetworkInterfaces(GoStruct):
    GO_NAME = "NetworkInterfaces"
    name: str = go_field("name", STRING, default="")
    ip: tuple[str, ...] | None = go_field("ip", SliceOf(STRING), default=None)
    mac_address: str = go_field("mac_address", STRING, default="")


@dataclasses.dataclass(frozen=True, slots=True)
class DiscoveryNetwork(GoStruct):
    GO_NAME = "DiscoveryNetwork"
    interfaces: tuple[NetworkInterfaces, ...] | None = go_field(
        "interfaces", SliceOf(StructOf(NetworkInterfaces)), default=None
    )
    p2p: Any = go_field("p2p", PLAIN, default=None)


@dataclasses.dataclass(frozen=True, slots=True)
class DiscoveryResources(GoStruct):
    GO_NAME = "DiscoveryResources"
    total: Resources = go_field("total", StructOf(Resources), default=Resources())
    onboarded: Resources = go_field("onboarded", StructOf(Resources), default=Resources())
    allocated: Resources = go_field("allocated", StructOf(Resources), default=Resources())
    free: Resources = go_field("free", StructOf(Resources), default=Resources())


@dataclasses.dataclass(frozen=True, slots=True)
class DiscoveryStatus(GoStruct):
    """One peer's view of itself: host, network, onboarding, resources and errors met."""

    GO_NAME = "DiscoveryStatus"
    hostname: str = go_field("hostname", STRING, default="")
    did: str = go_field("did", STRING, default="")
    network: DiscoveryNetwork = go_field(
        "network", StructOf(DiscoveryNetwork), default=DiscoveryNetwork()
    )
    onboarded: bool = go_field("onboarded", BOOL, default=False)
    resources: DiscoveryResources = go_field(
        "resources", StructOf(DiscoveryResources), default=DiscoveryResources()
    )
    config: Any = go_field("config", PLAIN, default=None)
    errors: tuple[str, ...] | None = go_field("errors", SliceOf(STRING), default=None)


_PEER_MAP = MapOf(StructOf(DiscoveryStatus))


@dataclasses.dataclass(frozen=True, slots=True)
class DiscoveryStatusResponse:
    """``/dms/node/status`` and ``/broadcast/dms/status``: statuses by peer ID."""

    peers: Mapping[str, DiscoveryStatus] | None = None

    def to_json(self) -> bytes:
        """``json.Marshal`` of the Go map (peer IDs sorted)."""
        out: list[str] = []
        _PEER_MAP.encode(self.peers, out)
        return "".join(out).encode("utf-8")

    @classmethod
    def from_json(cls, data: bytes | str) -> Self:
        """``json.Unmarshal`` into the Go map; ``null`` is the nil map."""
        raw = decode_plain(data)
        if raw is None:
            return cls()
        if not isinstance(raw, dict):
            kind = {list: "array", str: "string", bool: "bool"}.get(type(raw), "number")
            raise GoDecodeError(
                f"json: cannot unmarshal {kind} into Go value of type node.DiscoveryStatusResponse"
            )
        return cls({peer: DiscoveryStatus.from_json(encode_any(v)) for peer, v in raw.items()})
