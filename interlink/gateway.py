"""The ``Gateway``: root of the actor tree, and the interLink plugin's backend.

It owns the pod registry (pod UID → ``PodActor``, supervised one-for-one: a crashed pod actor
restarts from its stored record), creates pod actors idempotently, answers ``/status`` from the
snapshots the pod actors publish (no round trip to the DMS), relays deletes, finds log files,
and answers the ping with the peers' capacity
(:class:`~dmsgw.interlink.capacity.resource_actor.Capacity`). On start it resumes every stored pod
and reconciles with the DMS: pods it knows are followed again, and two background passes collect
what interLink has demonstrably forgotten (see :meth:`Gateway.collect_orphans`, and
:mod:`~dmsgw.interlink.state.recovery` for the owner label and the ledger of polls they rely on).
When the root supervisor gives up, the gateway says so through :attr:`Gateway.gave_up`, and
``dmsgw serve`` ends (crash-only).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence

from ..actors import bridge
from ..actors.aio import AsyncActorRef
from ..actors.base import ActorExit, ExitHook
from ..actors.registry import Registry
from ..actors.supervision import Backoff, Intensity, Restart, Strategy
from ..actors.supervisor import ChildSpec, Supervisor
from ..actors.turns import Turns, wake_in_turns
from ..behaviors.ensemble import EnsembleConfig
from ..behaviors.node import Invoke
from ..clock import NS_PER_SECOND, Clock, system_clock
from ..errors import DmsgwError
from ..transport.rest import TransportError
from .capacity.admission_queue import AdmissionPolicy, AdmissionQueue
from .capacity.resource_actor import Capacity
from .logs.get_logs import pod_logs
from .logs.kept_logs import KeptLogs
from .plugin_errors import BackendUnavailable, UnknownPodError
from .pods.deployment_board import DeploymentBoard
from .pods.heap import HeapFreezer
from .pods.pod_actor import PodActor
from .pods.pod_book import PodBook
from .pods.pod_phases import Event, move
from .pods.pod_services import PodServices
from .pods.pod_translation import FirstAttempts, Translate, refuse_what_cannot_run
from .pods.poll_pace import DEFAULT_POLLS_PER_S, PollPace
from .pods.under_way import RECREATE_WAIT_S, UnderWay
from .records.pod_record import (
    DEFAULT_POLICY,
    Kept,
    Phase,
    PodPolicy,
    PodRecord,
    Snapshot,
    entry_of,
    read_stored,
    remember_request,
    request_data,
    stored,
)
from .records.snapshots import Shown
from .reports.pod_report import PodReport
from .state.pod_store import PodStore
from .state.recovery import ORPHAN_GRACE_S, OwnedEnsembles, PollLedger, unknown_pod_status
from .wire import k8s
from .wire.bodies import CreateStruct, LogStruct, PingResponse, PodStatus, RetrievedPodData
from .wire.parsing import PodRef, in_turns

log = logging.getLogger(__name__)

JID_PREFIX = "dmsgw-"
ORPHAN_PASS_EVERY_S = 60.0
"""How often :meth:`Gateway.start_orphan_collection` runs a pass."""
ROOT_INTENSITY = Intensity(max_restarts=100, period_s=60.0)
"""Pod actor restarts the root supervisor allows before it gives up (and the process ends)."""
ROOT_BACKOFF = Backoff(min_s=0.5, max_s=30.0)
POD_STOP_S = 5.0
"""How long closing waits for the pod actors to stop together (the supervisor's own wait for
each one it stops)."""
RESUME_BATCH = 64
"""Pods resumed per supervisor message at start: one thread round trip each, and between two
the loop runs the batch's first steps (64 of them hold it about as long as the longest stall
allowed: bench/README.md, "Steps per turn of the loop")."""


def job_id(uid: str) -> str:
    """The ``PodJID`` interLink stores as the pod's ``JobID`` annotation: stable per pod, so it
    survives redeployments (the ensemble ID changes with each)."""
    return JID_PREFIX + uid


@dataclasses.dataclass(frozen=True)
class GatewayParts:
    """What the gateway is made of (built by :func:`dmsgw.interlink.app.start_backend`, or by
    tests)."""

    invoke: Invoke
    store: PodStore
    translate: Translate
    snapshot: Snapshot
    capacity: Capacity
    loop: asyncio.AbstractEventLoop
    policy: PodPolicy = DEFAULT_POLICY
    clock: Clock = system_clock
    orphan_grace_s: float = ORPHAN_GRACE_S
    owner: str = ""
    """Stamped on every ensemble (:data:`~dmsgw.interlink.state.recovery.OWNER_KEY`); a gateway
    without one (``""``) collects and re-adopts nothing."""
    intensity: Intensity = ROOT_INTENSITY
    backoff: Backoff = ROOT_BACKOFF
    close_dms: Callable[[], Awaitable[None]] | None = None
    """Closes what ``invoke`` goes through (the DMS client, the embedded devnet), last of all
    when the gateway closes."""
    freeze_every: int = 0
    """Freeze the heap after this many pods taken on (:class:`HeapFreezer`; ``dmsgw serve``
    sets :data:`~dmsgw.interlink.pods.heap.FREEZE_EVERY`); 0 never freezes."""
    polls_per_s: float = DEFAULT_POLLS_PER_S
    """Status polls of the DMS a second, all followed pods together (:class:`PollPace`)."""
    admission: AdmissionPolicy = dataclasses.field(default_factory=AdmissionPolicy)
    recreate_wait_s: float = RECREATE_WAIT_S
    kept_logs: KeptLogs | None = None
    """Where the logs of the runs seen to end are kept (decision 69); ``None``: beside the
    state file."""
    turns: Turns = dataclasses.field(default_factory=Turns)
    """The gate the pod actors pass: pods started together begin and hear a few per turn of
    the loop (and the creates are answered a few per turn: ``wake_in_turns``)."""


class Gateway:
    """The plugin backend (create, delete, status, ping, logs, close) over pod actors."""

    def __init__(self, parts: GatewayParts) -> None:
        self.parts = parts
        self.kept_logs = parts.kept_logs or KeptLogs.beside(parts.store.path)
        self._heap = HeapFreezer(parts.freeze_every)
        self._pace = PollPace(parts.polls_per_s)
        self.board = DeploymentBoard(parts.invoke, parts.owner, every_s=self._list_every_s)
        self.registry = Registry()
        polls = PollLedger(parts.clock, parts.orphan_grace_s)
        self._first_attempts = FirstAttempts(self._translate)  # each create translates once
        self.book = PodBook(
            polls, UnderWay(parts.recreate_wait_s), self._heap, self._first_attempts
        )
        self.pod_report: PodReport | None = None
        """The pods and their usage on the operator port (set by ``start_backend``)."""
        self._owned = OwnedEnsembles(parts.invoke, parts.owner)
        self.gave_up: asyncio.Future[str] = parts.loop.create_future()
        """Completes with the reason when the root supervisor has given up: every pod actor
        is stopped, so the process must end and start again (crash-only). ``dmsgw serve``
        awaits it besides its stop signal."""
        self._supervisor = Supervisor.start(
            strategy=Strategy.ONE_FOR_ONE,
            intensity=parts.intensity,
            backoff=parts.backoff,
            registry=self.registry,
            clock=parts.clock,
            exit_hook=self._supervisor_ended,
        )
        self._starting: list[tuple[ChildSpec, asyncio.Future[None]]] = []
        """The pod actors to start in the next supervisor message (:meth:`_spawn`)."""
        self._sending: set[asyncio.Task[None]] = set()  # the messages under way
        # pykka builds a proxy by introspecting the actor, a cost worth paying once (see
        # bench/README.md, "Calls from other threads").
        self._supervisor_proxy = self._supervisor.proxy()
        self._orphans: asyncio.Task[None] | None = None
        self.admission = AdmissionQueue(parts.capacity.gathering, parts.admission, parts.clock)
        self._services = PodServices(
            invoke=parts.invoke,
            store=parts.store,
            translate=self._first_attempts,
            status_of=parts.snapshot,
            book=self.book,
            loop=parts.loop,
            policy=parts.policy,
            clock=parts.clock,
            heap=self._heap,
            pace=self._pace,
            board=self.board,
            turns=parts.turns,
            admission=self.admission,
            kept_logs=self.kept_logs,
        )

    def _list_every_s(self) -> float:
        """The board lists as often as a settled pod would poll (the policy's longest wait)."""
        return self.parts.policy.poll_max_s

    # --- start-up and shutdown ------------------------------------------------------------

    async def start(self) -> None:
        """Resume every stored pod (crash-only recovery). The store is read in a worker
        thread (reading every record and its kept snapshot held the loop for seconds in one
        go: bench/README.md, "A restart's resume"), then the live pods' actors start a batch
        at a time. What the process made before
        is collected first, while it is small: the resume's own freeze collects nothing, and
        would keep its garbage for good (a command line's parser, say)."""
        self._heap.settle()
        with self._heap.paused():
            ended, live = await asyncio.to_thread(self._stored)
            for record, snapshot in ended:  # no actor, and no poll to wait for
                self.book.records[record.uid] = record
                self.book.snapshots.publish(record.uid, snapshot)
            for first in range(0, len(live), RESUME_BATCH):
                specs = [self._child(*pod) for pod in live[first : first + RESUME_BATCH]]
                await bridge.call(self._supervisor_proxy.start_children(specs))
            # Frozen before the collector is back: its first pass would walk them all.
            self._heap.settle(collect=False)
        log.info("gateway resumed %d pods from %s", len(ended) + len(live), self.parts.store.path)

    def _stored(
        self,
    ) -> tuple[list[tuple[PodRecord, Shown]], list[tuple[PodRecord, Kept | None]]]:
        """(In a worker thread.) Every stored pod: the ended ones with their ``/status``
        entry (made again when the one kept is not what this gateway would make), the others
        with their kept entry, if any, which their actors publish."""
        ended, live = [], []
        for record, kept in self.parts.store.load_each(read_stored):
            if record.phase == Phase.TERMINAL:
                ended.append((record, kept[1] if kept else Shown.of(self.parts.snapshot(record))))
            else:
                live.append((record, kept))
        return ended, live

    def start_orphan_collection(self, every_s: float = ORPHAN_PASS_EVERY_S) -> None:
        """Run :meth:`collect_orphans` every ``every_s``; a failing pass is logged and the
        next one runs all the same."""

        async def loop() -> None:
            while True:
                await asyncio.sleep(every_s)
                try:
                    await self.collect_orphans()
                except DmsgwError as exc:
                    log.warning("orphan collection: %s", exc)
                except Exception:
                    log.exception("bug in the orphan collection")

        self._orphans = asyncio.get_running_loop().create_task(loop())

    async def close(self) -> None:
        """Stop the passes, the capacity's actor and every pod actor; close the store, then
        what reaches the DMS."""
        if self._orphans is not None:
            self._orphans.cancel()
            # a pass cut short must end before the store it writes to closes
            await asyncio.gather(self._orphans, return_exceptions=True)
        await self.admission.close()
        await self.parts.capacity.close()
        await self.board.close()
        await self._stop_pods()
        await asyncio.get_running_loop().run_in_executor(None, self._supervisor.stop)
        await self.parts.store.close()
        self._heap.close()
        if self.parts.close_dms is not None:
            await self.parts.close_dms()

    async def _stop_pods(self) -> None:
        """Ask every pod actor to stop at once, then wait for them all, for as long as the
        supervisor would wait for one. The supervisor stops its children one after another,
        a thread round trip each and a turn of this loop: 100,000 pods on a busy loop took
        minutes; it now finds them ended. A pod stopped this way is not restarted (its
        actor is transient and ended normally), and resumes from its record at the next
        start."""
        refs = [
            ref
            for uid in self.book.records
            if isinstance(ref := self.registry.get(_name(uid)), AsyncActorRef)
        ]
        for ref in refs:
            ref.stop()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(POD_STOP_S):
                for ref in refs:
                    await ref.wait_stopped()

    def _supervisor_ended(self, event: ActorExit) -> None:
        """The root supervisor ended (in its own thread). Past its restart intensity it has
        stopped every pod actor and failed: nobody above it can restart them, so the process
        has to go; :attr:`gave_up` tells whoever runs it."""
        if event.normal:
            return
        reason = f"the pod supervisor gave up: {event.error}"
        log.critical("%s; the gateway must be restarted", reason)
        with contextlib.suppress(RuntimeError):  # the loop is closed: the process is ending
            self.parts.loop.call_soon_threadsafe(_settle, self.gave_up, reason)

    async def _spawn(self, record: PodRecord, kept: Kept | None = None) -> None:
        """Start the pod's actor. The pods taken on at once (creates whose records shared a
        commit) start in one supervisor message: a thread round trip each was a tenth of a
        create's time on the loop."""
        started: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if not self._starting:
            sending = asyncio.get_running_loop().create_task(self._start_waiting())
            self._sending.add(sending)
            sending.add_done_callback(self._sending.discard)
        self._starting.append((self._child(record, kept), started))
        await started

    async def _start_waiting(self) -> None:
        """Start the actors :meth:`_spawn` queued since this task was made, in one message;
        each waiter hears how its own start went, a few per turn of the loop (what each
        create does next, answering its request, runs before the next ones hear)."""
        waiting, self._starting = self._starting, []
        specs = [spec for spec, _ in waiting]
        try:
            outcomes = await bridge.call(self._supervisor_proxy.start_each(specs))
            for (_, started), outcome in zip(waiting, outcomes, strict=True):
                if isinstance(outcome, Exception) and not started.done():
                    started.set_exception(outcome)
            await wake_in_turns([started for _, started in waiting])
        except asyncio.CancelledError:
            for _, started in waiting:
                started.cancel()
            raise
        except Exception as exc:  # the supervisor is gone: every start failed alike
            for _, started in waiting:
                if not started.done():  # its create was cancelled meanwhile
                    started.set_exception(exc)

    def _child(self, record: PodRecord, kept: Kept | None = None) -> ChildSpec:
        """The supervisor's spec of the pod's actor; the pod is known from now on, and
        answers polls with ``kept``, the ``/status`` entry stored with ``record``, at once:
        its actor may start turns later (pods started together take turns), and publishes
        the same entry then without making it again."""
        self.book.take_on(record, kept[1] if kept is not None else None)
        start = _PodStart(self._services, record.uid, kept)
        return ChildSpec(_name(record.uid), start, Restart.TRANSIENT)

    def pods(self) -> list[tuple[PodRecord, Shown | None]]:
        """Every pod the gateway tracks: its newest record and its ``/status`` entry
        (``None`` before the first)."""
        return self.book.pods()

    def _translate(self, data: RetrievedPodData, generation: int) -> EnsembleConfig:
        """The configured translation, the ensemble stamped with this gateway as its owner."""
        return self._owned.stamp(self.parts.translate(data, generation))

    # --- the plugin backend ---------------------------------------------------------------

    async def create(self, pods: list[RetrievedPodData]) -> list[CreateStruct]:
        """Record each pod and start its actor; idempotent on UID. Answers at once: the
        deployment happens in the pod actor. The pods of one request are taken one after another;
        separate requests run concurrently (their store writes share one commit, their actors
        start in one supervisor message), and a second create of a UID waits for the first."""
        first = refuse_what_cannot_run(self._translate, pods)
        results = []
        for data in pods:
            uid = data.pod.metadata.uid
            await self._create_one(uid, data, first.get(uid))
            results.append(CreateStruct.model_validate({"PodUID": uid, "PodJID": job_id(uid)}))
        return results

    async def _create_one(
        self, uid: str, data: RetrievedPodData, first: EnsembleConfig | None
    ) -> None:
        await self.book.under_way.settled(uid)  # a delete of the UID under way ends first
        if uid in self.book.records:
            return
        with self.book.under_way.creating(uid):
            record = _first_attempt(uid, data, self.parts.clock())
            remember_request(record.request, data)  # parsed and checked once, by the route
            # The pod's first entry is made here, not by its actor: the create is answered
            # before the actor starts (actors take turns), and interLink may poll at once.
            kept = entry_of(record, self.parts.snapshot)
            await self.parts.store.put(uid, stored(record, kept))
            self._first_attempts.keep(uid, first)
            await self._spawn(record, kept)

    async def delete(self, pod: k8s.Pod) -> None:
        """Shut the pod's ensemble down, idempotent, stored before answered (decision 70)."""
        uid = pod.metadata.uid
        await self.book.under_way.created(uid)
        if uid not in self.book.records:
            return
        with self.book.under_way.deleting(uid):
            ref = self.registry.get(_name(uid))
            if ref is not None and ref.is_alive():
                return await ref.proxy().delete()  # type: ignore[attr-defined,no-any-return]
            record = self.book.records[uid]
            if ref is not None or record.phase != Phase.TERMINAL:
                return await self._delete_later(record)
            await self.parts.store.delete(uid)  # dropped only once the store has let it go
            await self.kept_logs.forget(uid)
            self.book.forget(uid)

    async def _delete_later(self, record: PodRecord) -> None:
        """A pod whose actor crashed and awaits its restart (its dead ref is still registered),
        or that has no actor and has not ended: dropping its record would leave the ensemble
        running and the restart without a record (it would fail, counted against the root
        supervisor, and be tried again). The delete is recorded instead, whatever the pod's
        phase, and the restarted actor (or, if the gateway gives up, the next gateway) carries
        it out as a live actor does: it shuts the ensemble down (at once when it has ended)
        and forgets the pod. Making the restart of a deleted pod a no-op instead would need
        the supervisor to forget a child from inside its start, and would drop the shutdown of
        an ensemble that an ended pod may still have (one whose actor crashed while ending).
        The record the restart reads is replaced before it is persisted: a restart due while
        the store writes reads the delete too."""
        if record.phase == Phase.DELETING:  # recorded already: the restart carries it out
            return
        deleting = dataclasses.replace(record, phase=move(record.phase, Event.DELETE).end)
        self.book.records[record.uid] = deleting
        try:
            await self.parts.store.put(record.uid, deleting.to_map())
        except BaseException:
            self.book.records[record.uid] = record  # not stored: the restart resumes the pod
            raise
        log.info("pod %s: its actor is restarting; the delete waits for it", record.uid)

    async def status(self, pods: list[PodRef]) -> list[PodStatus]:
        """Snapshots only: no DMS round trip. An unknown pod that carries our ``JobID`` is
        re-adopted if the DMS still runs its ensemble."""
        self.book.polls.heard_of(ref.uid for ref in pods)
        out = []
        async for ref in in_turns(pods):  # thousands of unknown pods must not hold the loop
            snapshot = self.book.snapshots.get(ref.uid)
            if snapshot is None and (record := self.book.records.get(ref.uid)) is not None:
                # Known, its actor not started yet (its entry was made again at a restart):
                # read from the record, never re-adopted from the DMS.
                snapshot = self.parts.snapshot(record)
            if snapshot is None:
                snapshot = await self._readopt(ref.pod())
            out.append(snapshot)
        return out

    def statuses_at_once(self, uids: Sequence[str]) -> bytes | None:
        """The ``/status`` reply from the kept entries, when every pod named has one."""
        answer = self.book.snapshots.joined(uids)
        if answer is not None:
            self.book.polls.heard_of(uids)
        return answer

    async def ping(self) -> PingResponse:
        """The capacity the DMS peers offer and the node's taints (see :class:`Capacity`)."""
        return await self.parts.capacity.ping()

    def logs(self, request: LogStruct) -> AsyncIterator[bytes]:
        """The container's log from the files the DMS writes (see
        :mod:`dmsgw.interlink.logs.dms_logs`)."""
        record = self.book.records.get(request.pod_uid)
        if record is None:
            raise UnknownPodError(f"no pod with UID {request.pod_uid!r} is known to this gateway")
        names = {
            c.name for c in (*_pod(record).spec.init_containers, *_pod(record).spec.containers)
        }
        if request.container_name and request.container_name not in names:
            raise UnknownPodError(
                f"pod {record.namespace}/{record.name} has no container {request.container_name!r}"
            )
        return pod_logs(record, request, self.parts.invoke, self.kept_logs, self.book.snapshots)

    # --- recovery ---------------------------------------------------------------------------

    async def _readopt(self, pod: k8s.Pod) -> PodStatus:
        uid = pod.metadata.uid
        jid = pod.metadata.annotations.get("JobID", "") if pod.metadata.annotations else ""
        if jid == job_id(uid):
            try:
                ensemble = await self._owned.live_one_of(uid)
            except TransportError as exc:
                raise BackendUnavailable(
                    f"cannot tell whether pod {uid} still runs: the DMS did not answer ({exc})"
                ) from None
            if uid in self.book.records:  # taken on by another poll while the DMS answered
                return self.book.snapshots.get(uid) or self.parts.snapshot(self.book.records[uid])
            if ensemble:
                record = PodRecord(
                    uid=uid,
                    namespace=pod.metadata.namespace,
                    name=pod.metadata.name,
                    jid=jid,
                    request=RetrievedPodData(pod=pod).to_json(),
                    phase=Phase.RUNNING,
                    ensemble_id=ensemble,
                    created_ns=self.parts.clock(),
                )
                self.book.records[uid] = record  # before the next await: one re-adoption only
                try:
                    await self.parts.store.put(uid, record.to_map())
                    await self._spawn(record)
                except BaseException:
                    self.book.records.pop(uid, None)
                    raise
                log.info("re-adopted pod %s (ensemble %s) from its JobID annotation", uid, ensemble)
                return self.book.snapshots.get(uid) or self.parts.snapshot(record)
        return unknown_pod_status(pod)

    async def collect_orphans(self) -> list[str]:
        """Delete the pods interLink has demonstrably forgotten (deleted while the gateway was
        down), then shut down the running ensembles of this gateway that no record knows.
        Returns the UIDs of the pods deleted.

        A pod is forgotten when interLink, alive and polling, has asked about other pods a
        whole grace period after it last named this one (or after the gateway took the pod
        on: created, resumed or re-adopted it). A pod nobody has polled yet, however old, is
        never collected, nor one of a gateway that interLink does not poll at all. A stray
        ensemble waits the same way from the gateway's start, since its pod may still be
        re-adopted through its ``JobID`` when interLink first names it."""
        polls = self.book.polls
        gone = {
            uid: (record.name, polls.last_named_ns(uid))
            for uid, record in self.book.records.items()
            if record.phase not in (Phase.TERMINAL, Phase.DELETING)
            and polls.forgotten_since(polls.last_named_ns(uid))
        }
        for uid, (name, since) in gone.items():
            silent_s = (self.parts.clock() - since) / NS_PER_SECOND
            log.warning(
                "pod %s was not named by interLink's polls for %.0f s: deleting it", uid, silent_s
            )
            await self.delete(k8s.Pod(metadata=k8s.ObjectMeta(uid=uid, name=name)))
        strays_due = polls.forgotten_since(polls.started_ns)
        strays = await self._owned.strays(self.book.records) if strays_due else []
        for ensemble_id in strays:
            log.warning("ensemble %s belongs to no known pod: shutting it down", ensemble_id)
            await self._owned.shut_down(ensemble_id)
        return list(gone)


@dataclasses.dataclass
class _PodStart:
    """Starts a pod's actor for its supervisor (on the supervisor's thread): the first start
    with the ``/status`` entry stored with the record, a restart from the book's newest record
    (the entry is read again from it)."""

    services: PodServices
    uid: str
    kept: Kept | None

    def __call__(self, hook: ExitHook) -> AsyncActorRef[PodActor]:
        kept, self.kept = self.kept, None
        record = self.services.book.records[self.uid]
        return PodActor.start(
            record, self.services, kept=kept, loop=self.services.loop, exit_hook=hook
        )


def _first_attempt(uid: str, data: RetrievedPodData, created_ns: int) -> PodRecord:
    """A new pod's record: its first attempt, waiting for DMS capacity (its actor queues it)."""
    return PodRecord(
        uid=uid,
        namespace=data.pod.metadata.namespace,
        name=data.pod.metadata.name,
        jid=job_id(uid),
        request=data.to_json(),
        phase=Phase.QUEUED,
        attempt=1,
        created_ns=created_ns,
    )


def _name(uid: str) -> str:
    return f"pod/{uid}"


def _settle(future: asyncio.Future[str], reason: str) -> None:
    if not future.done():
        future.set_result(reason)


def _pod(record: PodRecord) -> k8s.Pod:
    return request_data(record).pod
