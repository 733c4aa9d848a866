"""Where an ensemble's allocations were placed, and the order they start in.

The orchestrator keeps one :class:`Placed` per allocation (its node in the ensemble, full ID,
actor handle on the provider, last known state); :func:`start_waves` is ``orderByDependency``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from ..behaviors.ensemble import AllocationConfig
from ..behaviors.status import AllocationStatus
from ..transport.envelope import Handle
from .protocol import DeploymentError, manifest_key


@dataclasses.dataclass
class Placed:
    """One allocation as its orchestrator sees it."""

    name: str
    node_id: str
    id: str
    config: AllocationConfig
    handle: Handle = dataclasses.field(default_factory=Handle)
    status: AllocationStatus = AllocationStatus.PENDING
    exit_code: int | None = None
    error: str = ""
    """What the provider said of the last run's end (e.g. an OOM kill)."""
    restarts: int = 0
    health: str = ""
    health_failures: int = 0

    @property
    def key(self) -> str:
        """The manifest key, ``node.allocation``."""
        return manifest_key(self.node_id, self.name)


def start_waves(allocations: Mapping[str, AllocationConfig]) -> list[list[str]]:
    """``orderByDependency``: allocations in waves, each after everything it depends on."""
    done: set[str] = set()
    waves: list[list[str]] = []
    pending = dict(allocations)
    while pending:
        wave = sorted(n for n, a in pending.items() if all(d in done for d in a.depends_on or ()))
        if not wave:
            raise DeploymentError(f"cyclic dependency among {', '.join(sorted(pending))}")
        waves.append(wave)
        done.update(wave)
        for name in wave:
            del pending[name]
    return waves
