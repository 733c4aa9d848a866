"""Where a deployment stands: its status, its manifest, and its allocations' state.

``DeploymentStatus`` is ``jobtypes.DeploymentStatus`` (``dms/jobs/types/orchestrator.go``):
an ``int`` inside the DMS and its ``String()`` name in replies. A newer DMS test also names an
``Updating`` status (a running deployment being updated); its integer could not be confirmed
in the source consulted, so it reads as :attr:`DeploymentStatus.UNKNOWN` here, which is not
terminal, i.e. "keep watching".

The manifest follows the newest ``dms/jobs/types/manifest.go`` (with ``metadata``, ``subnet``,
``contracts`` and the redundancy fields). Versions before it spelt the node address list
``pub_addrss``, which is therefore not read from an older DMS's manifest.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping

from ..gojson import (
    BOOL,
    FLOAT64,
    INT64,
    STRING,
    UINT64,
    GoStruct,
    MapOf,
    SliceOf,
    StructOf,
    go_field,
)
from ..transport.envelope import Handle
from .ensemble import HealthCheckManifest, Location, SubnetConfig
from .resources import Resources

__all__ = [
    "AllocationInfo",
    "AllocationManifest",
    "AllocationResourceUsage",
    "AllocationStatus",
    "ContractManifest",
    "DeploymentStatus",
    "EnsembleManifest",
    "NodeManifest",
    "is_terminal",
]


class DeploymentStatus(enum.IntEnum):
    """The orchestrator's state; :attr:`go_name` is the name the DMS sends in replies."""

    UNKNOWN = -1  # not a Go value: anything the DMS names otherwise (its String() "Unknown")
    PREPARING = 0
    GENERATING = 1
    COMMITTING = 2
    PROVISIONING = 3
    RUNNING = 4
    FAILED = 5
    SHUTTING_DOWN = 6
    COMPLETED = 7

    @property
    def go_name(self) -> str:
        """The DMS's ``String()``; ``str()`` stays the integer, as JSON encoding needs."""
        return _GO_NAMES[self]

    @classmethod
    def parse(cls, value: str | int) -> DeploymentStatus:
        """From the reply's name (``"Running"``) or the DMS's integer; else ``UNKNOWN``."""
        if isinstance(value, int):
            try:
                status = cls(value)
            except ValueError:
                return cls.UNKNOWN
            return status
        return _BY_NAME.get(value, cls.UNKNOWN)


_GO_NAMES = {
    DeploymentStatus.UNKNOWN: "Unknown",
    DeploymentStatus.PREPARING: "Preparing",
    DeploymentStatus.GENERATING: "Generating",
    DeploymentStatus.COMMITTING: "Committing",
    DeploymentStatus.PROVISIONING: "Provisioning",
    DeploymentStatus.RUNNING: "Running",
    DeploymentStatus.FAILED: "Failed",
    DeploymentStatus.SHUTTING_DOWN: "ShuttingDown",
    DeploymentStatus.COMPLETED: "Completed",
}
_BY_NAME = {name: status for status, name in _GO_NAMES.items()}
_TERMINAL = frozenset({DeploymentStatus.FAILED, DeploymentStatus.COMPLETED})


def is_terminal(status: DeploymentStatus | str | int) -> bool:
    """Whether the deployment will not change any more (``Failed`` or ``Completed``)."""
    if not isinstance(status, DeploymentStatus):
        status = DeploymentStatus.parse(status)
    return status in _TERMINAL


class AllocationStatus(enum.StrEnum):
    """``jobtypes.AllocationStatus``: the state of one allocation."""

    PENDING = "pending"
    RUNNING = "running"
    RESTARTING = "restarting"
    STOPPED = "stopped"
    FAILED = "failed"
    COMPLETED = "completed"
    TERMINATED = "terminated"
    STANDBY = "standby"


@dataclasses.dataclass(frozen=True, slots=True)
class ContractManifest(GoStruct):
    GO_NAME = "ContractManifest"
    id: str = go_field("id", STRING, default="")
    did: str = go_field("did", STRING, default="")
    host: str = go_field("host", STRING, default="")


