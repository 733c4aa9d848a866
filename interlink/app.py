"""``dmsgw serve``'s gateway, assembled: :func:`start_backend`.

The one module that wires together the configuration (:mod:`~dmsgw.interlink.config`), the
gateway's key and capabilities (:mod:`~dmsgw.keys.loading`), the DMS client (a
:class:`~dmsgw.behaviors.node.NodeClient` over the REST transport) and, when no DMS URL is
configured, the embedded devnet. Everything else in :mod:`dmsgw.interlink` is handed what it
needs, so that tests assemble the same parts over an in-memory DMS.
"""

from __future__ import annotations

import asyncio
import functools
import logging

from ..behaviors.node import NodeActor, NodeClient, seconds_until_grant_expiry
from ..clock import Clock, system_clock
from ..devnet.devnet import Devnet
from ..keys.crypto import Ed25519PrivKey, PrivKey
from ..keys.did import DID
from ..keys.keystore import KeyStore
from ..keys.loading import load_capabilities, load_key
from ..keys.trust import provider_from_private_key
from ..keys.ucan.context import CapabilityContext
from ..transport.rest import RestTransport
from ..transport.security import SecurityContext
from .bodies import PodStatus
from .config import GatewayConfig
from .gateway import Gateway, GatewayParts
from .heap import FREEZE_EVERY
from .pod_record import PodRecord, snapshot_of
from .resources import Capacity, GpuCatalog, ResourceActor
from .server import Metrics
from .store import PodStore
from .translation import Translator

log = logging.getLogger(__name__)


class DmsConnection:
    """The gateway's link to the DMS: the node actor that signs its requests and the transport
    that carries them, and the embedded devnet they go to when it runs one (stopped with it)."""

    def __init__(self, client: NodeClient, devnet: Devnet | None = None) -> None:
        self.client = client
        self._devnet = devnet

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
        return cls(NodeClient(node, transport, security), devnet)

    @property
    def did(self) -> DID:
        """The gateway's DID: the owner label of its ensembles."""
        return self.client.security.did

    async def close(self) -> None:
        """Stop the node actor, close the transport, then stop the embedded devnet."""
        node = self.client.actor
        if node.stop():
            await node.wait_stopped()
        await self.client.transport.close()
        if self._devnet is not None:
            await self._devnet.stop()


async def connect_dms(config: GatewayConfig, loop: asyncio.AbstractEventLoop) -> DmsConnection:
    """The configured DMS under the configured key and capabilities; without a DMS URL, an
    embedded devnet started for this run, which grants the gateway's key ``/dms/node``."""
    passphrase = config.passphrase.get_secret_value() if config.passphrase else None
    if not config.embedded_devnet:
        name, key = load_key(config.key_name, config.key_dir, passphrase)
        capabilities = load_capabilities(
            config.cap_context, name, key, config.cap_dir, system_clock
        )
        return DmsConnection.open(str(config.dms_url), key, capabilities, loop=loop)
    devnet = Devnet()
    await devnet.start()
    key = _embedded_key(config, passphrase)
    grant = devnet.grant(DID.from_public_key(key.public_key()), ["/dms/node"])
    capabilities = CapabilityContext(provider_from_private_key(key), provide=grant)
    log.info("no DMS configured: started the embedded devnet (%s)", ", ".join(devnet.urls))
    return DmsConnection.open(devnet.urls[0], key, capabilities, loop=loop, devnet=devnet)


def _embedded_key(config: GatewayConfig, passphrase: str | None) -> PrivKey:
    """The configured key when it exists and can be unlocked without asking; otherwise a key
    for this run only (the embedded devnet lives no longer than the process either)."""
    store = KeyStore(config.key_dir)
    if passphrase is not None and store.exists(config.key_name):
        return store.priv_key(config.key_name, passphrase)
    return Ed25519PrivKey.generate()


def snapshot_now(record: PodRecord) -> PodStatus:
    """A pod's ``/status`` entry as of the wall clock (the times interLink shows)."""
    return snapshot_of(record, now_ns=system_clock())


async def start_backend(
    config: GatewayConfig, *, metrics: Metrics, clock: Clock = system_clock
) -> Gateway:
    """Build and start the gateway described by ``config`` and return it: the plugin server's
    backend. ``clock`` times the gateway's background passes."""
    loop = asyncio.get_running_loop()
    dms = await connect_dms(config, loop)
    catalog = GpuCatalog()
    resources = ResourceActor.start(dms.client.invoke, catalog=catalog, loop=loop)
    capacity = Capacity(
        resources, pods_capacity=config.pods_capacity, gpu_prefix=config.gpu_resource_prefix
    )
    parts = GatewayParts(
        invoke=dms.client.invoke,
        store=PodStore(config.state_path),
        translate=Translator(catalog, capacity.free_resources),
        snapshot=snapshot_now,
        capacity=capacity,
        loop=loop,
        clock=clock,
        owner=str(dms.did),
        close_dms=dms.close,
        freeze_every=FREEZE_EVERY,
    )
    gateway = Gateway(parts)
    await gateway.start()
    _export_metrics(metrics, gateway, dms.client.security.capabilities)
    gateway.start_orphan_collection()
    return gateway


def _export_metrics(metrics: Metrics, gateway: Gateway, capabilities: CapabilityContext) -> None:
    """The gateway's own gauges on the operator port."""
    metrics.gauge("pods", "Pods the gateway tracks").set_function(
        functools.partial(len, gateway.snapshots)
    )
    metrics.gauge(
        "grant_expiry_seconds",
        "Seconds until the gateway's grant from the DMS runs out (negative: it has; NaN: none)",
    ).set_function(functools.partial(seconds_until_grant_expiry, capabilities, system_clock))
