"""Bids for an ensemble: the orchestrator's side of ``dms/orchestrator/bid.go``.

One round: a bid request per ensemble node (its executors, aggregate resources, location and
ports) — unicast to a pinned ``peer`` (which must be reachable, or the whole deployment
fails), broadcast on ``/nunet/deployment`` for the others, with the ensemble's
``exclude_peers`` — then bids collected for the bid window. A bid counts when it is validly
signed by its peer, for this ensemble and one of its nodes, from a peer not excluded, not pinned
to another node and in the node's location; each peer counts once. Among the bids for a node
one is chosen at random.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
from collections.abc import Mapping

from ..behaviors.ensemble import EnsembleConfigV1
from ..transport.envelope import Envelope, Handle, HandleError
from .basic_actor import BasicActor
from .protocol import (
    BID_REPLY,
    BID_REQUEST,
    BID_REQUEST_TOPIC,
    Bid,
    BidRequest,
    BidRequestV1,
    BidV1,
    DeploymentError,
    EnsembleBidRequest,
    PublicPorts,
    Spec,
    bid_is_valid,
    location_satisfies,
)
from .resource_ledger import total


def bid_requests(config: EnsembleConfigV1) -> list[BidRequestV1]:
    """What each ensemble node asks of a provider."""
    allocations = config.allocations or {}
    requests = []
    for node_id, node in sorted((config.nodes or {}).items()):
        configs = [allocations[name] for name in node.allocations or () if name in allocations]
        ports = node.ports or ()
        requests.append(
            BidRequestV1(
                node_id=node_id,
                executors=tuple(sorted({a.executor for a in configs})),
                resources=total(a.resources for a in configs),
                location=node.location,
                public_ports=PublicPorts(
                    static=tuple(p.public for p in ports if p.public) or None,
                    dynamic=sum(1 for p in ports if not p.public),
                ),
            )
        )
    return requests


async def _request_from(
    actor: BasicActor, peer: str, payload: EnsembleBidRequest, window_s: float
) -> None:
    """A pinned node's request goes to its peer alone ("the entire deployment must fail"
    when that peer cannot be reached)."""
    try:
        target = Handle.from_peer_id(peer)
    except HandleError as exc:
        raise DeploymentError(f"failed to bid: request bids: {exc}") from None
    msg = actor.message(target, BID_REQUEST, payload, window_s)
    msg = dataclasses.replace(msg, opt=dataclasses.replace(msg.opt, cont=BID_REPLY))
    if not await actor.send(msg):
        raise DeploymentError(
            "failed to bid: request bids: requesting bid to targeted peer: "
            f"sending targeted bid request: failed to send message to {peer}"
        )


async def bid_round(
    actor: BasicActor,
    ensemble_id: str,
    config: EnsembleConfigV1,
    round_no: int,
    window_s: float,
    rng: random.Random,
) -> dict[str, BidV1] | None:
    """The chosen bid for every node, or ``None`` when some node got none."""
    nodes = config.nodes or {}
    excluded = tuple(config.exclude_peers or ())
    received: asyncio.Queue[Bid] = asyncio.Queue()

    async def on_bid(msg: Envelope, bid: Bid) -> None:
        received.put_nowait(bid)

    actor.add_behavior(Spec(BID_REPLY, Bid), on_bid)
    try:
        requests = bid_requests(config)
        for request in requests:
            peer = nodes[request.node_id].peer
            if peer:
                one = EnsembleBidRequest(
                    ensemble_id, round_no, (BidRequest(request),), excluded or None
                )
                await _request_from(actor, peer, one, window_s)
        broadcast = tuple(BidRequest(r) for r in requests if not nodes[r.node_id].peer)
        if broadcast:
            payload = EnsembleBidRequest(ensemble_id, round_no, broadcast, excluded or None)
            await actor.publish(BID_REQUEST_TOPIC, BID_REQUEST, payload, window_s, BID_REPLY)
        bids = await _collect(received, window_s, ensemble_id, config, set(excluded))
    finally:
        actor.remove_behavior(BID_REPLY)
    if set(bids) != set(nodes):
        return None
    return {node_id: rng.choice(options) for node_id, options in sorted(bids.items())}


async def _collect(
    received: asyncio.Queue[Bid],
    window_s: float,
    ensemble_id: str,
    config: EnsembleConfigV1,
    excluded: set[str],
) -> dict[str, list[BidV1]]:
    """``collectBids`` + ``addBid`` until the window closes."""
    nodes = config.nodes or {}
    pinned: Mapping[str, str] = {n.peer: node_id for node_id, n in nodes.items() if n.peer}
    bids: dict[str, list[BidV1]] = {}
    loop = asyncio.get_running_loop()
    end = loop.time() + window_s
    while (left := end - loop.time()) > 0:
        try:
            async with asyncio.timeout(left):
                bid = await received.get()
        except TimeoutError:
            break
        v1 = bid.v1
        if v1 is None or not bid_is_valid(bid) or v1.ensemble_id != ensemble_id:
            continue
        node = nodes.get(v1.node_id)
        if node is None or v1.peer in excluded:
            continue
        if pinned.get(v1.peer, v1.node_id) != v1.node_id:
            continue
        if not location_satisfies(v1.location, node.location):
            continue
        bids.setdefault(v1.node_id, []).append(v1)
        excluded.add(v1.peer)
    return bids
