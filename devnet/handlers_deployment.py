"""``/dms/node/deployment/*``: the deployments this node orchestrates.

As ``dms/node/behaviors_deployment.go`` (newest): ``new`` refuses an envelope expiring within
``MinDeploymentTime`` (59 s), an empty or invalid ensemble, then replies at once with the new
ensemble ID and deploys in the background until the request's expiry minus 15 s; ``status``,
``manifest``, ``info`` and ``list`` read every deployment ever made here (failed ones
included; ``info`` answers the status and manifest, not the allocations' details);
``logs`` brings this host's copy of an allocation's output up to date (decision 115: file to
file, only what is new) and replies with the directory; ``shutdown`` acts on a ``Running``
deployment only.

One refusal is the devnet's own: an allocation without ``entrypoint``/``cmd``, which a DMS
would run from its image and the devnet cannot (it pulls no image). It is refused with the
invalid ensembles, naming the allocation, because a DMS's status reply carries no reason for
a ``Failed`` deployment: deployed, it would retry until its deadline and fail without one.
"""

from __future__ import annotations

import logging
import random
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..behaviors.deployment import (
    DeploymentInfo,
    DeploymentInfoRequest,
    DeploymentInfoResponse,
    DeploymentListRequest,
    DeploymentListResponse,
    DeploymentLogsRequest,
    DeploymentLogsResponse,
    DeploymentManifestRequest,
    DeploymentManifestResponse,
    DeploymentShutdownRequest,
    DeploymentShutdownResponse,
    DeploymentStatusRequest,
    DeploymentStatusResponse,
    NewDeploymentRequest,
    NewDeploymentResponse,
)
from ..behaviors.ensemble import EnsembleConfigV1
from ..behaviors.ensemble_validation import validate_ensemble
from ..behaviors.status import DeploymentStatus
from ..clock import NS_PER_SECOND
from ..transport.envelope import Envelope
from .basic_actor import InvokeError
from .changes import ChangeFeed
from .forwarding import AllocationNetworks
from .images import Images, why_not_runnable
from .orchestrator import Orchestrator
from .protocol import DeploymentError
from .sandbox import SandboxError, command_of, missing_host_paths
from .simulated_node import DmsNode
from .timeouts import Timeouts
from .times import parse_rfc3339, rfc3339

log = logging.getLogger(__name__)

MIN_DEPLOYMENT_S = 59.0
"""``MinDeploymentTime``: a wire rule, not a devnet timing, so it is never shortened."""
NOT_FOUND = "deployment not found"
ORCHESTRATOR_NOT_FOUND = "orchestrator with ID not found"
NOT_RUNNING = "deployment is not running"


