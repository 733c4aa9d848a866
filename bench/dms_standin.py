"""The DMS stand-in the pod benches share (``follow.py``, ``pods.py``): one embedded-devnet
node in its own process (:mod:`dms_process`), whose deployments run at once, and the gateway's
own DMS client to it.

Every request goes through the devnet's receive path (the REST API, the envelope decoded and
its signature verified, the capability tokens consumed and required, the behavior dispatched,
the reply signed), and the deployment behaviors are the devnet's own handlers (``list``,
``status``, ``manifest``, ``logs``, ``shutdown``), whose ``list`` filters, sorts and writes
every deployment it holds, as a DMS's does.

What the stand-in skips: ``deployment/new`` records a deployment that runs at once (its
allocations ``running``) instead of bidding and starting a process, so that 10,000 pods can
run on one machine; it commits no resources, so the node offers room for every pod a bench
runs (:data:`PROFILE`). It leaves what a DMS and the started container would have left: a
manifest that lists each allocation on the ensemble's node (this node's peer), and per
allocation a log holding what the gateway's wrapper prints when it starts the command (its
start marker, on stderr and on stdout), written under the node's log directory when
``deployment/logs`` first asks for it, as a DMS writes its copy of the output it has; a
shutdown stops the allocations and forgets their logs, as the devnet's orchestrator does. A
listing filtered by one pod's UID (each create's check that its pod was not deployed already)
is answered from an index, where a DMS scans every deployment: against a scan, 32 creates in
flight timed out from ~2,000 deployments on this machine, so the creates' DMS side here is
cheaper than a DMS's. Every other listing (the gateway's board, its recovery) scans.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import shutil
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dmsgw
from dmsgw.behaviors.deployment import (
    DeploymentListRequest,
    DeploymentListResponse,
    NewDeploymentRequest,
    NewDeploymentResponse,
)
from dmsgw.behaviors.resources import CPU, RAM, Disk, Resources
from dmsgw.behaviors.status import (
    AllocationInfo,
    AllocationManifest,
    AllocationStatus,
    DeploymentStatus,
    EnsembleManifest,
    NodeManifest,
)
from dmsgw.devnet.devnet import Devnet, node_key
from dmsgw.devnet.handlers_deployment import Deployments
from dmsgw.devnet.protocol import full_allocation_id, manifest_key
from dmsgw.devnet.resource_ledger import NodeProfile
from dmsgw.interlink.records.pod_record import POD_UID_KEY
from dmsgw.interlink.translate.run_markers import STARTED_MARKER
from dmsgw.keys.crypto import Ed25519PrivKey
from dmsgw.keys.did import DID
from dmsgw.keys.trust import provider_from_private_key
from dmsgw.keys.ucan import Action, CapabilityContext
from dmsgw.transport.envelope import Envelope
from dmsgw.transport.rest import RestTransport

SEED = "bench-follow"
GIB = 2**30
_ROOM = Resources(  # room for 100,000 pods of the benches' size (100m CPU, 64 MiB)
    cpu=CPU(clock_speed=3.2e9, cores=10_000.0, architecture="x86_64", vendor="GenuineIntel"),
    ram=RAM(size=8192 * GIB),
    disk=Disk(size=65536 * GIB),
)
PROFILE = NodeProfile("bench stand-in", _ROOM, _ROOM)
"""The stand-in node's machine and offer: room for every pod a bench runs, as its deployments
commit none of it (a DMS's free resources shrink as its deployments run, and the gateway's
admission stops at them; against the devnet's own offer, which never shrank, the admission let
one batch of pods through each recheck, and the bench charged the waits to the gateway:
bench/README.md, issue 28's ``pods.py`` section)."""
KEY = Ed25519PrivKey(bytes(range(100, 132)))
STARTED_OUTPUT = (STARTED_MARKER + "\n").encode()
"""What the wrapper has printed, on each stream, once it started the command."""


class RunningDeployment:
    """A deployment that runs at once, as the devnet's handlers read an orchestrator: its
    allocations on the ensemble's nodes, all on this peer, each with the log its wrapper's
    start leaves."""

    def __init__(
        self, ensemble_id: str, config: Any, clock: Callable[[], int], peer: str, logs: Path
    ) -> None:
        self.id = ensemble_id
        self.config = config
        self.status = DeploymentStatus.RUNNING
        self._clock = clock
        self.created_ns = self.updated_ns = clock()
        self.completed_ns: int | None = None
        self._logs = logs / ensemble_id
        self._peer = peer
        self._nodes = {
            manifest_key(node, name): node
            for node, placed in (config.nodes or {}).items()
            for name in placed.allocations or ()
        }
        self._allocations = {
            key: AllocationInfo(
                allocation_id=full_allocation_id(ensemble_id, node, key.split(".", 1)[1]),
                status=AllocationStatus.RUNNING.value,
            )
            for key, node in self._nodes.items()
        }

    def allocation_info(self) -> dict[str, AllocationInfo]:
        return {info.allocation_id: info for info in self._allocations.values()}

    def manifest(self) -> EnsembleManifest:
        """Each allocation on its node, each node on this peer."""
        allocations = {
            key: AllocationManifest(
                id=info.allocation_id,
                node_id=self._nodes[key],
                dns_name=f"{key.split('.', 1)[1]}.internal",
                status=info.status,
            )
            for key, info in self._allocations.items()
        }
        nodes = {
            node: NodeManifest(
                id=node,
                peer=self._peer,
                allocations=tuple(k for k, n in self._nodes.items() if n == node),
            )
            for node in dict.fromkeys(self._nodes.values())
        }
        return EnsembleManifest(id=self.id, allocations=allocations, nodes=nodes or None)

    async def write_logs(self, key: str) -> str:
        """The allocation's log files, written at the first ask: the output they copy never
        grows after the start, so later asks find them up to date."""
        if key not in self._allocations or self.status != DeploymentStatus.RUNNING:
            raise OSError(f"no allocation {key} running in ensemble {self.id}")
        directory = self._logs / key
        if not directory.is_dir():
            directory.mkdir(parents=True)
            for name in ("stdout.log", "stderr.log"):
                (directory / name).write_bytes(STARTED_OUTPUT)
        return str(directory)

    async def shutdown(self) -> None:
        """Every allocation stopped and its logs forgotten, then ``Completed``."""
        completed = AllocationStatus.COMPLETED.value
        self._allocations = {
            key: dataclasses.replace(info, status=completed)
            for key, info in self._allocations.items()
        }
        shutil.rmtree(self._logs, ignore_errors=True)
        self.status = DeploymentStatus.COMPLETED
        self.updated_ns = self.completed_ns = self._clock()

    def close(self) -> None:
        pass


class StandIn:
    """``deployment/new`` and ``list`` of the stand-in (see the module docstring)."""

    def __init__(self, deployments: Deployments, peer: str) -> None:
        self.deployments = deployments
        self.peer = peer
        self.by_pod: dict[str, list[str]] = collections.defaultdict(list)

    async def new(self, msg: Envelope, request: NewDeploymentRequest) -> NewDeploymentResponse:
        v1 = request.ensemble.v1
        if v1 is None:
            return NewDeploymentResponse(status="ERROR", error="empty ensemble config")
        ensemble_id = str(uuid.uuid4())
        self.deployments.orchestrators[ensemble_id] = RunningDeployment(  # type: ignore[assignment]
            ensemble_id, v1, self.deployments.node.clock, self.peer, self.deployments.logs_dir
        )
        self.by_pod[(v1.metadata or {}).get(POD_UID_KEY, "")].append(ensemble_id)
        return NewDeploymentResponse(status="OK", ensemble_id=ensemble_id)

    async def list(self, msg: Envelope, request: DeploymentListRequest) -> DeploymentListResponse:
        uid = (request.metadata or {}).get(POD_UID_KEY)
        if uid is None:  # the board's: every deployment scanned, as by a DMS
            return await self.deployments._list(msg, request)
        found = [self.deployments.orchestrators[i] for i in self.by_pod.get(uid, ())]
        wanted = request.metadata or {}
        infos = tuple(
            self.deployments._info(o)
            for o in found
            if all((o.config.metadata or {}).get(k) == v for k, v in wanted.items())
        )
        return DeploymentListResponse(deployments=infos, total=len(infos))


def serve_dms(port: int) -> None:
    """The child process: one devnet node, its deployments stood in for, until killed."""

    async def forever() -> None:
        devnet = Devnet(1, seed=SEED, base_port=port, profiles=[PROFILE], network_namespaces=False)
        await devnet.start()
        node = devnet.nodes[0]
        assert node.deployments is not None
        stand_in = StandIn(node.deployments, node.node.peer_id)
        node.node.add_behavior("/dms/node/deployment/new", stand_in.new)
        node.node.add_behavior("/dms/node/deployment/list", stand_in.list)
        await asyncio.Event().wait()

    asyncio.run(forever())


def gateway_client(url: str, *, max_concurrency: int = 64) -> Any:
    """The gateway's own DMS client to the stand-in at ``url``, under a grant of its node's."""
    dms_key = node_key(SEED, 0)
    dms_ctx = CapabilityContext(provider_from_private_key(dms_key))
    expire = time.time_ns() + 30 * 24 * 3600 * 10**9
    grant = dms_ctx.grant(
        Action.DELEGATE, DID.from_public_key(KEY.public_key()), DID(), None, expire, 0, ["/dms"]
    )
    ctx = CapabilityContext(provider_from_private_key(KEY), provide=grant)
    return dmsgw.connect(
        url,
        key=KEY,
        context=ctx,
        transport=RestTransport(url, max_concurrency=max_concurrency),
        loop=asyncio.get_running_loop(),
    )


class Counted:
    """The client's ``invoke``, counting the calls by behavior."""

    def __init__(self, invoke: Any) -> None:
        self.invoke = invoke
        self.calls: collections.Counter[str] = collections.Counter()

    async def __call__(self, behavior: Any, payload: Any = None, **options: Any) -> Any:
        self.calls[behavior.name.removeprefix("/dms/node/")] += 1
        return await self.invoke(behavior, payload, **options)
