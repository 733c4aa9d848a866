"""The ``Gateway``: root of the actor tree and the interLink plugin's backend.

It owns the pod registry (pod UID → ``PodActor``, supervised one-for-one: a crashed pod actor
restarts from its stored record), creates pod actors idempotently, answers ``/status`` from the
snapshots the pod actors publish (no round trip to the DMS), relays deletes, finds log files,
and asks the ``ResourceActor`` for node capacity. On start it resumes every stored pod and
reconciles with the DMS: pods it knows are followed again, and two background passes collect
what interLink has demonstrably forgotten (see :meth:`Gateway.collect_orphans`). Every ensemble
carries its gateway's owner label, and a gateway only ever collects or re-adopts its own, so
that several gateways can share one DMS. When the root supervisor gives up, the gateway says so
through :attr:`Gateway.gave_up`, and ``dmsgw serve`` ends (crash-only).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import random
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

from ..actors import bridge
from ..actors.aio import AsyncActorRef
from ..actors.base import ActorExit
from ..actors.registry import Registry
from ..actors.supervision import Backoff, Intensity, Restart, Strategy
from ..actors.supervisor import ChildSpec, Supervisor
from ..behaviors.deployment import (
    DeploymentListRequest,
    DeploymentManifestRequest,
    DeploymentShutdownRequest,
)
from ..behaviors.ensemble import EnsembleConfig
from ..behaviors.node import NodeActor, NodeClient, seconds_until_grant_expiry
from ..behaviors.status import DeploymentStatus
from ..clock import NS_PER_SECOND, Clock, system_clock
from ..errors import DmsgwError
from ..keys.crypto import Ed25519PrivKey, PrivKey
from ..keys.did import DID
from ..keys.keystore import KeyStore
from ..keys.loading import load_capabilities, load_key
from ..keys.trust import provider_from_private_key
from ..keys.ucan.context import CapabilityContext
from ..transport.envelope import Handle
from ..transport.rest import RestTransport
from ..transport.security import SecurityContext
from . import k8s
from .bodies import (
    CreateStruct,
    LogStruct,
    PingResponse,
    PodRef,
    PodStatus,
    RetrievedPodData,
    in_turns,
)
from .capacity import GPU_RESOURCE_PREFIX, consolidate_capacity
from .config import GatewayConfig
from .logs import log_directory, read_logs
from .pod import PodActor
from .pod_ensemble import PodTranslationError, TranslationOptions, pod_to_ensemble
from .pod_follower import Invoke, deployment_unknown
from .pod_record import (
    DEFAULT_POLICY,
    POD_UID_KEY,
    Phase,
    PodPolicy,
    PodRecord,
    Snapshot,
    request_data,
    snapshot_of,
)
from .resources import DMSUnreachableError, GpuCatalog, ResourceActor
from .server import BackendUnavailable, Metrics, UnknownPodError
from .store import PodStore
from .translation import Translate, TranslationNotReadyError

log = logging.getLogger(__name__)

JID_PREFIX = "dmsgw-"
ORPHAN_GRACE_S = 300.0
"""How long interLink must have gone on polling other pods without naming a pod before that
pod counts as deleted (see :meth:`Gateway.collect_orphans`)."""
OWNER_KEY = "dmsgw.io/owner"
"""Ensemble metadata: the gateway that deployed it (its DID). A gateway collects and re-adopts
only ensembles that carry its own; older ensembles without the label are never collected."""

ROOT_INTENSITY = Intensity(max_restarts=100, period_s=60.0)
"""Pod actor restarts the root supervisor allows before it gives up (and the process ends)."""
ROOT_BACKOFF = Backoff(min_s=0.5, max_s=30.0)


def job_id(uid: str) -> str:
    """The ``PodJID`` interLink stores as the pod's ``JobID`` annotation: stable per pod, so it
    survives redeployments (the ensemble ID changes with each)."""
    return JID_PREFIX + uid


@dataclasses.dataclass
class GatewayParts:
    """What the gateway is made of (built by :func:`start_backend`, or by tests)."""

    invoke: Invoke
    store: PodStore
    translate: Translate
    snapshot: Snapshot
    unknown_pod: Callable[[k8s.Pod], PodStatus]
    loop: asyncio.AbstractEventLoop
    policy: PodPolicy = DEFAULT_POLICY
    clock: Clock = system_clock
    orphan_grace_s: float = ORPHAN_GRACE_S
    owner: str = ""
    """Stamped on every ensemble as :data:`OWNER_KEY`; a gateway without one (``""``) collects
    and re-adopts nothing."""
    intensity: Intensity = ROOT_INTENSITY
    backoff: Backoff = ROOT_BACKOFF


class Gateway:
    """Implements the plugin backend (create, delete, status, ping, logs)."""

    def __init__(self, parts: GatewayParts) -> None:
        self.parts = parts
        self.registry = Registry()
        self.snapshots: dict[str, PodStatus] = {}
        self._records: dict[str, PodRecord] = {}
        self._named: dict[str, int] = {}  # UID -> when interLink last named it (or we took it)
        self._polled_ns: int | None = None  # when interLink last asked about any pod
        # One generator for every pod's retry jitter: a Random is 2.5 KiB, a tenth of a pod.
        self._jitter = random.Random()
        self._started_ns = parts.clock()
        self.gave_up: asyncio.Future[str] = parts.loop.create_future()
        """Completes with the reason when the root supervisor has given up: every pod actor
        is stopped, so the process must end and start again (crash-only)."""
        self._supervisor = Supervisor.start(
            strategy=Strategy.ONE_FOR_ONE,
            intensity=parts.intensity,
            backoff=parts.backoff,
            registry=self.registry,
            clock=parts.clock,
            exit_hook=self._supervisor_ended,
        )
        self._creating: dict[str, asyncio.Future[None]] = {}  # UID -> its create under way
        # pykka builds a proxy by introspecting the actor (~0.4 ms): build it once.
        self._supervisor_proxy = self._supervisor.proxy()

    # --- start-up and shutdown ------------------------------------------------------------

    async def start(self) -> None:
        """Resume every stored pod (crash-only recovery)."""
        records = [PodRecord.from_map(m) for m in self.parts.store.load_all()]
        for record in records:
            if record.phase == Phase.TERMINAL:
                self._records[record.uid] = record
                self.snapshots[record.uid] = self.parts.snapshot(record)
                continue
            await self._spawn(record)
        log.info("gateway resumed %d pods from %s", len(records), self.parts.store.path)

    async def close(self) -> None:
        await asyncio.get_running_loop().run_in_executor(None, self._supervisor.stop)
        await self.parts.store.close()

    def _supervisor_ended(self, event: ActorExit) -> None:
        """The root supervisor ended (in its own thread). Past its restart intensity it has
        stopped every pod actor and failed: nobody above it can restart them, so the process
        has to go; :attr:`gave_up` tells whoever runs it."""
        if event.normal:
            return
        reason = f"the pod supervisor gave up: {event.error}"
        log.critical("%s; the gateway must be restarted", reason)
        with contextlib.suppress(RuntimeError):  # the loop is closed: the process is ending
            self.parts.loop.call_soon_threadsafe(_settle, self.gave_up, reason)

    async def _spawn(self, record: PodRecord) -> None:
        self._records[record.uid] = record
        self._named[record.uid] = self.parts.clock()  # the wait for a first poll starts now
        parts = self.parts

        def start(hook: Any) -> AsyncActorRef[PodActor]:
            latest = self._records[record.uid]  # a restarted actor resumes from the newest record
            return PodActor.start(
                latest,
                invoke=parts.invoke,
                store=parts.store,
                translate=self._translate,
                snapshot=parts.snapshot,
                snapshots=self.snapshots,
                on_deleted=self._forget,
                policy=parts.policy,
                clock=parts.clock,
                rng=self._jitter,
                loop=parts.loop,
                exit_hook=hook,
            )

        spec = ChildSpec(_name(record.uid), start, Restart.TRANSIENT)
        await bridge.call(self._supervisor_proxy.start_child(spec))

    def _forget(self, uid: str) -> None:
        """A pod actor finished deleting its pod."""
        self._records.pop(uid, None)
        self._named.pop(uid, None)

    def _translate(self, data: RetrievedPodData, generation: int) -> EnsembleConfig:
        """The configured translation, the ensemble stamped with this gateway as its owner."""
        config = self.parts.translate(data, generation)
        if not self.parts.owner or config.v1 is None:
            return config
        metadata = {**(config.v1.metadata or {}), OWNER_KEY: self.parts.owner}
        return dataclasses.replace(config, v1=dataclasses.replace(config.v1, metadata=metadata))

    def _owns(self, metadata: Mapping[str, str] | None) -> bool:
        """Whether an ensemble with this metadata was deployed by this gateway."""
        return bool(self.parts.owner) and (metadata or {}).get(OWNER_KEY) == self.parts.owner

    # --- the plugin backend ---------------------------------------------------------------

    async def create(self, pods: list[RetrievedPodData]) -> list[CreateStruct]:
        """Record each pod and start its actor; idempotent on UID. Answers at once: the
        deployment happens in the pod actor. Creates of different pods run concurrently (their
        store writes share one commit); a second create of a UID waits for the first."""
        results = []
        for data in pods:
            uid = data.pod.metadata.uid
            await self._create_one(uid, data)
            results.append(CreateStruct.model_validate({"PodUID": uid, "PodJID": job_id(uid)}))
        return results

    async def _create_one(self, uid: str, data: RetrievedPodData) -> None:
        while (pending := self._creating.get(uid)) is not None:
            await asyncio.wait([pending])  # if that create failed, this one tries again
        if uid in self._records:
            return
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._creating[uid] = done
        try:
            record = PodRecord(
                uid=uid,
                namespace=data.pod.metadata.namespace,
                name=data.pod.metadata.name,
                jid=job_id(uid),
                request=data.to_json(),
                created_ns=self.parts.clock(),
            )
            await self.parts.store.put(uid, record.to_map())
            await self._spawn(record)
        finally:
            del self._creating[uid]
            done.set_result(None)

    async def delete(self, pod: k8s.Pod) -> None:
        """Shut the pod's ensemble down; idempotent (interLink never retries a delete)."""
        uid = pod.metadata.uid
        ref = self.registry.get(_name(uid))
        if ref is not None and ref.is_alive():
            await ref.proxy().delete()  # type: ignore[attr-defined]
            return
        record = self._records.pop(uid, None)
        self.snapshots.pop(uid, None)
        self._named.pop(uid, None)
        if record is not None:
            await self.parts.store.delete(uid)

    async def status(self, pods: list[PodRef]) -> list[PodStatus]:
        """Snapshots only: no DMS round trip. An unknown pod that carries our ``JobID`` is
        re-adopted if the DMS still runs its ensemble."""
        self._heard_of(pods)
        out = []
        async for ref in in_turns(pods):  # thousands of unknown pods must not hold the loop
            snapshot = self.snapshots.get(ref.uid)
            if snapshot is None:
                snapshot = await self._readopt(ref.pod())
            out.append(snapshot)
        return out

    def _heard_of(self, pods: list[PodRef]) -> None:
        """interLink polled these pods now: it is alive, and still wants each of them (a poll
        naming no pod, as its ping is, proves neither)."""
        if not pods:
            return
        now = self._polled_ns = self.parts.clock()
        for ref in pods:
            if ref.uid in self._named:
                self._named[ref.uid] = now

    def logs(self, request: LogStruct) -> AsyncIterator[bytes]:
        """The container's log from the files the DMS writes (see :mod:`dmsgw.interlink.logs`)."""
        record = self._records.get(request.pod_uid)
        if record is None:
            raise UnknownPodError(f"no pod with UID {request.pod_uid!r} is known to this gateway")
        names = {
            c.name for c in (*_pod(record).spec.init_containers, *_pod(record).spec.containers)
        }
        if request.container_name and request.container_name not in names:
            raise UnknownPodError(
                f"pod {record.namespace}/{record.name} has no container {request.container_name!r}"
            )
        return self._log_stream(record, request)

    async def _log_stream(self, record: PodRecord, request: LogStruct) -> AsyncIterator[bytes]:
        ensemble = record.previous_ensemble_id if request.opts.previous else record.ensemble_id
        if not ensemble:
            what = "no previous run" if request.opts.previous else "not been deployed yet"
            raise DmsgwError(f"pod {record.namespace}/{record.name} has {what}")
        container = request.container_name or _pod(record).spec.containers[0].name
        allocation = await self._allocation_key(ensemble, container)

        async def fetch() -> Path:
            return await log_directory(self.parts.invoke, ensemble, allocation)

        def running() -> bool:
            snapshot = self.snapshots.get(record.uid)
            statuses = [
                *(snapshot.containers if snapshot else ()),
                *(snapshot.init_containers if snapshot else ()),
            ]
            return any(s.name == container and s.state.terminated is None for s in statuses)

        async for chunk in read_logs(fetch, request.opts, running=running):
            yield chunk

    async def _allocation_key(self, ensemble: str, container: str) -> str:
        """The manifest's name for the container's allocation (``<node>.<allocation>``). An
        ensemble the DMS no longer knows took its logs with it: the pod's logs are gone, which
        is the client's 404, not the gateway's failure."""
        try:
            reply = await self.parts.invoke(
                "/dms/node/deployment/manifest", DeploymentManifestRequest(ensemble)
            )
        except DmsgwError as exc:
            if deployment_unknown(exc):
                raise UnknownPodError(
                    f"the DMS no longer knows deployment {ensemble}, nor its logs ({exc})"
                ) from None
            raise
        for key in reply.manifest.allocations or {}:
            if key == container or key.endswith("." + container):
                return str(key)
        raise DmsgwError(f"ensemble {ensemble} has no allocation for container {container!r}")

    # --- recovery ---------------------------------------------------------------------------

    async def _readopt(self, pod: k8s.Pod) -> PodStatus:
        uid = pod.metadata.uid
        jid = pod.metadata.annotations.get("JobID", "") if pod.metadata.annotations else ""
        if jid == job_id(uid):
            ensemble = await self._ensemble_of(uid)
            if ensemble:
                record = PodRecord(
                    uid=uid,
                    namespace=pod.metadata.namespace,
                    name=pod.metadata.name,
                    jid=jid,
                    request=RetrievedPodData(pod=pod).to_json(),
                    phase=Phase.RUNNING,
                    ensemble_id=ensemble,
                    created_ns=self.parts.clock(),
                )
                await self.parts.store.put(uid, record.to_map())
                await self._spawn(record)
                log.info("re-adopted pod %s (ensemble %s) from its JobID annotation", uid, ensemble)
                return self.snapshots.get(uid) or self.parts.snapshot(record)
        return self.parts.unknown_pod(pod)

    async def _ensemble_of(self, uid: str) -> str:
        """The live ensemble this gateway deployed for pod ``uid``, if the DMS still runs one."""
        if not self.parts.owner:
            return ""
        wanted = {POD_UID_KEY: uid, OWNER_KEY: self.parts.owner}
        try:
            listing = await self.parts.invoke(
                "/dms/node/deployment/list", DeploymentListRequest(metadata=wanted)
            )
        except DmsgwError:
            return ""
        live = [
            d
            for d in listing.deployments or ()
            if (d.metadata or {}).get(POD_UID_KEY) == uid
            and self._owns(d.metadata)
            and DeploymentStatus.parse(d.status)
            not in (DeploymentStatus.COMPLETED, DeploymentStatus.FAILED)
        ]
        return live[-1].orchestrator_id if live else ""

    async def collect_orphans(self) -> list[str]:
        """Delete the pods interLink has demonstrably forgotten (deleted while the gateway was
        down), then shut down the running ensembles of this gateway that no record knows.
        Returns the UIDs of the pods deleted.

        A pod is forgotten when interLink, alive and polling, has asked about other pods a
        whole grace period after it last named this one (or after the gateway took the pod
        on: created, resumed or re-adopted it). A pod nobody has polled yet, however old, is
        never collected, nor one of a gateway that interLink does not poll at all. A stray
        ensemble waits the same way from the gateway's start, since its pod may still be
        re-adopted through its ``JobID`` when interLink first names it."""
        gone = {
            uid: (record.name, self._named.get(uid, self._started_ns))
            for uid, record in self._records.items()
            if record.phase not in (Phase.TERMINAL, Phase.DELETING)
            and self._forgotten(self._named.get(uid, self._started_ns))
        }
        for uid, (name, since) in gone.items():
            silent_s = (self.parts.clock() - since) / NS_PER_SECOND
            log.warning(
                "pod %s was not named by interLink's polls for %.0f s: deleting it", uid, silent_s
            )
            await self.delete(k8s.Pod(metadata=k8s.ObjectMeta(uid=uid, name=name)))
        strays = await self._stray_ensembles() if self._forgotten(self._started_ns) else []
        for ensemble_id in strays:
            log.warning("ensemble %s belongs to no known pod: shutting it down", ensemble_id)
            try:
                await self.parts.invoke(
                    "/dms/node/deployment/shutdown", DeploymentShutdownRequest(ensemble_id)
                )
            except DmsgwError as exc:
                log.info("shutdown of stray ensemble %s: %s", ensemble_id, exc)
        return list(gone)

    def _forgotten(self, since_ns: int) -> bool:
        """Whether interLink has polled other pods at least a grace period after ``since_ns``
        (proof that it is alive and no longer asks about what it last heard of then)."""
        if self._polled_ns is None:
            return False
        return self._polled_ns - since_ns >= self.parts.orphan_grace_s * NS_PER_SECOND

    async def _stray_ensembles(self) -> list[str]:
        """Running ensembles that this gateway deployed for a pod it has no record of. Another
        gateway's, and those without an owner (deployed before the label existed), are not."""
        if not self.parts.owner:
            return []
        try:
            listing = await self.parts.invoke(
                "/dms/node/deployment/list",
                DeploymentListRequest(metadata={OWNER_KEY: self.parts.owner}),
            )
        except DmsgwError:
            return []
        return [
            d.orchestrator_id
            for d in listing.deployments or ()
            if self._owns(d.metadata)
            and (d.metadata or {}).get(POD_UID_KEY)
            and (d.metadata or {}).get(POD_UID_KEY) not in self._records
            and DeploymentStatus.parse(d.status) == DeploymentStatus.RUNNING
        ]


