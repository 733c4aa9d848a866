"""A devnet: N simulated DMS nodes on one in-process network, each with a REST API on loopback.

Each node has its own Ed25519 identity (derived from the devnet's seed, so a restarted node
and a re-run devnet keep their identities), its own capability context, a machine
(:mod:`.resource_ledger`), and serves the DMS's behaviors. Between nodes, capabilities are granted
as on a DMS network: every node grants every other ``/dms/deployment``, ``/dms/allocation``,
``/dms/ensemble`` and the health check (a provide anchor on the grantee), so that any node can
orchestrate on the others and they can answer; and every node admits chains rooted in any
other node for ``/dms/node``, ``/public`` and ``/broadcast`` (a require anchor), so that a
gateway granted ``/dms/node`` by one node's operator is obeyed across the devnet (one operator's
playground). Outside keys, such as the gateway's, get capabilities with :meth:`Devnet.grant`,
exactly as with ``nunet cap grant``.

:class:`Devnet` runs on the caller's event loop; :class:`BackgroundDevnet` runs one on its own
thread for synchronous callers (a REPL, ``dmsgw devnet up``, pytest). Processes and files of
the devnet live under one temporary directory, removed when it stops. Allocations run as an
unprivileged user when the devnet is root, and die with it however it ends; a working
directory that a dead devnet left behind is removed by the next one to start
(:mod:`.confinement`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import logging
import os
import random
import threading
from collections.abc import Coroutine, Sequence
from pathlib import Path
from typing import Any, TypeVar

from aiohttp import web

from ..clock import NS_PER_SECOND, Clock, system_clock
from ..devnet_files.devnet_record import state_dir
from ..keys.crypto import Ed25519PrivKey
from ..keys.did import DID
from ..keys.trust import provider_from_private_key
from ..keys.ucan.context import CapabilityContext
from ..keys.ucan.token import Action, TokenList
from .cgroups import Cgroups
from .changes import ChangeFeed
from .confinement import (
    Identities,
    RunAs,
    Watchdog,
    check_reachable,
    choose_run_as,
    describe_run_as,
    make_work_dir,
    stale_work_dirs,
)
from .executor import ProcessExecutor, probe_isolation
from .forwarding import AllocationNetworks
from .handlers import install_basic_behaviors
from .handlers_deployment import Deployments
from .handlers_newest import install_newest_behaviors
from .handlers_node import install_node_behaviors
from .host_paths import remove_tree
from .images import Images
from .netns import Namespaces
from .network import Network
from .oci_containers import ImageExecutor
from .protocol import PEER_CAPABILITIES, PEER_TOPICS
from .provider import PUBLIC_ADDRESS, Provider
from .resource_ledger import NodeProfile, ResourceLedger, default_profiles
from .rest_api import make_app
from .sandbox import Isolation, SandboxError
from .simulated_node import DmsNode
from .timeouts import DEVNET_TIMEOUTS, Timeouts
from .userns import UserNamespaces

T = TypeVar("T")

log = logging.getLogger(__name__)

DEFAULT_NODES = 3
DEFAULT_HOST = "127.0.0.1"
DEFAULT_SEED = "default"
API_SHUTDOWN_S = 0.25
"""How long a stopping node's REST API lets requests in flight finish before cutting them, as a
DMS that goes away does. An ``invoke`` waits for its reply until the message expires (30 s
and more), and a stopped node's replies never come."""
OPERATOR_CAPABILITIES = ("/dms/node", "/public", "/broadcast")
"""What a node accepts from chains rooted in the other nodes (gateway grants)."""
ANCHOR_LIFETIME_S = 10 * 365 * 24 * 3600.0


def node_key(seed: str, index: int) -> Ed25519PrivKey:
    """A node's key, derived from the devnet seed: the same seed gives the same identities, so
    a restarted node keeps its identity and a devnet can be described by one word."""
    return Ed25519PrivKey(hashlib.sha256(f"dmsgw-devnet/{seed}/{index}".encode()).digest())


@dataclasses.dataclass
class DevnetNode:
    """A node: the simulated DMS, its machine, its REST server, and (once started) its
    provider and deployment services."""

    node: DmsNode
    profile: NodeProfile
    ledger: ResourceLedger
    runner: web.AppRunner | None = None
    url: str = ""
    provider: Provider | None = None
    deployments: Deployments | None = None
    executor: ProcessExecutor | None = None


