"""``dmsgw serve``'s gateway, assembled: :func:`start_backend`.

The one module that wires together the configuration
(:mod:`~dmsgw.interlink.configuration.serve_config`), the gateway's key and capabilities
(:mod:`~dmsgw.keys.loading`), the DMS client (a :class:`~dmsgw.behaviors.node.NodeClient` over the
REST transport), the state bound to its DMS (:mod:`~dmsgw.interlink.state.state_binding`) and, when
asked for (``devnet``), the embedded devnet. Everything else in :mod:`dmsgw.interlink` is handed
what it needs, so that tests assemble the same parts over an in-memory DMS.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable

from prometheus_client import Gauge

from ..behaviors.catalog import Behavior, Rep, Req, require_in_version
from ..behaviors.dms_version import learn_dms_version
from ..behaviors.node import (
    NodeActor,
    NodeClient,
    ReplyError,
    grant_expiry,
    seconds_until_grant_expiry,
)
from ..clock import Clock, system_clock
from ..devnet.devnet import Devnet
from ..keys.crypto import Ed25519PrivKey, PrivKey
from ..keys.did import DID
from ..keys.keystore import KeyStore
from ..keys.loading import load_capabilities, load_key
from ..keys.trust import provider_from_private_key
from ..keys.ucan.context import CapabilityContext
from ..transport.rest import DMSError, RestTransport, TransportError
from ..transport.security import SecurityContext
from .capacity.admission import AdmissionPolicy
from .capacity.resource_actor import Capacity, GpuCatalog, ResourceActor
from .configuration.serve_config import GatewayConfig
from .gateway import Gateway, GatewayParts
from .pods.heap import FREEZE_EVERY
from .pods.pod_translation import Translator
from .records.pod_record import DEFAULT_POLICY, PodPolicy, Snapshot, snapshot_of
from .reports.pod_report import PodReport
from .reports.pod_usage import UsageBook
from .server import DmsCalls, Metrics
from .state.pod_store import PodStore
from .state.state_binding import (
    EMBEDDED_DEVNET,
    DmsIdentity,
    StateBinding,
    StateFromAnotherDmsError,
)
from .translate import TranslationOptions

log = logging.getLogger(__name__)


VersionSeen = Callable[[str], None]
"""Told the DMS's version each time the gateway learns it (the operator port shows it)."""
IdentitySeen = Callable[[DmsIdentity], None]
"""Told who the DMS is each time the gateway learns it; raises if it is not the state's."""


class DmsConnection:
    """The gateway's link to the DMS: the node actor that signs its requests and the transport
    that carries them, and the embedded devnet they go to when it runs one (stopped with it).

    It learns the DMS's version and identity (:meth:`learn_version`) when the gateway starts
    and again on the first call after the DMS could not be reached (it may have come back
    upgraded, or be another DMS), and :meth:`invoke` refuses at once a behavior that version
    does not have."""

    def __init__(
        self, client: NodeClient, devnet: Devnet | None = None, *, where: str = "the DMS"
    ) -> None:
        self.client = client
        self._devnet = devnet
        self.where = where
        self.version: str | None = None
        self.on_version: VersionSeen | None = None
        self.on_identity: IdentitySeen | None = None
        self._lost = False
        self._relearning = asyncio.Lock()

    @classmethod
    def open(
        cls,
        url: str,
        key: PrivKey,
        capabilities: CapabilityContext,
        *,
        loop: asyncio.AbstractEventLoop,
        devnet: Devnet | None = None,
    ) -> DmsConnection:
        """A node actor signing as ``key`` with ``capabilities``, talking to the DMS at ``url``."""
        transport = RestTransport(url)
        security = SecurityContext(key, capabilities)
        node = NodeActor.start(security, transport, loop=loop)
        return cls(NodeClient(node, transport, security), devnet, where=url)

    @property
    def did(self) -> DID:
        """The gateway's DID: the owner label of its ensembles."""
        return self.client.security.did

    async def learn_version(self) -> str:
        """Ask the DMS which version it is (:func:`~dmsgw.behaviors.dms_version.
        learn_dms_version`), log it and tell :attr:`on_version`; a DMS whose wire the gateway
        does not speak raises :class:`~dmsgw.behaviors.dms_version.UnsupportedDmsError`."""
        await self._learn_identity()
        version = await learn_dms_version(self.client.invoke, self.where)
        if version != self.version:
            log.info("the DMS at %s is DMS %s", self.where, version, extra={"dms_version": version})
        self.version = version
        if self.on_version is not None:
            self.on_version(version)
        return version

    async def _learn_identity(self) -> None:
        """Who the DMS is, told to :attr:`on_identity` before anything is asked of it."""
        if self.on_identity is None:
            return
        if self._devnet is not None:
            identity = EMBEDDED_DEVNET
        else:
            identity = DmsIdentity.of(await self.client.transport.handle(refresh=True), self.where)
        self.on_identity(identity)

    async def learn_version_or_defer(self) -> bool:
        """At start: learn the version (and identity) now (``True``), or on the first call
        when the DMS cannot be reached yet (``False``: the gateway starts whether its DMS is
        up or not, as before it asked; it refuses only a DMS that answers and does not speak
        its wire)."""
        try:
            await self.learn_version()
        except TransportError as exc:
            if not _unreachable(exc):
                raise
            log.warning("cannot ask the DMS its version yet (%s): asking on the first call", exc)
            self._lost = True
            return False
        return True

    async def invoke(
        self,
        behavior: Behavior[Req, Rep],
        payload: Req | None = None,
        *,
        to: str | None = None,
        timeout_s: float | None = None,
    ) -> Rep:
        """:meth:`NodeClient.invoke`, for the DMS's version: a behavior it does not have is
        refused before it is sent; the first call after the DMS was unreachable learns its
        version again first."""
        if self._lost:
            async with self._relearning:  # calls waiting here learn it once between them
                if self._lost:
                    await self.learn_version()
                    self._lost = False
        if self.version is not None:
            require_in_version(behavior, self.version)
        try:
            return await self.client.invoke(behavior, payload, to=to, timeout_s=timeout_s)
        except TransportError as exc:
            self._lost = self._lost or _unreachable(exc)
            raise

    async def close(self) -> None:
        """Stop the node actor, close the transport, then stop the embedded devnet."""
        node = self.client.actor
        if node.stop():
            await node.wait_stopped()
        await self.client.transport.close()
        if self._devnet is not None:
            await self._devnet.stop()


