"""The ensemble configuration a DMS deploys: ``jobtypes.EnsembleConfig`` and its parts.

Field order, JSON keys and ``omitempty`` follow the newest ``dms/jobs/types/ensemble.go``
(the version with ``escalation_strategy``, ``subnet``, ``exclude_peers``, ``metadata`` and
``contracts``) and the newest ``types`` it uses (``SpecConfig``, ``AllocationKey``,
``HealthCheckManifest``, ``VolumeConfig``, ``ContractConfig``, ``Resources``). Older DMS
versions decode this JSON fine: every key they know is spelled the same, and Go ignores the
rest. Note that Go never omits a struct under ``omitempty``, so ``supervisor``, ``subnet``,
``healthcheck`` and ``location`` are always present on the wire.

Validation is in :mod:`dmsgw.behaviors.ensemble_validation`; YAML files in
:mod:`dmsgw.behaviors.ensemble_yaml`.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from typing import Any

from ..gojson import (
    ANY,
    BOOL,
    BYTES,
    INT64,
    STRING,
    UINT64,
    GoStruct,
    MapOf,
    Ptr,
    SliceOf,
    StructOf,
    go_field,
)
from .resources import Resources

__all__ = [
    "AllocationConfig",
    "AllocationFailureRecovery",
    "AllocationKey",
    "AllocationType",
    "ContractConfig",
    "EdgeConstraint",
    "EnsembleConfig",
    "EnsembleConfigV1",
    "EscalationStrategy",
    "Executor",
    "HealthCheckManifest",
    "HealthCheckResponse",
    "KeyType",
    "Location",
    "LocationConstraints",
    "NodeConfig",
    "NodeFailureRecovery",
    "PortConfig",
    "SpecConfig",
    "SubnetConfig",
    "SupervisorConfig",
    "SupervisorStrategy",
    "VolumeConfig",
]


class Executor(enum.StrEnum):
    """``AllocationExecutor``. ``containerd`` is in the newest DMS's acceptance ensembles."""

    DOCKER = "docker"
    FIRECRACKER = "firecracker"
    CONTAINERD = "containerd"
    NULL = "null"


class AllocationType(enum.StrEnum):
    """A ``service`` is restarted on failure; a ``task`` runs to completion."""

    SERVICE = "service"
    TASK = "task"


class AllocationFailureRecovery(enum.StrEnum):
    STAY_DOWN = "stay_down"
    ONE_FOR_ONE = "one_for_one"
    ONE_FOR_ALL = "one_for_all"
    REST_FOR_ONE = "rest_for_one"


class NodeFailureRecovery(enum.StrEnum):
    STAY_DOWN = "stay_down"
    RESTART = "restart"
    REDEPLOY = "redeploy"


class EscalationStrategy(enum.StrEnum):
    REDEPLOY = "redeploy"
    TEARDOWN = "teardown"


class SupervisorStrategy(enum.StrEnum):
    ONE_FOR_ONE = "OneForOne"
    ALL_FOR_ONE = "AllForOne"
    REST_FOR_ONE = "RestForOne"


class KeyType(enum.StrEnum):
    SSH = "ssh"
    GPG = "gpg"


STOP_TIMEOUT_PARAM = "stop_timeout"
"""A container's grace period on stop, in seconds, as Docker's container configuration names
it (``StopTimeout``): SIGTERM, then SIGKILL once it has passed. The gateway writes it for
every container (the pod's ``terminationGracePeriodSeconds``); the embedded devnet honours it,
and a DMS whose executor does not read it stops the container after its own
``AllocationShutdownTimeout`` instead (decision 071)."""


@dataclasses.dataclass(frozen=True, slots=True)
class SpecConfig(GoStruct):
    """``types.SpecConfig``: what to run, e.g. ``{"type": "docker", "params": {"image": …}}``.

    Docker params the DMS reads: ``image``, ``entrypoint``, ``cmd``, ``environment``
    (``"K=V"`` strings), ``working_directory``, ``restart_policy``. ``params`` is a Go
    ``map[string]interface{}``, so its keys are written sorted.
    """

    GO_NAME = "SpecConfig"
    type: str = go_field("type", STRING, default="")
    params: Mapping[str, Any] | None = go_field("params", MapOf(ANY), omitempty=True, default=None)


@dataclasses.dataclass(frozen=True, slots=True)
class AllocationKey(GoStruct):
    """A key to install in the allocation; ``file`` is sent as given (content or path)."""

    GO_NAME = "AllocationKey"
    type: str = go_field("type", STRING, default="")
    file: str = go_field("file", STRING, default="")
    dest: str = go_field("dest", STRING, default="")


@dataclasses.dataclass(frozen=True, slots=True)
class HealthCheckResponse(GoStruct):
    GO_NAME = "HealthCheckResponse"
    type: str = go_field("type", STRING, default="")
    value: str = go_field("value", STRING, default="")


