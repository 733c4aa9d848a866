"""What a pod's follower reports to its actor (:mod:`.pod_follower` → :mod:`..pods.pod_actor`): one
message per result, which the actor alone turns into changes of the pod's record."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from ...behaviors.deployment import DeploymentStatusResponse
from ...behaviors.status import DeploymentStatus
from ..capacity.admission import Wait
from ..records.container_runs import Runs


@dataclasses.dataclass(frozen=True)
class Observed:
    """The deployment's status, an allocation's or a container's runs changed."""

    status: DeploymentStatus
    reply: DeploymentStatusResponse
    manifest: Any = None  # fetched when the deployment ends: how each allocation ended
    runs: Mapping[str, Runs] = dataclasses.field(default_factory=dict)
    endpoints: list[dict[str, Any]] | None = None  # once running: see :mod:`..pods.endpoints`
    placement: dict[str, str] | None = None  # from a manifest read: node and peer


@dataclasses.dataclass(frozen=True)
class Deployed:
    attempt: int
    ensemble_id: str


@dataclasses.dataclass(frozen=True)
class DeployFailed:
    attempt: int
    message: str


@dataclasses.dataclass(frozen=True)
class Queued:
    """Why ``attempt`` waits in the admission queue changed."""

    attempt: int
    wait: Wait


@dataclasses.dataclass(frozen=True)
class Admitted:
    """``attempt`` left the admission queue: it may deploy."""

    attempt: int


@dataclasses.dataclass(frozen=True)
class Lost:
    """The DMS no longer knows the followed deployment (``error`` is its last answer)."""

    ensemble_id: str
    error: str


@dataclasses.dataclass(frozen=True)
class BackedOff:
    """The back-off after ``attempt`` is over (its ensemble stopped): the next may deploy."""

    attempt: int


@dataclasses.dataclass(frozen=True)
class ShutDown:
    pass


@dataclasses.dataclass(frozen=True)
class Ended:
    """The ensemble of a pod that has ended for good is shut down (or ended by itself)."""

    ensemble_id: str