async def connect_dms(
    config: GatewayConfig, loop: asyncio.AbstractEventLoop, devnet: Devnet | None = None
) -> DmsConnection:
    """The configured DMS under the configured key and capabilities; with ``devnet`` chosen, an
    embedded devnet started for this run (``devnet``, else a default one), which grants the
    gateway's key ``/dms/node``."""
    passphrase = config.passphrase.get_secret_value() if config.passphrase else None
    if not config.embedded_devnet:
        name, key = load_key(config.key_name, config.key_dir, passphrase)
        capabilities = load_capabilities(
            config.cap_context, name, key, config.cap_dir, system_clock
        )
        return DmsConnection.open(str(config.dms_url), key, capabilities, loop=loop)
    devnet = devnet or Devnet()
    await devnet.start()
    key = _embedded_key(config, passphrase)
    grant = devnet.grant(DID.from_public_key(key.public_key()), ["/dms/node"])
    capabilities = CapabilityContext(provider_from_private_key(key), provide=grant)
    log.info("devnet chosen: started the embedded devnet (%s)", ", ".join(devnet.urls))
    return DmsConnection.open(devnet.urls[0], key, capabilities, loop=loop, devnet=devnet)


def _unreachable(exc: TransportError) -> bool:
    """Whether ``exc`` says the DMS could not be reached (not its answer, nor a bad reply)."""
    return not isinstance(exc, (DMSError, ReplyError))


def _embedded_key(config: GatewayConfig, passphrase: str | None) -> PrivKey:
    """The configured key when it exists and can be unlocked without asking; otherwise a key
    for this run only (the embedded devnet lives no longer than the process either)."""
    store = KeyStore(config.key_dir)
    if passphrase is not None and store.exists(config.key_name):
        return store.unlock(config.key_name, passphrase)
    return Ed25519PrivKey.generate()


def snapshot_by(clock: Clock) -> Snapshot:
    """How a pod's record reads as its ``/status`` entry as of ``clock``: the gateway's own
    clock, which also stamps the containers' runs (the times interLink shows)."""
    return lambda record: snapshot_of(record, now_ns=clock())


async def start_backend(
    config: GatewayConfig,
    *,
    metrics: Metrics,
    clock: Clock = system_clock,
    devnet: Devnet | None = None,
    policy: PodPolicy = DEFAULT_POLICY,
) -> Gateway:
    """Build and start the gateway described by ``config`` and return it: the plugin server's
    backend. ``clock`` times the gateway's background passes; ``devnet`` is the embedded
    devnet to start when ``config`` names no DMS (a default one when ``None``); ``policy`` is how
    its pods poll and retry."""
    loop = asyncio.get_running_loop()
    store = PodStore(config.state_path)
    binding = StateBinding(store)
    try:
        if config.embedded_devnet:
            binding.check(EMBEDDED_DEVNET)  # before a devnet is started for nothing
        dms = await connect_dms(config, loop, devnet)
    except BaseException:
        await store.close()
        raise
    dms.on_version = functools.partial(_show_version, _dms_info(metrics))
    dms.on_identity = binding.check
    try:
        if not await dms.learn_version_or_defer():
            binding.check_unreachable(dms.where)
        return await _assemble(config, dms, store, binding, metrics, clock, policy, loop)
    except BaseException:  # a start-up error closes the DMS's HTTP session, or asyncio says so
        await dms.close()
        await store.close()
        raise


