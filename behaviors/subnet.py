"""Payloads of the node's subnet behaviors, ``/dms/node/subnet/{create,destroy,join}``.

Mirrors the request and reply structs of ``dms/orchestrator/subnet.go`` and
``dms/orchestrator/teardown.go`` (the handlers are in ``dms/node``). An orchestrator invokes
them on the DMSs of its deployment (under ``/dms/ensemble/<id>/node/subnet/…``, or the static
``/dms/node/subnet/…`` names); they are in the catalog so that an operator can call them by
hand. The structs have no JSON tags: the keys are the Go field names.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from ..gojson import BOOL, STRING, GoStruct, MapOf, go_field

__all__ = [
    "SubnetCreateRequest",
    "SubnetCreateResponse",
    "SubnetDestroyRequest",
    "SubnetDestroyResponse",
    "SubnetJoinRequest",
    "SubnetJoinResponse",
]


@dataclasses.dataclass(frozen=True, slots=True)
class SubnetCreateRequest(GoStruct):
    """Create the subnet ``SubnetID``; ``RoutingTable`` maps subnet IPs to peer IDs."""

    GO_NAME = "SubnetCreateRequest"
    subnet_id: str = go_field("SubnetID", STRING, default="")
    ip: str = go_field("IP", STRING, default="")
    routing_table: Mapping[str, str] | None = go_field("RoutingTable", MapOf(STRING), default=None)


@dataclasses.dataclass(frozen=True, slots=True)
class SubnetCreateResponse(GoStruct):
    GO_NAME = "SubnetCreateResponse"
    ok: bool = go_field("OK", BOOL, default=False)
    error: str = go_field("Error", STRING, default="")


@dataclasses.dataclass(frozen=True, slots=True)
class SubnetDestroyRequest(GoStruct):
    GO_NAME = "SubnetDestroyRequest"
    subnet_id: str = go_field("SubnetID", STRING, default="")


@dataclasses.dataclass(frozen=True, slots=True)
class SubnetDestroyResponse(GoStruct):
    GO_NAME = "SubnetDestroyResponse"
    ok: bool = go_field("OK", BOOL, default=False)
    error: str = go_field("Error", STRING, default="")


@dataclasses.dataclass(frozen=True, slots=True)
class SubnetJoinRequest(GoStruct):
    """Join peer ``PeerID`` at ``IP``; ``Records`` maps DNS names to subnet IPs."""

    GO_NAME = "SubnetJoinRequest"
    subnet_id: str = go_field("SubnetID", STRING, default="")
    peer_id: str = go_field("PeerID", STRING, default="")
    ip: str = go_field("IP", STRING, default="")
    records: Mapping[str, str] | None = go_field("Records", MapOf(STRING), default=None)


@dataclasses.dataclass(frozen=True, slots=True)
class SubnetJoinResponse(GoStruct):
    GO_NAME = "SubnetJoinResponse"
    ok: bool = go_field("OK", BOOL, default=False)
    error: str = go_field("Error", STRING, default="")
