"""The behavior catalog: every DMS ``node`` behavior the gateway speaks, defined once.

Mirrors the behavior names of ``dms/behaviors/behaviors.go`` (and the newest CLI,
``cmd/actor/behaviors.go``), one entry per behavior a client invokes. Both sides use it: the
client to build requests and read replies, the simulated DMS to read requests and build
replies. Each entry names its request and reply models, the capability an invoker must hold
(the DMS requires the behavior name itself, and a capability implies every path under it, so
``/dms/node`` covers all of ``/dms/node/...``), how long to let the envelope live, and, for
broadcasts, the topic.

``namespace`` is the attribute path of a typed client facade (``("deployment", "status")``
for ``dms.deployment.status(...)``); it is declared per behavior rather than derived from the
name, because names like ``/dms/cap/provide/anchor`` make poor Python paths.

Each entry is a constant named after its namespace (``DEPLOYMENT_STATUS``), a
``Behavior[Request, Reply]``: code invokes the constant, so that the type checker pairs the
request with the behavior and knows the reply; names are looked up (:func:`get_behavior`) only
for what arrives as text (``dms.invoke("/dms/node/...")``, the CLI, the devnet's handlers).

Each entry also says which DMS versions have it (``versions``): the v0.5 DMS anchors
capabilities with one ``/dms/cap/anchor``, the v0.6 DMS with ``/dms/cap/{provide,require,
revoke}/anchor`` and adds ``/dms/cap/revoke/broadcast`` and ``/dms/node/deployment/info``.
:func:`catalog_for` is the catalog of one version, and :func:`require_in_version` refuses,
before anything is sent, a behavior the DMS at hand does not have (it would drop the message
and the caller would wait for its expiry). :mod:`~dmsgw.behaviors.dms_version` learns which
version a DMS is.
"""

from __future__ import annotations

import dataclasses
import difflib
import keyword
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Generic, Protocol, Self, TypeVar

from ..errors import DmsgwError
from .allocations import AllocationsListResponse
from .cap_anchors import (
    CapAnchorRequest,
    CapAnchorResponse,
    CapListRequest,
    CapListResponse,
    CapTokenAnchorRequest,
)
from .deployment import (
    DeploymentDeleteRequest,
    DeploymentDeleteResponse,
    DeploymentInfoRequest,
    DeploymentInfoResponse,
    DeploymentListRequest,
    DeploymentListResponse,
    DeploymentLogsRequest,
    DeploymentLogsResponse,
    DeploymentManifestRequest,
    DeploymentManifestResponse,
    DeploymentPruneRequest,
    DeploymentPruneResponse,
    DeploymentShutdownRequest,
    DeploymentShutdownResponse,
    DeploymentStatusRequest,
    DeploymentStatusResponse,
    NewDeploymentRequest,
    NewDeploymentResponse,
    UpdateDeploymentRequest,
    UpdateDeploymentResponse,
)
from .logger import LoggerConfigRequest, LoggerConfigResponse
from .node_resources import ResourcesResponse
from .onboarding import (
    OffboardRequest,
    OffboardResponse,
    OnboardRequest,
    OnboardResponse,
    OnboardStatusResponse,
)
from .peers import (
    PeerAddrInfoResponse,
    PeerConnectRequest,
    PeerConnectResponse,
    PeerDHTResponse,
    PeerScoreResponse,
    PeersListResponse,
    PingRequest,
    PingResponse,
)
from .public import DiscoveryStatusResponse, HelloResponse, PublicStatusResponse
from .subnet import (
    SubnetCreateRequest,
    SubnetCreateResponse,
    SubnetDestroyRequest,
    SubnetDestroyResponse,
    SubnetJoinRequest,
    SubnetJoinResponse,
)
from .tokenomics import (
    CollectUsagesAndForwardToPaymentProvidersReponse,
    CollectUsagesAndForwardToPaymentProvidersRequest,
    ContractApproveLocalRequest,
    ContractApproveLocalResponse,
    ContractCancelPaymentQuoteRequest,
    ContractCancelPaymentQuoteResponse,
    ContractCompletionRequest,
    ContractCompletionResponse,
    ContractConfirmLocalTransactionRequest,
    ContractConfirmLocalTransactionResponse,
    ContractGetPaymentQuoteRequest,
    ContractGetPaymentQuoteResponse,
    ContractListIncomingRequest,
    ContractListIncomingResponse,
    ContractListLocalTransactionsRequest,
    ContractListLocalTransactionsResponse,
    ContractPaymentStatusRequest,
    ContractPaymentStatusResponse,
    ContractSettleRequest,
    ContractSettleResponse,
    ContractStatusRequest,
    ContractStatusResponse,
    ContractTerminationRequest,
    ContractTerminationResponse,
    ContractValidatePaymentQuoteRequest,
    ContractValidatePaymentQuoteResponse,
    ContractValidateRequest,
    ContractValidateResponse,
    CreateContractRequest,
    CreateContractResponse,
)
from .volume import (
    CreateVolumeRequest,
    CreateVolumeResponse,
    DeleteVolumeRequest,
    DeleteVolumeResponse,
    StartVolumeRequest,
    StartVolumeResponse,
)