def _name(uid: str) -> str:
    return f"pod/{uid}"


def _settle(future: asyncio.Future[str], reason: str) -> None:
    if not future.done():
        future.set_result(reason)


def _pod(record: PodRecord) -> k8s.Pod:
    return request_data(record).pod


# --- the interLink plugin backend ---------------------------------------------------------


class GatewayBackend:
    """The plugin server's backend: the :class:`Gateway` plus capacity and log files."""

    def __init__(
        self,
        gateway: Gateway,
        resources: AsyncActorRef[ResourceActor],
        *,
        pods_capacity: int,
        closers: list[Callable[[], Awaitable[None]]],
        gpu_prefix: str = GPU_RESOURCE_PREFIX,
    ) -> None:
        self.gateway = gateway
        self.gave_up = gateway.gave_up
        """What ``dmsgw serve`` awaits besides its stop signal (see :attr:`Gateway.gave_up`)."""
        self._resources = resources
        self._pods_capacity = pods_capacity
        self._gpu_prefix = gpu_prefix
        self._closers = closers
        self._advertised: set[str] = set()
        self._orphans: asyncio.Task[None] | None = None

    def start_orphan_collection(self, every_s: float = 60.0) -> None:
        """Run :meth:`Gateway.collect_orphans` every ``every_s``; a failing pass is logged and
        the next one runs all the same."""

        async def loop() -> None:
            while True:
                await asyncio.sleep(every_s)
                try:
                    await self.gateway.collect_orphans()
                except DmsgwError as exc:
                    log.warning("orphan collection: %s", exc)
                except Exception:
                    log.exception("bug in the orphan collection")

        self._orphans = asyncio.get_running_loop().create_task(loop())

    async def create(self, pods: list[RetrievedPodData]) -> list[CreateStruct]:
        return await self.gateway.create(pods)

    async def delete(self, pod: k8s.Pod) -> None:
        await self.gateway.delete(pod)

    async def status(self, pods: list[PodRef]) -> list[PodStatus]:
        return await self.gateway.status(pods)

    async def ping(self) -> PingResponse:
        try:
            peers = await self._resources.proxy().free_resources()
        except DMSUnreachableError as exc:
            raise BackendUnavailable(str(exc)) from None
        reply = consolidate_capacity(
            (p.free for p in peers),
            max_pods=self._pods_capacity,
            advertised=self._advertised,
            gpu_prefix=self._gpu_prefix,
        )
        if reply.resources is not None:
            self._advertised |= {a.resource_type for a in reply.resources.accelerators or ()}
        return reply

    def logs(self, request: LogStruct) -> AsyncIterator[bytes]:
        return self.gateway.logs(request)

    async def close(self) -> None:
        if self._orphans is not None:
            self._orphans.cancel()
        if self._resources.stop():
            await self._resources.wait_stopped()
        await self.gateway.close()
        for close in reversed(self._closers):
            await close()