class Devnet:
    """``nodes`` simulated DMS nodes (``profiles`` describe their machines; default: the
    heterogeneous trio); ``base_port`` 0 picks free ports; ``run_as``: one unprivileged
    user for every allocation when the devnet is root (default: a user of each pod's own);
    ``work_parent``: where the working directory is made (default: the temporary directory);
    ``network_namespaces``: whether allocations get network namespaces (default:
    where they can be made; ``False``: they share the host's network; ``True``: fail clearly
    where they cannot); ``images``: whether an allocation whose image is in Podman's storage
    runs in a container (default; ``False``: every allocation runs as a host process)."""

    def __init__(
        self,
        nodes: int = DEFAULT_NODES,
        *,
        seed: str = DEFAULT_SEED,
        base_port: int = 0,
        host: str = DEFAULT_HOST,
        profiles: Sequence[NodeProfile] | None = None,
        timeouts: Timeouts = DEVNET_TIMEOUTS,
        isolation: Isolation | None = None,
        clock: Clock = system_clock,
        early_timeout: bool = False,
        run_as: RunAs | None = None,
        work_parent: Path | None = None,
        network_namespaces: bool | None = None,
        images: bool = True,
    ) -> None:
        if nodes < 1:
            raise ValueError("a devnet needs at least one node")
        if profiles is not None and len(profiles) != nodes:
            raise ValueError(f"{nodes} nodes need {nodes} profiles, got {len(profiles)}")
        if not 0 <= base_port <= 65535 - nodes:
            raise ValueError(f"base port {base_port} leaves no room for {nodes} nodes")
        self.network = Network(rng=random.Random(f"{seed}/network"))
        self.rng = random.Random(f"{seed}/orchestration")
        self.changes = ChangeFeed()
        self.clock = clock
        self.seed = seed
        self.host = host
        self.base_port = base_port
        self.timeouts = timeouts
        self.isolation = isolation
        self.early_timeout = early_timeout
        self.run_as = run_as
        self.work_parent = work_parent
        self.root: Path | None = None
        self.watchdog: Watchdog | None = None
        self.cgroups: Cgroups | None = None
        self.identities: Identities | None = None
        """A user of its own for each pod, when the devnet is root and no user was named."""
        self.userns: UserNamespaces | None = None
        """Namespaces of its own for each pod, when the devnet is not root (:mod:`.userns`)."""
        self.network_namespaces = network_namespaces
        self.images = Images(images)
        """The images its nodes run in containers (Podman's storage; probed on first use)."""
        self.networks = AllocationNetworks(PUBLIC_ADDRESS)
        """The allocations' networks (namespaces where they can be made: probed at start)."""
        keys = [node_key(seed, i) for i in range(nodes)]
        contexts = [
            CapabilityContext(provider_from_private_key(k), name="dms", clock=clock) for k in keys
        ]
        _grant_between(contexts, clock() + int(ANCHOR_LIFETIME_S * NS_PER_SECOND))
        self.nodes: list[DevnetNode] = []
        for i, (key, ctx) in enumerate(zip(keys, contexts, strict=True)):
            profile = (profiles or default_profiles(nodes))[i]
            node = DmsNode(key, self.network, name=f"node{i}", capabilities=ctx, clock=clock)
            install_basic_behaviors(node)
            install_newest_behaviors(node)
            self.nodes.append(
                DevnetNode(node, profile, ResourceLedger(profile.hardware, profile.onboarded))
            )

    @property
    def urls(self) -> list[str]:
        return [n.url for n in self.nodes]

    async def start(self) -> None:
        """Make the working directory, serve every node's REST API."""
        if self.root is None:
            isolation = await probe_isolation(self.isolation)
            run_as = choose_run_as(self.run_as)
            self.root = await self._make_work_dir(run_as)
            if run_as is not None and self.run_as is None:
                self.identities = Identities(self.root.name)
                self.identities.remove_stale()
            self.cgroups = await asyncio.to_thread(Cgroups.probe, self.root.name)
            self.networks.namespaces = await self._namespaces(isolation, self.root.name)
            if run_as is None:
                self.userns = await self._user_namespaces(self.root)
            log.info(
                "devnet: work dir %s, %s isolation; %s; %s; %s; %s",
                self.root,
                isolation.value,
                self.describe_identities(),
                self.cgroups.describe(),
                self.networks.describe(),
                self.images.describe(),
            )
            for weaker in self._weaker_boundaries(run_as):
                log.warning("devnet: %s (see the operator guide's security model)", weaker)
            for entry in self.nodes:
                self._services(entry, self.root / entry.node.name, isolation, run_as)
        for i, entry in enumerate(self.nodes):
            await self._serve(entry, self.base_port + i if self.base_port else 0)

    def _weaker_boundaries(self, run_as: RunAs | None) -> list[str]:
        """What keeps pods apart that this devnet cannot have, in words for a warning."""
        weaker = []
        if run_as is None:
            if self.userns is None:
                weaker.append(
                    "not root, and this kernel refuses this user namespaces: every pod runs "
                    "as this process's user, so each can read the others' files and "
                    "environment, and this user's (the gateway's state too)"
                )
        elif self.identities is None:
            weaker.append(
                f"every pod runs as one user ({run_as.describe()}), so each can read the "
                f"others' files and environment"
            )
        if self.networks.namespaces is None and not self.networks.private_loopback:
            weaker.append(
                "no network namespaces: pods share the host's network and reach what "
                "listens on its loopback (the gateway's operator port, the devnet nodes' APIs)"
            )
        return weaker

    def describe_identities(self) -> str:
        """Who the allocations run as, for the start log line and the banner."""
        if self.identities is not None:
            return self.identities.describe()
        if self.userns is not None:
            return self.userns.describe(self.networks.private_loopback)
        return describe_run_as(choose_run_as(self.run_as))

    async def _namespaces(self, isolation: Isolation, prefix: str) -> Namespaces | None:
        """Network namespaces for the allocations, if wanted and possible: an allocation's
        process joins its namespace as root, before ``namespace`` isolation drops to its
        user (``rewrite`` isolation starts it as that user)."""
        if self.network_namespaces is False:
            return None
        namespaces = await Namespaces.probe(prefix) if isolation is Isolation.NAMESPACE else None
        if namespaces is None and self.network_namespaces:
            raise SandboxError(
                "network namespaces need root, `ip` (iproute2), namespace isolation, and a "
                "host that lets this process make namespaces and veth pairs"
            )
        return namespaces

    async def _user_namespaces(self, root: Path) -> UserNamespaces | None:
        """Not root: user, mount, PID and network namespaces for every allocation, where this
        kernel lets this user make them."""
        userns = UserNamespaces.for_this_user(root, state_dir())
        possible, network = await userns.probe()
        if not possible:
            log.debug("devnet: this kernel refuses this user namespaces")
            return None
        self.networks.private_loopback = network and self.network_namespaces is not False
        return userns

    async def _make_work_dir(self, run_as: RunAs | None) -> Path:
        """A new working directory that ``run_as`` can reach, and its watchdog; first those
        that devnets which no longer run left behind are removed."""
        if run_as is not None:
            check_reachable(self.work_parent, run_as)
        for stale in stale_work_dirs(self.work_parent):
            log.info("devnet: removing %s, left by a devnet that no longer runs", stale)
            await asyncio.to_thread(remove_tree, stale)
        root = make_work_dir(self.work_parent)
        if run_as is not None:
            os.chmod(root, 0o711)  # the allocations' user may pass through, not look around
        self.watchdog = Watchdog(root)
        self.watchdog.start()
        return root

    def _services(
        self, entry: DevnetNode, workdir: Path, isolation: Isolation, run_as: RunAs | None
    ) -> None:
        node = entry.node
        entry.executor = ImageExecutor(
            workdir / "allocations",
            isolation,
            workdir / "volumes",
            run_as=run_as if self.identities is None else None,
            watchdog=self.watchdog,
            cgroups=self.cgroups,
            network=self.networks,
            identities=self.identities,
            images=self.images,
            userns=self.userns,
        )
        entry.provider = Provider(
            node, entry.profile, entry.ledger, entry.executor, self.timeouts, self.changes.notify
        )
        entry.deployments = Deployments(
            node,
            timeouts=self.timeouts,
            rng=self.rng,
            changes=self.changes,
            logs_dir=workdir / "deployments",
            networks=self.networks,
            images=self.images,
        )
        install_node_behaviors(
            node, entry.profile, entry.ledger, entry.provider, self.changes.notify
        )

    async def _serve(self, entry: DevnetNode, port: int) -> None:
        runner = web.AppRunner(
            make_app(entry.node, early_timeout=self.early_timeout),
            shutdown_timeout=API_SHUTDOWN_S,
        )
        await runner.setup()
        site = web.TCPSite(runner, self.host, port)
        try:
            await site.start()
        except OSError:
            await runner.cleanup()
            raise
        bound = runner.addresses[0][1]
        entry.runner = runner
        entry.url = f"http://{self.host}:{bound}"
        self.network.set_down(entry.node.peer_id, False)

    async def stop_node(self, index: int) -> None:
        """Fault injection: the node's REST API goes away and the network loses it (its
        allocations keep running, as containers outlive a DMS that lost its network)."""
        entry = self.nodes[index]
        self.network.set_down(entry.node.peer_id, True)
        if entry.runner is not None:
            await entry.runner.cleanup()
            entry.runner = None
        self.changes.notify()

    async def restart_node(self, index: int) -> None:
        """Bring a stopped node back on the same port, with the same identity."""
        entry = self.nodes[index]
        if entry.runner is None:
            await self._serve(entry, int(entry.url.rsplit(":", 1)[1]) if entry.url else 0)
            self.changes.notify()

    async def stop(self) -> None:
        """Stop every node and process; remove the working directory."""
        for i in range(len(self.nodes)):
            await self.stop_node(i)
        for entry in self.nodes:
            await entry.node.cancel_tasks()
        for entry in self.nodes:
            if entry.deployments is not None:
                entry.deployments.close()
            if entry.provider is not None:
                await entry.provider.close()
            entry.node.stop_actors()
        if self.cgroups is not None:
            await asyncio.to_thread(self.cgroups.remove)
            self.cgroups = None
        await self.networks.stop()
        if self.identities is not None:
            self.identities.release_all()
        if self.root is not None:
            await asyncio.to_thread(remove_tree, self.root)
            self.root = None
        await self.images.close()  # what a run cut short left, once its sandbox is gone
        if self.watchdog is not None:
            await self.watchdog.close()
            self.watchdog = None

    def grant(
        self,
        subject: DID,
        caps: Sequence[str] = ("/dms/node",),
        *,
        topics: Sequence[str] = (),
        node: int = 0,
        duration_s: float = 365 * 24 * 3600.0,
        depth: int = 0,
    ) -> TokenList:
        """``nunet cap grant --context dms --cap … [--topic …] <subject>`` on node ``node``
        (broadcasting needs a topic, e.g. ``/nunet``)."""
        return grant_token(
            self.nodes[node].node.capabilities,
            subject,
            caps,
            topics=topics,
            expire=self.clock() + int(duration_s * NS_PER_SECOND),
            depth=depth,
        )


