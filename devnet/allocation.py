"""An allocation on its compute provider: a child actor of the node and the process it runs.

It answers the orchestrator (``/dms/allocation/start|restart|shutdown|logs`` and the health
check) and reports every change of its state to the orchestrator's
``/dms/ensemble/<id>/allocation/status``: ``running`` when its command starts, then, when the
process ends on its own, ``completed`` (exit code 0) or ``failed`` (anything else, or killed:
128 + the signal; "container was killed due to OOM" when it outgrew ``ram.size`` and the
executor killed its largest process — 137 when that was the main one).
A process the orchestrator stopped ends ``terminated``. Deciding what a failure means for the
ensemble (``failure_recovery``) is the orchestrator's business.

``start`` first gives it its network (a namespace of its own where the devnet can make one)
and opens its public ports (:class:`~dmsgw.devnet.forwarding.AllocationNetworks`), which stay
forwarded to its private ports until it is shut down, whatever its process does.
``start`` (and ``restart``) reply once the provision scripts have run and the command has been
started, so a failing script fails the start with its stderr in the reason; how long the
scripts may take is ``Timeouts.provision_s``, on top of the start timeout.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from ..behaviors.executor_stats import AllocationStatsResponse, ExecutorStats
from ..behaviors.status import AllocationStatus
from ..transport.envelope import Envelope, Handle
from .basic_actor import BasicActor
from .confinement import unreachable_command
from .executor import OOM_ERROR, Execution, ProcessExecutor
from .log_copies import LogExtent
from .protocol import (
    ALLOCATION_LOGS,
    ALLOCATION_RESTART,
    ALLOCATION_SHUTDOWN,
    ALLOCATION_START,
    ALLOCATION_STATS,
    HEALTHCHECK,
    INTERNAL_SPECS,
    AllocationDeploymentConfig,
    AllocationLogsResponse,
    AllocationStartRequest,
    AllocationStatusUpdate,
    OkResponse,
    allocation_status_behavior,
)
from .run_usage import RunMeter
from .sandbox import SandboxError, SandboxPlan
from .simulated_node import DmsNode
from .timeouts import Timeouts

log = logging.getLogger(__name__)


class Allocation:
    """One allocation of an ensemble, hosted by ``node``."""

    def __init__(
        self,
        node: DmsNode,
        allocation_id: str,
        ensemble_id: str,
        config: AllocationDeploymentConfig,
        orchestrator: Handle,
        executor: ProcessExecutor,
        timeouts: Timeouts,
        on_end: Callable[[Allocation], None],
    ) -> None:
        self.node = node
        self.id = allocation_id
        self.ensemble_id = ensemble_id
        self.config = config
        self.orchestrator = orchestrator
        self.executor = executor
        self.timeouts = timeouts
        self._on_end = on_end
        self.status = AllocationStatus.PENDING
        self.exit_code: int | None = None
        self.error = ""
        """Why the last run ended, when the executor knows more than its exit code."""
        self._command_runs = False  # the execution's command has started (its set-up is done)
        self.oom_killed = False
        self.started_ns: list[int] = []
        """When each run of the process started (a restart adds one)."""
        self.plan: SandboxPlan | None = None
        self._mounted = False
        self.execution: Execution | None = None
        self._meter: RunMeter | None = None
        """Measures the current run (``/dms/allocation/stats``)."""
        executor.hold(allocation_id, config)
        self.actor: BasicActor = node.spawn_actor(allocation_id)
        for name, handler in (
            (ALLOCATION_START, self._handle_start),
            (ALLOCATION_RESTART, self._handle_restart),
            (ALLOCATION_SHUTDOWN, self._handle_shutdown),
            (ALLOCATION_LOGS, self._handle_logs),
            (ALLOCATION_STATS, self._handle_stats),
            (HEALTHCHECK, self._handle_healthcheck),
        ):
            self.actor.add_behavior(INTERNAL_SPECS[name], handler)

    @property
    def handle(self) -> Handle:
        return self.actor.handle

    @property
    def pid(self) -> int | None:
        return self.execution.pid if self.execution is not None else None

    # --- behaviors ----------------------------------------------------------------------

    async def _handle_start(self, msg: Envelope, request: AllocationStartRequest) -> OkResponse:
        if self.status == AllocationStatus.RUNNING:
            return OkResponse(ok=True)
        try:
            await self.executor.network.open(self.id, request.port_mapping or {})
            await self._run()
        except (SandboxError, OSError) as exc:
            if self.status != AllocationStatus.TERMINATED:  # not stopped meanwhile
                self.status = AllocationStatus.FAILED
                self._on_end(self)
            await self.executor.network.close(self.id)
            return OkResponse(error=f"start executor: allocation {self.id}: {exc}")
        return OkResponse(ok=True)

    async def _handle_restart(self, msg: Envelope, request: Any) -> OkResponse:
        try:
            await self.restart()
        except (SandboxError, OSError) as exc:
            if self.status != AllocationStatus.TERMINATED:
                self.status = AllocationStatus.FAILED
            return OkResponse(error=f"run allocation: allocation {self.id}: {exc}")
        return OkResponse(ok=True)

    async def _handle_shutdown(self, msg: Envelope, request: Any) -> OkResponse:
        await self.shutdown()
        return OkResponse(ok=True)

    async def _handle_logs(self, msg: Envelope, request: Any) -> AllocationLogsResponse:
        if self.plan is None:
            return AllocationLogsResponse(error=f"allocation {self.id} has not started")
        stdout, stderr = LogExtent.of(self.plan.stdout), LogExtent.of(self.plan.stderr)
        return AllocationLogsResponse(
            stdout_file=str(stdout.path),
            stdout_length=stdout.length,
            stderr_file=str(stderr.path),
            stderr_length=stderr.length,
        )

    async def _handle_stats(self, msg: Envelope, request: Any) -> AllocationStatsResponse:
        """``handleAllocationStats``: the run's usage, measured now; all zeros (nothing
        measured) while it does not run, as the DMS answers."""
        meter = self._meter
        if self.status != AllocationStatus.RUNNING or meter is None:
            return AllocationStatsResponse(ok=True, stats=ExecutorStats())
        try:
            stats = await asyncio.to_thread(meter.measure)
        except OSError as exc:
            return AllocationStatsResponse(error=f"failed to retrieve allocation stats: {exc}")
        return AllocationStatsResponse(ok=True, stats=stats)

    async def _handle_healthcheck(self, msg: Envelope, request: Any) -> OkResponse:
        if self.execution is None or self.status != AllocationStatus.RUNNING:
            return OkResponse(error=f"allocation {self.id} is {self.status.value}")
        check = self.config.healthcheck
        why = await self.executor.check_health(
            self.execution, check, self.timeouts.health_timeout_s
        )
        return OkResponse(ok=not why, error=why)

    # --- the process ----------------------------------------------------------------------

    async def _run(self) -> None:
        """Set up and start the process; returns once its command has been started."""
        if self.plan is None:
            self.plan = await self.executor.prepare(self.id, self.config, self.ensemble_id)
            self._mounted = True
        execution = await self.executor.run(self.plan)
        self.execution, self._command_runs = execution, False
        self.exit_code, self.error, self.oom_killed = None, "", False
        if execution.sampled:
            self.node.spawn(execution.watch_memory(), f"memory of {self.id}")
        try:
            await execution.provisioned(self.timeouts.provision_s)
        except SandboxError:
            self.exit_code = execution.returncode
            if self.execution is execution:
                self.execution = None
            raise
        if self.execution is not execution:
            raise SandboxError("stopped while it was being set up")
        self._command_runs = True
        self.started_ns.append(self.node.clock())
        self._meter = RunMeter(
            execution.pid,
            execution.group,
            self.plan.memory_limit,
            self.node.clock,
            self.started_ns[-1],
        )
        self.status = AllocationStatus.RUNNING
        self.node.spawn(self._watch(execution), f"allocation {self.id}")
        await self._report(AllocationStatus.RUNNING)

    async def _watch(self, execution: Execution) -> None:
        code = await execution.wait()
        execution.kill()  # whatever the command left running in its process group
        if self.execution is not execution or self.status != AllocationStatus.RUNNING:
            return  # stopped or restarted on purpose: reported by whoever did it
        self.exit_code = code
        self.oom_killed = execution.oom_killed
        self.error = OOM_ERROR if execution.oom_killed else ""
        if (
            code == NOT_FOUND_EXIT
            and execution.plan.run_as is not None
            and not execution.plan.image
        ):
            self.error = await asyncio.to_thread(_tell_not_found, execution.plan)
        self.status = AllocationStatus.COMPLETED if code == 0 else AllocationStatus.FAILED
        if self.status == AllocationStatus.COMPLETED:
            self._on_end(self)
        await self._report(self.status)

    async def _stop_process(self) -> None:
        execution, self.execution = self.execution, None
        if execution is not None:
            # The pod's grace is its command's: a set-up still running (provision scripts
            # waiting for an init container) is stopped within the DMS's own timeout.
            grace_s = (
                self.timeouts.stop_grace_s(self.config.execution)
                if self._command_runs
                else self.timeouts.shutdown_s
            )
            self.exit_code = await execution.stop(grace_s)

    async def restart(self) -> None:
        """Stop the process if it runs and start it again (logs are appended to)."""
        self.status = AllocationStatus.RESTARTING
        await self._stop_process()
        await self._run()

    async def shutdown(self) -> None:
        """Stop the process for good and give back the resources, mount points and volumes."""
        if self.status == AllocationStatus.TERMINATED:
            return
        self.status = AllocationStatus.TERMINATED
        await self._stop_process()
        self._on_end(self)
        await self._release()

    async def _release(self) -> None:
        await self.executor.network.close(self.id)
        plan = self.plan if self._mounted else None
        self._mounted = False
        await self.executor.release(self.id, plan)

    def kill(self) -> None:
        """Fault injection: SIGKILL the process group, as an out-of-memory killer would."""
        if self.execution is not None:
            self.execution.kill()

    async def _report(self, status: AllocationStatus) -> None:
        update = AllocationStatusUpdate(
            allocation_id=self.id,
            status=status.value,
            exit_code=self.exit_code or 0,
            error=self.error,
        )
        behavior = allocation_status_behavior(self.ensemble_id)
        msg = self.actor.message(self.orchestrator, behavior, update, self.timeouts.invoke_s)
        if not await self.actor.send(msg):
            log.info("%s: could not report %s to its orchestrator", self.id, status.value)

    async def close(self) -> None:
        """The node stops: end the process and release its sandbox."""
        self.status = AllocationStatus.TERMINATED
        await self._stop_process()
        self.actor.stop()
        await self._release()
        await self.executor.remove_sandbox(self.id, self.plan)


NOT_FOUND_EXIT = 127
"""A shell's exit status for a command it did not find."""


def _tell_not_found(plan: SandboxPlan) -> str:
    """Why the command was not found, when it is on this host where the allocation's user
    cannot reach it: said at the end of its stderr, where the user reads the shell's own
    ``not found`` (``""`` when it is not that). Blocking."""
    assert plan.run_as is not None
    path = plan.environment.get("PATH", "")
    why = unreachable_command(plan.command, path, plan.run_as)
    if why:
        with plan.stderr.open("ab") as stderr:
            stderr.write(why.encode() + b"\n")
    return why