__all__ = [
    "BY_NAMESPACE",
    "CATALOG",
    "DEFAULT_TIMEOUT_S",
    "Behavior",
    "BehaviorNotInVersionError",
    "BehaviorPayloadError",
    "DMS_V05",
    "DMS_V06",
    "DMS_VERSIONS",
    "NEWEST_DMS",
    "UnknownBehaviorError",
    "WireModel",
    "catalog_for",
    "get_behavior",
    "require_in_version",
    "PUBLIC_HELLO",
    "PUBLIC_STATUS",
    "BROADCAST_HELLO",
    "NODE_STATUS",
    "BROADCAST_STATUS",
    "PEERS_LIST",
    "PEERS_SELF",
    "PEERS_PING",
    "PEERS_DHT",
    "PEERS_CONNECT",
    "PEERS_SCORE",
    "ONBOARDING_ONBOARD",
    "ONBOARDING_OFFBOARD",
    "ONBOARDING_STATUS",
    "DEPLOYMENT_NEW",
    "DEPLOYMENT_UPDATE",
    "DEPLOYMENT_LIST",
    "DEPLOYMENT_STATUS",
    "DEPLOYMENT_MANIFEST",
    "DEPLOYMENT_INFO",
    "DEPLOYMENT_LOGS",
    "DEPLOYMENT_SHUTDOWN",
    "DEPLOYMENT_PRUNE",
    "DEPLOYMENT_DELETE",
    "ALLOCATIONS_LIST",
    "RESOURCES_FREE",
    "RESOURCES_ALLOCATED",
    "RESOURCES_ONBOARDED",
    "HARDWARE_SPEC",
    "HARDWARE_USAGE",
    "LOGGER_CONFIG",
    "CAP_LIST",
    "CAP_ANCHOR",
    "CAP_PROVIDE_ANCHOR",
    "CAP_REQUIRE_ANCHOR",
    "CAP_REVOKE_ANCHOR",
    "VOLUME_CREATE",
    "VOLUME_START",
    "VOLUME_DELETE",
    "DEBUG_FLIGHTREC",
    "CAP_REVOKE_BROADCAST",
    "SUBNET_CREATE",
    "SUBNET_DESTROY",
    "SUBNET_JOIN",
    "CONTRACT_CREATE",
    "CONTRACT_STATE",
    "CONTRACT_LIST_INCOMING",
    "CONTRACT_APPROVE_LOCAL",
    "CONTRACT_TERMINATE",
    "CONTRACT_COMPLETE",
    "CONTRACT_SETTLE",
    "CONTRACT_VALIDATE",
    "CONTRACT_PAYMENT_STATUS",
    "CONTRACT_USAGES_CALCULATE",
    "CONTRACT_TRANSACTIONS_LIST",
    "CONTRACT_TRANSACTIONS_CONFIRM",
]

