"""An in-memory DMS that several gateways can share, and gateways built over it with an
injected clock: what the tests of the gateway's background passes and of a pod's life need.

The fake answers the deployment behaviors at once, as the devnet would (same error texts, from
the devnet's own constants), keeps every deployment's metadata, and lets a test make the DMS
forget a deployment. Waiting is bounded polling of the gateway's own state (never of
``/status``, which would count as interLink asking about the pods).
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from dmsgw.actors.turns import Turns
from dmsgw.behaviors.catalog import Behavior
from dmsgw.behaviors.deployment import (
    DeploymentInfo,
    DeploymentListResponse,
    DeploymentLogsResponse,
    DeploymentManifestResponse,
    DeploymentShutdownResponse,
    DeploymentStatusResponse,
    NewDeploymentResponse,
)
from dmsgw.behaviors.node import DMSBehaviorError
from dmsgw.behaviors.node_resources import ResourcesResponse
from dmsgw.behaviors.peers import PeerAddrInfoResponse, PeersListResponse
from dmsgw.behaviors.resources import CPU, RAM, Disk, Resources
from dmsgw.behaviors.status import AllocationInfo, EnsembleManifest
from dmsgw.clock import FixedClock
from dmsgw.devnet.handlers_deployment import NOT_FOUND, NOT_RUNNING, ORCHESTRATOR_NOT_FOUND
from dmsgw.devnet.resource_ledger import total
from dmsgw.interlink.capacity.admission import minus
from dmsgw.interlink.capacity.resource_actor import Capacity, ResourceActor
from dmsgw.interlink.gateway import Gateway, GatewayParts, job_id
from dmsgw.interlink.pods.heap import HeapFreezer
from dmsgw.interlink.pods.pod_book import PodBook
from dmsgw.interlink.pods.pod_services import PodServices
from dmsgw.interlink.pods.pod_translation import Translate
from dmsgw.interlink.pods.under_way import UnderWay
from dmsgw.interlink.records.pod_record import POD_UID_KEY, PodPolicy, Snapshot, snapshot_of
from dmsgw.interlink.state.pod_store import PodStore
from dmsgw.interlink.state.recovery import PollLedger
from dmsgw.interlink.translate import TranslationOptions, pod_to_ensemble
from dmsgw.interlink.wire.bodies import RetrievedPodData
from dmsgw.interlink.wire.parsing import parse_create_body, read_status_body
from dmsgw.transport.rest import TransportError

FAST = PodPolicy(poll_min_s=0.02, poll_max_s=0.1, retry_min_s=0.02, restart_min_s=0.02)
WAIT_S = 10.0
"""How long a test waits for the gateway to get somewhere before it fails (bounded)."""
PEER = "12D3KooWFakePeer"
ROOMY = Resources(cpu=CPU(cores=1024.0), ram=RAM(size=1 << 44), disk=Disk(size=1 << 46))
"""The fake's free resources unless a test says otherwise: room for every pod of a test."""
PODS_CAPACITY = 10


@dataclasses.dataclass
class FakeDeployment:
    id: str
    metadata: dict[str, str]
    containers: tuple[str, ...]
    status: str = "Running"
    holds: Resources = dataclasses.field(default_factory=Resources)
    allocations: dict[str, str] = dataclasses.field(default_factory=dict)
    """Container name -> its allocation's status, where it is not ``running``."""