@dataclasses.dataclass(frozen=True, slots=True)
class AllocationManifest(GoStruct):
    """A deployed allocation: where it runs, its actor handle, address and status.

    ``ports`` maps public to private port; Go's ``map[int]int`` has its keys as decimal
    strings on the wire, which is how they are kept here.
    """

    GO_NAME = "AllocationManifest"
    id: str = go_field("id", STRING, default="")
    node_id: str = go_field("node_id", STRING, default="")
    type: str = go_field("type", STRING, default="")
    handle: Handle = go_field("handle", StructOf(Handle), default=Handle())
    dns_name: str = go_field("dns_name", STRING, default="")
    priv_addr: str = go_field("priv_addr", STRING, default="")
    ports: Mapping[str, int] | None = go_field("ports", MapOf(INT64), omitempty=True, default=None)
    healthcheck: HealthCheckManifest = go_field(
        "healthcheck", StructOf(HealthCheckManifest), default=HealthCheckManifest()
    )
    status: str = go_field("status", STRING, default="")
    redundancy_group: str = go_field("redundancy_group", STRING, omitempty=True, default="")
    is_standby: bool = go_field("is_standby", BOOL, default=False)


@dataclasses.dataclass(frozen=True, slots=True)
class NodeManifest(GoStruct):
    """A node of a deployed ensemble: the peer it landed on and its allocations."""

    GO_NAME = "NodeManifest"
    id: str = go_field("id", STRING, default="")
    peer: str = go_field("peer", STRING, omitempty=True, default="")
    handle: Handle = go_field("handle", StructOf(Handle), default=Handle())
    pub_address: tuple[str, ...] | None = go_field("pub_address", SliceOf(STRING), default=None)
    location: Location = go_field("location", StructOf(Location), default=Location())
    allocations: tuple[str, ...] | None = go_field("allocations", SliceOf(STRING), default=None)
    redundancy_role: str = go_field("redundancy_role", STRING, omitempty=True, default="")
    primary_node: str = go_field("primary_node", STRING, omitempty=True, default="")
    standby_nodes: tuple[str, ...] | None = go_field(
        "standby_nodes", SliceOf(STRING), omitempty=True, default=None
    )
    standby_index: int = go_field("standby_index", INT64, omitempty=True, default=0)
    status: str = go_field("status", STRING, default="")


@dataclasses.dataclass(frozen=True, slots=True)
class EnsembleManifest(GoStruct):
    """What was deployed: the orchestrator's handle, allocations and nodes by name."""

    GO_NAME = "EnsembleManifest"
    id: str = go_field("id", STRING, default="")
    metadata: Mapping[str, str] | None = go_field(
        "metadata", MapOf(STRING), omitempty=True, default=None
    )
    orchestrator: Handle = go_field("orchestrator", StructOf(Handle), default=Handle())
    allocations: Mapping[str, AllocationManifest] | None = go_field(
        "allocations", MapOf(StructOf(AllocationManifest)), default=None
    )
    nodes: Mapping[str, NodeManifest] | None = go_field(
        "nodes", MapOf(StructOf(NodeManifest)), default=None
    )
    subnet: SubnetConfig = go_field("subnet", StructOf(SubnetConfig), default=SubnetConfig())
    contracts: Mapping[str, ContractManifest] | None = go_field(
        "contracts", MapOf(StructOf(ContractManifest)), default=None
    )


@dataclasses.dataclass(frozen=True, slots=True)
class AllocationResourceUsage(GoStruct):
    GO_NAME = "AllocationResourceUsage"
    cpu_usage_percent: float = go_field("cpu_usage_percent", FLOAT64, default=0.0)
    memory_used_bytes: int = go_field("memory_used_bytes", UINT64, default=0)
    memory_limit_bytes: int = go_field("memory_limit_bytes", UINT64, default=0)
    network_rx_bytes: int = go_field("network_rx_bytes", UINT64, default=0)
    network_tx_bytes: int = go_field("network_tx_bytes", UINT64, default=0)


@dataclasses.dataclass(frozen=True, slots=True)
class AllocationInfo(GoStruct):
    """``jobtypes.AllocationInfo``: an allocation's live state (status, health, usage)."""

    GO_NAME = "AllocationInfo"
    allocation_id: str = go_field("allocation_id", STRING, default="")
    status: str = go_field("status", STRING, default="")
    heartbeat_seq: int = go_field("heartbeat_seq", INT64, default=0)
    has_health_check: bool = go_field("has_health_check", BOOL, default=False)
    health: str = go_field("health", STRING, default="")
    resource_limit: Resources = go_field("resource_limit", StructOf(Resources), default=Resources())
    resource_usage: AllocationResourceUsage = go_field(
        "resource_usage", StructOf(AllocationResourceUsage), default=AllocationResourceUsage()
    )
    dns_name: str = go_field("dns_name", STRING, default="")
    ip: str = go_field("ip", STRING, default="")
    timestamp: int = go_field("timestamp", INT64, default=0)
