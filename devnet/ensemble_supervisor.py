"""Supervision of a running ensemble (``dms/orchestrator/supervisor.go``), by its orchestrator.

* Health: every allocation with a health check is checked every ``interval`` (default
  ``health_interval_s``) through ``/dms/actor/healthcheck``; its state shows as ``health``;
  ``health_failures`` failures in a row restart it, as the DMS supervisor's escalation does.
* Failures: an allocation reported ``failed`` is handled per its ``failure_recovery`` —
  ``stay_down`` (default) leaves it, ``one_for_one`` restarts it, ``one_for_all`` restarts every
  live allocation, ``rest_for_one`` it and those started after it — at most ``max_restarts``
  times per allocation (a devnet rule: the DMS leaves this open).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import Any

from ..behaviors.ensemble import AllocationConfig, AllocationFailureRecovery
from ..behaviors.status import AllocationStatus
from ..clock import NS_PER_SECOND
from .basic_actor import BasicActor, InvokeError
from .placement import Placed, start_waves
from .protocol import ALLOCATION_RESTART, HEALTHCHECK, AllocationRequest, OkResponse
from .simulated_node import DmsNode
from .timeouts import Timeouts

log = logging.getLogger(__name__)


class EnsembleSupervisor:
    """Keeps an ensemble's allocations healthy and applies their ``failure_recovery``."""

    def __init__(
        self,
        node: DmsNode,
        actor: BasicActor,
        allocations: Mapping[str, AllocationConfig],
        timeouts: Timeouts,
        on_change: Callable[[], None],
    ) -> None:
        self.node = node
        self.actor = actor
        self.order = [name for wave in start_waves(allocations) for name in wave]
        self.timeouts = timeouts
        self._on_change = on_change
        self._tasks: list[asyncio.Task[Any]] = []

    def start(self, placed: Mapping[str, Placed]) -> None:
        for a in placed.values():
            if a.config.healthcheck.type:
                self._tasks.append(self.node.spawn(self._health_loop(a), f"health of {a.id}"))

    def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        self._tasks.clear()

    async def _health_loop(self, a: Placed) -> None:
        interval = a.config.healthcheck.interval / NS_PER_SECOND or self.timeouts.health_interval_s
        while True:
            await asyncio.sleep(interval)
            if a.status != AllocationStatus.RUNNING:
                continue
            try:
                reply = await self.actor.invoke(
                    a.handle, HEALTHCHECK, None, self.timeouts.health_timeout_s
                )
                response = OkResponse.from_json(reply.msg or b"{}")
                healthy, why = response.ok, response.error
            except InvokeError as exc:
                healthy, why = False, str(exc)
            previous = a.health
            a.health = "healthy" if healthy else "unhealthy"
            a.health_failures = 0 if healthy else a.health_failures + 1
            if a.health != previous:
                self._on_change()
            if a.health_failures >= self.timeouts.health_failures:
                log.info("%s unhealthy (%s): restarting it", a.id, why)
                a.health_failures = 0
                await self.restart(a)

    def restart_set(self, failed: Placed, placed: Mapping[str, Placed]) -> list[Placed]:
        """Who restarts with ``failed`` under its ``failure_recovery``."""
        policy = failed.config.failure_recovery or AllocationFailureRecovery.STAY_DOWN
        if policy == AllocationFailureRecovery.ONE_FOR_ONE:
            return [failed]
        live = [
            a
            for a in sorted(placed.values(), key=lambda x: self.order.index(x.name))
            if a is failed or a.status in (AllocationStatus.RUNNING, AllocationStatus.FAILED)
        ]
        if policy == AllocationFailureRecovery.ONE_FOR_ALL:
            return live
        if policy == AllocationFailureRecovery.REST_FOR_ONE:
            return live[live.index(failed) :]
        return []

    def recover(self, failed: Placed, placed: Mapping[str, Placed]) -> None:
        """Apply ``failed``'s ``failure_recovery`` (in the background). Those to restart are
        ``restarting`` from now on, before the restart is sent: an ensemble of tasks whose
        failed task is about to run again has not ended."""
        chosen = []
        for a in self.restart_set(failed, placed):
            if a.restarts >= self.timeouts.max_restarts:
                log.info("%s stays down after %d restarts", a.id, a.restarts)
            else:
                self._mark_restarting(a)
                chosen.append(a)
        if chosen:
            self.node.spawn(self._restart_all(chosen), f"recovery of {failed.id}")

    async def _restart_all(self, chosen: list[Placed]) -> None:
        for a in chosen:
            await self.restart(a)

    def _mark_restarting(self, a: Placed) -> None:
        if a.status != AllocationStatus.RESTARTING:
            a.restarts += 1
            a.status = AllocationStatus.RESTARTING
            self._on_change()

    async def restart(self, a: Placed) -> None:
        """``/dms/allocation/restart``: the allocation reports ``running`` once it runs again."""
        self._mark_restarting(a)
        try:
            timeout = self.timeouts.start_timeout_s(bool(a.config.provision))
            reply = await self.actor.invoke(
                a.handle, ALLOCATION_RESTART, AllocationRequest(a.id), timeout
            )
            response = OkResponse.from_json(reply.msg or b"{}")
            error = "" if response.ok else response.error or "the allocation refused"
        except InvokeError as exc:
            error = str(exc)
        if error:
            log.info("restarting %s failed: %s", a.id, error)
            a.status = AllocationStatus.FAILED
            self._on_change()