class FakeDMS:
    """One DMS, shared by every gateway of a test. ``free`` is what ``resources/free``
    reports; while ``reachable`` is false, the peer behaviors fail as a dead DMS does."""

    def __init__(self, logs: Path, free: Resources | None = None) -> None:
        self.deployments: dict[str, FakeDeployment] = {}
        self.free = free or ROOMY
        self.onboarded: Resources | None = None
        """What ``resources/onboarded`` reports (``None``: as much as is free). When set,
        the running deployments hold their resources of it, and ``free`` is what is left."""
        self.refuse = 0
        """How many of the next deployments fail at once unplaced, as where the DMS found no
        room (its status says ``Failed`` and nothing more; its manifest lists no allocation)."""
        self.reachable = True
        self.unknown_deployment = f"failed to get deployment: {NOT_FOUND}"
        """What ``status`` and ``manifest`` answer for a deployment the DMS does not know
        (by default the devnet's answer)."""
        self.manifest = EnsembleManifest()
        """What ``manifest`` answers for a deployment it knows."""
        self.asked: Counter[str] = Counter()  # behavior (without /dms/node/) -> times asked
        self.asked_about: Counter[str] = Counter()  # ensemble ID -> status/manifest/logs asked
        self._ids = itertools.count(1)
        logs.mkdir(parents=True, exist_ok=True)
        (logs / "stdout.log").write_text("hello\n")
        (logs / "stderr.log").write_text("")
        self._logs = logs

    def live(self, uid: str | None = None) -> list[FakeDeployment]:
        """The running deployments (of pod ``uid``)."""
        return [
            d
            for d in self.deployments.values()
            if d.status == "Running" and (uid is None or d.metadata.get(POD_UID_KEY) == uid)
        ]

    def _free(self) -> Resources:
        if self.onboarded is None:
            return self.free
        return minus(self.onboarded, total(d.holds for d in self.live()))

    def forget(self, ensemble_id: str) -> None:
        """The DMS loses the deployment (restarted without it)."""
        del self.deployments[ensemble_id]

    async def __call__(
        self,
        behavior: Behavior[Any, Any],
        payload: Any = None,
        *,
        to: str | None = None,
        timeout_s: float | None = None,
    ) -> Any:
        await asyncio.sleep(0)  # a round trip yields, as a real one does
        reply = self._answer(behavior.name, payload)
        error = getattr(reply, "error", "")
        if error:
            raise DMSBehaviorError(behavior.name, error, reply)
        return reply

    def _answer(self, behavior: str, payload: Any) -> Any:
        name = behavior.removeprefix("/dms/node/")
        self.asked[name] += 1
        if name in ("peers/self", "peers/list", "resources/free") and not self.reachable:
            raise TransportError(f"{behavior}: connection refused")
        if name == "peers/self":
            return PeerAddrInfoResponse(id=PEER)
        if name == "peers/list":
            return PeersListResponse(peers=(PEER,))
        if name == "resources/free":
            return ResourcesResponse(resources=self._free())
        if name == "resources/onboarded":
            return ResourcesResponse(resources=self.onboarded or self.free)
        if name == "deployment/new":
            v1 = payload.ensemble.v1
            ensemble = FakeDeployment(
                f"ens-{next(self._ids)}",
                dict(v1.metadata or {}),
                tuple(v1.allocations or ()),
                holds=total(a.resources for a in (v1.allocations or {}).values()),
            )
            if self.refuse:
                self.refuse -= 1
                ensemble.status = "Failed"
            self.deployments[ensemble.id] = ensemble
            return NewDeploymentResponse(status="OK", ensemble_id=ensemble.id)
        if name == "deployment/list":
            wanted = (payload.metadata if payload is not None else None) or {}
            found = [
                d
                for d in self.deployments.values()
                if all(d.metadata.get(k) == v for k, v in wanted.items())
            ]
            infos = tuple(
                DeploymentInfo(orchestrator_id=d.id, status=d.status, metadata=d.metadata)
                for d in found
            )
            return DeploymentListResponse(deployments=infos, total=len(infos))
        return self.about_one(name, payload)

    def about_one(self, name: str, payload: Any) -> Any:
        """The answer of behavior ``name`` about one deployment: what a test's DMS overrides
        to answer otherwise than the devnet does."""
        ident = getattr(payload, "id", "") or getattr(payload, "ensemble_id", "")
        found = self.deployments.get(ident)
        self.asked_about[ident] += 1
        if name == "deployment/status":
            if found is None:
                return DeploymentStatusResponse(error=self.unknown_deployment)
            running = found.status == "Running"
            info = {
                f"{found.id}_pod.{c}": AllocationInfo(
                    allocation_id=f"{found.id}_pod.{c}",
                    status=found.allocations.get(c, "running"),
                )
                for c in found.containers
            }
            return DeploymentStatusResponse(
                status=found.status, allocation_info=info if running else None
            )
        if name == "deployment/manifest":
            if found is None:
                return DeploymentManifestResponse(error=self.unknown_deployment)
            return DeploymentManifestResponse(manifest=self.manifest)
        if name == "deployment/shutdown":
            if found is None:
                return DeploymentShutdownResponse(error=ORCHESTRATOR_NOT_FOUND)
            if found.status != "Running":
                return DeploymentShutdownResponse(error=NOT_RUNNING)
            found.status = "Completed"
            return DeploymentShutdownResponse(ok=True)
        if name == "deployment/logs":
            if found is None:
                return DeploymentLogsResponse(
                    error=f"failed to get orchestrator: {ORCHESTRATOR_NOT_FOUND}"
                )
            return DeploymentLogsResponse(logs_written_to=str(self._logs))
        raise AssertionError(f"the fake DMS does not answer {name}")


