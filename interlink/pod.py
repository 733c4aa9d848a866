"""``PodActor``: one per Kubernetes pod UID, supervising that pod's ensemble on the DMS.

Its life: persist → deploy (retrying transient DMS failures with backoff, never twice for one
attempt) → follow the ensemble's status → apply the pod's ``restartPolicy`` → on delete, shut
the ensemble down until done. A deployment the DMS no longer knows ends the pod (or, under a
``restartPolicy`` that asks for it, is deployed again) instead of being followed forever.
Every transition is written to the store *before* it is acted on (crash-only), and every change
publishes a fresh snapshot that ``/status`` reads without a round trip. The DMS I/O runs in a
follower task that only reports back to the actor, so the actor's state changes one message at
a time.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import json
import logging
import random
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from ..actors.aio import AsyncActor
from ..behaviors.catalog import (
    DEPLOYMENT_LIST,
    DEPLOYMENT_MANIFEST,
    DEPLOYMENT_NEW,
    DEPLOYMENT_SHUTDOWN,
    DEPLOYMENT_STATUS,
)
from ..behaviors.deployment import (
    DeploymentListRequest,
    DeploymentManifestRequest,
    DeploymentShutdownRequest,
    DeploymentStatusRequest,
    DeploymentStatusResponse,
    NewDeploymentRequest,
    NewDeploymentResponse,
)
from ..behaviors.ensemble import EnsembleConfig
from ..behaviors.node import DMSBehaviorError, Invoke
from ..behaviors.status import AllocationStatus, DeploymentStatus, EnsembleManifest
from ..clock import NS_PER_SECOND, Clock, system_clock
from ..errors import DmsgwError
from ..transport.rest import DMSError, DMSErrorKind, TransportError
from . import k8s
from .bodies import PodStatus, RetrievedPodData
from .container_runs import Runs
from .logs import STDERR_LOG, lines_after, log_directory
from .parsing import parse_create_body
from .pod_status import (
    CRASH_LOOP,
    allocation_of,
    container_statuses,
    pod_status,
)
from .run_markers import markers
from .store import PodStore
from .translate import (
    METADATA_GENERATION,
    METADATA_POD_UID,
    allocation_key,
    is_wrapped,
)

log = logging.getLogger(__name__)

POD_UID_KEY = METADATA_POD_UID
ATTEMPT_KEY = METADATA_GENERATION  # one deployment per attempt: its generation
DEPLOYMENT_LOST = "DeploymentLost"
"""``PodRecord.reason`` of a pod whose deployment the DMS no longer knows."""
LOST_AFTER = 3
"""How many status polls in a row must find the deployment unknown before the pod counts it
lost: one answer could come from a DMS that is restarting and has not restored it yet."""


class TranslationNotReadyError(DmsgwError):
    """The pod cannot be translated *yet*: ``wait()`` fetches what is missing (the peers' GPU
    catalog, before the first ping), after which the translation is tried again. Raised by a
    :data:`Translate`; the pod actor waits instead of failing the pod."""

    def __init__(self, message: str, wait: Callable[[], Awaitable[Any]]) -> None:
        super().__init__(message)
        self.wait = wait


class Phase:
    """Where a pod is in its life (stored as text)."""

    PENDING = "pending"  # recorded, not yet deployed
    DEPLOYING = "deploying"  # deployment/new under way for ``attempt``
    RUNNING = "running"  # an ensemble exists; following it
    BACKOFF = "backoff"  # ended; waiting to redeploy (restartPolicy)
    TERMINAL = "terminal"  # ended for good (or failed before deploying)
    DELETING = "deleting"  # shutting the ensemble down


TERMINAL_DMS = {DeploymentStatus.COMPLETED, DeploymentStatus.FAILED}
_NOT_STARTED = frozenset({"", AllocationStatus.PENDING})
_UNHEALTHY = "unhealthy"
END_READ_TRIES = 3
"""How many more polls a follower makes when a log could not be read at the deployment's end."""
MARKER_READ_LIMIT = 1 << 20
"""At most this much of a container's new stderr is read for the wrapper's markers at once
(a container that wrote more between two reads may have runs go uncounted)."""


