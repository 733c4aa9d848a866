"""A pod's DMS I/O, for its ``PodActor``: deploy an attempt (never twice), follow the
deployment's status and the containers' runs, wait out a restart's back-off, shut the ensemble
down. A :class:`PodFollower` runs one of these at a time, beside its actor (a follow polls in
steps, each in a task of its own, and holds no task between two polls); it is handed what it
needs of the pod and never reads or writes the pod's record: each result goes back to the
actor as a message, and the actor alone changes the record (decision 8).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import math
from collections.abc import Callable, Mapping
from typing import Any

from ...actors.steps import Steps
from ...behaviors.catalog import (
    DEPLOYMENT_LIST,
    DEPLOYMENT_MANIFEST,
    DEPLOYMENT_NEW,
    DEPLOYMENT_SHUTDOWN,
    DEPLOYMENT_STATUS,
)
from ...behaviors.deployment import (
    DeploymentListRequest,
    DeploymentManifestRequest,
    DeploymentShutdownRequest,
    DeploymentStatusRequest,
    NewDeploymentRequest,
    NewDeploymentResponse,
)
from ...behaviors.ensemble import EnsembleConfig
from ...behaviors.node import DMSBehaviorError
from ...behaviors.status import DeploymentStatus
from ...errors import DmsgwError
from ...transport.rest import DMSError, DMSErrorKind, TransportError
from ..capacity.admission import Order, Wait, demand_of
from ..records.container_runs import Runs
from ..records.endpoints import placement_of, where_it_runs
from ..records.pod_record import (
    ATTEMPT_KEY,
    INCARNATION_KEY,
    POD_UID_KEY,
    TERMINAL_DMS,
    parsed_request,
)
from ..state.recovery import labelled
from .deployment_board import Listed
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
from .follow_state import (
    Following,
    after_news,
    after_quiet,
    allocation_state,
    reads_log,
    runs_now,
    settled,
    starts_unseen,
)
from .pod_services import PodServices
from .pod_translation import TranslationNotReadyError
from .poll_pace import PollPace
from .run_reads import keep_last_runs, read_runs, read_together

log = logging.getLogger(__name__)

LOST_AFTER = 3
"""How many status polls in a row must find the deployment unknown before the pod counts it
lost: one answer could come from a DMS that is restarting and has not restored it yet."""

STARTING_WAIT_S = 1.0
"""The longest wait between two polls of a deployment on its way to running, when no board
watches it (or the policy's longest, if shorter): a pod created is seen running soon."""


_STOPPING: set[asyncio.Future[bool]] = set()
"""The stops of provisioning ensembles left behind by a restart (:meth:`PodFollower.back_off`):
held here until done, or asyncio could collect them unfinished."""


def _stopped(task: asyncio.Future[bool]) -> None:
    """A stop left behind ended: one cut short by the gateway's close is the orphan pass's."""
    _STOPPING.discard(task)
    if not task.cancelled() and task.exception() is not None:
        log.info("the stop of an ensemble left behind ended early: %s", task.exception())


class _Follow:
    """A follow's step: a poll. The first reads what the polls need of the pod (a parse of
    its request): a gateway resuming 10,000 pods parsed them all as it started their actors,
    for over a second (bench/README.md, "A restart's resume"), where the first polls spread
    them over the longest wait. A follow whose deployment
    has settled parks on the gateway's board instead of polling (:meth:`woken`), and counts
    toward the pace only while it polls."""

    __slots__ = (
        "_ensemble_id",
        "_follower",
        "_following",
        "_parked",
        "_resumed",
        "_runs_so_far",
        "steps",
    )

    def __init__(
        self,
        follower: PodFollower,
        ensemble_id: str,
        runs_so_far: Mapping[str, Any],
        *,
        resumed: bool,
    ) -> None:
        self._follower = follower
        self._ensemble_id = ensemble_id
        self._runs_so_far = runs_so_far
        self._resumed = resumed
        self._following: Following | None = None
        self._parked = False
        self.steps: Steps | None = None  # the steps it is; let go when they end (ended)

    async def __call__(self) -> float | None:
        if self._following is None:
            self._following = self._follower.following(
                self._ensemble_id, self._runs_so_far, resumed=self._resumed
            )
            self._runs_so_far = {}
        wait = await self._follower.poll(self._following)
        if wait is None or not self._follower.parks(self._following):
            return wait
        self._parked = True
        self._follower.park(self._following, self)
        return math.inf  # until woken

    def woken(self, listed: Listed | None) -> None:
        """The board's listing shows the deployment changed (``listed``): poll now."""
        if self._following is not None:
            self._following.listed = listed
        self._parked = False
        self._follower.rejoined()
        if self.steps is not None:
            self.steps.wake()

    def ended(self) -> None:
        """The follow is over (or cancelled): off the board, or out of the pace."""
        parked, self._parked = self._parked, False
        self._follower.stopped(self._ensemble_id, self if parked else None)
        self.steps = None


Report = Callable[[Any], None]
"""How the follower hands a result to its actor (the actor's mailbox)."""


class PodFollower:
    """The DMS I/O of the pod ``uid`` (its ``/create`` body: ``request``); see the module
    docstring. One per actor: a delete that cancels a deployment under way shuts down what that
    deployment's request may still create (:meth:`shut_down`)."""

    # One per pod, kept as long as the pod: no __dict__ (10,000 pods are the target).
    __slots__ = (
        "_admitted",
        "_incarnation",
        "_inflight",
        "_pace",
        "_report",
        "_request",
        "_services",
        "_uid",
    )

    def __init__(
        self,
        uid: str,
        request: bytes,
        services: PodServices,
        *,
        report: Report,
        incarnation: str = "",
    ) -> None:
        self._uid = uid
        self._request = request
        self._services = services
        self._report = report
        self._incarnation = incarnation
        """Stamped on each ensemble (:data:`INCARNATION_KEY`): the ensembles of a pod deleted
        before with the same UID are never taken for this pod's (``""``: a record of an
        older gateway, whose ensembles carry none)."""
        self._pace = services.pace or PollPace(per_s=math.inf)  # alone: the policy's longest wait
        self._inflight: asyncio.Future[NewDeploymentResponse] | None = None  # deployment/new
        self._admitted: tuple[int, EnsembleConfig] | None = None  # for its deploy, once

    async def queue(self, attempt: int, order: Order) -> None:
        """Wait in the admission queue at ``order`` with ``attempt``'s ensemble, reporting
        each change of why (:class:`Queued`), then :class:`Admitted`."""
        ensemble = await self._translated(attempt)
        if ensemble is None:
            return
        if self._services.admission is not None:
            tell = functools.partial(self._queued, attempt)
            await self._services.admission.wait(self._uid, order, demand_of(ensemble), tell)
        self._admitted = (attempt, ensemble)
        self._report(Admitted(attempt))

    def _queued(self, attempt: int, wait: Wait) -> None:
        self._report(Queued(attempt, wait))

    async def deploy(self, attempt: int) -> None:
        """Deploy ``attempt`` (the actor recorded it, admitted): report it :class:`Deployed`
        or :class:`DeployFailed`; transient DMS failures are retried with backoff."""
        ensemble = await self._translated(attempt)
        if ensemble is None:
            return
        if self._services.admission is not None:  # held already, unless a restart resumes it
            self._services.admission.hold(self._uid, demand_of(ensemble))
        tries = 0
        while True:
            existing = await self._find_existing(attempt)
            if existing:
                self._report(Deployed(attempt, existing))
                return
            try:
                # Shielded: a delete cancels this task, but a request already sent may still
                # be accepted; the delete then waits for its reply (see shut_down).
                self._inflight = asyncio.ensure_future(
                    self._services.invoke(
                        DEPLOYMENT_NEW,
                        NewDeploymentRequest(ensemble),
                        timeout_s=self._services.policy.deploy_timeout_s,
                    )
                )
                reply = await asyncio.shield(self._inflight)
                self._inflight = None
            except DMSBehaviorError as exc:
                self._report(DeployFailed(attempt, str(exc)))
                return
            except (TransportError, DmsgwError) as exc:
                tries += 1
                await self._back_off(tries, f"deploy attempt {attempt} failed ({exc})")
                continue
            if reply.status.upper() != "OK" or not reply.ensemble_id:
                self._report(DeployFailed(attempt, reply.error or f"status {reply.status!r}"))
                return
            self._report(Deployed(attempt, reply.ensemble_id))
            return

    async def _translated(self, attempt: int) -> EnsembleConfig | None:
        """``attempt``'s ensemble, as admitted or in a turn; ``None``: it does not translate."""
        admitted, self._admitted = self._admitted, None
        if admitted is not None and admitted[0] == attempt:
            return admitted[1]
        await self._take_turn()
        try:
            return await self._ensemble(attempt)
        except DmsgwError as exc:
            self._report(DeployFailed(attempt, str(exc)))
            return None

    async def _ensemble(self, attempt: int) -> EnsembleConfig:
        """The pod translated; a translation that is not ready waits for what it lacks (and
        retries with backoff while that cannot be had) instead of failing the pod for good."""
        tries = 0
        while True:
            try:
                ensemble = self._services.translate(parsed_request(self._request), attempt)
                return labelled(ensemble, INCARNATION_KEY, self._incarnation)
            except TranslationNotReadyError as pending:
                if tries:
                    await asyncio.sleep(self._retry_delay(tries))
                tries += 1
                log.info("pod %s: %s", self._uid, pending)
                try:
                    await pending.wait()
                except DmsgwError as exc:
                    log.info("pod %s: still waiting: %s", self._uid, exc)

    async def _find_existing(self, attempt: int) -> str:
        """An ensemble already deployed for this attempt (the reply to an earlier try may have
        been lost, or the gateway died after the DMS accepted it): never deploy twice. A
        listing that goes unanswered is asked again: that DMS may well hold one."""
        wanted = {POD_UID_KEY: self._uid, ATTEMPT_KEY: str(attempt)}
        if self._incarnation:
            wanted[INCARNATION_KEY] = self._incarnation
        tries = 0
        while True:
            try:
                listing = await self._services.invoke(
                    DEPLOYMENT_LIST, DeploymentListRequest(metadata=wanted)
                )
                break
            except TransportError as exc:
                tries += 1
                await self._back_off(tries, f"cannot list its deployments ({exc})")
            except DmsgwError:
                return ""
        for item in listing.deployments or ():
            meta = item.metadata or {}
            if all(meta.get(k) == v for k, v in wanted.items()):
                return str(item.orchestrator_id)
        return ""

    def _longest_wait(self) -> float:
        """The longest wait between two polls, now: the policy's, stretched by the pace."""
        return self._pace.stretched(self._services.policy.poll_max_s)

    async def _take_turn(self) -> None:
        """Wait for a turn of the loop with room (:class:`~dmsgw.actors.turns.Turns`) before
        a step of a few hundred µs: pods created together translate and poll together, and
        their actors' gate alone let 8 of them start a turn while 16 translations and 26
        polls ran in the same one (bench/README.md, "Steps per turn of the loop")."""
        if self._services.turns is not None:
            await self._services.turns.take()

    async def _back_off(self, tries: int, failed: str) -> None:
        """Wait before the retry after ``tries`` failures (the last one ``failed``, logged)."""
        delay = self._retry_delay(tries)
        log.warning("pod %s: %s; retrying in %.1f s", self._uid, failed, delay)
        await asyncio.sleep(delay)

    def _retry_delay(self, tries: int) -> float:
        p = self._services.policy
        base = min(p.retry_max_s, p.retry_min_s * 2.0 ** (tries - 1))
        return base * (0.8 + 0.4 * self._services.rng.random())

    def follow(
        self, ensemble_id: str, runs_so_far: Mapping[str, Any], *, resumed: bool = False
    ) -> Steps:
        """Report each change of the deployment's status, of an allocation's status or of a
        container's runs (:meth:`poll`, once per wait), until the deployment ends or the DMS
        has lost it. The pod counts toward how often all followed pods poll
        (:class:`~dmsgw.interlink.pods.poll_pace.PollPace`) as long as this runs, and holds no
        task between two polls (:class:`~dmsgw.actors.steps.Steps`).

        A ``resumed`` deployment, one its pod's stored snapshot shows already, is first asked
        after a random part of the longest wait, as if it had been followed all along: a
        gateway resuming 10,000 pods asked about all of them at once, and held the loop
        while it did. The longest wait is the policy's ``poll_max_s``, or longer when more
        pods are followed than poll that often within the pace's polls a second."""
        self._pace.join()
        first_wait_s = self._services.rng.uniform(0.0, self._longest_wait()) if resumed else 0.0
        step = _Follow(self, ensemble_id, runs_so_far, resumed=resumed)
        step.steps = Steps(step, first_wait_s=first_wait_s, on_end=step.ended)
        return step.steps

    def parks(self, f: Following) -> bool:
        """Whether the follow of ``f`` parks on the board after this poll (decision 79): its
        deployment runs, has :func:`settled` and the poll found nothing new, or it is on its
        way to running with no init container that may run unseen."""
        if self._services.board is None or f.last is None or f.unknown:
            return False
        if f.last[0] == DeploymentStatus.RUNNING:
            return f.quiet and settled(f)
        return f.last[0] not in TERMINAL_DMS and not starts_unseen(f)

    def park(self, f: Following, follow: _Follow) -> None:
        """Park ``follow`` on the board until the listing shows ``f``'s deployment other
        than it did before the last poll (``f.listed``); it leaves the pace meanwhile."""
        assert self._services.board is not None and f.last is not None  # parks() said so
        self._pace.leave()
        status = f.last[0]
        starting = "" if status == DeploymentStatus.RUNNING else status.go_name
        self._services.board.park(f.ensemble_id, f.listed, follow, starting=starting)

    def rejoined(self) -> None:
        """A follow woken from the board polls again (it joins the pace)."""
        self._pace.join()

    def stopped(self, ensemble_id: str, parked: _Follow | None) -> None:
        """The follow of ``ensemble_id`` ended (its pod was deleted, say): off the board if
        it was ``parked`` there, out of the pace otherwise."""
        if parked is None:
            self._pace.leave()
        elif self._services.board is not None:
            self._services.board.unpark(ensemble_id, parked)

    def following(
        self, ensemble_id: str, runs_so_far: Mapping[str, Any], *, resumed: bool = False
    ) -> Following:
        """What :meth:`poll` needs to know of the deployment before its first poll."""
        return Following.of(
            ensemble_id,
            self._request,
            runs_so_far,
            resumed=resumed,
            interval=self._services.policy.poll_min_s,
        )

    async def poll(self, f: Following) -> float | None:
        """Ask the DMS once about ``f``'s deployment and report what changed: the seconds to
        wait before the next poll, or ``None`` once the deployment has ended or is lost.

        A wrapped container whose allocation changed, and every one once the deployment has
        ended, has its log read for the wrapper's markers: the DMS reports no exit code, and
        allocations only while the deployment runs. An allocation whose health check fails
        may be restarted by the DMS between two polls: its log is read at every poll, as the
        start markers are the only trace of such a restart; so is that of a container whose
        wrapper runs probes, whose outcomes change no DMS status."""
        self._services.heap.polled()  # what the last poll made is replaced: see HeapFreezer.polled
        try:
            reply = await self._services.invoke(
                DEPLOYMENT_STATUS, DeploymentStatusRequest(f.ensemble_id)
            )
        except DmsgwError as exc:
            return self._unanswered(f, exc)
        await self._take_turn()
        f.unknown = 0
        f.polls += 1
        status = DeploymentStatus.parse(reply.status)
        allocations = reply.allocation_info or {}
        key = (status, tuple(sorted((k, v.status, v.health) for k, v in allocations.items())))
        ended = status in TERMINAL_DMS
        manifest, placement, endpoints = await self._where(f, status, changed=key != f.last)
        listed = (manifest.allocations or {}) if manifest is not None else {}
        states = {name: allocation_state(name, listed, allocations) for name in f.containers}
        now = await self._runs_read(f, states, ended=ended)
        if now is None:  # the logs hold the only exit codes: try the end again
            return f.interval
        policy, longest = self._services.policy, self._longest_wait()
        if key != f.last or now != f.runs or endpoints is not None or placement is not None:
            self._report(Observed(status, reply, manifest, now, endpoints, placement))
            after_news(f, key, now, shortest_s=policy.poll_min_s, longest_s=longest)
            return None if ended else f.interval
        starting = self._pace.stretched(min(STARTING_WAIT_S, policy.poll_max_s))
        on_its_way = status != DeploymentStatus.RUNNING and not ended
        after_quiet(f, longest_s=longest, starting_s=starting, on_its_way=on_its_way)
        return f.interval

    async def _where(
        self, f: Following, status: DeploymentStatus, *, changed: bool
    ) -> tuple[Any, dict[str, str] | None, list[dict[str, Any]] | None]:
        """The manifest of an ended deployment (read once per change: how each allocation
        ended) and where it ran; and, once it runs, where it runs and is reached."""
        ended = status in TERMINAL_DMS
        manifest = await self._manifest(f.ensemble_id) if ended and changed else None
        placement = (
            placement_of(parsed_request(self._request).pod, manifest)
            if manifest is not None
            else None
        )
        endpoints = None
        if f.placement_due and status == DeploymentStatus.RUNNING:
            running = await self._manifest(f.ensemble_id)
            if running is not None:
                f.placement_due = False
                placement, endpoints = where_it_runs(parsed_request(self._request).pod, running)
        return manifest, placement, endpoints

    async def _runs_read(
        self, f: Following, states: dict[str, tuple[str, str]], *, ended: bool
    ) -> dict[str, Runs] | None:
        """Each container's runs once this poll has read the logs it reads (``None``: the
        ended deployment's logs could not be read, and are tried again)."""
        read = [name for name in f.containers if reads_log(f, name, states, ended=ended)]
        at_ns = self._services.clock()
        found = await read_together(
            [
                read_runs(
                    self._services.invoke,
                    f.ensemble_id,
                    name,
                    f.runs[name],
                    uid=self._uid,
                    at_ns=at_ns,
                    kept=self._services.kept_logs,
                )
                for name in read
            ]
        )
        unread = {name for name, got in zip(read, found, strict=True) if got is None}
        if ended and unread and f.end_reads_left:
            f.end_reads_left -= 1
            return None
        read_now = {n: got for n, got in zip(read, found, strict=True) if got is not None}
        now = runs_now(f, read_now, unread, states, ended=ended, at_ns=at_ns)
        # A container whose log could not be read is read again at the next poll.
        f.seen = {name: f.seen.get(name) if name in unread else states[name] for name in states}
        return now

    def _unanswered(self, f: Following, exc: DmsgwError) -> float | None:
        """A status poll the DMS did not answer: asked again after a wait that doubles, and
        the deployment reported lost once the DMS said it does not know it ``LOST_AFTER``
        times in a row."""
        lost = isinstance(exc, DMSError) and exc.kind is DMSErrorKind.NOT_FOUND
        f.unknown = f.unknown + 1 if lost else 0
        if f.unknown >= LOST_AFTER:
            self._report(Lost(f.ensemble_id, str(exc)))
            return None
        log.info("pod %s: status of %s unavailable: %s", self._uid, f.ensemble_id, exc)
        wait, f.interval = f.interval, min(f.interval * 2, self._longest_wait())
        return wait

    async def _manifest(self, ensemble_id: str) -> Any:
        try:
            reply = await self._services.invoke(
                DEPLOYMENT_MANIFEST, DeploymentManifestRequest(ensemble_id)
            )
        except DmsgwError as exc:
            log.info("pod %s: manifest of %s unavailable: %s", self._uid, ensemble_id, exc)
            return None
        return reply.manifest

    async def back_off(
        self, attempt: int, *, delay_s: float = 0.0, stop: str = "", runs: Mapping[str, Any] = {}
    ) -> None:
        """Keep the last runs' logs of the ensemble ``stop`` and stop it (at once when it has
        ended already), wait ``delay_s``, then report :class:`BackedOff`: the actor records the
        next attempt and deploys it. An ensemble the DMS is still provisioning (it shuts down
        only a running one) is stopped beside the next attempt, as soon as it runs or ends: its
        provisioning may wait minutes for an init container that failed, and the pod's restart
        cannot (a gateway that restarts meanwhile collects it as an orphan)."""
        if stop:
            await self._keep_last(stop, runs)
        if stop and not await self._stop(stop, provisioning=False):
            task = asyncio.ensure_future(self._stop(stop))
            _STOPPING.add(task)
            task.add_done_callback(_stopped)
        if delay_s:
            await asyncio.sleep(delay_s)
        self._report(BackedOff(attempt))

    async def end(self, ensemble_id: str, runs: Mapping[str, Any]) -> None:
        """Keep the last runs' logs (``runs``: the record's ledger), then shut down the ensemble
        of a pod that has ended for good and report :class:`Ended`. The DMS shuts down only a
        ``Running`` deployment: one still provisioning (it retries until its deadline) is shut
        down as soon as it runs, or left to end by itself."""
        await self._keep_last(ensemble_id, runs)
        await self._stop(ensemble_id)
        self._report(Ended(ensemble_id))

    async def shut_down(self, ensemble_id: str, attempt: int) -> None:
        """Shut the pod's ensemble down until done (the one of ``attempt`` when the delete came
        while it was deploying), then report :class:`ShutDown`."""
        if not ensemble_id and attempt:  # deleted while deploying
            ensemble_id = await self._deployed_anyway(attempt)
        await self._stop(ensemble_id)
        self._report(ShutDown())

    async def _deployed_anyway(self, attempt: int) -> str:
        """The ensemble of a deployment/new that the delete cut short, if the DMS took it."""
        inflight, self._inflight = self._inflight, None
        if inflight is not None:
            reply: NewDeploymentResponse | None
            try:
                reply = await inflight
            except Exception:  # refused or lost: the listing tells
                reply = None
            if reply is not None and reply.ensemble_id:
                return reply.ensemble_id
        return await self._find_existing(attempt)

    async def _keep_last(self, ensemble_id: str, runs: Mapping[str, Any]) -> None:
        if (
            self._services.kept_logs is not None
        ):  # before a stop: the DMS may remove the ensemble's files
            await keep_last_runs(
                self._services.invoke, self._services.kept_logs, self._uid, ensemble_id, runs
            )

    async def _stop(self, ensemble_id: str, *, provisioning: bool = True) -> bool:
        """Shut ``ensemble_id`` down until it has ended; ``False`` at once when it is still
        provisioning and ``provisioning`` says not to wait for it."""
        tries = 0
        while ensemble_id:
            try:
                state = await self._services.invoke(
                    DEPLOYMENT_STATUS, DeploymentStatusRequest(ensemble_id)
                )
                status = DeploymentStatus.parse(state.status)
                if status in TERMINAL_DMS or status == DeploymentStatus.UNKNOWN:
                    break
                if status != DeploymentStatus.RUNNING and not provisioning:
                    return False
                if status == DeploymentStatus.RUNNING:
                    await self._services.invoke(
                        DEPLOYMENT_SHUTDOWN, DeploymentShutdownRequest(ensemble_id)
                    )
            except DmsgwError as exc:
                if isinstance(exc, DMSError) and exc.kind is DMSErrorKind.NOT_FOUND:
                    break  # the DMS no longer knows it: nothing left to stop
                log.info("pod %s: shutdown of %s: %s", self._uid, ensemble_id, exc)
            tries += 1
            await asyncio.sleep(min(self._retry_delay(tries), self._services.policy.poll_max_s))
        return True