DEFAULT_TIMEOUT_S = 30.0
DMS_V05 = "v0.5"
"""The DMS that anchors capabilities with ``/dms/cap/anchor``."""
DMS_V06 = "v0.6"
"""The DMS that anchors them with ``/dms/cap/{provide,require,revoke}/anchor``."""
DMS_VERSIONS = (DMS_V05, DMS_V06)
"""The DMS versions whose wire the gateway speaks, oldest first."""
NEWEST_DMS = DMS_V06
_ALL = frozenset(DMS_VERSIONS)
# handleNewDeployment refuses an envelope expiring within MinDeploymentTime (59 s); a margin
# covers the trip to the DMS. Update needs MinUpdateDeploymentTime, twice 59 s.
_NEW_DEPLOYMENT_MIN_S = 60.0
_UPDATE_DEPLOYMENT_MIN_S = 120.0


class WireModel(Protocol):
    """A payload type: Go-exact JSON out, Go-compatible JSON in (every GoStruct is one)."""

    def to_json(self) -> bytes: ...

    @classmethod
    def from_json(cls, data: bytes | str) -> Self: ...


class UnknownBehaviorError(DmsgwError):
    """A behavior name that is not in the catalog."""


class BehaviorNotInVersionError(UnknownBehaviorError):
    """A behavior the DMS at hand does not have (it is another version's)."""


class BehaviorPayloadError(DmsgwError):
    """A payload of the wrong type for the behavior it is sent with."""


Req = TypeVar("Req", bound="WireModel | None")
"""A behavior's request model (``None`` for a behavior invoked without a payload)."""
Rep = TypeVar("Rep", bound=WireModel)
"""A behavior's reply model."""
_Payload = TypeVar("_Payload", bound=WireModel)  # the request of a behavior that takes one


@dataclasses.dataclass(frozen=True, slots=True)
class Behavior(Generic[Req, Rep]):
    """One behavior: its name, payload types, required capability, lifetime and doc.

    ``Behavior[Req, Rep]`` carries its request and reply types, so that an ``invoke`` of it
    is checked end to end: ``invoke(DEPLOYMENT_STATUS, DeploymentStatusRequest(id))`` is a
    :class:`DeploymentStatusResponse` to the type checker, and a request of another
    behavior is an error before anything runs. ``request`` is ``None`` for behaviors
    invoked without a payload (``Req`` is then ``None``, and the envelope's ``msg`` is
    empty). ``timeout_s`` is the default envelope lifetime; ``min_timeout_s`` the shortest
    the DMS accepts (0: any). ``topic`` is set for broadcasts only. ``versions`` are the
    DMS versions that have it.
    """

    name: str
    namespace: tuple[str, ...]
    request: type[WireModel] | None
    reply: type[Rep]
    doc: str
    timeout_s: float = DEFAULT_TIMEOUT_S
    min_timeout_s: float = 0.0
    topic: str = ""
    capability: str = ""
    versions: frozenset[str] = _ALL

    def __post_init__(self) -> None:
        if not self.capability:
            object.__setattr__(self, "capability", self.name)
        bad = [p for p in self.namespace if not p.isidentifier() or keyword.iskeyword(p)]
        if not self.namespace or bad:
            raise ValueError(f"{self.name}: namespace {self.namespace} is not a Python path")
        if self.timeout_s < self.min_timeout_s:
            raise ValueError(f"{self.name}: default timeout below the DMS's minimum")
        if not self.versions or not self.versions <= _ALL:
            raise ValueError(f"{self.name}: versions {sorted(self.versions)} are not DMS versions")

    @property
    def broadcast(self) -> bool:
        return bool(self.topic)

    def encode_request(self, payload: Req | None = None) -> bytes:
        """The envelope ``msg`` bytes for ``payload`` (empty when the behavior takes none;
        the request's defaults when it takes one and ``payload`` is ``None``). A payload of
        the wrong type is refused here too, for callers the type checker does not see (a
        REPL, a behavior looked up by name)."""
        if self.request is None:
            if payload is not None:
                raise BehaviorPayloadError(f"{self.name} takes no payload, got {payload!r}")
            return b""
        if payload is None:
            return self.request.from_json(b"{}").to_json()
        if not isinstance(payload, self.request):
            raise BehaviorPayloadError(
                f"{self.name} takes a {self.request.__name__}, got {type(payload).__name__}"
            )
        return payload.to_json()

    def decode_request(self, data: bytes) -> WireModel | None:
        """The payload a DMS handler would decode from ``msg`` (``None`` if it takes none)."""
        return None if self.request is None else self.request.from_json(data)

    def decode_reply(self, data: bytes) -> Rep:
        """The reply payload, decoded as the Go client does."""
        return self.reply.from_json(data)


