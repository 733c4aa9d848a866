"""Handlers of what a simulated DMS says about itself as a machine and a provider.

Onboarding status/onboard/offboard, resources free/allocated/onboarded, hardware spec/usage,
``/public/status``, ``/dms/cap/list`` and ``/dms/node/allocations/list``
(``dms/node/behaviors_onboarding.go``, ``behaviors_resources.go``, ``behaviors_public.go``,
``behaviors_cap.go``, ``behaviors_allocation.go``), answered from the node's
:class:`~dmsgw.devnet.resource_ledger.ResourceLedger` and capability context with the catalog's
models.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from ..behaviors.allocations import AllocationsListResponse
from ..behaviors.cap_anchors import CapListRequest, CapListResponse
from ..behaviors.node_resources import ResourcesResponse
from ..behaviors.onboarding import (
    OffboardResponse,
    OnboardingConfig,
    OnboardRequest,
    OnboardResponse,
    OnboardStatusResponse,
)
from ..behaviors.public import PublicStatusResponse
from ..behaviors.resources import ResourceError, Resources
from ..behaviors.status import AllocationInfo
from ..transport.envelope import Envelope
from .provider import Provider
from .resource_ledger import NodeProfile, ResourceLedger
from .simulated_node import DmsNode
from .times import rfc3339


def _gpu_indexes(text: str) -> list[int]:
    """The CLI's ``--gpus`` text: ``0,2`` or ``0:24,2:24`` (index, optionally ``:VRAM``)."""
    indexes = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        head = part.split(":", 1)[0]
        if not head.isdigit():
            raise ResourceError(f"GPUs {text!r}: {part!r} does not start with a GPU index")
        indexes.append(int(head))
    return indexes


def _offer(request: OnboardRequest, hardware: Resources) -> Resources:
    offer = request.config.onboarded_resources
    if not (offer.cpu.cores > 0 and offer.ram.size > 0 and offer.disk.size > 0):
        raise ResourceError(
            "invalid onboarding config: onboarded_resources needs cpu.cores, ram.size and "
            "disk.size > 0"
        )
    if request.no_gpu:
        return dataclasses.replace(offer, gpus=None)
    if request.gpus:
        cards = {g.index: g for g in hardware.gpus or ()}
        wanted = _gpu_indexes(request.gpus)
        missing = [i for i in wanted if i not in cards]
        if missing:
            raise ResourceError(f"GPUs {request.gpus!r}: the machine has no GPU {missing[0]}")
        return dataclasses.replace(offer, gpus=tuple(cards[i] for i in wanted) or None)
    return offer


def install_node_behaviors(
    node: DmsNode,
    profile: NodeProfile,
    ledger: ResourceLedger,
    provider: Provider,
    on_change: Callable[[], None],
) -> None:
    """Onboarding, resources, hardware, public status, capabilities, allocations."""
    onboarded_at = [node.clock()]

    def config() -> OnboardingConfig:
        stamp = rfc3339(onboarded_at[0])
        return OnboardingConfig(
            id="1",
            created_at=stamp,
            updated_at=stamp,
            is_onboarded=ledger.is_onboarded,
            onboarded_resources=ledger.onboarded or Resources(),
        )

    async def onboard(msg: Envelope, request: OnboardRequest) -> OnboardResponse:
        try:
            ledger.onboard(_offer(request, profile.hardware))
        except ResourceError as exc:
            return OnboardResponse(error=str(exc))
        onboarded_at[0] = node.clock()
        on_change()
        return OnboardResponse(success=True, config=config())

    async def offboard(msg: Envelope, request: Any) -> OffboardResponse:
        try:
            ledger.offboard()
        except ResourceError as exc:
            return OffboardResponse(error=str(exc))
        on_change()
        return OffboardResponse(success=True)

    async def status(msg: Envelope, request: Any) -> OnboardStatusResponse:
        return OnboardStatusResponse(onboarded=ledger.is_onboarded)

    def resources(read: Callable[[], Resources | None], what: str) -> Any:
        async def handler(msg: Envelope, request: Any) -> ResourcesResponse:
            value = read()
            if value is None:
                return ResourcesResponse(error=f"{what}: machine is not onboarded")
            return ResourcesResponse(ok=True, resources=value)

        return handler

    async def public_status(msg: Envelope, request: Any) -> PublicStatusResponse:
        return PublicStatusResponse(status="OK", resources=profile.hardware)

    async def cap_list(msg: Envelope, request: CapListRequest) -> CapListResponse:
        roots, require, provide, revoke = node.capabilities.list_roots()
        return CapListResponse(
            ok=True, roots=tuple(roots) or None, require=require, provide=provide, revoke=revoke
        )

    async def allocations(msg: Envelope, request: Any) -> AllocationsListResponse:
        infos = tuple(
            AllocationInfo(
                allocation_id=a.id,
                status=a.status.value,
                has_health_check=bool(a.config.healthcheck.type),
                resource_limit=a.config.resources,
                timestamp=node.clock() // 1_000_000_000,
            )
            for a in provider.allocations.values()
        )
        return AllocationsListResponse(allocations=infos or None)

    for name, handler in (
        ("/dms/node/onboarding/onboard", onboard),
        ("/dms/node/onboarding/offboard", offboard),
        ("/dms/node/onboarding/status", status),
        ("/dms/node/resources/free", resources(ledger.free, "free resources")),
        ("/dms/node/resources/allocated", resources(ledger.allocated, "allocated resources")),
        ("/dms/node/resources/onboarded", resources(lambda: ledger.onboarded, "onboarded")),
        ("/dms/node/hardware/spec", resources(lambda: profile.hardware, "hardware")),
        ("/dms/node/hardware/usage", resources(ledger.allocated, "hardware usage")),
        ("/public/status", public_status),
        ("/dms/cap/list", cap_list),
        ("/dms/node/allocations/list", allocations),
    ):
        node.add_behavior(name, handler)
