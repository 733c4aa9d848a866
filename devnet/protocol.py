"""What simulated DMS nodes say to each other while orchestrating: behaviors and payloads.

These are the DMS's node-to-node messages (``dms/jobs/types/bid.go``, the orchestrator's
``commit.go``, ``provision.go``, ``teardown.go`` and the allocation behaviors), mirrored closely
enough that the flow, the capabilities each step needs and the error texts are the DMS's. The
gateway never sees them; they travel only on the devnet's in-process network, as real signed
envelopes. Where the DMS uses dynamic per-ensemble names for allocation behaviors, the devnet
uses fixed names under the same namespaces (``/dms/allocation/...``): the capability granted
between nodes covers both.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from ..behaviors.catalog import get_behavior
from ..behaviors.ensemble import (
    AllocationKey,
    HealthCheckManifest,
    Location,
    LocationConstraints,
    SpecConfig,
    VolumeConfig,
)
from ..behaviors.resources import Resources
from ..errors import DmsgwError
from ..gojson import (
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
    marshal,
)
from ..keys.crypto import KeyFormatError, PrivKey
from ..keys.did import DID
from ..keys.peer import PeerIDError, public_key_from_peer_id
from ..transport.envelope import Handle

# --- behavior names (dms/behaviors) --------------------------------------------------------

BID_REQUEST = "/dms/deployment/request"
BID_REQUEST_TOPIC = "/nunet/deployment"
BID_REPLY = "/dms/deployment/bid"
COMMIT = "/dms/deployment/commit"
ALLOCATE = "/dms/deployment/allocate"
REVERT = "/dms/deployment/revert"
ALLOCATION_START = "/dms/allocation/start"
ALLOCATION_RESTART = "/dms/allocation/restart"
ALLOCATION_SHUTDOWN = "/dms/allocation/shutdown"
ALLOCATION_LOGS = "/dms/allocation/logs"
ALLOCATION_STATS = "/dms/allocation/stats"
"""``AllocationStatsBehavior`` (its value is not in the source consulted: named as its
siblings are; only devnet nodes send it to each other)."""
HEALTHCHECK = "/dms/actor/healthcheck"
REPLY_PREFIX = "/private/reply/"
"""Reply-to behaviors of node-to-node invocations; the invoker delegates each to the callee."""

FAILED_TO_DEPLOY = "failed to create deployment"
"""``ErrDeploymentFailed``: the DMS's words for a deployment that could not be made in time."""


class DeploymentError(DmsgwError):
    """A step of a deployment failed; the text is the DMS's (as its log would show)."""


PEER_CAPABILITIES = ("/dms/deployment", "/dms/allocation", "/dms/ensemble", HEALTHCHECK)
"""What every devnet node grants every other: orchestrate on it, bid to it, drive allocations
and report their state (``dms/jobs/README.md``: N_o has ``/dms/deployment`` on providers,
providers have ``/dms/deployment/bid`` on N_o)."""
PEER_TOPICS = ("/nunet",)


def allocation_status_behavior(ensemble_id: str) -> str:
    """Where an allocation reports its state to its orchestrator (``/dms/ensemble/<id>/…``)."""
    return f"/dms/ensemble/{ensemble_id}/allocation/status"


def manifest_key(node_id: str, allocation: str) -> str:
    """``DefaultAllocationIDGenerator.GenerateManifestKey``: ``node.allocation``."""
    return f"{node_id}.{allocation}"


def full_allocation_id(ensemble_id: str, node_id: str, allocation: str) -> str:
    """``GenerateFullAllocationID``: ``ensemble_node.allocation``."""
    return f"{ensemble_id}_{node_id}.{allocation}"


# --- behavior specs -------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Spec:
    """How an actor reads a behavior: its request type (``None``: the raw envelope payload),
    the capability a sender needs (the behavior name, as the DMS requires) and, for broadcasts,
    the topic."""

    name: str
    request: type[GoStruct] | None = None
    topic: str = ""
    capability: str = ""

    def __post_init__(self) -> None:
        if not self.capability:
            object.__setattr__(self, "capability", self.name)

    def decode(self, data: bytes) -> Any:
        if self.request is None:
            return data
        return self.request.from_json(data or b"{}")


def catalog_spec(name: str) -> Spec:
    """The spec of a behavior of the gateway's catalog (the DMS's public API)."""
    b = get_behavior(name)
    request: Any = b.request
    return Spec(b.name, request, b.topic, b.capability)


# --- bids (dms/jobs/types/bid.go) -----------------------------------------------------------

BID_PREFIX = b"dms-bid-"


@dataclasses.dataclass(frozen=True, slots=True)
class PublicPorts(GoStruct):
    static: tuple[int, ...] | None = go_field(
        "static", SliceOf(INT64), omitempty=True, default=None
    )
    dynamic: int = go_field("dynamic", INT64, omitempty=True, default=0)


@dataclasses.dataclass(frozen=True, slots=True)
class GeneralRequirements(GoStruct):
    privileged_docker: bool = go_field("privileged_docker", BOOL, omitempty=True, default=False)