def plain_translation(data: RetrievedPodData, generation: int) -> Any:
    return pod_to_ensemble(data, options=TranslationOptions(generation=generation))


class _Unreachable:
    """What a test that drives a pod's actor or follower by hand never reaches: touching it
    fails the test, naming it."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attribute: str) -> Any:
        raise AssertionError(f"{self._name}.{attribute} is not reached in this test")

    def __call__(self, *_: Any, **__: Any) -> Any:
        raise AssertionError(f"{self._name} is not called in this test")


def pod_services(invoke: Any, **given: Any) -> PodServices:
    """The services of one pod alone over ``invoke`` (the translation: :func:`plain_translation`),
    for a follower or an actor a test drives by hand; the store and the ``/status`` read are
    :class:`_Unreachable` unless ``given``."""
    parts: dict[str, Any] = {
        "invoke": invoke,
        "store": _Unreachable("store"),
        "translate": plain_translation,
        "status_of": _Unreachable("status_of"),
        "book": PodBook(PollLedger(FixedClock(0), 0.0), UnderWay(0.0), HeapFreezer(every=0)),
    }
    return PodServices(**{**parts, **given})


class ClosedTurns(Turns):
    """A gate that lets nothing through until opened: every pod actor waits to start."""

    def __init__(self) -> None:
        super().__init__()
        self.open = asyncio.Event()

    async def take(self) -> None:
        await self.open.wait()


async def gateway_on(
    dms: FakeDMS,
    state: Path,
    *,
    owner: str,
    clock: FixedClock,
    translate: Translate = plain_translation,
    store: PodStore | None = None,
    capacity: Capacity | None = None,
    policy: PodPolicy = FAST,
    snapshot: Snapshot | None = None,
    **parts: Any,
) -> Gateway:
    """A started gateway over ``dms`` keeping its pods in ``state`` (or in ``store``); its
    capacity is that of the fake's peers (or ``capacity``); its pods' entries are made by
    ``snapshot`` (:func:`snapshot_of` at ``clock`` when ``None``)."""
    gateway = Gateway(
        GatewayParts(
            invoke=dms,
            store=store or PodStore(state),
            translate=translate,
            snapshot=snapshot or (lambda record: snapshot_of(record, now_ns=clock())),
            capacity=capacity
            or Capacity(ResourceActor.start(dms, clock=clock), pods_capacity=PODS_CAPACITY),
            loop=asyncio.get_running_loop(),
            policy=policy,
            clock=clock,
            owner=owner,
            **parts,
        )
    )
    await gateway.start()
    return gateway


def pod(uid: str, *, policy: str = "Never", **container: Any) -> dict[str, Any]:
    """A pod as interLink sends it, with the ``JobID`` annotation interLink keeps."""
    return {
        "metadata": {
            "name": f"p-{uid[-4:]}",
            "namespace": "default",
            "uid": uid,
            "annotations": {"JobID": job_id(uid)},
        },
        "spec": {
            "restartPolicy": policy,
            "containers": [{"name": "main", "image": "busybox", **container}],
        },
    }


def uid(n: int) -> str:
    return f"0000a11d-0000-4000-8000-{n:012d}"


async def create(gateway: Gateway, spec: dict[str, Any]) -> None:
    body = json.dumps({"pod": spec, "container": [{"name": "main"}]}).encode()
    await gateway.create(parse_create_body(body))


async def poll(gateway: Gateway, *specs: dict[str, Any]) -> list[Any]:
    """interLink's status poll naming these pods."""
    return await gateway.status(await read_status_body(json.dumps(list(specs)).encode()))


async def until(done: Callable[[], bool], what: str) -> None:
    """Wait (bounded) until ``done()``, as the pod actors get there."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT_S
    while not done():
        if loop.time() > deadline:
            raise AssertionError(f"never happened within {WAIT_S} s: {what}")
        await asyncio.sleep(0.01)


async def until_async(done: Callable[[], Awaitable[bool]], what: str) -> None:
    """:func:`until` for a check that must await (an HTTP poll), bounded as it is."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT_S
    while not await done():
        if loop.time() > deadline:
            raise AssertionError(f"never happened within {WAIT_S} s: {what}")
        await asyncio.sleep(0.05)