def _b(
    name: str,
    namespace: str,
    request: type[_Payload],
    reply: type[Rep],
    doc: str,
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    min_timeout_s: float = 0.0,
    topic: str = "",
    versions: frozenset[str] = _ALL,
) -> Behavior[_Payload, Rep]:
    """A behavior invoked with a ``request`` payload (a broadcast, when ``topic`` is set)."""
    return Behavior(
        name,
        tuple(namespace.split(".")),
        request,
        reply,
        doc,
        timeout_s,
        min_timeout_s,
        topic=topic,
        versions=versions,
    )


def _plain(
    name: str,
    namespace: str,
    reply: type[Rep],
    doc: str,
    *,
    topic: str = "",
    versions: frozenset[str] = _ALL,
) -> Behavior[None, Rep]:
    """A behavior invoked without a payload (a broadcast, when ``topic`` is set)."""
    return Behavior(
        name, tuple(namespace.split(".")), None, reply, doc, topic=topic, versions=versions
    )


# public and broadcast
PUBLIC_HELLO = _plain(
    "/public/hello",
    "public.hello",
    HelloResponse,
    "The DMS's DID, for a polite introduction.",
)
PUBLIC_STATUS = _plain(
    "/public/status",
    "public.status",
    PublicStatusResponse,
    "Status and the machine's total resources.",
)
BROADCAST_HELLO = _plain(
    "/broadcast/hello",
    "broadcast.hello",
    HelloResponse,
    "Say hello on the hello topic; every DMS that hears it replies with its DID.",
    topic="/nunet/hello",
)
NODE_STATUS = _plain(
    "/dms/node/status",
    "node.status",
    DiscoveryStatusResponse,
    "Host, network, onboarding and resources of the DMS (fleet discovery).",
)
BROADCAST_STATUS = _plain(
    "/broadcast/dms/status",
    "broadcast.status",
    DiscoveryStatusResponse,
    "Ask every DMS on the status topic for its discovery status.",
    topic="/nunet/status",
)

# peers
PEERS_LIST = _plain(
    "/dms/node/peers/list",
    "peers.list",
    PeersListResponse,
    "Peer IDs of the DMS's pubsub peers.",
)
PEERS_SELF = _plain(
    "/dms/node/peers/self",
    "peers.self",
    PeerAddrInfoResponse,
    "The DMS's peer ID and listen addresses.",
)
PEERS_PING = _b(
    "/dms/node/peers/ping",
    "peers.ping",
    PingRequest,
    PingResponse,
    "Ping a peer; round-trip time in ms.",
)
PEERS_DHT = _plain(
    "/dms/node/peers/dht",
    "peers.dht",
    PeerDHTResponse,
    "The peers in the DMS's DHT routing table.",
)
PEERS_CONNECT = _b(
    "/dms/node/peers/connect",
    "peers.connect",
    PeerConnectRequest,
    PeerConnectResponse,
    "Connect to a peer by multiaddress.",
)
PEERS_SCORE = _plain(
    "/dms/node/peers/score",
    "peers.score",
    PeerScoreResponse,
    "Gossipsub scores of the DMS's peers.",
)

# onboarding
ONBOARDING_ONBOARD = _b(
    "/dms/node/onboarding/onboard",
    "onboarding.onboard",
    OnboardRequest,
    OnboardResponse,
    "Offer resources to the network as a compute provider.",
)
ONBOARDING_OFFBOARD = _b(
    "/dms/node/onboarding/offboard",
    "onboarding.offboard",
    OffboardRequest,
    OffboardResponse,
    "Stop being a compute provider.",
)
ONBOARDING_STATUS = _plain(
    "/dms/node/onboarding/status",
    "onboarding.status",
    OnboardStatusResponse,
    "Whether the DMS is onboarded.",
)