@dataclasses.dataclass
class PodRecord:
    """What is persisted of a pod (msgpack map; unknown keys ignored, missing defaulted)."""

    uid: str
    namespace: str
    name: str
    jid: str
    request: bytes  # the RetrievedPodData JSON interLink sent
    phase: str = Phase.PENDING
    attempt: int = 0
    restarts: int = 0
    ensemble_id: str = ""
    previous_ensemble_id: str = ""  # the ensemble before the last restart (logs --previous)
    dms_status: str = ""
    reason: str = ""
    message: str = ""
    created_ns: int = 0
    started_ns: int = 0
    finished_ns: int = 0
    running_ns: int = 0  # when the current ensemble was first seen Running (0: not yet)
    backoff: int = 0  # restarts in a row, none after a run of restart_reset_s: the back-off
    observed: dict[str, Any] = dataclasses.field(default_factory=dict)
    runs: dict[str, Any] = dataclasses.field(default_factory=dict)
    """Container name -> its runs, restarts and last run's end (:meth:`Runs.to_map`)."""

    def to_map(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_map(cls, value: Mapping[str, Any]) -> PodRecord:
        names = {f.name for f in dataclasses.fields(cls)}
        fields = {k: v for k, v in value.items() if k in names}
        if not isinstance(fields.get("runs", {}), dict):
            fields["runs"] = {}  # a garbled ledger reads as empty, as a garbled entry of it does
        return cls(**fields)


@dataclasses.dataclass(frozen=True)
class PodPolicy:
    """Timings of a pod's life; tests shrink them."""

    poll_min_s: float = 0.5
    poll_max_s: float = 5.0
    retry_min_s: float = 1.0
    retry_max_s: float = 60.0
    restart_min_s: float = 10.0
    restart_max_s: float = 300.0
    restart_reset_s: float = 600.0
    """A deployment that ran this long resets the restart back-off (as the kubelet's does)."""
    deploy_timeout_s: float = 120.0


DEFAULT_POLICY = PodPolicy()


@dataclasses.dataclass(frozen=True)
class _Observed:
    status: DeploymentStatus
    reply: Any
    manifest: Any = None  # fetched when the deployment ends: how each allocation ended
    runs: Mapping[str, Runs] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class _Deployed:
    attempt: int
    ensemble_id: str


@dataclasses.dataclass(frozen=True)
class _DeployFailed:
    attempt: int
    message: str


@dataclasses.dataclass(frozen=True)
class _Lost:
    """The DMS no longer knows the followed deployment (``error`` is its last answer)."""

    ensemble_id: str
    error: str


@dataclasses.dataclass(frozen=True)
class _ShutDown:
    pass


@dataclasses.dataclass(frozen=True)
class _TaskCrashed:
    error: BaseException | None


Translate = Callable[[RetrievedPodData, int], EnsembleConfig]
"""``translate(pod data, generation)``: the generation (deploy attempt) is part of the ensemble.
It raises :class:`TranslationNotReadyError` when it lacks something it can fetch."""
Snapshot = Callable[["PodRecord"], PodStatus]


class PodActor(AsyncActor):
    """Supervises one pod's ensemble; see the module docstring for its life."""

    mailbox_size = 100

    def __init__(
        self,
        record: PodRecord,
        *,
        invoke: Invoke,
        store: PodStore,
        translate: Translate,
        snapshot: Snapshot,
        snapshots: dict[str, PodStatus],
        on_deleted: Callable[[str], None],
        policy: PodPolicy = DEFAULT_POLICY,
        clock: Clock = system_clock,
        rng: random.Random | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.record = record
        self._invoke = invoke
        self._store = store
        self._translate = translate
        self._snapshot = snapshot
        self._snapshots = snapshots
        self._on_deleted = on_deleted
        self._policy = policy
        self._clock = clock
        self._rng = rng or random.Random()
        self._task: asyncio.Task[None] | None = None
        # deployment/new under way
        self._inflight: asyncio.Future[NewDeploymentResponse] | None = None

    # --- life cycle ---------------------------------------------------------------------

    async def on_start(self) -> None:
        """Resume from the record: a new pod deploys, a known ensemble is followed."""
        self._publish()
        phase = self.record.phase
        if phase in (Phase.PENDING, Phase.DEPLOYING):
            self._run(self._deploy(self.record.attempt if phase == Phase.DEPLOYING else None))
        elif phase == Phase.BACKOFF:  # the ended (or still running) ensemble stops first
            self._run(self._restart(self.record.ensemble_id))
        elif phase == Phase.RUNNING:
            self._run(self._follow(self.record.ensemble_id))
        elif phase == Phase.DELETING:
            self._run(self._shutdown(self.record.ensemble_id))

    async def on_stop(self) -> None:
        await self._cancel()

    def _run(self, coro: Any) -> None:
        self._task = asyncio.get_running_loop().create_task(coro)
        self._task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        """A bug in the follower task crashes the actor, so that its supervisor restarts it
        from the stored record instead of leaving the pod unattended."""
        if task.cancelled() or task.exception() is None:
            return
        with contextlib.suppress(Exception):  # the actor may be stopping already
            self.actor_ref.tell(_TaskCrashed(task.exception()))

    async def _cancel(self) -> None:
        task, self._task = self._task, None
        if task is not None and task is not asyncio.current_task():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def _save(self) -> None:
        await self._store.put(self.record.uid, self.record.to_map())
        self._publish()

    def _publish(self) -> None:
        self._snapshots[self.record.uid] = self._snapshot(self.record)

    # --- what the gateway asks ----------------------------------------------------------

    async def delete(self) -> None:
        """Shut the ensemble down (idempotent); the actor stops when it is done."""
        if self.record.phase == Phase.DELETING:
            return
        await self._cancel()
        self.record.phase = Phase.DELETING
        await self._save()
        self._run(self._shutdown(self.record.ensemble_id))

    # --- messages from the follower task ------------------------------------------------

    async def on_receive(self, message: Any) -> Any:
        if isinstance(message, _Deployed):
            await self._on_deployed(message)
        elif isinstance(message, _DeployFailed):
            await self._on_deploy_failed(message)
        elif isinstance(message, _Observed):
            await self._on_observed(message)
        elif isinstance(message, _Lost):
            await self._on_lost(message)
        elif isinstance(message, _ShutDown):
            await self._on_shut_down()
        elif isinstance(message, _TaskCrashed):
            raise RuntimeError(f"pod {self.record.uid}: follower failed") from message.error
        else:
            raise TypeError(f"PodActor does not handle {message!r}")

    async def _on_deployed(self, message: _Deployed) -> None:
        if self.record.phase != Phase.DEPLOYING or message.attempt != self.record.attempt:
            return
        self.record.phase = Phase.RUNNING
        self.record.ensemble_id = message.ensemble_id
        self.record.dms_status = DeploymentStatus.PREPARING.go_name
        await self._save()
        self._run(self._follow(message.ensemble_id))

    async def _on_deploy_failed(self, message: _DeployFailed) -> None:
        if self.record.phase != Phase.DEPLOYING or message.attempt != self.record.attempt:
            return
        self.record.phase = Phase.TERMINAL
        self.record.reason = "ProviderFailed"
        self.record.message = message.message
        self.record.finished_ns = self._clock()
        await self._save()

    async def _on_observed(self, message: _Observed) -> None:
        if self.record.phase != Phase.RUNNING:
            return
        record = self.record
        record.dms_status = message.status.go_name
        observed = _plain(message.reply)
        if not observed.get("allocation_info") and record.observed.get("allocation_info"):
            # The DMS stops listing allocations when the deployment ends: keep how they ended.
            observed["allocation_info"] = record.observed["allocation_info"]
        if message.manifest is not None:
            observed["manifest"] = _plain(message.manifest)
        record.observed = observed
        record.runs = {name: runs.to_map() for name, runs in message.runs.items()}
        if message.status == DeploymentStatus.RUNNING and not record.started_ns:
            record.started_ns = self._clock()
        if message.status == DeploymentStatus.RUNNING and not record.running_ns:
            record.running_ns = self._clock()
        if message.status == DeploymentStatus.RUNNING and self._service_completed():
            # The DMS restarts a failed service (one_for_one) but leaves one that exited 0,
            # while the ensemble stays Running: restartPolicy Always redeploys the pod.
            await self._cancel()  # the follower of the old ensemble
            record.phase = Phase.BACKOFF
            delay = self._count_restart()
            await self._save()
            self._run(self._restart(record.ensemble_id, delay_s=delay))
            return
        if message.status in TERMINAL_DMS:
            record.finished_ns = self._clock()
            if self._restarts(message.status):
                record.phase = Phase.BACKOFF
                delay = self._count_restart()
                await self._save()
                self._run(self._deploy(None, delay_s=delay))
                return
            record.phase = Phase.TERMINAL
        await self._save()

    async def _on_lost(self, message: _Lost) -> None:
        """The DMS lost the deployment (restarted without it, or dropped it): following it
        would report it running forever. ``Always`` and ``OnFailure`` deploy the pod again;
        ``Never`` ends it, failed, saying why."""
        record = self.record
        if record.phase != Phase.RUNNING or message.ensemble_id != record.ensemble_id:
            return
        record.finished_ns = self._clock()
        record.dms_status = DeploymentStatus.FAILED.go_name
        lost = f"the DMS no longer knows deployment {message.ensemble_id} ({message.error})"
        if request_data(record).pod.spec.restart_policy in ("Always", "OnFailure"):
            log.warning("pod %s: %s; deploying it again", record.uid, lost)
            record.phase = Phase.BACKOFF
            delay = self._count_restart()
            await self._save()
            self._run(self._deploy(None, delay_s=delay))
            return
        log.warning("pod %s: %s; the pod has failed", record.uid, lost)
        record.phase = Phase.TERMINAL
        record.reason = DEPLOYMENT_LOST
        record.message = lost
        await self._save()

    async def _on_shut_down(self) -> None:
        await self._store.delete(self.record.uid)
        self._snapshots.pop(self.record.uid, None)
        self._on_deleted(self.record.uid)
        self.actor_ref.stop()

    def _restarts(self, status: DeploymentStatus) -> bool:
        """``restartPolicy``: Always redeploys, OnFailure when the deployment failed or a
        container ended with an error (an ensemble of tasks "completes" either way)."""
        policy = request_data(self.record).pod.spec.restart_policy
        if policy == "Always":
            return True
        if policy != "OnFailure":
            return False
        if status == DeploymentStatus.FAILED:
            return True
        return any(run.exit_code != 0 for run in _latest_runs(self._snapshot(self.record)))

    def _service_completed(self) -> bool:
        """Under ``Always``: a main container (a DMS service) ended with exit code 0."""
        if request_data(self.record).pod.spec.restart_policy != "Always":
            return False
        return any(run.exit_code == 0 for run in _latest_runs(self._snapshot(self.record)))

    def _count_restart(self) -> float:
        """Count a restart and return its delay, as the kubelet's back-off: ``restart_min_s``
        doubled for each restart in a row, at most ``restart_max_s``; a deployment that ran
        ``restart_reset_s`` starts the count again."""
        p, record = self._policy, self.record
        ran_ns = self._clock() - record.running_ns if record.running_ns else 0
        record.backoff = 1 if ran_ns >= p.restart_reset_s * NS_PER_SECOND else record.backoff + 1
        record.restarts += 1
        record.running_ns = 0
        return min(p.restart_max_s, p.restart_min_s * 2.0 ** (record.backoff - 1))

    # --- the follower task: DMS I/O only, results reported back as messages --------------

    async def _deploy(self, attempt: int | None, *, delay_s: float = 0.0) -> None:
        if delay_s:
            await asyncio.sleep(delay_s)
        if attempt is None:
            self.record.attempt += 1
            self.record.phase = Phase.DEPLOYING
            self.record.previous_ensemble_id = (
                self.record.ensemble_id or self.record.previous_ensemble_id
            )
            self.record.ensemble_id = ""
            self.record.runs = {
                name: Runs.from_map(runs).next_ensemble().to_map()
                for name, runs in self.record.runs.items()
            }
            # What the DMS said of the ended ensemble is not the next one's state.
            self.record.dms_status, self.record.observed = "", {}
            await self._save()
        attempt = self.record.attempt
        try:
            ensemble = await self._ensemble(attempt)
        except DmsgwError as exc:
            self.actor_ref.tell(_DeployFailed(attempt, str(exc)))
            return
        tries = 0
        while True:
            existing = await self._find_existing(attempt)
            if existing:
                self.actor_ref.tell(_Deployed(attempt, existing))
                return
            try:
                # Shielded: a delete cancels this task, but a request already sent may still
                # be accepted; the delete then waits for its reply (see _shutdown).
                self._inflight = asyncio.ensure_future(
                    self._invoke(
                        DEPLOYMENT_NEW,
                        NewDeploymentRequest(ensemble),
                        timeout_s=self._policy.deploy_timeout_s,
                    )
                )
                reply = await asyncio.shield(self._inflight)
                self._inflight = None
            except DMSBehaviorError as exc:
                self.actor_ref.tell(_DeployFailed(attempt, str(exc)))
                return
            except (TransportError, DmsgwError) as exc:
                tries += 1
                delay = self._retry_delay(tries)
                log.warning(
                    "pod %s: deploy attempt %d failed (%s); retrying in %.1f s",
                    self.record.uid,
                    attempt,
                    exc,
                    delay,
                )
                await asyncio.sleep(delay)
                continue
            if reply.status.upper() != "OK" or not reply.ensemble_id:
                self.actor_ref.tell(
                    _DeployFailed(attempt, reply.error or f"status {reply.status!r}")
                )
                return
            self.actor_ref.tell(_Deployed(attempt, reply.ensemble_id))
            return

    async def _ensemble(self, attempt: int) -> EnsembleConfig:
        """The pod translated; a translation that is not ready waits for what it lacks (and
        retries with backoff while that cannot be had) instead of failing the pod for good."""
        tries = 0
        while True:
            try:
                return self._translate(request_data(self.record), attempt)
            except TranslationNotReadyError as pending:
                if tries:
                    await asyncio.sleep(self._retry_delay(tries))
                tries += 1
                log.info("pod %s: %s", self.record.uid, pending)
                try:
                    await pending.wait()
                except DmsgwError as exc:
                    log.info("pod %s: still waiting: %s", self.record.uid, exc)

    async def _find_existing(self, attempt: int) -> str:
        """An ensemble already deployed for this attempt (the reply to an earlier try may have
        been lost, or the gateway died after the DMS accepted it): never deploy twice. A
        listing that goes unanswered is asked again: that DMS may well hold one."""
        wanted = {POD_UID_KEY: self.record.uid, ATTEMPT_KEY: str(attempt)}
        tries = 0
        while True:
            try:
                listing = await self._invoke(
                    DEPLOYMENT_LIST, DeploymentListRequest(metadata=wanted)
                )
                break
            except TransportError as exc:
                tries += 1
                delay = self._retry_delay(tries)
                log.warning(
                    "pod %s: cannot list its deployments (%s); retrying in %.1f s",
                    self.record.uid,
                    exc,
                    delay,
                )
                await asyncio.sleep(delay)
            except DmsgwError:
                return ""
        for item in listing.deployments or ():
            meta = item.metadata or {}
            if all(meta.get(k) == v for k, v in wanted.items()):
                return str(item.orchestrator_id)
        return ""

    def _retry_delay(self, tries: int) -> float:
        p = self._policy
        base = min(p.retry_max_s, p.retry_min_s * 2.0 ** (tries - 1))
        return base * (0.8 + 0.4 * self._rng.random())

    async def _follow(self, ensemble_id: str) -> None:
        """Report each change of the deployment's status, of an allocation's status or of a
        container's runs (a task fails while the deployment still runs, and the DMS reports
        allocations only then). A wrapped container whose allocation changed, and every one
        once the deployment has ended, has its log read for the wrapper's markers: the DMS
        reports no exit code. An allocation whose health check fails may be restarted by
        the DMS between two polls: its log is read at every poll, as the start markers are
        the only trace of such a restart."""
        interval = self._policy.poll_min_s
        last: tuple[Any, ...] | None = None
        containers = _wrapped_containers(self.record)  # name -> whether it runs wrapped
        runs = {name: Runs.from_map(self.record.runs.get(name)) for name in containers}
        seen: dict[str, tuple[str, str] | None] = {}
        end_reads_left = END_READ_TRIES
        unknown = 0  # status polls in a row that found the deployment unknown to the DMS
        while True:
            try:
                reply = await self._invoke(DEPLOYMENT_STATUS, DeploymentStatusRequest(ensemble_id))
            except DmsgwError as exc:
                lost = isinstance(exc, DMSError) and exc.kind is DMSErrorKind.NOT_FOUND
                unknown = unknown + 1 if lost else 0
                if unknown >= LOST_AFTER:
                    self.actor_ref.tell(_Lost(ensemble_id, str(exc)))
                    return
                log.info("pod %s: status of %s unavailable: %s", self.record.uid, ensemble_id, exc)
                await asyncio.sleep(interval)
                interval = min(interval * 2, self._policy.poll_max_s)
                continue
            unknown = 0
            status = DeploymentStatus.parse(reply.status)
            allocations = reply.allocation_info or {}
            key = (status, tuple(sorted((k, v.status, v.health) for k, v in allocations.items())))
            ended = status in TERMINAL_DMS
            manifest = await self._manifest(ensemble_id) if ended and key != last else None
            listed = (manifest.allocations or {}) if manifest is not None else {}
            states = {name: _allocation_state(name, listed, allocations) for name in containers}
            read = [
                name
                for name, wraps in containers.items()
                if wraps
                and (
                    ended  # the manifest may have failed too: every log, once more
                    or (
                        states[name][0] not in _NOT_STARTED
                        and (states[name] != seen.get(name) or states[name][1] == _UNHEALTHY)
                    )
                )
            ]
            found = await asyncio.gather(
                *(
                    read_runs(self._invoke, ensemble_id, name, runs[name], uid=self.record.uid)
                    for name in read
                )
            )
            unread = {name for name, got in zip(read, found, strict=True) if got is None}
            if ended and unread and end_reads_left:
                end_reads_left -= 1  # the logs hold the only exit codes: try the end again
                await asyncio.sleep(interval)
                continue
            now = {
                **runs,
                **{n: got for n, got in zip(read, found, strict=True) if got is not None},
            }
            now = {
                # A container whose log could not be read keeps its runs as they were: judging
                # its status without its markers would count a run they may yet show.
                name: now[name]
                if name in unread and not ended
                else now[name].saw(states[name][0], deployment_ended=ended, wrapped=wraps)
                for name, wraps in containers.items()
            }
            # A container whose log could not be read is read again at the next poll.
            seen = {name: seen.get(name) if name in unread else states[name] for name in states}
            if key != last or now != runs:
                self.actor_ref.tell(_Observed(status, reply, manifest, now))
                interval = self._policy.poll_min_s
                last, runs = key, now
                if ended:
                    return
            else:
                interval = min(interval * 1.5, self._policy.poll_max_s)
            await asyncio.sleep(interval)

    async def _manifest(self, ensemble_id: str) -> EnsembleManifest | None:
        try:
            reply = await self._invoke(DEPLOYMENT_MANIFEST, DeploymentManifestRequest(ensemble_id))
        except DmsgwError as exc:
            log.info("pod %s: manifest of %s unavailable: %s", self.record.uid, ensemble_id, exc)
            return None
        return reply.manifest

    async def _shutdown(self, ensemble_id: str) -> None:
        if not ensemble_id and self.record.attempt:  # deleted while deploying
            ensemble_id = await self._deployed_anyway()
        await self._stop(ensemble_id)
        self.actor_ref.tell(_ShutDown())

    async def _deployed_anyway(self) -> str:
        """The ensemble of a deployment/new that the delete cut short, if the DMS took it."""
        inflight, self._inflight = self._inflight, None
        if inflight is not None:
            try:
                reply: NewDeploymentResponse | None = await inflight
            except Exception:  # refused or lost: the listing tells
                reply = None
            if reply is not None and reply.ensemble_id:
                return reply.ensemble_id
        return await self._find_existing(self.record.attempt)

    async def _restart(self, ensemble_id: str, *, delay_s: float = 0.0) -> None:
        """Stop the ensemble (at once when it has ended already), then deploy the next."""
        await self._stop(ensemble_id)
        await self._deploy(None, delay_s=delay_s)

    async def _stop(self, ensemble_id: str) -> None:
        tries = 0
        while ensemble_id:
            try:
                state = await self._invoke(DEPLOYMENT_STATUS, DeploymentStatusRequest(ensemble_id))
                status = DeploymentStatus.parse(state.status)
                if status in TERMINAL_DMS or status == DeploymentStatus.UNKNOWN:
                    break
                if status == DeploymentStatus.RUNNING:
                    await self._invoke(DEPLOYMENT_SHUTDOWN, DeploymentShutdownRequest(ensemble_id))
            except DmsgwError as exc:
                if isinstance(exc, DMSError) and exc.kind is DMSErrorKind.NOT_FOUND:
                    break  # the DMS no longer knows it: nothing left to stop
                log.info("pod %s: shutdown of %s: %s", self.record.uid, ensemble_id, exc)
            tries += 1
            await asyncio.sleep(min(self._retry_delay(tries), self._policy.poll_max_s))


def _latest_runs(status: PodStatus) -> list[k8s.ContainerStateTerminated]:
    """How each main container's latest run ended, for those whose run has ended: reported
    ``terminated``, or waiting to run again with that run as its last state."""
    runs = []
    for c in status.containers:
        waiting = c.state.waiting
        if c.state.terminated is not None:
            runs.append(c.state.terminated)
        elif waiting is not None and waiting.reason == CRASH_LOOP and c.last_state.terminated:
            runs.append(c.last_state.terminated)
    return runs


def _wrapped_containers(record: PodRecord) -> dict[str, bool]:
    """Each container of the pod, init containers first, and whether it runs wrapped: what a
    follower needs of the pod, without keeping the parsed pod alive as long as it follows."""
    pod = request_data(record).pod
    return {c.name: is_wrapped(pod, c) for c in (*pod.spec.init_containers, *pod.spec.containers)}


def request_data(record: PodRecord) -> RetrievedPodData:
    """The ``/create`` body the record keeps (it was valid when stored)."""
    return _parsed_request(record.request)


@functools.lru_cache(maxsize=256)
def _parsed_request(request: bytes) -> RetrievedPodData:
    """A pod's stored body is read on every snapshot and restart decision, and never changes:
    parse it once (bounded, so 10,000 pods do not keep 10,000 parsed copies)."""
    return parse_create_body(request)[0]


async def read_runs(
    invoke: Invoke, ensemble_id: str, container: str, runs: Runs, *, uid: str
) -> Runs | None:
    """``runs`` after the markers that the container's stderr gained since the last read;
    ``None`` when the log cannot be had (pod ``uid`` names it in the log message)."""
    try:
        directory = await log_directory(invoke, ensemble_id, allocation_key(container))
        text, read_to = await asyncio.to_thread(
            lines_after, directory / STDERR_LOG, runs.read_to, MARKER_READ_LIMIT
        )
    except (DmsgwError, OSError) as exc:
        log.info("pod %s: log of %s unavailable: %s", uid, container, exc)
        return None
    return runs.read(markers(text), read_to)


def _allocation_state(
    name: str, listed: Mapping[str, Any], allocations: Mapping[str, Any]
) -> tuple[str, str]:
    """A container's allocation status and health, from the live info or the manifest."""
    status, info, _ = allocation_of(name, listed, allocations)
    return status, info.health if info is not None else ""


def _plain(reply: Any) -> dict[str, Any]:
    """A reply as a plain map, to persist what was last observed."""
    raw = reply.to_json() if hasattr(reply, "to_json") else b"{}"
    value = json.loads(raw)
    return value if isinstance(value, dict) else {}


def snapshot_of(record: PodRecord, *, now_ns: int) -> PodStatus:
    """The ``/status`` entry for a pod record: its containers as Kubernetes sees them."""
    pod = request_data(record).pod
    observed = DeploymentStatusResponse.from_json(json.dumps(record.observed or {}))
    status = record.dms_status or DeploymentStatus.PREPARING.go_name
    if record.phase == Phase.TERMINAL and record.reason == "ProviderFailed":
        status = DeploymentStatus.FAILED.go_name
    containers = (*pod.spec.init_containers, *pod.spec.containers)
    runs = {c.name: Runs.from_map(record.runs.get(c.name)) for c in containers}
    seen = {name: own.observation(record.restarts) for name, own in runs.items()}
    manifest = (
        EnsembleManifest.from_json(json.dumps(record.observed["manifest"]))
        if record.observed.get("manifest")
        else None
    )
    statuses = container_statuses(
        pod,
        status,
        manifest,
        now=datetime.fromtimestamp(now_ns / NS_PER_SECOND, UTC),
        allocation_info=observed.allocation_info,
        observations=seen,
        error=record.message or observed.error,
        final=record.phase == Phase.TERMINAL,
    )
    return pod_status(pod, record.jid, statuses)