@dataclasses.dataclass(frozen=True, slots=True)
class HealthCheckManifest(GoStruct):
    """``command`` (``exec``) or ``http`` (``endpoint``) check; ``interval`` in nanoseconds."""

    GO_NAME = "HealthCheckManifest"
    type: str = go_field("type", STRING, default="")
    exec: tuple[str, ...] | None = go_field("exec", SliceOf(STRING), default=None)
    endpoint: str = go_field("endpoint", STRING, default="")
    response: HealthCheckResponse = go_field(
        "response", StructOf(HealthCheckResponse), default=HealthCheckResponse()
    )
    interval: int = go_field("interval", INT64, default=0)

    def is_empty(self) -> bool:
        """No health check configured (the zero value, which Go still marshals)."""
        return self == HealthCheckManifest()


@dataclasses.dataclass(frozen=True, slots=True)
class VolumeConfig(GoStruct):
    """Storage for an allocation: ``local`` (``src``) or ``glusterfs`` (``servers`` …)."""

    GO_NAME = "VolumeConfig"
    type: str = go_field("type", STRING, default="")
    mount_destination: str = go_field("mount_destination", STRING, default="")
    read_only: bool = go_field("read_only", BOOL, default=False)
    name: str = go_field("name", STRING, omitempty=True, default="")
    servers: tuple[str, ...] | None = go_field(
        "servers", SliceOf(STRING), omitempty=True, default=None
    )
    client_private_key: str = go_field("client_private_key", STRING, omitempty=True, default="")
    client_pem: str = go_field("client_pem", STRING, omitempty=True, default="")
    client_ca: str = go_field("client_ca", STRING, omitempty=True, default="")
    src: str = go_field("src", STRING, omitempty=True, default="")


@dataclasses.dataclass(frozen=True, slots=True)
class ContractConfig(GoStruct):
    """A contract the deployment runs under; the DMS fills ``provider``/``requestor``."""

    GO_NAME = "ContractConfig"
    did: str = go_field("did", STRING, default="")
    host: str = go_field("host", STRING, default="")
    provider: str = go_field("provider", STRING, omitempty=True, default="")
    requestor: str = go_field("requestor", STRING, omitempty=True, default="")


@dataclasses.dataclass(frozen=True, slots=True)
class AllocationConfig(GoStruct):
    """One allocation: what runs (``execution``) on which executor, with which resources."""

    GO_NAME = "AllocationConfig"
    executor: str = go_field("executor", STRING, default="")
    type: str = go_field("type", STRING, default="")
    resources: Resources = go_field("resources", StructOf(Resources), default=Resources())
    execution: SpecConfig = go_field("execution", StructOf(SpecConfig), default=SpecConfig())
    dns_name: str = go_field("dns_name", STRING, omitempty=True, default="")
    keys: tuple[AllocationKey, ...] | None = go_field(
        "keys", SliceOf(StructOf(AllocationKey)), omitempty=True, default=None
    )
    provision: tuple[str, ...] | None = go_field(
        "provision", SliceOf(STRING), omitempty=True, default=None
    )
    healthcheck: HealthCheckManifest = go_field(
        "healthcheck", StructOf(HealthCheckManifest), omitempty=True, default=HealthCheckManifest()
    )
    volume: tuple[VolumeConfig, ...] | None = go_field(
        "volume", SliceOf(StructOf(VolumeConfig)), omitempty=True, default=None
    )
    failure_recovery: str = go_field("failure_recovery", STRING, omitempty=True, default="")
    depends_on: tuple[str, ...] | None = go_field(
        "depends_on", SliceOf(STRING), omitempty=True, default=None
    )


@dataclasses.dataclass(frozen=True, slots=True)
class Location(GoStruct):
    """A place; empty fields match anything (``continent`` is required by validation)."""

    GO_NAME = "Location"
    continent: str = go_field("continent", STRING, omitempty=True, default="")
    country: str = go_field("country", STRING, omitempty=True, default="")
    city: str = go_field("city", STRING, omitempty=True, default="")
    asn: int = go_field("asn", UINT64, omitempty=True, default=0)
    isp: str = go_field("isp", STRING, omitempty=True, default="")


@dataclasses.dataclass(frozen=True, slots=True)
class LocationConstraints(GoStruct):
    """Where a node may run; ``accept`` wins over ``reject`` when both are given."""

    GO_NAME = "LocationConstraints"
    accept: tuple[Location, ...] | None = go_field(
        "accept", SliceOf(StructOf(Location)), omitempty=True, default=None
    )
    reject: tuple[Location, ...] | None = go_field(
        "reject", SliceOf(StructOf(Location)), omitempty=True, default=None
    )


@dataclasses.dataclass(frozen=True, slots=True)
class PortConfig(GoStruct):
    """Public port on the node mapped to a private port of one of its allocations."""

    GO_NAME = "PortConfig"
    public: int = go_field("public", INT64, default=0)
    private: int = go_field("private", INT64, default=0)
    allocation: str = go_field("allocation", STRING, default="")


