"""How long the devnet's orchestration waits at each step.

:data:`DMS_TIMEOUTS` are the DMS's own values (``dms/orchestrator/orchestrator.go``,
``supervisor.go``, ``behaviors_bid.go``); a DMS waits 5 s for bids on every deployment, which is
right on a real network and a needless pause on an in-process one, so a devnet defaults to
:data:`DEVNET_TIMEOUTS`. Tests inject shorter ones still, notably ``deploy_deadline_s``: a DMS
keeps retrying an impossible deployment until the request's expiry minus 15 s (a minute or
more); a test wants the ``Failed`` verdict in a second.
"""

from __future__ import annotations

import dataclasses

from ..behaviors.ensemble import STOP_TIMEOUT_PARAM, SpecConfig

MAX_STOP_GRACE_S = 3600.0
"""The longest grace a devnet allocation gets on stop, whatever it asks for."""


@dataclasses.dataclass(frozen=True)
class Timeouts:
    """Orchestration timings, in seconds."""

    bid_window_s: float = 5.0
    """``BidRequestTimeout``: how long bids are collected in each round."""
    commit_s: float = 3.0
    """``CommitDeploymentTimeout``, per allocation of a node."""
    allocate_s: float = 5.0
    """``AllocationDeploymentTimeout``, per allocation of a node."""
    start_s: float = 300.0
    """``AllocationStartTimeout`` (long in the DMS: images may have to be pulled)."""
    provision_s: float = 3600.0
    """How long an allocation's provision scripts may run, on top of ``start_s`` (a devnet
    rule: a DMS runs them inside the container, after its start, where nothing bounds them;
    they may wait for another allocation, e.g. an init container's completion marker)."""
    shutdown_s: float = 15.0
    """``AllocationShutdownTimeout``; also the grace between SIGTERM and SIGKILL."""
    reserve_s: float = 15.0
    """``MinEnsembleDeploymentTime``: deploying stops this long before the request expires."""
    deploy_deadline_s: float | None = None
    """A cap on how long one deployment may try (the devnet's knob; ``None``: as the DMS)."""
    bid_state_s: float = 300.0
    """``bidStateTimeout``: how long a provider keeps a bid open for a commit."""
    health_interval_s: float = 30.0
    """Health check period when an allocation's ``healthcheck.interval`` is 0."""
    health_timeout_s: float = 5.0
    """``HealthCheckTimeout``."""
    health_failures: int = 3
    """Consecutive failed health checks before the allocation is restarted (the supervisor's 3)."""
    max_restarts: int = 3
    """Restarts per allocation under ``failure_recovery`` before it stays down (devnet rule)."""
    invoke_s: float = 30.0
    """Other node-to-node requests (logs, revert, status)."""

    def stop_grace_s(self, execution: SpecConfig) -> float:
        """The grace between SIGTERM and SIGKILL for an allocation running ``execution``: its
        ``stop_timeout`` (Docker's ``StopTimeout``, which the gateway sets to the pod's
        ``terminationGracePeriodSeconds``), else ``shutdown_s``."""
        wanted = (execution.params or {}).get(STOP_TIMEOUT_PARAM)
        if isinstance(wanted, int | float) and not isinstance(wanted, bool) and wanted >= 0:
            return float(min(wanted, MAX_STOP_GRACE_S))
        return self.shutdown_s

    def start_timeout_s(self, provisioned: bool) -> float:
        """How long to wait for an allocation's start (or restart) reply: the provision
        scripts do not count against ``start_s``."""
        return self.start_s + (self.provision_s if provisioned else 0.0)


DMS_TIMEOUTS = Timeouts()
DEVNET_TIMEOUTS = Timeouts(
    bid_window_s=0.3, commit_s=2.0, allocate_s=2.0, start_s=30.0, shutdown_s=5.0
)
TEST_TIMEOUTS = dataclasses.replace(
    DEVNET_TIMEOUTS,
    bid_window_s=0.1,
    deploy_deadline_s=0.6,
    health_interval_s=0.2,
    health_timeout_s=2.0,
    shutdown_s=2.0,
    provision_s=10.0,
)
"""For test suites: quick bids, a 0.6 s cap on hopeless deployments, frequent health checks,
provision scripts cut short after 10 s."""