@dataclasses.dataclass(frozen=True, slots=True)
class BidRequestV1(GoStruct):
    """What one ensemble node needs: executors, aggregate resources, location, ports."""

    node_id: str = go_field("node_id", STRING, default="")
    executors: tuple[str, ...] | None = go_field("executors", SliceOf(STRING), default=None)
    resources: Resources = go_field("resources", StructOf(Resources), default=Resources())
    location: LocationConstraints = go_field(
        "location", StructOf(LocationConstraints), omitempty=True, default=LocationConstraints()
    )
    public_ports: PublicPorts = go_field(
        "public_ports", StructOf(PublicPorts), omitempty=True, default=PublicPorts()
    )
    general_requirements: GeneralRequirements = go_field(
        "general_requirements",
        StructOf(GeneralRequirements),
        omitempty=True,
        default=GeneralRequirements(),
    )
    contract_did: DID = go_field("ContractDID", StructOf(DID), default=DID())


@dataclasses.dataclass(frozen=True, slots=True)
class BidRequest(GoStruct):
    v1: BidRequestV1 | None = go_field("V1", Ptr(StructOf(BidRequestV1)), default=None)


@dataclasses.dataclass(frozen=True, slots=True)
class EnsembleBidRequest(GoStruct):
    """A round of bid requests for an ensemble; ``nonce`` tells rounds apart."""

    id: str = go_field("id", STRING, default="")
    nonce: int = go_field("nonce", UINT64, default=0)
    request: tuple[BidRequest, ...] | None = go_field(
        "request", SliceOf(StructOf(BidRequest)), default=None
    )
    peer_exclusion: tuple[str, ...] | None = go_field(
        "peer_exclusion", SliceOf(STRING), omitempty=True, default=None
    )


@dataclasses.dataclass(frozen=True, slots=True)
class BidV1(GoStruct):
    ensemble_id: str = go_field("EnsembleID", STRING, default="")
    node_id: str = go_field("NodeID", STRING, default="")
    peer: str = go_field("Peer", STRING, default="")
    pub_address: str = go_field("PubAddress", STRING, default="")
    location: Location = go_field("Location", StructOf(Location), default=Location())
    handle: Handle = go_field("Handle", StructOf(Handle), default=Handle())
    signature: bytes | None = go_field("Signature", BYTES, default=None)


@dataclasses.dataclass(frozen=True, slots=True)
class Bid(GoStruct):
    v1: BidV1 | None = go_field("V1", Ptr(StructOf(BidV1)), default=None)


def sign_bid(bid: BidV1, key: PrivKey) -> Bid:
    """``Bid.Sign``: the provider's key over ``"dms-bid-"`` + the bid without its signature."""
    unsigned = dataclasses.replace(bid, signature=None)
    return Bid(dataclasses.replace(unsigned, signature=key.sign(BID_PREFIX + marshal(unsigned))))


def bid_is_valid(bid: Bid) -> bool:
    """``Bid.Validate``: signed by the key behind the bid's peer ID."""
    if bid.v1 is None:
        return False
    try:
        key = public_key_from_peer_id(bid.v1.peer)
    except (PeerIDError, KeyFormatError):
        return False
    data = BID_PREFIX + marshal(dataclasses.replace(bid.v1, signature=None))
    return key.verify(data, bid.v1.signature or b"")


def location_satisfies(location: Location, constraints: LocationConstraints) -> bool:
    """``Location.Satisfies``: accepted (when an accept list is given) and not rejected; empty
    fields of a constraint match anything."""

    def matches(want: Location) -> bool:
        pairs = (
            (want.continent, location.continent),
            (want.country, location.country),
            (want.city, location.city),
            (want.isp, location.isp),
        )
        if want.asn and want.asn != location.asn:
            return False
        return all(not w or w.casefold() == h.casefold() for w, h in pairs)

    if constraints.accept and not any(matches(a) for a in constraints.accept):
        return False
    return not any(matches(r) for r in constraints.reject or ())


# --- commit, allocate, revert (orchestrator/commit.go, teardown.go) ----------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class CommitDeploymentRequest(GoStruct):
    ensemble_id: str = go_field("EnsembleID", STRING, default="")
    allocation_name: str = go_field("AllocationName", STRING, default="")
    node_id: str = go_field("NodeID", STRING, default="")
    resources: Resources = go_field("Resources", StructOf(Resources), default=Resources())
    port_mapping: Mapping[str, int] | None = go_field("PortMapping", MapOf(INT64), default=None)


@dataclasses.dataclass(frozen=True, slots=True)
class OkResponse(GoStruct):
    """The DMS's ``{OK, Error}`` replies (commit, revert, start, stop, restart, healthcheck)."""

    ok: bool = go_field("OK", BOOL, default=False)
    error: str = go_field("Error", STRING, default="")