# deployments orchestrated by this DMS
DEPLOYMENT_NEW = _b(
    "/dms/node/deployment/new",
    "deployment.new",
    NewDeploymentRequest,
    NewDeploymentResponse,
    "Deploy an ensemble; replies at once with its ID, then deploys until expiry.",
    timeout_s=120.0,
    min_timeout_s=_NEW_DEPLOYMENT_MIN_S,
)
DEPLOYMENT_UPDATE = _b(
    "/dms/node/deployment/update",
    "deployment.update",
    UpdateDeploymentRequest,
    UpdateDeploymentResponse,
    "Change a running deployment's ensemble.",
    timeout_s=180.0,
    min_timeout_s=_UPDATE_DEPLOYMENT_MIN_S,
)
DEPLOYMENT_LIST = _b(
    "/dms/node/deployment/list",
    "deployment.list",
    DeploymentListRequest,
    DeploymentListResponse,
    "Deployments, filtered, paged and sorted.",
)
DEPLOYMENT_STATUS = _b(
    "/dms/node/deployment/status",
    "deployment.status",
    DeploymentStatusRequest,
    DeploymentStatusResponse,
    "A deployment's status (and its allocations' state and usage while it runs).",
    timeout_s=60.0,
)
DEPLOYMENT_MANIFEST = _b(
    "/dms/node/deployment/manifest",
    "deployment.manifest",
    DeploymentManifestRequest,
    DeploymentManifestResponse,
    "What was deployed where: the ensemble manifest.",
)
DEPLOYMENT_INFO = _b(
    "/dms/node/deployment/info",
    "deployment.info",
    DeploymentInfoRequest,
    DeploymentInfoResponse,
    "Status, manifest, allocation details, usage and log paths in one call.",
    timeout_s=60.0,
    versions=frozenset({DMS_V06}),
)
DEPLOYMENT_LOGS = _b(
    "/dms/node/deployment/logs",
    "deployment.logs",
    DeploymentLogsRequest,
    DeploymentLogsResponse,
    "Write an allocation's logs on the DMS host; replies with the directory.",
    timeout_s=60.0,
)
DEPLOYMENT_SHUTDOWN = _b(
    "/dms/node/deployment/shutdown",
    "deployment.shutdown",
    DeploymentShutdownRequest,
    DeploymentShutdownResponse,
    "Shut a running deployment down.",
)
DEPLOYMENT_PRUNE = _b(
    "/dms/node/deployment/prune",
    "deployment.prune",
    DeploymentPruneRequest,
    DeploymentPruneResponse,
    "Forget finished deployments older than a cutoff (or all).",
)
DEPLOYMENT_DELETE = _b(
    "/dms/node/deployment/delete",
    "deployment.delete",
    DeploymentDeleteRequest,
    DeploymentDeleteResponse,
    "Forget one deployment.",
)

# this DMS as a compute provider
ALLOCATIONS_LIST = _plain(
    "/dms/node/allocations/list",
    "allocations.list",
    AllocationsListResponse,
    "The allocations running on this DMS.",
)
RESOURCES_FREE = _plain(
    "/dms/node/resources/free",
    "resources.free",
    ResourcesResponse,
    "Resources free for new allocations (bytes, Hz).",
)
RESOURCES_ALLOCATED = _plain(
    "/dms/node/resources/allocated",
    "resources.allocated",
    ResourcesResponse,
    "Resources held by running allocations (bytes, Hz).",
)
RESOURCES_ONBOARDED = _plain(
    "/dms/node/resources/onboarded",
    "resources.onboarded",
    ResourcesResponse,
    "Resources offered to the network (bytes, Hz).",
)
HARDWARE_SPEC = _plain(
    "/dms/node/hardware/spec",
    "hardware.spec",
    ResourcesResponse,
    "The machine's hardware (bytes, Hz).",
)
HARDWARE_USAGE = _plain(
    "/dms/node/hardware/usage",
    "hardware.usage",
    ResourcesResponse,
    "The machine's current resource usage (bytes, Hz).",
)
LOGGER_CONFIG = _b(
    "/dms/node/logger/config",
    "logger.config",
    LoggerConfigRequest,
    LoggerConfigResponse,
    "Change log level, flush interval or Elasticsearch/APM settings.",
)

