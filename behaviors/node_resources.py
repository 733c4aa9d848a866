"""The reply of ``/dms/node/resources/*`` and ``/dms/node/hardware/*``.

``dms/node/behaviors_resources.go``: one ``ResourcesResponse`` for free, allocated and
onboarded resources and for the hardware spec and usage; sizes in bytes, clocks in Hz.
"""

from __future__ import annotations

import dataclasses

from ..gojson import BOOL, STRING, GoStruct, StructOf, go_field
from .resources import Resources

__all__ = ["ResourcesResponse"]


@dataclasses.dataclass(frozen=True, slots=True)
class ResourcesResponse(GoStruct):
    GO_NAME = "ResourcesResponse"
    ok: bool = go_field("OK", BOOL, default=False)
    resources: Resources = go_field("Resources", StructOf(Resources), default=Resources())
    error: str = go_field("error", STRING, omitempty=True, default="")
