"""Handlers of the behaviors every simulated DMS serves about its network: peers and hello.

Each handler takes the request envelope and its decoded payload and returns the reply model,
built from the same catalog models the gateway decodes.
"""

from __future__ import annotations

from typing import Any

from ..behaviors.peers import (
    PeerAddrInfoResponse,
    PeerConnectRequest,
    PeerConnectResponse,
    PeersListResponse,
    PingRequest,
    PingResponse,
)
from ..behaviors.public import HelloResponse
from ..transport.envelope import Envelope
from .simulated_node import DmsNode


def install_basic_behaviors(node: DmsNode) -> None:
    """Peers list/self/ping/connect and the public/broadcast hello."""

    async def peers_list(msg: Envelope, request: Any) -> PeersListResponse:
        others = tuple(p for p in node.network.peers() if p != node.peer_id)
        return PeersListResponse(peers=others)

    async def peers_self(msg: Envelope, request: Any) -> PeerAddrInfoResponse:
        return PeerAddrInfoResponse(id=node.peer_id, listen_addr=f"[/memory/{node.peer_id}]")

    async def peers_ping(msg: Envelope, request: PingRequest) -> PingResponse:
        if request.host not in node.network.peers() or not node.network.reachable(
            node.peer_id, request.host
        ):
            return PingResponse(error=f"failed to ping {request.host}: no route to peer", rtt=0)
        return PingResponse(rtt=int(node.network.latency_s * 2000))

    async def peers_connect(msg: Envelope, request: PeerConnectRequest) -> PeerConnectResponse:
        """Every devnet node is connected to every other; ``connect`` checks the address
        names one that is reachable (``/p2p/<peer ID>`` ends the multiaddress)."""
        _, marker, peer = request.address.rpartition("/p2p/")
        if not marker or not peer:
            return PeerConnectResponse(error=f"invalid multiaddress {request.address!r}")
        if peer not in node.network.peers() or not node.network.reachable(node.peer_id, peer):
            return PeerConnectResponse(error=f"failed to connect to {peer}: no route to peer")
        return PeerConnectResponse(status="CONNECTED")

    async def hello(msg: Envelope, request: Any) -> HelloResponse:
        return HelloResponse(did=node.did)

    node.add_behavior("/dms/node/peers/list", peers_list)
    node.add_behavior("/dms/node/peers/self", peers_self)
    node.add_behavior("/dms/node/peers/ping", peers_ping)
    node.add_behavior("/dms/node/peers/connect", peers_connect)
    node.add_behavior("/public/hello", hello)
    node.add_behavior("/broadcast/hello", hello)