# capabilities
CAP_LIST = _b(
    "/dms/cap/list",
    "cap.list",
    CapListRequest,
    CapListResponse,
    "The DMS's capability anchors.",
)
CAP_ANCHOR = _b(
    "/dms/cap/anchor",
    "cap.anchor",
    CapAnchorRequest,
    CapAnchorResponse,
    "Add root DIDs and tokens to the DMS's anchors (v0.5).",
    versions=frozenset({DMS_V05}),
)
CAP_PROVIDE_ANCHOR = _b(
    "/dms/cap/provide/anchor",
    "cap.provide_anchor",
    CapTokenAnchorRequest,
    CapAnchorResponse,
    "Add tokens to the DMS's provide anchor.",
    versions=frozenset({DMS_V06}),
)
CAP_REQUIRE_ANCHOR = _b(
    "/dms/cap/require/anchor",
    "cap.require_anchor",
    CapTokenAnchorRequest,
    CapAnchorResponse,
    "Add tokens to the DMS's require anchor.",
    versions=frozenset({DMS_V06}),
)
CAP_REVOKE_ANCHOR = _b(
    "/dms/cap/revoke/anchor",
    "cap.revoke_anchor",
    CapTokenAnchorRequest,
    CapAnchorResponse,
    "Add revocation tokens to the DMS's revoke anchor.",
    versions=frozenset({DMS_V06}),
)

# volumes
VOLUME_CREATE = _b(
    "/dms/volume/create",
    "volume.create",
    CreateVolumeRequest,
    CreateVolumeResponse,
    "Create a GlusterFS volume; replies with its CA certificate.",
)
VOLUME_START = _b(
    "/dms/volume/start",
    "volume.start",
    StartVolumeRequest,
    StartVolumeResponse,
    "Start a GlusterFS volume.",
)
VOLUME_DELETE = _b(
    "/dms/volume/delete",
    "volume.delete",
    DeleteVolumeRequest,
    DeleteVolumeResponse,
    "Delete a GlusterFS volume (its creator only).",
)

# --- the newest DMS's further behaviors: debug, revocation broadcast, subnet, tokenomics ---