# --- assembling the gateway for ``dmsgw serve`` ------------------------------------------


def unknown_pod_status(pod: k8s.Pod) -> PodStatus:
    """A pod this gateway has no record of: reported ended with an error, so that it does not
    hang in Pending forever (interLink keeps polling a pod until it ends)."""
    ended = k8s.ContainerStatus.model_validate(
        {
            "name": "",
            "ready": False,
            "restartCount": 0,
            "image": "",
            "imageID": "",
            "state": {
                "terminated": {
                    "exitCode": 1,
                    "reason": "NotFound",
                    "message": "the gateway has no record of this pod, and the DMS runs "
                    "no ensemble for it",
                }
            },
        }
    )
    names = [c.name for c in pod.spec.containers] or [pod.metadata.name or "pod"]
    return PodStatus.model_validate(
        {
            "name": pod.metadata.name,
            "UID": pod.metadata.uid,
            "namespace": pod.metadata.namespace,
            "JID": "",
            "containers": [ended.model_copy(update={"name": n}).to_wire() for n in names],
            "initContainers": [],
        }
    )


def catalog_translation(catalog: GpuCatalog, load: Callable[[], Awaitable[None]]) -> Translate:
    """Pods translated against the GPU classes the peers report. Until that catalog has been
    loaded once (by a ping, or by ``load``), a pod that does not translate may only lack it
    (a GPU pod resumed after a restart, before interLink's first ping): it waits for the
    catalog and is translated again, instead of failing for good."""

    def translate(data: RetrievedPodData, generation: int) -> EnsembleConfig:
        options = TranslationOptions(generation=generation, gpu_models=dict(catalog.models))
        try:
            return pod_to_ensemble(data, options=options)
        except PodTranslationError as exc:
            if catalog.loaded:
                raise
            raise TranslationNotReadyError(
                f"waiting for the DMS peers' GPU catalog to translate the pod ({exc})", load
            ) from None

    return translate


