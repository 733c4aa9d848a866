"""``PodActor``: one per Kubernetes pod UID, supervising that pod's ensemble on the DMS.

Its life: persist → deploy (retrying transient DMS failures with backoff, never twice for one
attempt) → follow the ensemble's status → apply the pod's ``restartPolicy`` (under ``Never`` a
failed init container ends the pod at once, and its ensemble is shut down) → on delete, shut
the ensemble down until done. A deployment the DMS no longer knows ends the pod (or, under a
``restartPolicy`` that asks for it, is deployed again) instead of being followed forever.
Every transition is written to the store *before* it is acted on (crash-only), and every change
publishes a fresh snapshot that ``/status`` reads without a round trip. The DMS I/O runs beside
the actor, in a task or in the steps of a follow (:mod:`~dmsgw.interlink.pods.pod_follower`),
and only reports back to the actor: the actor alone changes the record and saves it, one message
at a time.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
from collections.abc import Coroutine
from typing import Any

from ...actors.aio import AsyncActor
from ...behaviors.status import AllocationStatus, DeploymentStatus
from ...clock import NS_PER_SECOND
from ..capacity.admission import (
    WAITING,
    WAITING_FOR_CAPACITY,
    Order,
    order_of,
    refused_for_capacity,
)
from ..records.container_runs import Runs, latest_runs
from ..records.endpoints import ENDPOINTS_KEY, PLACEMENT_KEY, describe
from ..records.pod_record import (
    DEPLOYMENT_LOST,
    INIT_CONTAINER_FAILED,
    TERMINAL_DMS,
    Kept,
    Phase,
    PodRecord,
    entry_of,
    kept_reply,
    live_allocations,
    plain_reply,
    request_data,
    shown_by,
    stored,
)
from ..records.pod_status import allocation_of
from ..wire.bodies import PodStatus
from .follow_reports import (
    Admitted,
    BackedOff,
    Deployed,
    DeployFailed,
    Ended,
    Lost,
    Observed,
    Queued,
    ShutDown,
)
from .pod_follower import PodFollower
from .pod_phases import GONE, RESUMES, Event, Step, move
from .pod_services import PodServices

log = logging.getLogger(__name__)

_DOWN_FOR_GOOD = {
    "Always": frozenset({AllocationStatus.FAILED, AllocationStatus.COMPLETED}),
    "OnFailure": frozenset({AllocationStatus.FAILED}),
}
"""The allocation statuses, by ``restartPolicy``, of a container that the DMS has left down
in a running ensemble and that the policy runs again (``restarting`` is the DMS's own)."""


@dataclasses.dataclass(frozen=True)
class _TaskCrashed:
    error: BaseException | None


class PodActor(AsyncActor):
    """Supervises one pod's ensemble; see the module docstring for its life."""

    mailbox_size = 100

    def __init__(
        self, record: PodRecord, services: PodServices, *, kept: Kept | None = None, **kwargs: Any
    ) -> None:
        super().__init__(turns=services.turns, **kwargs)
        self.record = record
        self._services = services
        self._follower: PodFollower  # made on start (see _new_follower)
        self._task: asyncio.Future[None] | None = None
        """The follower's work under way: a task, or the steps of a follow (decision 58)."""
        self._shown: Kept | None = kept
        """The record's last ``/status`` entry, with what it was read from (:func:`shown_by`):
        at first the one stored with the record, which the store checked it was
        (:func:`~dmsgw.interlink.records.pod_record.kept_snapshot`)."""

    # --- life cycle ---------------------------------------------------------------------

    async def on_start(self) -> None:
        """Resume from the record: a new pod deploys, a known ensemble is followed."""
        self._follower = self._new_follower()
        if self._shown is None:  # a kept entry was published with the pod (Gateway._child)
            self._publish()
        record = self.record
        step = RESUMES[record.phase]
        if record.phase == Phase.PENDING:  # recorded by a gateway that wrote no first attempt
            await self._next_attempt()
        elif step is Step.QUEUE:  # back in line, in its place
            self._take(step, record.attempt, self._order)
        elif step is Step.DEPLOY:
            self._take(step, record.attempt)
        elif step is Step.BACK_OFF:  # the ended (or still running) ensemble stops first
            stop, runs = record.ensemble_id, dict(record.runs)
            self._take(step, record.attempt, stop=stop, runs=runs)
        elif step is Step.FOLLOW:  # resumed: its snapshot shows what the DMS said
            resumed = bool(record.dms_status)
            self._take(step, record.ensemble_id, dict(record.runs), resumed=resumed)
        elif step is Step.SHUT_DOWN:
            self._take(step, record.ensemble_id, record.attempt)
        elif step is Step.END:
            self._take(step, record.ensemble_id, dict(record.runs))
        self._services.heap.took()  # what the start made (its follower, its task) settles in time

    async def on_stop(self) -> None:
        await self._cancel()
        self._release()  # a restarted actor takes its place again from its record

    def _release(self) -> None:
        """The pod holds no DMS capacity any more: the admission queue may give it out."""
        if self._services.admission is not None:
            self._services.admission.release(self.record.uid)

    @functools.cached_property
    def _order(self) -> Order:
        """The pod's place in the admission queue: its priority, then its creation."""
        record = self.record
        return order_of(request_data(record).pod.spec.priority, record.created_ns, record.uid)

    def _run(self, work: Coroutine[Any, Any, None] | asyncio.Future[None]) -> None:
        self._task = asyncio.ensure_future(work)
        self._task.add_done_callback(self._task_done)

    def _move(self, event: Event) -> Step:
        """Move the pod as :data:`~.pod_phases.MOVES` says for ``event`` (a move it does not
        have is a bug: :class:`~.pod_phases.PhaseError`); the step that follows is returned."""
        found = move(self.record.phase, event)
        self.record.phase = found.end
        return found.step

    def _take(self, step: Step, *args: Any, **kwargs: Any) -> None:
        """Run the follower's ``step`` (its method of that name) as the actor's work."""
        if step not in (Step.NOTHING, Step.FORGET):
            self._run(getattr(self._follower, step.value)(*args, **kwargs))

    def _new_follower(self) -> PodFollower:
        """The pod's follower, which reports through the actor's ref: its results queue
        behind the actor's other messages. Not through the actor itself: actor, follower and
        report would be a reference cycle, left for the cyclic collector when the pod ends
        (and kept by a frozen heap); the ref lets go of the actor when the actor ends."""
        record = self.record
        return PodFollower(
            record.uid,
            record.request,
            self._services,
            report=self.actor_ref.tell,
            incarnation=str(record.created_ns or ""),
        )

    def _task_done(self, task: asyncio.Future[None]) -> None:
        """A bug in the follower's work crashes the actor, so that its supervisor restarts it
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
        """Store the record with its snapshot (a restart publishes it as it is), then
        publish that snapshot: the actor handles one message at a time, so the record is
        still the one stored."""
        kept = self._read()
        await self._services.store.put(self.record.uid, stored(self.record, kept))
        self._services.book.publish(self.record, kept[1])

    def _publish(self) -> None:
        self._services.book.publish(self.record, self._read()[1])

    def _status(self) -> PodStatus:
        """The pod's ``/status`` entry as a model, for the decisions that read it (read back
        from its JSON: the model is not kept, see :mod:`~dmsgw.interlink.records.snapshots`)."""
        return self._read()[1].status()

    def _read(self) -> Kept:
        """The record's ``/status`` entry and what it was read from, read again only when
        that changed: most transitions (pending, deploying, deployed) change nothing
        ``/status`` shows."""
        digest = shown_by(self.record)
        if self._shown is None or self._shown[0] != digest:
            self._shown = entry_of(self.record, self._services.status_of, digest)
        return self._shown

    # --- what the gateway asks ----------------------------------------------------------

    async def delete(self) -> None:
        """Shut the ensemble down (idempotent); the actor stops when it is done. The delete
        is stored before anything changes: a store that fails raises to the caller (nothing
        is acknowledged that was not saved) and leaves the pod as it was, its follower still
        at work, so that a delete again completes it. A pod deleting, or gone already (its
        record dropped, its actor about to stop), is deleted: nothing more to do."""
        if self.record.phase in (Phase.DELETING, GONE):
            return
        was = self.record.phase
        step = self._move(Event.DELETE)
        try:
            await self._save()
        except BaseException:
            self.record.phase = was  # not stored: the pod is as it was
            raise
        await self._cancel()  # what the follower reports meanwhile is ignored: deleting
        self._release()
        self._take(step, self.record.ensemble_id, self.record.attempt)

    # --- messages from the follower ---------------------------------------------------

    async def on_receive(self, message: Any) -> Any:
        if isinstance(message, Queued):
            self._on_queued(message)
        elif isinstance(message, Admitted):
            await self._on_admitted(message)
        elif isinstance(message, Deployed):
            await self._on_deployed(message)
        elif isinstance(message, DeployFailed):
            await self._on_deploy_failed(message)
        elif isinstance(message, Observed):
            await self._on_observed(message)
        elif isinstance(message, Lost):
            await self._on_lost(message)
        elif isinstance(message, BackedOff):
            await self._on_backed_off(message)
        elif isinstance(message, ShutDown):
            await self._on_shut_down()
        elif isinstance(message, Ended):
            await self._on_ended(message)
        elif isinstance(message, _TaskCrashed):
            raise RuntimeError(f"pod {self.record.uid}: follower failed") from message.error
        else:
            raise TypeError(f"PodActor does not handle {message!r}")

    async def _on_deployed(self, message: Deployed) -> None:
        if self.record.phase != Phase.DEPLOYING or message.attempt != self.record.attempt:
            return
        step = self._move(Event.DEPLOYED)
        self.record.ensemble_id = message.ensemble_id
        for key in (ENDPOINTS_KEY, PLACEMENT_KEY):  # the last ensemble's ports and peer
            self.record.observed.pop(key, None)
        self.record.dms_status = DeploymentStatus.PREPARING.go_name
        await self._save()
        self._take(step, message.ensemble_id, dict(self.record.runs))

    def _on_queued(self, message: Queued) -> None:
        """Why the pod waits changed: shown at once, not stored (a restart tells it again)."""
        record = self.record
        if record.phase != Phase.QUEUED or message.attempt != record.attempt:
            return
        record.reason, record.message = message.wait
        self._publish()

    async def _on_admitted(self, message: Admitted) -> None:
        record = self.record
        if record.phase != Phase.QUEUED or message.attempt != record.attempt:
            return
        step = self._move(Event.ADMITTED)
        record.reason = record.message = ""
        await self._save()
        self._take(step, record.attempt)

    async def _on_deploy_failed(self, message: DeployFailed) -> None:
        phase = self.record.phase
        if phase not in (Phase.QUEUED, Phase.DEPLOYING) or message.attempt != self.record.attempt:
            return
        self._release()
        if phase == Phase.DEPLOYING and refused_for_capacity(message.message):
            await self._wait_again(message.message)
            return
        self._move(Event.DEPLOY_FAILED)  # nothing follows: the pod has failed
        self.record.reason = "ProviderFailed"
        self.record.message = message.message
        self.record.finished_ns = self._services.clock()
        await self._save()

    async def _on_observed(self, message: Observed) -> None:
        if self.record.phase != Phase.RUNNING:
            return
        record = self.record
        if message.status == DeploymentStatus.RUNNING and self._services.admission is not None:
            self._services.admission.settled(record.uid)
        elif message.status in TERMINAL_DMS:
            self._release()
            error, manifest = message.reply.error, message.manifest
            placed = message.status != DeploymentStatus.FAILED or record.running_ns
            if not placed and refused_for_capacity(error, manifest):
                await self._wait_again(error or "no DMS peer took it (no bid, or no room)")
                return
        before = _followed(record)
        self._note(message)
        running = message.status == DeploymentStatus.RUNNING
        if (running and self._left_down()) or (
            message.status not in TERMINAL_DMS and self._init_failed_to_retry()
        ):
            # The DMS restarts a failed container in place (one_for_one) a few times, but
            # leaves one that exited 0 and, past its own limit, one that failed, while the
            # ensemble stays Running: the pod's restartPolicy redeploys it, with back-off.
            await self._cancel()  # the follower of the old ensemble
            step = self._move(Event.RESTART)
            record.observed.pop(ENDPOINTS_KEY, None)  # the ensemble is stopped with its ports
            delay = self._count_restart()
            await self._save()
            stop, runs = record.ensemble_id, dict(record.runs)
            self._take(step, record.attempt, delay_s=delay, stop=stop, runs=runs)
            return
        if message.status not in TERMINAL_DMS and (failed := self._init_failed_for_good()):
            await self._end(failed)
            return
        if message.status in TERMINAL_DMS:
            record.finished_ns = self._services.clock()
            record.observed.pop(ENDPOINTS_KEY, None)  # an ended ensemble publishes no port
            if self._restarts(message.status):
                step = self._move(Event.RESTART)
                delay = self._count_restart()
                await self._save()
                self._take(step, record.attempt, delay_s=delay)
                return
            self._move(Event.ENDED)  # nothing follows: the pod has ended
        elif _followed(record) == before:
            return  # a resumed pod's first status is what was saved: no write, no new snapshot
        await self._save()

    def _note(self, message: Observed) -> None:
        """Record what the DMS said of the running pod: its status, its reply (allocations
        kept once the DMS stops listing them), the manifest, endpoints and placement (kept
        when not told again), the containers' runs, and when it first ran."""
        record = self.record
        record.dms_status = message.status.go_name
        observed = kept_reply(message.reply)
        if not observed.get("allocation_info") and record.observed.get("allocation_info"):
            # The DMS stops listing allocations when the deployment ends: keep how they ended.
            observed["allocation_info"] = record.observed["allocation_info"]
        if message.manifest is not None:
            observed["manifest"] = plain_reply(message.manifest)
        if message.endpoints is not None:
            log.info(
                "pod %s/%s reachable at %s",
                record.namespace,
                record.name,
                describe(message.endpoints) or "no published port",
            )
        for key, news in ((ENDPOINTS_KEY, message.endpoints), (PLACEMENT_KEY, message.placement)):
            kept = record.observed.get(key) if news is None else news
            if kept is not None:
                observed[key] = kept
        record.observed = observed
        record.runs = {name: runs.to_map() for name, runs in message.runs.items()}
        if message.status == DeploymentStatus.RUNNING and not record.started_ns:
            record.started_ns = self._services.clock()
        if message.status == DeploymentStatus.RUNNING and not record.running_ns:
            record.running_ns = self._services.clock()

    async def _on_lost(self, message: Lost) -> None:
        """The DMS lost the deployment (restarted without it, or dropped it): following it
        would report it running forever. ``Always`` and ``OnFailure`` deploy the pod again;
        ``Never`` ends it, failed, saying why."""
        record = self.record
        if record.phase != Phase.RUNNING or message.ensemble_id != record.ensemble_id:
            return
        self._release()
        record.finished_ns = self._services.clock()
        record.dms_status = DeploymentStatus.FAILED.go_name
        lost = f"the DMS no longer knows deployment {message.ensemble_id} ({message.error})"
        if self._restart_policy in ("Always", "OnFailure"):
            log.warning("pod %s: %s; deploying it again", record.uid, lost)
            step = self._move(Event.RESTART)
            record.observed.pop(ENDPOINTS_KEY, None)  # its ports went with it
            delay = self._count_restart()
            await self._save()
            self._take(step, record.attempt, delay_s=delay)
            return
        log.warning("pod %s: %s; the pod has failed", record.uid, lost)
        self._move(Event.LOST)  # nothing follows: the pod has failed
        record.reason = DEPLOYMENT_LOST
        record.message = lost
        await self._save()

    async def _end(self, init_container: str) -> None:
        """End the pod failed at once, as the kubelet does when an init container fails under
        ``restartPolicy: Never``, instead of when the DMS gives up retrying the provisioning
        that waits for it (a deadline minutes away): the pod is recorded ended (its snapshot is
        final, so the virtual kubelet fails it), then its ensemble is shut down, and a gateway
        that restarts meanwhile shuts it down too."""
        record = self.record
        await self._cancel()  # the follower of the ensemble
        log.info(
            "pod %s: init container %r failed under restartPolicy Never; the pod has failed",
            record.uid,
            init_container,
        )
        step = self._move(Event.INIT_FAILED)
        record.reason = INIT_CONTAINER_FAILED
        record.finished_ns = self._services.clock()
        await self._save()
        self._take(step, record.ensemble_id, dict(record.runs))

    async def _on_ended(self, message: Ended) -> None:
        if self.record.phase != Phase.ENDING or message.ensemble_id != self.record.ensemble_id:
            return
        self._release()
        self._move(Event.STOPPED)  # nothing follows: the pod has ended
        await self._save()

    async def _on_backed_off(self, message: BackedOff) -> None:
        if self.record.phase != Phase.BACKOFF or message.attempt != self.record.attempt:
            return
        await self._next_attempt()

    async def _wait_again(self, refusal: str) -> None:
        """The DMS refused the attempt for lack of capacity (no bid, a failed commit): the
        pod waits in line again, in its place, with a new attempt (not a restart)."""
        log.info(
            "pod %s: the DMS refused it for lack of capacity (%s); waiting",
            self.record.uid,
            refusal,
        )
        await self._next_attempt(f"the DMS refused the last attempt: {refusal}")

    async def _next_attempt(self, why: str = "") -> None:
        """Record the next deployment attempt (persisted before it is made), waiting in the
        admission queue for DMS capacity, then make it when admitted."""
        record = self.record
        self._release()  # what the previous attempt held (a stopped ensemble) is free
        record.attempt += 1
        step = self._move(Event.ATTEMPT)  # shown waiting once the queue says why (or ``why``)
        record.reason = WAITING_FOR_CAPACITY if why else ""
        record.message = f"{WAITING}: {why}" if why else ""
        record.previous_ensemble_id = record.ensemble_id or record.previous_ensemble_id
        record.ensemble_id = ""
        record.runs = {
            name: Runs.from_map(runs).next_ensemble().to_map() for name, runs in record.runs.items()
        }
        # What the DMS said of the ended ensemble is not the next one's state.
        record.dms_status, record.observed = "", {}
        await self._save()
        self._take(step, record.attempt, self._order)

    async def _on_shut_down(self) -> None:
        await self._services.store.delete(self.record.uid)  # failing, a restart shuts down again
        self._move(Event.SHUT_DOWN)  # gone: the record is deleted, the actor stops
        kept_logs = self._services.kept_logs
        if kept_logs is not None:  # the kubelet keeps them until the pod is deleted
            await kept_logs.forget(self.record.uid)
        self._services.book.forget(self.record.uid)
        self.actor_ref.stop()

    def _restarts(self, status: DeploymentStatus) -> bool:
        """``restartPolicy``: Always redeploys, OnFailure when the deployment failed or a
        container ended with an error (an ensemble of tasks "completes" either way)."""
        policy = self._restart_policy
        if policy == "Always":
            return True
        if policy != "OnFailure":
            return False
        if status == DeploymentStatus.FAILED:
            return True
        return any(run.exit_code != 0 for run in latest_runs(self._status(), self.record.runs))

    def _init_failed_for_good(self) -> str:
        """Under ``Never``: the init container whose run failed (``""``: none), as the pod
        reports it (``terminated`` with a non-zero code); nothing will run it again."""
        pod = request_data(self.record).pod
        if pod.spec.restart_policy != "Never" or not pod.spec.init_containers:
            return ""
        return next(
            (
                c.name
                for c in self._services.status_of(self.record).init_containers
                if c.state.terminated is not None and c.state.terminated.exit_code != 0
            ),
            "",
        )

    def _init_failed_to_retry(self) -> bool:
        """Under ``Always`` or ``OnFailure``: whether an init container's latest run failed
        in this ensemble and none of it runs. The DMS provisions the main containers behind
        the init containers and does not run a failed one again there (its provisioning
        waits until its own deadline, minutes away); the kubelet restarts it with back-off,
        and so does the gateway, by deploying the pod again."""
        if self._restart_policy == "Never":
            return False
        for name in self._containers[0]:
            runs = Runs.from_map(self.record.runs.get(name))
            if not runs.running and runs.ended and runs.exit_code != 0:
                return True
        return False

    def _left_down(self) -> bool:
        """Whether a main container ended in the running ensemble and the DMS will not run it
        again there, while the pod's ``restartPolicy`` would: under ``Always`` one that exited
        0 (the DMS leaves a service that did) or whose allocation it reports ended, under
        ``OnFailure`` one whose allocation it reports failed. The kubelet restarts such a
        container forever, with back-off (decision 67); the DMS stops restarting one in place
        after its own limit, and its ensemble runs on without it."""
        policy = self._restart_policy
        if policy == "Never":
            return False
        if policy == "Always" and any(
            run.exit_code == 0 for run in latest_runs(self._status(), self.record.runs)
        ):
            return True
        down = _DOWN_FOR_GOOD[policy]
        live = live_allocations(self.record.observed)
        return any(allocation_of(name, {}, live)[0] in down for name in self._containers[1])

    @functools.cached_property
    def _containers(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """The names of the pod's init and main containers, read once (as
        :attr:`_restart_policy`)."""
        spec = request_data(self.record).pod.spec
        return tuple(c.name for c in spec.init_containers), tuple(c.name for c in spec.containers)

    @functools.cached_property
    def _restart_policy(self) -> str:
        """The pod's ``restartPolicy``, read once: every status of a running pod asks, and
        the parsed request it is read from is cached for a few hundred pods only (a gateway
        resuming 10,000 pods parsed each request again for it)."""
        return request_data(self.record).pod.spec.restart_policy

    def _count_restart(self) -> float:
        """Count a restart and return its delay, as the kubelet's back-off: ``restart_min_s``
        doubled for each restart in a row, at most ``restart_max_s``; a deployment that ran
        ``restart_reset_s`` starts the count again."""
        p, record = self._services.policy, self.record
        ran_ns = self._services.clock() - record.running_ns if record.running_ns else 0
        record.backoff = 1 if ran_ns >= p.restart_reset_s * NS_PER_SECOND else record.backoff + 1
        record.restarts += 1
        record.running_ns = 0
        return min(p.restart_max_s, p.restart_min_s * 2.0 ** (record.backoff - 1))


def _followed(record: PodRecord) -> tuple[Any, ...]:
    """What following a running ensemble may change in its pod's record."""
    return (record.dms_status, record.observed, record.runs, record.started_ns, record.running_ns)