def grant_token(
    ctx: CapabilityContext,
    subject: DID,
    caps: Sequence[str],
    *,
    topics: Sequence[str] = (),
    expire: int,
    depth: int = 0,
) -> TokenList:
    """A delegation of ``caps`` from ``ctx``'s DID to ``subject`` (usable on any audience)."""
    return ctx.grant(
        Action.DELEGATE, subject, DID(), list(topics) or None, expire, depth, list(caps)
    )


def _grant_between(contexts: Sequence[CapabilityContext], expire: int) -> None:
    """The capabilities devnet nodes hold on each other (see the module's docstring)."""
    for ctx in contexts:
        others = [c for c in contexts if c is not ctx]
        provide = [
            t
            for other in others
            for t in grant_token(
                other, ctx.did, PEER_CAPABILITIES, topics=PEER_TOPICS, expire=expire
            ).present()
        ]
        require = [
            t
            for other in others
            for t in grant_token(
                ctx, other.did, OPERATOR_CAPABILITIES, topics=PEER_TOPICS, expire=expire
            ).present()
        ]
        ctx.add_roots(provide=TokenList.of(provide), require=TokenList.of(require))


class BackgroundDevnet:
    """A :class:`Devnet` on its own event loop thread, driven from synchronous code."""

    def __init__(self, devnet: Devnet) -> None:
        self.devnet = devnet
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="dmsgw-devnet", daemon=True
        )

    def start(self) -> Devnet:
        self._thread.start()
        try:
            self.call(self.devnet.start())
        except BaseException:
            self.stop()
            raise
        return self.devnet

    def call(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run a devnet coroutine (``devnet.stop_node(1)``) on the devnet's loop."""
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def stop(self) -> None:
        if not self._thread.is_alive():
            return
        asyncio.run_coroutine_threadsafe(self.devnet.stop(), self._loop).result()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()
