"""A node as a compute provider: it bids, commits resources, and hosts allocations.

The behaviors of ``dms/node/behaviors_bid.go`` and ``behaviors_deployment.go``'s provider side:

* ``/dms/deployment/request`` (topic ``/nunet/deployment``, or unicast for a pinned peer): a
  bid for the first node request it can serve — onboarded, not excluded, in the requested
  location, with the executors and free resources asked for — signed with the node's key. A
  node bids on its own broadcasts too (its orchestrator and provider are actors of the same
  DMS, so a DMS can deploy onto itself — the only way a one-node network deploys at all); it
  answers each round (ensemble ID and nonce) once; a request it cannot serve gets no answer,
  as from a DMS.
* ``/dms/deployment/commit``: holds an allocation's resources (within a bid still open).
* ``/dms/deployment/allocate``: creates the allocation actors, returns their handles.
* ``/dms/deployment/revert``: forgets the bid, stops and releases what was made.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from ..behaviors.resources import ResourceError
from ..clock import NS_PER_SECOND
from ..transport.envelope import Envelope
from .allocation import Allocation
from .executor import ProcessExecutor
from .protocol import (
    ALLOCATE,
    BID_REQUEST,
    COMMIT,
    INTERNAL_SPECS,
    REVERT,
    AllocationDeploymentRequest,
    AllocationDeploymentResponse,
    Bid,
    BidRequestV1,
    BidV1,
    CommitDeploymentRequest,
    DeploymentRevertRequest,
    EnsembleBidRequest,
    OkResponse,
    location_satisfies,
    sign_bid,
)
from .resource_ledger import NodeProfile, ResourceLedger
from .simulated_node import DmsNode
from .timeouts import Timeouts

PUBLIC_ADDRESS = "127.0.0.1"


@dataclasses.dataclass(frozen=True)
class _OpenBid:
    request: BidRequestV1
    expire_ns: int


class Provider:
    """The compute-provider half of ``node``."""

    def __init__(
        self,
        node: DmsNode,
        profile: NodeProfile,
        ledger: ResourceLedger,
        executor: ProcessExecutor,
        timeouts: Timeouts,
        on_change: Callable[[], None],
    ) -> None:
        self.node = node
        self.profile = profile
        self.ledger = ledger
        self.executor = executor
        self.timeouts = timeouts
        self._on_change = on_change
        self._bids: dict[str, _OpenBid] = {}
        self._answered: set[tuple[str, int]] = set()
        self.allocations: dict[str, Allocation] = {}
        for name, handler in (
            (BID_REQUEST, self._handle_bid_request),
            (COMMIT, self._handle_commit),
            (ALLOCATE, self._handle_allocate),
            (REVERT, self._handle_revert),
        ):
            node.root.add_behavior(INTERNAL_SPECS[name], handler)

    def _serves(self, request: BidRequestV1, excluded: tuple[str, ...]) -> bool:
        if self.node.peer_id in excluded:
            return False
        if not location_satisfies(self.profile.location, request.location):
            return False
        if any(e not in self.profile.executors for e in request.executors or ()):
            return False
        return not self.ledger.shortfall(request.resources)

    async def _handle_bid_request(self, msg: Envelope, request: EnsembleBidRequest) -> Bid | None:
        if not self.ledger.is_onboarded:
            return None
        round_key = (request.id, request.nonce)
        if round_key in self._answered:
            return None
        excluded = tuple(request.peer_exclusion or ())
        for item in request.request or ():
            v1 = item.v1
            if v1 is None or not self._serves(v1, excluded):
                continue
            self._answered.add(round_key)
            expire = self.node.clock() + int(self.timeouts.bid_state_s * NS_PER_SECOND)
            self._bids[request.id] = _OpenBid(v1, expire)
            bid = BidV1(
                ensemble_id=request.id,
                node_id=v1.node_id,
                peer=self.node.peer_id,
                pub_address=PUBLIC_ADDRESS,
                location=self.profile.location,
                handle=self.node.handle,
            )
            return sign_bid(bid, self.node.key)
        return None

    async def _handle_commit(self, msg: Envelope, request: CommitDeploymentRequest) -> OkResponse:
        bid = self._bids.get(request.ensemble_id)
        if bid is None:
            return OkResponse(error=f"no bid requests for ensemble id: {request.ensemble_id}")
        if bid.expire_ns < self.node.clock():
            return OkResponse(
                error=f"bid request for ensemble id: {request.ensemble_id} has expired"
            )
        try:
            self.ledger.hold(request.allocation_name, request.resources)
        except ResourceError as exc:
            return OkResponse(
                error=f"commit resources for ensemble allocID: {request.allocation_name}: {exc}"
            )
        self._on_change()
        return OkResponse(ok=True)

    async def _handle_allocate(
        self, msg: Envelope, request: AllocationDeploymentRequest
    ) -> AllocationDeploymentResponse:
        made: dict[str, Any] = {}
        for allocation_id, config in sorted((request.allocations or {}).items()):
            if allocation_id not in self.ledger.holders():
                return AllocationDeploymentResponse(
                    error=f"allocation {allocation_id} has no committed resources"
                )
            existing = self.allocations.get(allocation_id)
            if existing is None:
                existing = Allocation(
                    self.node,
                    allocation_id,
                    request.ensemble_id,
                    config,
                    msg.from_,
                    self.executor,
                    self.timeouts,
                    self._ended,
                )
                self.allocations[allocation_id] = existing
            made[allocation_id] = existing.handle
        return AllocationDeploymentResponse(ok=True, allocations=made)

    async def _handle_revert(self, msg: Envelope, request: DeploymentRevertRequest) -> OkResponse:
        self._bids.pop(request.ensemble_id, None)
        for allocation_id in request.allocs_by_name or ():
            allocation = self.allocations.pop(allocation_id, None)
            if allocation is not None:
                await allocation.close()
            self.ledger.release(allocation_id)
        self._on_change()
        return OkResponse(ok=True)

    def _ended(self, allocation: Allocation) -> None:
        """An allocation is done with its resources (completed, failed to start, shut down)."""
        if self.ledger.release(allocation.id):
            self._on_change()

    def find(self, ensemble_id: str, name: str) -> Allocation | None:
        """The allocation ``name`` (an allocation or manifest key) of ``ensemble_id`` here."""
        for allocation in self.allocations.values():
            if allocation.ensemble_id == ensemble_id and (
                allocation.id.endswith(f".{name}") or allocation.id.endswith(f"_{name}")
            ):
                return allocation
        return None

    async def close(self) -> None:
        for allocation in list(self.allocations.values()):
            await allocation.close()
        self.allocations.clear()