DEBUG_FLIGHTREC = _plain(
    "/dms/debug/flightrec",
    "debug.flightrec",
    PingResponse,
    "Dump the Go flight recorder's trace on the DMS host (no answer if it runs none).",
)
CAP_REVOKE_BROADCAST = _b(
    "/dms/cap/revoke/broadcast",
    "cap.revoke_broadcast",
    CapTokenAnchorRequest,
    CapAnchorResponse,
    "Broadcast revocation tokens; every DMS that hears them anchors them.",
    topic="/nunet/revocation",
    versions=frozenset({DMS_V06}),
)
SUBNET_CREATE = _b(
    "/dms/node/subnet/create",
    "subnet.create",
    SubnetCreateRequest,
    SubnetCreateResponse,
    "Create a deployment's subnet on this DMS (an orchestrator's call).",
)
SUBNET_DESTROY = _b(
    "/dms/node/subnet/destroy",
    "subnet.destroy",
    SubnetDestroyRequest,
    SubnetDestroyResponse,
    "Destroy a deployment's subnet on this DMS.",
)
SUBNET_JOIN = _b(
    "/dms/node/subnet/join",
    "subnet.join",
    SubnetJoinRequest,
    SubnetJoinResponse,
    "Join this DMS to a deployment's subnet, with its routes and DNS records.",
)
CONTRACT_CREATE = _b(
    "/dms/tokenomics/contract/create",
    "contract.create",
    CreateContractRequest,
    CreateContractResponse,
    "Create a contract on its solution enabler; replies with the contract's DID.",
)
CONTRACT_STATE = _b(
    "/dms/tokenomics/contract/state",
    "contract.state",
    ContractStatusRequest,
    ContractStatusResponse,
    "A contract as its host holds it.",
)
CONTRACT_LIST_INCOMING = _b(
    "/dms/tokenomics/contract/list_incoming",
    "contract.list_incoming",
    ContractListIncomingRequest,
    ContractListIncomingResponse,
    "Contracts proposed to this DMS, awaiting approval.",
)
CONTRACT_APPROVE_LOCAL = _b(
    "/dms/tokenomics/contract/approve_local",
    "contract.approve_local",
    ContractApproveLocalRequest,
    ContractApproveLocalResponse,
    "Approve a proposed contract as its provider.",
)
CONTRACT_TERMINATE = _b(
    "/dms/tokenomics/contract/terminate",
    "contract.terminate",
    ContractTerminationRequest,
    ContractTerminationResponse,
    "End a contract early (on its host).",
)
CONTRACT_COMPLETE = _b(
    "/dms/tokenomics/contract/complete",
    "contract.complete",
    ContractCompletionRequest,
    ContractCompletionResponse,
    "Mark a contract completed (on its host).",
)
CONTRACT_SETTLE = _b(
    "/dms/tokenomics/contract/settle",
    "contract.settle",
    ContractSettleRequest,
    ContractSettleResponse,
    "Settle a contract (on its host).",
)
CONTRACT_VALIDATE = _b(
    "/dms/tokenomics/contract/validate",
    "contract.validate",
    ContractValidateRequest,
    ContractValidateResponse,
    "Whether a contract is valid, and its state (on its host).",
)
CONTRACT_PAYMENT_STATUS = _b(
    "/dms/tokenomics/contract/payment/status",
    "contract.payment_status",
    ContractPaymentStatusRequest,
    ContractPaymentStatusResponse,
    "Whether the payment with this unique ID was made.",
)
CONTRACT_USAGES_CALCULATE = _b(
    "/dms/tokenomics/contract/usages/calculate",
    "contract.usages_calculate",
    CollectUsagesAndForwardToPaymentProvidersRequest,
    CollectUsagesAndForwardToPaymentProvidersReponse,
    "Collect contracts' usage and forward it to their payment providers (on the host).",
)
CONTRACT_TRANSACTIONS_LIST = _b(
    "/dms/tokenomics/contract/transactions/list",
    "contract.transactions_list",
    ContractListLocalTransactionsRequest,
    ContractListLocalTransactionsResponse,
    "The payment transactions this DMS holds.",
)
CONTRACT_TRANSACTIONS_CONFIRM = _b(
    "/dms/tokenomics/contract/transactions/confirm",
    "contract.transactions_confirm",
    ContractConfirmLocalTransactionRequest,
    ContractConfirmLocalTransactionResponse,
    "Record the blockchain transaction that paid a payment request (with the quote it paid).",
)
CONTRACT_PAYMENT_QUOTE_GET = _b(
    "/dms/tokenomics/contract/payment/quote/get",
    "contract.payment_quote_get",
    ContractGetPaymentQuoteRequest,
    ContractGetPaymentQuoteResponse,
    "A quote converting a transaction's amount to its payment currency, valid for a while.",
)
CONTRACT_PAYMENT_QUOTE_VALIDATE = _b(
    "/dms/tokenomics/contract/payment/quote/validate",
    "contract.payment_quote_validate",
    ContractValidatePaymentQuoteRequest,
    ContractValidatePaymentQuoteResponse,
    "Whether a payment quote is still valid (not expired, not used), with its details.",
)
CONTRACT_PAYMENT_QUOTE_CANCEL = _b(
    "/dms/tokenomics/contract/payment/quote/cancel",
    "contract.payment_quote_cancel",
    ContractCancelPaymentQuoteRequest,
    ContractCancelPaymentQuoteResponse,
    "Cancel a payment quote that was not used, so that another may be asked for.",
)