@dataclasses.dataclass(frozen=True, slots=True)
class NodeConfig(GoStruct):
    """A DMS node of the ensemble and the allocations placed on it."""

    GO_NAME = "NodeConfig"
    allocations: tuple[str, ...] | None = go_field("allocations", SliceOf(STRING), default=None)
    ports: tuple[PortConfig, ...] | None = go_field(
        "ports", SliceOf(StructOf(PortConfig)), omitempty=True, default=None
    )
    location: LocationConstraints = go_field(
        "location", StructOf(LocationConstraints), omitempty=True, default=LocationConstraints()
    )
    peer: str = go_field("peer", STRING, omitempty=True, default="")
    redundancy: int = go_field("redundancy", INT64, omitempty=True, default=0)
    failure_recovery: str = go_field("failure_recovery", STRING, omitempty=True, default="")


@dataclasses.dataclass(frozen=True, slots=True)
class EdgeConstraint(GoStruct):
    """Network constraint between nodes ``s`` and ``t``: RTT in ms, bandwidth in bit/s."""

    GO_NAME = "EdgeConstraint"
    s: str = go_field("s", STRING, default="")
    t: str = go_field("t", STRING, default="")
    rtt: int = go_field("rtt", UINT64, omitempty=True, default=0)
    bw: int = go_field("bw", UINT64, omitempty=True, default=0)


class _SelfStructOf(StructOf):
    """``StructOf`` for a struct that contains slices of itself, bound once it exists."""

    def __init__(self, go_name: str) -> None:
        self.go_name = go_name

    def bind(self, cls: type[GoStruct]) -> None:
        self.cls = cls


_SUPERVISOR = _SelfStructOf("SupervisorConfig")


@dataclasses.dataclass(frozen=True, slots=True)
class SupervisorConfig(GoStruct):
    """A supervision tree over allocations (Erlang-style strategies)."""

    GO_NAME = "SupervisorConfig"
    strategy: str = go_field("strategy", STRING, omitempty=True, default="")
    allocations: tuple[str, ...] | None = go_field(
        "allocations", SliceOf(STRING), omitempty=True, default=None
    )
    children: tuple[SupervisorConfig, ...] | None = go_field(
        "children", SliceOf(_SUPERVISOR), omitempty=True, default=None
    )


_SUPERVISOR.bind(SupervisorConfig)


@dataclasses.dataclass(frozen=True, slots=True)
class SubnetConfig(GoStruct):
    """``join``: whether the orchestrator joins the ensemble's private network."""

    GO_NAME = "SubnetConfig"
    join: bool = go_field("join", BOOL, omitempty=True, default=False)


@dataclasses.dataclass(frozen=True, slots=True)
class EnsembleConfigV1(GoStruct):
    """Version 1 of an ensemble: named allocations, the nodes they are placed on, and more.

    ``allocations`` and ``nodes`` are not ``omitempty`` (``None`` is sent as ``null``);
    ``scripts`` values are raw bytes (base64 on the wire).
    """

    GO_NAME = "EnsembleConfigV1"
    escalation_strategy: str = go_field("escalation_strategy", STRING, default="")
    allocations: Mapping[str, AllocationConfig] | None = go_field(
        "allocations", MapOf(StructOf(AllocationConfig)), default=None
    )
    nodes: Mapping[str, NodeConfig] | None = go_field(
        "nodes", MapOf(StructOf(NodeConfig)), default=None
    )
    edges: tuple[EdgeConstraint, ...] | None = go_field(
        "edges", SliceOf(StructOf(EdgeConstraint)), omitempty=True, default=None
    )
    supervisor: SupervisorConfig = go_field(
        "supervisor", StructOf(SupervisorConfig), omitempty=True, default=SupervisorConfig()
    )
    keys: Mapping[str, str] | None = go_field("keys", MapOf(STRING), omitempty=True, default=None)
    scripts: Mapping[str, bytes] | None = go_field(
        "scripts", MapOf(BYTES), omitempty=True, default=None
    )
    subnet: SubnetConfig = go_field(
        "subnet", StructOf(SubnetConfig), omitempty=True, default=SubnetConfig()
    )
    exclude_peers: tuple[str, ...] | None = go_field(
        "exclude_peers", SliceOf(STRING), omitempty=True, default=None
    )
    metadata: Mapping[str, str] | None = go_field(
        "metadata", MapOf(STRING), omitempty=True, default=None
    )
    contracts: Mapping[str, ContractConfig] | None = go_field(
        "contracts", MapOf(StructOf(ContractConfig)), omitempty=True, default=None
    )


@dataclasses.dataclass(frozen=True, slots=True)
class EnsembleConfig(GoStruct):
    """The versioned envelope ``{"v1": …}``; a DMS refuses one whose ``v1`` is nil."""

    GO_NAME = "EnsembleConfig"
    v1: EnsembleConfigV1 | None = go_field("v1", Ptr(StructOf(EnsembleConfigV1)), default=None)