@dataclasses.dataclass(frozen=True, slots=True)
class AllocationDeploymentConfig(GoStruct):
    """One allocation as its provider needs it to run (``jobtypes.AllocationDeploymentConfig``)."""

    type: str = go_field("Type", STRING, default="")
    executor: str = go_field("Executor", STRING, default="")
    resources: Resources = go_field("Resources", StructOf(Resources), default=Resources())
    execution: SpecConfig = go_field("Execution", StructOf(SpecConfig), default=SpecConfig())
    provision_scripts: Mapping[str, bytes] | None = go_field(
        "ProvisionScripts", MapOf(BYTES), default=None
    )
    keys: tuple[AllocationKey, ...] | None = go_field(
        "Keys", SliceOf(StructOf(AllocationKey)), default=None
    )
    volume: tuple[VolumeConfig, ...] | None = go_field(
        "Volume", SliceOf(StructOf(VolumeConfig)), default=None
    )
    healthcheck: HealthCheckManifest = go_field(
        "HealthCheck", StructOf(HealthCheckManifest), default=HealthCheckManifest()
    )


@dataclasses.dataclass(frozen=True, slots=True)
class AllocationDeploymentRequest(GoStruct):
    ensemble_id: str = go_field("EnsembleID", STRING, default="")
    node_id: str = go_field("NodeID", STRING, default="")
    allocations: Mapping[str, AllocationDeploymentConfig] | None = go_field(
        "Allocations", MapOf(StructOf(AllocationDeploymentConfig)), default=None
    )


@dataclasses.dataclass(frozen=True, slots=True)
class AllocationDeploymentResponse(GoStruct):
    ok: bool = go_field("OK", BOOL, default=False)
    error: str = go_field("Error", STRING, default="")
    allocations: Mapping[str, Handle] | None = go_field(
        "Allocations", MapOf(StructOf(Handle)), default=None
    )


@dataclasses.dataclass(frozen=True, slots=True)
class DeploymentRevertRequest(GoStruct):
    ensemble_id: str = go_field("EnsembleID", STRING, default="")
    allocs_by_name: tuple[str, ...] | None = go_field("AllocsByName", SliceOf(STRING), default=None)


# --- allocations (jobs/allocation.go, orchestrator/provision.go) -------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class AllocationStartRequest(GoStruct):
    subnet_ip: str = go_field("SubnetIP", STRING, default="")
    gateway_ip: str = go_field("GatewayIP", STRING, default="")
    port_mapping: Mapping[str, int] | None = go_field("PortMapping", MapOf(INT64), default=None)


@dataclasses.dataclass(frozen=True, slots=True)
class AllocationRequest(GoStruct):
    """Stop or restart an allocation (``AllocationStopRequest``)."""

    allocation_id: str = go_field("AllocationID", STRING, default="")


@dataclasses.dataclass(frozen=True, slots=True)
class AllocationLogsRequest(GoStruct):
    alloc_name: str = go_field("AllocName", STRING, default="")


@dataclasses.dataclass(frozen=True, slots=True)
class AllocationLogsResponse(GoStruct):
    """The DMS's reply carries the output itself (``Stdout``, ``Stderr``); the devnet's
    compute nodes share the orchestrator's host and answer instead where each log file is and
    how long it was when asked (its side record of when lines were written, beside it, is
    read after: it covers no less), which :mod:`~dmsgw.devnet.log_copies` copies."""

    stdout: bytes | None = go_field("Stdout", BYTES, default=None)
    stderr: bytes | None = go_field("Stderr", BYTES, default=None)
    error: str = go_field("Error", STRING, default="")
    stdout_file: str = go_field("StdoutFile", STRING, default="")
    stdout_length: int = go_field("StdoutLength", INT64, default=0)
    stderr_file: str = go_field("StderrFile", STRING, default="")
    stderr_length: int = go_field("StderrLength", INT64, default=0)


@dataclasses.dataclass(frozen=True, slots=True)
class AllocationStatusUpdate(GoStruct):
    """An allocation's new state, sent to its orchestrator (exit code once it has exited)."""

    allocation_id: str = go_field("AllocationID", STRING, default="")
    status: str = go_field("Status", STRING, default="")
    exit_code: int = go_field("ExitCode", INT64, default=0)
    error: str = go_field("Error", STRING, default="")


INTERNAL_SPECS: Mapping[str, Spec] = {
    s.name: s
    for s in (
        Spec(BID_REQUEST, EnsembleBidRequest, topic=BID_REQUEST_TOPIC),
        Spec(BID_REPLY, Bid),
        Spec(COMMIT, CommitDeploymentRequest),
        Spec(ALLOCATE, AllocationDeploymentRequest),
        Spec(REVERT, DeploymentRevertRequest),
        Spec(ALLOCATION_START, AllocationStartRequest),
        Spec(ALLOCATION_RESTART, AllocationRequest),
        Spec(ALLOCATION_SHUTDOWN, AllocationRequest),
        Spec(ALLOCATION_LOGS, AllocationLogsRequest),
        Spec(ALLOCATION_STATS),
        Spec(HEALTHCHECK),
    )
}
