"""Payloads of ``/dms/node/onboarding/*`` (``dms/node/behaviors_onboarding.go``).

``types.OnboardingConfig`` embeds ``types.BaseDBModel`` (untagged ``ID``, ``CreatedAt``,
``UpdatedAt``, ``DeletedAt``), whose fields Go promotes into the config's JSON.
"""

from __future__ import annotations

import dataclasses

from ..gojson import BOOL, STRING, GoStruct, StructOf, go_field
from .gotime import GO_TIME, ZERO_TIME
from .resources import Resources

__all__ = [
    "OffboardRequest",
    "OffboardResponse",
    "OnboardRequest",
    "OnboardResponse",
    "OnboardStatusResponse",
    "OnboardingConfig",
]


@dataclasses.dataclass(frozen=True, slots=True)
class OnboardingConfig(GoStruct):
    """Whether the node is onboarded, and the resources it offers to the network."""

    GO_NAME = "OnboardingConfig"
    id: str = go_field("ID", STRING, default="")
    created_at: str = go_field("CreatedAt", GO_TIME, default=ZERO_TIME)
    updated_at: str = go_field("UpdatedAt", GO_TIME, default=ZERO_TIME)
    deleted_at: str = go_field("DeletedAt", GO_TIME, default=ZERO_TIME)
    is_onboarded: bool = go_field("is_onboarded", BOOL, default=False)
    onboarded_resources: Resources = go_field(
        "onboarded_resources", StructOf(Resources), omitempty=True, default=Resources()
    )


@dataclasses.dataclass(frozen=True, slots=True)
class OnboardRequest(GoStruct):
    """Resources to offer (RAM/disk in bytes); ``GPUs`` is the CLI's ``"index:vram,…"`` text."""

    GO_NAME = "OnboardRequest"
    no_gpu: bool = go_field("NoGPU", BOOL, default=False)
    gpus: str = go_field("GPUs", STRING, default="")
    config: OnboardingConfig = go_field(
        "Config", StructOf(OnboardingConfig), default=OnboardingConfig()
    )


@dataclasses.dataclass(frozen=True, slots=True)
class OnboardResponse(GoStruct):
    GO_NAME = "OnboardResponse"
    success: bool = go_field("success", BOOL, default=False)
    error: str = go_field("error", STRING, omitempty=True, default="")
    config: OnboardingConfig = go_field(
        "config", StructOf(OnboardingConfig), omitempty=True, default=OnboardingConfig()
    )


@dataclasses.dataclass(frozen=True, slots=True)
class OffboardRequest(GoStruct):
    """No fields: sent as ``{}``."""

    GO_NAME = "OffboardRequest"


@dataclasses.dataclass(frozen=True, slots=True)
class OffboardResponse(GoStruct):
    GO_NAME = "OffboardResponse"
    success: bool = go_field("success", BOOL, default=False)
    error: str = go_field("error", STRING, omitempty=True, default="")


@dataclasses.dataclass(frozen=True, slots=True)
class OnboardStatusResponse(GoStruct):
    """The newest DMS sends only ``onboarded``; v0.5 could add an ``error`` (kept, omitempty)."""

    GO_NAME = "OnboardStatusResponse"
    onboarded: bool = go_field("onboarded", BOOL, default=False)
    error: str = go_field("error", STRING, omitempty=True, default="")
