"""The orchestrator of one deployment: a child actor of the node that received it.

It deploys as the DMS's ``BasicOrchestrator`` does (``dms/orchestrator/orchestrator.go``,
``bid.go``, ``commit.go``, ``provision.go``, ``teardown.go``), over signed envelopes:

1. ``Preparing``: a round of bids (:mod:`.bidding`). A node without a bid means a new round,
   until the deadline (request expiry minus 15 s, or the devnet's ``deploy_deadline_s``); an
   unreachable pinned peer fails the deployment at once.
2. ``Generating``: one bid per node, chosen at random among those received.
3. ``Committing``: every allocation's resources committed on its provider, then the
   allocations created (``/dms/deployment/allocate``); any failure reverts and starts over.
4. ``Provisioning``: allocations started in ``depends_on`` order.
5. ``Running``: allocations report their state; the :mod:`.ensemble_supervisor` runs health checks
   and applies ``failure_recovery``; an ensemble of tasks only is ``Completed`` when all have ended.
   ``shutdown`` goes ``ShuttingDown`` -> ``Completed``. A deployment that cannot be placed in
   time is ``Failed``.
"""

from __future__ import annotations

import asyncio
import logging
import random
import zlib
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any

from ..behaviors.ensemble import AllocationType, EnsembleConfigV1, NodeConfig
from ..behaviors.executor_stats import AllocationStatsResponse, ExecutorStats
from ..behaviors.status import (
    AllocationInfo,
    AllocationManifest,
    AllocationStatus,
    DeploymentStatus,
    EnsembleManifest,
    NodeManifest,
)
from ..clock import NS_PER_SECOND
from ..transport.envelope import Envelope
from .basic_actor import BasicActor, InvokeError
from .bidding import bid_round
from .changes import ChangeFeed
from .ensemble_supervisor import EnsembleSupervisor
from .log_copies import LogCopies, LogExtent
from .placement import Placed, start_waves
from .protocol import (
    ALLOCATE,
    ALLOCATION_LOGS,
    ALLOCATION_SHUTDOWN,
    ALLOCATION_START,
    ALLOCATION_STATS,
    COMMIT,
    FAILED_TO_DEPLOY,
    REVERT,
    AllocationDeploymentConfig,
    AllocationDeploymentRequest,
    AllocationDeploymentResponse,
    AllocationLogsRequest,
    AllocationLogsResponse,
    AllocationRequest,
    AllocationStartRequest,
    AllocationStatusUpdate,
    BidV1,
    CommitDeploymentRequest,
    DeploymentError,
    DeploymentRevertRequest,
    OkResponse,
    Spec,
    allocation_status_behavior,
    full_allocation_id,
)
from .simulated_node import DmsNode
from .timeouts import Timeouts

log = logging.getLogger(__name__)