async def start_backend(
    config: GatewayConfig, *, metrics: Metrics, clock: Clock = system_clock
) -> GatewayBackend:
    """Build and start the gateway described by ``config`` (the embedded devnet when no DMS
    URL is configured) and return it as the plugin server's backend. ``clock`` times the
    gateway's background passes."""
    from ..devnet.devnet import Devnet

    loop = asyncio.get_running_loop()
    closers: list[Callable[[], Awaitable[None]]] = []
    passphrase = config.passphrase.get_secret_value() if config.passphrase else None
    if config.embedded_devnet:
        devnet = Devnet()
        await devnet.start()
        closers.append(devnet.stop)
        key = _embedded_key(config, passphrase)
        grant = devnet.grant(DID.from_public_key(key.public_key()), ["/dms/node"])
        capabilities = CapabilityContext(provider_from_private_key(key), provide=grant)
        url = devnet.urls[0]
        log.info("no DMS configured: started the embedded devnet (%s)", ", ".join(devnet.urls))
    else:
        name, key = load_key(config.key_name, config.key_dir, passphrase)
        capabilities = load_capabilities(
            config.cap_context, name, key, config.cap_dir, system_clock
        )
        url = str(config.dms_url)
    transport = RestTransport(url)
    closers.append(transport.close)
    security = SecurityContext(key, capabilities)
    node = NodeActor.start(security, transport, loop=loop)
    client = NodeClient(node, transport, security)

    async def stop_node() -> None:
        if node.stop():
            await node.wait_stopped()

    closers.append(stop_node)

    async def invoke(
        behavior: str, payload: Any = None, *, to: str | None = None, timeout_s: float | None = None
    ) -> Any:
        target = Handle.parse(to) if to else None
        return await client.invoke(behavior, payload, to=target, timeout_s=timeout_s)

    catalog = GpuCatalog()
    resources = ResourceActor.start(invoke, catalog=catalog, loop=loop)

    async def load_catalog() -> None:
        await resources.proxy().free_resources()

    parts = GatewayParts(
        invoke=invoke,
        store=PodStore(config.state_path),
        translate=catalog_translation(catalog, load_catalog),
        snapshot=lambda record: snapshot_of(record, now_ns=system_clock()),
        unknown_pod=unknown_pod_status,
        loop=loop,
        clock=clock,
        owner=str(security.did),
    )
    gateway = Gateway(parts)
    await gateway.start()
    backend = GatewayBackend(
        gateway,
        resources,
        pods_capacity=config.pods_capacity,
        closers=closers,
        gpu_prefix=config.gpu_resource_prefix,
    )
    metrics.gauge("pods", "Pods the gateway tracks").set_function(lambda: len(gateway.snapshots))
    metrics.gauge(
        "grant_expiry_seconds",
        "Seconds until the gateway's grant from the DMS runs out (negative: it has; NaN: none)",
    ).set_function(lambda: seconds_until_grant_expiry(capabilities, system_clock))
    backend.start_orphan_collection()
    return backend


def _embedded_key(config: GatewayConfig, passphrase: str | None) -> PrivKey:
    """The configured key when it exists and can be unlocked without asking; otherwise a key
    for this run only (the embedded devnet lives no longer than the process either)."""
    store = KeyStore(config.key_dir)
    if passphrase is not None and store.exists(config.key_name):
        return store.priv_key(config.key_name, passphrase)
    return Ed25519PrivKey.generate()