class Deployments:
    """The node's orchestrators, by ensemble ID, and the behaviors that reach them."""

    def __init__(
        self,
        node: DmsNode,
        *,
        timeouts: Timeouts,
        rng: random.Random,
        changes: ChangeFeed,
        logs_dir: Path,
        networks: AllocationNetworks | None = None,
        images: Images | None = None,
    ) -> None:
        self.node = node
        self.networks = networks or AllocationNetworks()
        self.images = images or Images(enabled=False)
        self.timeouts = timeouts
        self.rng = rng
        self.changes = changes
        self.logs_dir = logs_dir
        self.orchestrators: dict[str, Orchestrator] = {}
        for name, handler in (
            ("/dms/node/deployment/new", self._new),
            ("/dms/node/deployment/list", self._list),
            ("/dms/node/deployment/status", self._status),
            ("/dms/node/deployment/manifest", self._manifest),
            ("/dms/node/deployment/info", self._deployment_info),
            ("/dms/node/deployment/logs", self._logs),
            ("/dms/node/deployment/shutdown", self._shutdown),
        ):
            node.add_behavior(name, handler)

    async def _new(self, msg: Envelope, request: NewDeploymentRequest) -> NewDeploymentResponse:
        left_s = (msg.opt.exp - self.node.clock()) / NS_PER_SECOND
        if left_s < MIN_DEPLOYMENT_S:
            return NewDeploymentResponse(
                status="ERROR", error="requested deployment time too short"
            )
        v1 = request.ensemble.v1
        if v1 is None:
            return NewDeploymentResponse(status="ERROR", error="empty ensemble config")
        problems = [*map(str, validate_ensemble(request.ensemble)), *self.networks.refusals(v1)]
        reasons = await self._unrunnable(v1)  # the devnet's own words, not the DMS's
        if problems:
            reasons.insert(0, f"failed to validate ensemble configuration: {'; '.join(problems)}")
        if reasons:
            error = "; ".join(reasons)
            log.info("deployment refused: %s", error)
            return NewDeploymentResponse(status="ERROR", error=error)
        ensemble_id = str(uuid.uuid4())
        orchestrator = Orchestrator(
            self.node,
            ensemble_id,
            v1,
            timeouts=self.timeouts,
            rng=self.rng,
            changes=self.changes,
            logs_dir=self.logs_dir,
        )
        self.orchestrators[ensemble_id] = orchestrator
        self.changes.notify()
        self.node.spawn(orchestrator.deploy(msg.opt.exp), f"deployment {ensemble_id}")
        return NewDeploymentResponse(status="OK", ensemble_id=ensemble_id)

    def _info(self, o: Orchestrator) -> DeploymentInfo:
        return DeploymentInfo(
            orchestrator_id=o.id,
            status=o.status.go_name,
            created_at=rfc3339(o.created_ns),
            updated_at=rfc3339(o.updated_ns),
            completed_at=rfc3339(o.completed_ns) if o.completed_ns is not None else None,
            metadata=o.config.metadata,
        )

    async def _list(self, msg: Envelope, request: DeploymentListRequest) -> DeploymentListResponse:
        found = [o for o in self.orchestrators.values() if _matches(o, request)]
        key, _, descending = _sort_key(request.sort_by)
        found.sort(key=key, reverse=descending)
        total = len(found)
        page = found[request.offset :]
        if request.limit > 0:
            page = page[: request.limit]
        has_more = request.limit > 0 and request.offset + len(page) < total
        return DeploymentListResponse(
            deployments=tuple(self._info(o) for o in page),
            total=total,
            has_more=has_more,
            next_offset=request.offset + len(page) if has_more else 0,
        )

    async def _status(
        self, msg: Envelope, request: DeploymentStatusRequest
    ) -> DeploymentStatusResponse:
        o = self.orchestrators.get(request.id)
        if o is None:
            return DeploymentStatusResponse(error=f"failed to get deployment: {NOT_FOUND}")
        if o.status != DeploymentStatus.RUNNING:
            return DeploymentStatusResponse(status=o.status.go_name)
        usage = None
        if request.include_usage:
            try:
                usage = dict(await o.usage())
            except DeploymentError as exc:
                return DeploymentStatusResponse(error=str(exc))
        return DeploymentStatusResponse(
            status=o.status.go_name,
            allocation_info=o.allocation_info() or None,
            allocation_usage=usage,
        )

    async def _manifest(
        self, msg: Envelope, request: DeploymentManifestRequest
    ) -> DeploymentManifestResponse:
        o = self.orchestrators.get(request.id)
        if o is None:
            return DeploymentManifestResponse(error=f"failed to get deployment: {NOT_FOUND}")
        return DeploymentManifestResponse(manifest=o.manifest())

    async def _deployment_info(
        self, msg: Envelope, request: DeploymentInfoRequest
    ) -> DeploymentInfoResponse:
        o = self.orchestrators.get(request.id)
        if o is None:
            return DeploymentInfoResponse(error=f"failed to get deployment: {NOT_FOUND}")
        usage = None
        if request.include_usage and o.status == DeploymentStatus.RUNNING:
            try:
                usage = dict(await o.usage())
            except DeploymentError as exc:
                return DeploymentInfoResponse(id=o.id, error=str(exc))
        return DeploymentInfoResponse(
            id=o.id, status=o.status.go_name, manifest=o.manifest(), usage=usage or None
        )

    async def _logs(self, msg: Envelope, request: DeploymentLogsRequest) -> DeploymentLogsResponse:
        o = self.orchestrators.get(request.ensemble_id)
        if o is None:
            return DeploymentLogsResponse(
                error=f"failed to get orchestrator: {ORCHESTRATOR_NOT_FOUND}"
            )
        try:
            directory = await o.write_logs(request.allocation_name)
        except (DeploymentError, InvokeError, OSError) as exc:
            return DeploymentLogsResponse(error=f"failed to get allocation logs: {exc}")
        return DeploymentLogsResponse(logs_written_to=directory)

    async def _shutdown(
        self, msg: Envelope, request: DeploymentShutdownRequest
    ) -> DeploymentShutdownResponse:
        o = self.orchestrators.get(request.id)
        if o is None:
            return DeploymentShutdownResponse(error=ORCHESTRATOR_NOT_FOUND)
        if o.status != DeploymentStatus.RUNNING:
            return DeploymentShutdownResponse(error=NOT_RUNNING)
        await o.shutdown()
        return DeploymentShutdownResponse(ok=True)

    def close(self) -> None:
        for o in self.orchestrators.values():
            o.close()

    async def _unrunnable(self, v1: EnsembleConfigV1) -> list[str]:
        """Why allocations of ``v1`` cannot run on a devnet node (one line each), so that the
        deployment fails at once: a DMS would accept them, its node's start would fail, and
        it would retry until its deadline and end ``Failed`` without saying why. Two causes:
        the devnet's own limit (no command, and an image it cannot run), and a host directory
        a volume names that does not exist (the devnet's nodes share this host)."""
        reasons = []
        for name, allocation in sorted((v1.allocations or {}).items()):
            params = allocation.execution.params or {}
            image = params.get("image")
            try:
                runs_image = isinstance(image, str) and await self.images.config(image)
                if not command_of(params) and not runs_image:
                    runtime = await self.images.runtime()
                    reasons.append(
                        f"allocation {name}: {why_not_runnable(str(image or ''), runtime is None)}"
                    )
            except SandboxError as exc:
                reasons.append(f"allocation {name}: {exc}")
            reasons += [
                f"allocation {name}: {why}" for why in missing_host_paths(allocation.volume)
            ]
        return reasons


def _matches(o: Orchestrator, request: DeploymentListRequest) -> bool:
    if request.status and int(o.status) not in request.status:
        return False
    metadata = o.config.metadata or {}
    if any(metadata.get(k) != v for k, v in (request.metadata or {}).items()):
        return False
    bounds: Iterable[tuple[str | None, int, bool]] = (
        (request.created_after, o.created_ns, True),
        (request.created_before, o.created_ns, False),
        (request.updated_after, o.updated_ns, True),
        (request.updated_before, o.updated_ns, False),
    )
    for text, value, after in bounds:
        if text is None:
            continue
        limit = parse_rfc3339(text)
        if (after and value < limit) or (not after and value > limit):
            return False
    return True


def _sort_key(sort_by: str) -> tuple[Any, str, bool]:
    """``created_at`` (default), ``updated_at`` or ``status``; a leading ``-`` descends."""
    descending = sort_by.startswith("-")
    field = sort_by.lstrip("-") or "created_at"
    keys = {
        "created_at": lambda o: o.created_ns,
        "updated_at": lambda o: o.updated_ns,
        "status": lambda o: int(o.status),
    }
    return keys.get(field, keys["created_at"]), field, descending