async def _assemble(
    config: GatewayConfig,
    dms: DmsConnection,
    store: PodStore,
    binding: StateBinding,
    metrics: Metrics,
    clock: Clock,
    policy: PodPolicy,
    loop: asyncio.AbstractEventLoop,
) -> Gateway:
    """The gateway over a connected ``dms`` and its opened ``store``, started."""
    catalog = GpuCatalog()
    resources = ResourceActor.start(dms.invoke, catalog=catalog, clock=clock, loop=loop)
    capacity = Capacity(
        resources,
        pods_capacity=config.pods_capacity,
        gpu_prefix=config.gpu_resource_prefix,
        clock=clock,
        grant_expiry=functools.partial(grant_expiry, dms.client.security.capabilities),
    )
    parts = GatewayParts(
        invoke=dms.invoke,
        store=store,
        translate=Translator(catalog, capacity.free_resources, defaults=_pod_defaults(config)),
        snapshot=snapshot_by(clock),
        capacity=capacity,
        loop=loop,
        policy=policy,
        clock=clock,
        owner=str(dms.did),
        close_dms=dms.close,
        freeze_every=FREEZE_EVERY,
        polls_per_s=config.polls_per_s,
        admission=AdmissionPolicy(max_deploying=config.max_deploying),
    )
    gateway = Gateway(parts)
    dms.on_identity = functools.partial(_give_up_on_another_dms, binding, gateway.gave_up)
    await gateway.start()
    gateway.pod_report = PodReport(
        gateway.pods,
        UsageBook(dms.client.invoke),
        clock=clock,
        stale_since=capacity.silent_since,
        waiting=gateway.admission.waiting,
    )
    dms.client.observer = DmsCalls(metrics).observe
    _export_metrics(metrics, gateway, dms.client.security.capabilities)
    gateway.start_orphan_collection()
    return gateway


def _give_up_on_another_dms(
    binding: StateBinding, gave_up: asyncio.Future[str], identity: DmsIdentity
) -> None:
    """A DMS that comes back as another one (its call fails, raising): the gateway stops,
    its state kept for the DMS it was made with."""
    try:
        binding.check(identity)
    except StateFromAnotherDmsError as exc:
        if not gave_up.done():
            gave_up.set_result(str(exc))
        raise


def _pod_defaults(config: GatewayConfig) -> TranslationOptions:
    """What a container that requests and limits neither gets, as configured."""
    return TranslationOptions(
        default_cpu_cores=config.default_cpu_cores,
        default_memory_bytes=config.default_memory_mib * 1024 * 1024,
    )


def _dms_info(metrics: Metrics) -> Gauge:
    """``dmsgw_dms_info{version}``: 1 for the version of the DMS the gateway talks to."""
    return metrics.gauge(
        "dms_info", "The DMS the gateway talks to (1 for its version)", ["version"]
    )


def _show_version(info: Gauge, version: str) -> None:
    """The version learned replaces the one shown (a DMS may come back upgraded)."""
    info.clear()
    info.labels(version=version).set(1)


def _export_metrics(metrics: Metrics, gateway: Gateway, capabilities: CapabilityContext) -> None:
    """The gateway's own gauges on the operator port."""
    metrics.gauge("pods", "Pods the gateway tracks").set_function(
        functools.partial(len, gateway.book.snapshots)
    )
    admission = gateway.admission
    metrics.gauge("pods_waiting_for_capacity", "Pods waiting for DMS capacity").set_function(
        admission.__len__
    )
    metrics.gauge(
        "capacity_wait_oldest_seconds", "How long the pod waiting longest for DMS capacity has"
    ).set_function(admission.oldest_wait_s)
    metrics.gauge(
        "deployments_under_way", "Deployments admitted and not yet running or ended"
    ).set_function(admission.deploying)
    metrics.gauge(
        "grant_expiry_seconds",
        "Seconds until the gateway's grant from the DMS runs out (negative: it has; NaN: none)",
    ).set_function(functools.partial(seconds_until_grant_expiry, capabilities, system_clock))