_BEHAVIORS: tuple[Behavior[Any, Any], ...] = (
    PUBLIC_HELLO,
    PUBLIC_STATUS,
    BROADCAST_HELLO,
    NODE_STATUS,
    BROADCAST_STATUS,
    PEERS_LIST,
    PEERS_SELF,
    PEERS_PING,
    PEERS_DHT,
    PEERS_CONNECT,
    PEERS_SCORE,
    ONBOARDING_ONBOARD,
    ONBOARDING_OFFBOARD,
    ONBOARDING_STATUS,
    DEPLOYMENT_NEW,
    DEPLOYMENT_UPDATE,
    DEPLOYMENT_LIST,
    DEPLOYMENT_STATUS,
    DEPLOYMENT_MANIFEST,
    DEPLOYMENT_INFO,
    DEPLOYMENT_LOGS,
    DEPLOYMENT_SHUTDOWN,
    DEPLOYMENT_PRUNE,
    DEPLOYMENT_DELETE,
    ALLOCATIONS_LIST,
    RESOURCES_FREE,
    RESOURCES_ALLOCATED,
    RESOURCES_ONBOARDED,
    HARDWARE_SPEC,
    HARDWARE_USAGE,
    LOGGER_CONFIG,
    CAP_LIST,
    CAP_ANCHOR,
    CAP_PROVIDE_ANCHOR,
    CAP_REQUIRE_ANCHOR,
    CAP_REVOKE_ANCHOR,
    VOLUME_CREATE,
    VOLUME_START,
    VOLUME_DELETE,
    DEBUG_FLIGHTREC,
    CAP_REVOKE_BROADCAST,
    SUBNET_CREATE,
    SUBNET_DESTROY,
    SUBNET_JOIN,
    CONTRACT_CREATE,
    CONTRACT_STATE,
    CONTRACT_LIST_INCOMING,
    CONTRACT_APPROVE_LOCAL,
    CONTRACT_TERMINATE,
    CONTRACT_COMPLETE,
    CONTRACT_SETTLE,
    CONTRACT_VALIDATE,
    CONTRACT_PAYMENT_STATUS,
    CONTRACT_USAGES_CALCULATE,
    CONTRACT_TRANSACTIONS_LIST,
    CONTRACT_TRANSACTIONS_CONFIRM,
    CONTRACT_PAYMENT_QUOTE_GET,
    CONTRACT_PAYMENT_QUOTE_VALIDATE,
    CONTRACT_PAYMENT_QUOTE_CANCEL,
)


def _index() -> tuple[
    Mapping[str, Behavior[Any, Any]], Mapping[tuple[str, ...], Behavior[Any, Any]]
]:
    by_name = {b.name: b for b in _BEHAVIORS}
    by_namespace = {b.namespace: b for b in _BEHAVIORS}
    if len(by_name) != len(_BEHAVIORS) or len(by_namespace) != len(_BEHAVIORS):
        raise ValueError("a behavior name or namespace is declared twice in the catalog")
    return MappingProxyType(by_name), MappingProxyType(by_namespace)


CATALOG, BY_NAMESPACE = _index()


def get_behavior(name: str) -> Behavior[Any, Any]:
    """The behavior called ``name``; :class:`UnknownBehaviorError` names close matches."""
    behavior = CATALOG.get(name)
    if behavior is not None:
        return behavior
    close = difflib.get_close_matches(name, CATALOG, n=3, cutoff=0.6)
    hint = f"; did you mean {' or '.join(close)}?" if close else ""
    raise UnknownBehaviorError(f"unknown behavior {name!r}{hint}")


def catalog_for(version: str) -> Mapping[str, Behavior[Any, Any]]:
    """The behaviors a DMS of ``version`` has, by name (the facade and ``invoke`` of a client
    connected to it offer these)."""
    return _BY_VERSION[version]


def require_in_version(behavior: Behavior[Any, Any], version: str) -> None:
    """Refuse, before it is sent, a behavior a DMS of ``version`` does not have."""
    if version not in behavior.versions:
        has = " and ".join(f"DMS {v}" for v in sorted(behavior.versions))
        raise BehaviorNotInVersionError(
            f"{behavior.name} is not a behavior of DMS {version} (only {has} has it); "
            f"the DMS would drop it unanswered"
        )


_BY_VERSION: Mapping[str, Mapping[str, Behavior[Any, Any]]] = MappingProxyType(
    {
        v: MappingProxyType({n: b for n, b in CATALOG.items() if v in b.versions})
        for v in DMS_VERSIONS
    }
)
