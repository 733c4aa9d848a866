"""The reply of ``/dms/node/allocations/list`` (``dms/node/behaviors_allocation.go``)."""

from __future__ import annotations

import dataclasses

from ..gojson import STRING, GoStruct, SliceOf, StructOf, go_field
from .status import AllocationInfo

__all__ = ["AllocationsListResponse"]


@dataclasses.dataclass(frozen=True, slots=True)
class AllocationsListResponse(GoStruct):
    """Every allocation this DMS runs as a compute provider, whatever its deployment."""

    GO_NAME = "AllocationsListResponse"
    allocations: tuple[AllocationInfo, ...] | None = go_field(
        "allocations", SliceOf(StructOf(AllocationInfo)), default=None
    )
    error: str = go_field("error", STRING, omitempty=True, default="")