class Orchestrator:
    """Deploys and then looks after one ensemble."""

    def __init__(
        self,
        node: DmsNode,
        ensemble_id: str,
        config: EnsembleConfigV1,
        *,
        timeouts: Timeouts,
        rng: random.Random,
        changes: ChangeFeed,
        logs_dir: Path,
    ) -> None:
        self.node = node
        self.id = ensemble_id
        self.config = config
        self.timeouts = timeouts
        self.rng = rng
        self.changes = changes
        self.logs_dir = logs_dir
        self.actor: BasicActor = node.spawn_actor(ensemble_id)
        self.status = DeploymentStatus.PREPARING
        self.history: list[DeploymentStatus] = [DeploymentStatus.PREPARING]
        self.error = ""
        self.failures: list[str] = []
        """Why each attempt that was reverted failed (the DMS keeps only a final error)."""
        self.created_ns = self.updated_ns = node.clock()
        self.completed_ns: int | None = None
        self._nodes: dict[str, BidV1] = {}
        self._allocations: dict[str, Placed] = {}
        self._round = 0
        self._finishing = False
        self._log_copies = LogCopies()
        self.supervisor = EnsembleSupervisor(
            node, self.actor, config.allocations or {}, timeouts, changes.notify
        )
        self.actor.add_behavior(
            Spec(allocation_status_behavior(ensemble_id), AllocationStatusUpdate),
            self._handle_allocation_status,
        )

    # --- state --------------------------------------------------------------------------

    def _set_status(self, status: DeploymentStatus) -> None:
        if status == self.status:
            return
        log.info("deployment %s: %s -> %s", self.id, self.status.go_name, status.go_name)
        self.status = status
        self.history.append(status)
        self._touch()
        if status in (DeploymentStatus.COMPLETED, DeploymentStatus.FAILED):
            self.completed_ns = self.updated_ns
        self.changes.notify()

    def _touch(self) -> None:
        """The deployment changed (its status or an allocation's): ``updated_at`` moves on,
        by a nanosecond at least (a stopped test clock included), as a listing is how a
        client following many deployments learns which changed."""
        self.updated_ns = max(self.node.clock(), self.updated_ns + 1)

    @property
    def placed(self) -> Mapping[str, Placed]:
        """Each allocation by manifest key, as this orchestrator last heard of it (exit code
        and error included, which no DMS reply carries)."""
        return MappingProxyType(self._allocations)

    def manifest(self) -> EnsembleManifest:
        """``EnsembleManifest`` as it stands: where each allocation runs and its state."""
        allocations = {
            a.key: AllocationManifest(
                id=a.id,
                node_id=a.node_id,
                type=a.config.type,
                handle=a.handle,
                dns_name=f"{a.config.dns_name or a.name}.internal",
                priv_addr=self._private_address(a),
                ports=self._ports(a) or None,
                healthcheck=a.config.healthcheck,
                status=a.status.value,
                redundancy_group=a.name,
            )
            for a in self._allocations.values()
        }
        nodes = {
            node_id: NodeManifest(
                id=node_id,
                peer=bid.peer,
                handle=bid.handle,
                pub_address=(bid.pub_address,),
                location=bid.location,
                allocations=tuple(
                    a.key for a in self._allocations.values() if a.node_id == node_id
                ),
            )
            for node_id, bid in self._nodes.items()
        }
        return EnsembleManifest(
            id=self.id,
            metadata=self.config.metadata,
            orchestrator=self.actor.handle,
            allocations=allocations,
            nodes=nodes,
            subnet=self.config.subnet,
        )

    def allocation_info(self) -> dict[str, AllocationInfo]:
        """``AllocationInfo`` by allocation ID (the status reply while running)."""
        return {
            a.id: AllocationInfo(
                allocation_id=a.id,
                status=a.status.value,
                has_health_check=bool(a.config.healthcheck.exec)
                and bool(a.config.healthcheck.type),
                health=a.health,
                resource_limit=a.config.resources,
                dns_name=f"{a.config.dns_name or a.name}.internal",
                ip=self._private_address(a),
                timestamp=self.updated_ns // NS_PER_SECOND,
            )
            for a in self._allocations.values()
        }

    def _subnet(self) -> str:
        """The ensemble's private network (``10.x.0.0/24``; the DMS carves 10/8 too)."""
        return f"10.{zlib.crc32(self.id.encode()) % 250 + 1}.0"

    def _private_address(self, a: Placed) -> str:
        return f"{self._subnet()}.{sorted(self._allocations).index(a.key) + 2}"

    def _ports(self, a: Placed) -> dict[str, int]:
        node = (self.config.nodes or {}).get(a.node_id, NodeConfig())
        return {str(p.public): p.private for p in node.ports or () if p.allocation == a.name}

    # --- deploying ----------------------------------------------------------------------

    async def deploy(self, expire_ns: int) -> None:
        """``Deploy``: until ``Running``, or ``Failed`` at the deadline."""
        deadline = expire_ns - int(self.timeouts.reserve_s * NS_PER_SECOND)
        if self.timeouts.deploy_deadline_s is not None:
            cap = self.node.clock() + int(self.timeouts.deploy_deadline_s * NS_PER_SECOND)
            deadline = min(deadline, cap)
        try:
            await self._deploy(deadline)
        except DeploymentError as exc:
            self.error = f"deploying ensemble: {exc}"
            log.info("deployment %s failed: %s", self.id, self.error)
        finally:  # as the DMS's Deploy: whatever stopped it short of Running is a failure
            if self.status != DeploymentStatus.RUNNING:
                self._set_status(DeploymentStatus.FAILED)

    async def _deploy(self, deadline: int) -> None:
        while self.node.clock() < deadline:
            self._set_status(DeploymentStatus.PREPARING)
            bids = await self._bid(deadline)
            if bids is None:
                log.info("deployment %s: a node got no bid; asking again", self.id)
                continue
            self._set_status(DeploymentStatus.GENERATING)
            self._place(bids)
            self._set_status(DeploymentStatus.COMMITTING)
            try:
                await self._commit()
                self._set_status(DeploymentStatus.PROVISIONING)
                await self._provision()
            except (DeploymentError, InvokeError) as exc:
                log.info("deployment %s: %s; reverting", self.id, exc)
                self.error = str(exc)
                self.failures.append(self.error)
                await self._revert()
                continue
            self._set_status(DeploymentStatus.RUNNING)
            self.supervisor.start(self._allocations)
            for a in list(self._allocations.values()):
                if a.status == AllocationStatus.FAILED:  # it failed while others started
                    self.supervisor.recover(a, self._allocations)
            self._check_tasks_done()
            return
        raise DeploymentError(FAILED_TO_DEPLOY)

    async def _bid(self, deadline: int) -> dict[str, BidV1] | None:
        """One round of bids (``None``: some node got none), if there is time for one."""
        window_ns = int(self.timeouts.bid_window_s * NS_PER_SECOND)
        if self.node.clock() + window_ns > deadline:
            raise DeploymentError(
                f"failed to bid: request bids: not enough time for deployment: {FAILED_TO_DEPLOY}"
            )
        self._round += 1
        return await bid_round(
            self.actor, self.id, self.config, self._round, self.timeouts.bid_window_s, self.rng
        )

    def _place(self, bids: Mapping[str, BidV1]) -> None:
        allocations = self.config.allocations or {}
        self._nodes = dict(bids)
        self._allocations = {}
        for node_id, node in (self.config.nodes or {}).items():
            for name in node.allocations or ():
                a = Placed(
                    name, node_id, full_allocation_id(self.id, node_id, name), allocations[name]
                )
                self._allocations[a.key] = a
        self.changes.notify()

    def _on_node(self, node_id: str) -> list[Placed]:
        return [a for a in self._allocations.values() if a.node_id == node_id]

    async def _commit(self) -> None:
        """Two phases: commit every allocation's resources, then allocate per node."""

        async def commit(a: Placed) -> None:
            bid = self._nodes[a.node_id]
            request = CommitDeploymentRequest(
                self.id, a.id, a.node_id, a.config.resources, self._ports(a) or None
            )
            reply = await self.actor.invoke(bid.handle, COMMIT, request, self.timeouts.commit_s)
            response = OkResponse.from_json(reply.msg or b"{}")
            if not response.ok:
                raise DeploymentError(
                    f"failed to commit resources: error committing for {a.node_id}: "
                    f"{response.error}: {FAILED_TO_DEPLOY}"
                )

        await _all(commit(a) for a in self._allocations.values())

        async def allocate(node_id: str, bid: BidV1) -> None:
            placed = self._on_node(node_id)
            request = AllocationDeploymentRequest(
                self.id, node_id, {a.id: self._deployment_config(a) for a in placed}
            )
            timeout = self.timeouts.allocate_s * max(1, len(placed))
            reply = await self.actor.invoke(bid.handle, ALLOCATE, request, timeout)
            response = AllocationDeploymentResponse.from_json(reply.msg or b"{}")
            if not response.ok:
                raise DeploymentError(
                    f"failed to allocate resources: allocation for {node_id} failed: "
                    f"{response.error}: {FAILED_TO_DEPLOY}"
                )
            for a in placed:
                handle = (response.allocations or {}).get(a.id)
                if handle is None:
                    raise DeploymentError(
                        f"missing allocation {a.id} for {node_id}: {FAILED_TO_DEPLOY}"
                    )
                a.handle = handle

        await _all(allocate(node_id, bid) for node_id, bid in self._nodes.items())

    def _deployment_config(self, a: Placed) -> AllocationDeploymentConfig:
        scripts = self.config.scripts or {}
        return AllocationDeploymentConfig(
            type=a.config.type,
            executor=a.config.executor,
            resources=a.config.resources,
            execution=a.config.execution,
            provision_scripts={s: scripts[s] for s in a.config.provision or () if s in scripts}
            or None,
            keys=a.config.keys,
            volume=a.config.volume,
            healthcheck=a.config.healthcheck,
        )

    async def _provision(self) -> None:
        """Start the allocations, each wave after the ones it depends on."""
        by_name = {a.name: a for a in self._allocations.values()}

        async def start(a: Placed) -> None:
            request = AllocationStartRequest(
                subnet_ip=self._private_address(a),
                gateway_ip=f"{self._subnet()}.1",
                port_mapping=self._ports(a) or None,
            )
            timeout = self.timeouts.start_timeout_s(bool(a.config.provision))
            reply = await self.actor.invoke(a.handle, ALLOCATION_START, request, timeout)
            response = OkResponse.from_json(reply.msg or b"{}")
            if not response.ok:
                a.status = AllocationStatus.FAILED
                raise DeploymentError(
                    f"provisioning allocations: error starting allocation: {response.error}: "
                    f"{FAILED_TO_DEPLOY}"
                )
            if a.status == AllocationStatus.PENDING:
                a.status = AllocationStatus.RUNNING

        for wave in start_waves(self.config.allocations or {}):
            await _all(start(by_name[name]) for name in wave if name in by_name)
            self.changes.notify()

    async def _revert(self) -> None:
        """``revert``: every node forgets the bid and releases what it committed."""
        await self._forget()
        self._nodes = {}
        self._allocations = {}
        self.changes.notify()

    async def _forget(self) -> None:
        """Every node forgets the bid and its allocations, whose files it removes."""

        async def revert(node_id: str, bid: BidV1) -> None:
            ids = tuple(a.id for a in self._on_node(node_id))
            request = DeploymentRevertRequest(self.id, ids)
            try:
                await self.actor.invoke(bid.handle, REVERT, request, self.timeouts.invoke_s)
            except InvokeError as exc:
                log.info("deployment %s: revert on %s: %s", self.id, node_id, exc)

        await asyncio.gather(*(revert(n, b) for n, b in self._nodes.items()))

    # --- running ------------------------------------------------------------------------

    async def _handle_allocation_status(
        self, msg: Envelope, update: AllocationStatusUpdate
    ) -> None:
        a = next((x for x in self._allocations.values() if x.id == update.allocation_id), None)
        if a is None or a.handle.id != msg.from_.id:
            return None
        try:
            status = AllocationStatus(update.status)
        except ValueError:
            return None
        if a.status == AllocationStatus.TERMINATED or self.status == DeploymentStatus.SHUTTING_DOWN:
            return None
        a.status = status
        if status in (AllocationStatus.COMPLETED, AllocationStatus.FAILED):
            a.exit_code, a.error = update.exit_code, update.error
        self._touch()
        self.changes.notify()
        if status == AllocationStatus.FAILED and self.status == DeploymentStatus.RUNNING:
            self.supervisor.recover(a, self._allocations)
        self._check_tasks_done()
        return None

    def _check_tasks_done(self) -> None:
        """``monitorOnlyTaskManifest``: an ensemble of tasks only completes with its tasks."""
        if self.status != DeploymentStatus.RUNNING or not self._allocations or self._finishing:
            return
        ended = (AllocationStatus.COMPLETED, AllocationStatus.FAILED, AllocationStatus.TERMINATED)
        if all(
            a.config.type == AllocationType.TASK and a.status in ended
            for a in self._allocations.values()
        ):
            self._finishing = True
            self.node.spawn(self._finish(), f"completion of {self.id}")

    async def _finish(self) -> None:
        await self._stop_allocations(keep_status=True)
        self._set_status(DeploymentStatus.COMPLETED)

    async def shutdown(self) -> None:
        """``Shutdown``: stop every allocation; ``ShuttingDown`` then ``Completed``. Each node
        then forgets its allocations, whose sandboxes and logs go with them: a deleted pod
        leaves no file behind (a completed one keeps its logs until it is shut down)."""
        self._set_status(DeploymentStatus.SHUTTING_DOWN)
        await self._stop_allocations(keep_status=False)
        await self._forget()
        self._set_status(DeploymentStatus.COMPLETED)

    async def _stop_allocations(self, *, keep_status: bool) -> None:
        self.supervisor.stop()

        async def stop(a: Placed) -> None:
            request = AllocationRequest(a.id)
            try:
                # The allocation waits out its grace before it answers.
                timeout = self.timeouts.shutdown_s + self.timeouts.stop_grace_s(a.config.execution)
                await self.actor.invoke(a.handle, ALLOCATION_SHUTDOWN, request, timeout)
            except InvokeError as exc:
                log.info("deployment %s: stopping %s: %s", self.id, a.key, exc)
                return
            if not keep_status or a.status == AllocationStatus.RUNNING:
                a.status = AllocationStatus.COMPLETED

        await asyncio.gather(*(stop(a) for a in self._allocations.values()))
        self.changes.notify()

    # --- usage ----------------------------------------------------------------------------

    async def usage(self) -> dict[str, ExecutorStats]:
        """``deployment/status``'s ``allocation_usage``: each allocation's stats, by manifest
        key, asked of the allocation itself; the first that fails fails the whole answer,
        with the DMS's words."""

        async def ask(key: str, a: Placed) -> tuple[str, ExecutorStats]:
            try:
                reply = await self.actor.invoke(
                    a.handle, ALLOCATION_STATS, None, self.timeouts.invoke_s
                )
            except InvokeError as exc:
                raise DeploymentError(
                    f"failed to invoke allocation stats for {key}: {exc}"
                ) from None
            answer = AllocationStatsResponse.from_json(reply.msg or b"{}")
            if not answer.ok:
                raise DeploymentError(f"allocation {key} stats error: {answer.error}")
            return key, answer.stats or ExecutorStats()

        measured = await asyncio.gather(*(ask(k, a) for k, a in self._allocations.items()))
        return dict(measured)

    # --- logs ---------------------------------------------------------------------------

    async def write_logs(self, key: str) -> str:
        """``GetAllocationLogs`` + ``WriteAllocationLogs``: have the allocation's node say
        where its output is, and bring the copies under ``deployments/<id>/<key>`` up to it
        (:mod:`.log_copies`); returns that directory."""
        a = self._allocations.get(key)
        if a is None or a.handle.empty():
            raise DeploymentError(f"node not found for allocation {key} of ensemble {self.id}")
        reply = await self.actor.invoke(
            a.handle, ALLOCATION_LOGS, AllocationLogsRequest(key), self.timeouts.invoke_s
        )
        logs = AllocationLogsResponse.from_json(reply.msg or b"{}")
        if logs.error:
            raise DeploymentError(f"replied with error getting logs for {key}: {logs.error}")
        directory = self.logs_dir / self.id / key
        await self._log_copies.update(
            key,
            directory,
            LogExtent(Path(logs.stdout_file), logs.stdout_length),
            LogExtent(Path(logs.stderr_file), logs.stderr_length),
        )
        return str(directory)

    def close(self) -> None:
        self.supervisor.stop()
        self.actor.stop()


async def _all(steps: Iterable[Any]) -> None:
    """Run ``steps`` concurrently; the first failure is raised after all have ended."""
    results: Sequence[Any] = await asyncio.gather(*steps, return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result
