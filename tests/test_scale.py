"""What the gateway keeps so that 100,000 pods and a large DMS network cost little per request,
and that what it keeps never goes stale: the ping's consolidated capacity, the Host check,
the heap frozen after batches of pods, pods started in one supervisor message, and a pod's
record saved only when it changed."""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import gc
import ipaddress
import json
import sys
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dmsgw.actors import bridge
from dmsgw.actors.aio import AsyncActorRef
from dmsgw.actors.registry import Registry
from dmsgw.actors.supervisor import ChildSpec, DuplicateChildError, Supervisor
from dmsgw.behaviors.resources import CPU, Resources
from dmsgw.clock import FixedClock
from dmsgw.interlink.capacity import resource_actor as resources
from dmsgw.interlink.capacity.resource_actor import Capacity, ResourceActor
from dmsgw.interlink.gateway import Gateway, job_id
from dmsgw.interlink.pods import heap
from dmsgw.interlink.pods.heap import HeapFreezer
from dmsgw.interlink.records import pod_record
from dmsgw.interlink.records.pod_record import (
    Phase,
    PodRecord,
    Snapshot,
    parsed_request,
    snapshot_of,
)
from dmsgw.interlink.server import front_door, host_is_local
from dmsgw.interlink.state.pod_store import PodStore
from dmsgw.interlink.wire import k8s
from dmsgw.interlink.wire.bodies import PodStatus, RetrievedPodData
from dmsgw.interlink.wire.parsing import (
    MEMO_BYTES,
    MEMO_ENTRIES,
    _BodyMemo,
    held_bytes,
    parse_create_body,
)
from tests.support.echo_actor import Echo
from tests.support.gateway_fakes import (
    WAIT_S,
    ClosedTurns,
    FakeDMS,
    create,
    gateway_on,
    pod,
    uid,
    until,
)

DATA = Path(__file__).parent / "data" / "interlink"


# --- the ping ------------------------------------------------------------------------------


async def test_the_ping_is_consolidated_once_per_gathering_and_again_when_it_changes(
    tmp_path: Path, clock: FixedClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cached ping answers the reply already consolidated; once the peers are asked again
    (the cache expired) the reply says what they answer now."""
    dms = FakeDMS(tmp_path / "logs", free=Resources(cpu=CPU(cores=2.0)))
    consolidations = 0
    consolidate = resources.consolidate_capacity

    def counting(*args: Any, **kwargs: Any) -> Any:
        nonlocal consolidations
        consolidations += 1
        return consolidate(*args, **kwargs)

    monkeypatch.setattr(resources, "consolidate_capacity", counting)
    capacity = Capacity(ResourceActor.start(dms, ttl_s=20.0, clock=clock), pods_capacity=10)
    try:
        first = await capacity.ping()
        assert [await capacity.ping() for _ in range(3)] == [first] * 3
        assert (consolidations, dms.asked["resources/free"]) == (1, 1)
        dms.free = Resources(cpu=CPU(cores=8.0))
        clock.advance(21.0)
        changed = await capacity.ping()
    finally:
        await capacity.close()
    assert (consolidations, dms.asked["resources/free"]) == (2, 2)
    assert first.resources is not None and first.resources.cpu == "2"
    assert changed.resources is not None and changed.resources.cpu == "8"


# --- the Host check --------------------------------------------------------------------------


def test_the_host_check_parses_a_host_and_address_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every request names the same Host on the same socket: it is parsed once, and the
    answers stay what they were (a wrong port or name is still refused)."""
    parsed: list[str] = []
    parse = ipaddress.ip_address

    def counting(text: str) -> Any:
        parsed.append(text)
        return parse(text)

    monkeypatch.setattr(front_door.ipaddress, "ip_address", counting)
    host_is_local.cache_clear()
    sockname = ("127.0.0.1", 4000)
    assert [host_is_local("127.0.0.1:4000", sockname) for _ in range(5)] == [True] * 5
    once = len(parsed)
    assert [host_is_local("127.0.0.1:4000", sockname) for _ in range(5)] == [True] * 5
    assert len(parsed) == once
    assert not host_is_local("127.0.0.1:4001", sockname)
    assert not host_is_local("evil.example:4000", sockname)
    assert host_is_local("localhost:4000", sockname)


# --- resuming pods ---------------------------------------------------------------------------


def test_children_started_in_one_message_are_each_supervised() -> None:
    """``start_children`` starts every spec in order, in one message, as ``start_child``
    would one by one: each is registered, and a duplicate name is refused."""
    supervisor = Supervisor.start(registry=(registry := Registry()))
    try:
        specs = [ChildSpec(name, lambda hook: Echo.start(exit_hook=hook)) for name in "abc"]
        refs = supervisor.proxy().start_children(specs).get(timeout=WAIT_S)
        assert [registry.get(name) for name in "abc"] == refs
        assert supervisor.proxy().which_children().get(timeout=WAIT_S) == [
            ("a", True),
            ("b", True),
            ("c", True),
        ]
        with pytest.raises(DuplicateChildError):
            supervisor.proxy().start_children(specs[:1]).get(timeout=WAIT_S)
    finally:
        supervisor.stop()


def test_children_started_each_on_their_own_share_a_message() -> None:
    """``start_each`` starts every spec in one message, each on its own: a spec that cannot
    start is answered with its error, and the others start all the same."""
    supervisor = Supervisor.start(registry=(registry := Registry()))
    try:
        specs = [ChildSpec(name, lambda hook: Echo.start(exit_hook=hook)) for name in "abc"]
        supervisor.proxy().start_child(specs[1]).get(timeout=WAIT_S)
        a, b, c = supervisor.proxy().start_each(specs).get(timeout=WAIT_S)
        assert isinstance(b, DuplicateChildError)
        assert (registry.get("a"), registry.get("c")) == (a, c)
        assert [alive for _, alive in supervisor.proxy().which_children().get(timeout=WAIT_S)] == [
            True,
            True,
            True,
        ]
    finally:
        supervisor.stop()


async def test_pods_created_at_once_start_in_one_supervisor_message(
    tmp_path: Path, clock: FixedClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Creates that run at once (their records share a commit) start their pods' actors in
    one supervisor message, not one thread round trip each; every pod is then deployed."""
    messages: list[int] = []
    start_each = Supervisor.start_each

    def counting(self: Supervisor, specs: list[ChildSpec]) -> list[Any]:
        messages.append(len(specs))
        return start_each(self, specs)

    monkeypatch.setattr(Supervisor, "start_each", counting)
    dms = FakeDMS(tmp_path / "logs")
    gateway = await gateway_on(dms, tmp_path / "state", owner="did:key:gw", clock=clock)
    try:
        await asyncio.gather(*(create(gateway, pod(uid(n))) for n in range(5)))
        running = [uid(n) for n in range(5)]
        await until(
            lambda: all(gateway.book.records[u].dms_status == "Running" for u in running), "running"
        )
    finally:
        await gateway.close()
    assert messages == [5]


async def _stored_running_pods(
    dms: FakeDMS, state: Path, clock: FixedClock, count: int
) -> list[str]:
    """``count`` pods created and running in a gateway on ``state``, closed after: the
    UIDs of what a restart there resumes."""
    pods = [uid(n) for n in range(count)]
    gateway = await gateway_on(dms, state, owner="did:key:gw", clock=clock)
    try:
        await asyncio.gather(*(create(gateway, pod(u)) for u in pods))
        await until(lambda: all(gateway.book.records[u].started_ns for u in pods), "running")
    finally:
        await gateway.close()
    return pods


async def test_closing_stops_every_pod_at_once_and_they_resume(
    tmp_path: Path, clock: FixedClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Closing asks every pod actor to stop together: the supervisor, which stops its
    children one thread round trip at a time, finds none left to wait for; and a restarted
    gateway resumes every pod."""
    waited_for: list[str] = []
    stop = AsyncActorRef.stop

    def spying(self: AsyncActorRef[Any], *, block: bool = False, **kw: Any) -> bool:
        stopped = stop(self, block=block, **kw)
        if block and stopped:
            waited_for.append(repr(self))
        return stopped

    monkeypatch.setattr(AsyncActorRef, "stop", spying)
    dms = FakeDMS(tmp_path / "logs")
    pods = await _stored_running_pods(dms, tmp_path / "state", clock, 8)
    assert waited_for == []
    again = await gateway_on(dms, tmp_path / "state", owner="did:key:gw", clock=clock)
    try:
        await until(lambda: all(again.registry.get(f"pod/{u}") for u in pods), "resumed")
        assert sorted(again.book.records) == sorted(pods)
        assert len(dms.live()) == len(pods)  # none deployed again, none shut down
    finally:
        await again.close()


class _CountingStore(PodStore):
    """A store that keeps the phase and attempt of every record written."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.phases: list[str] = []
        self.attempts: list[int] = []

    async def put(self, uid: str, record: dict[str, Any]) -> None:
        self.phases.append(record["phase"])
        self.attempts.append(record["attempt"])
        await super().put(uid, record)


async def test_a_resumed_pod_saves_only_what_changed(tmp_path: Path, clock: FixedClock) -> None:
    """After a restart, the first status of a pod that is as it was saved is not written
    again (10,000 pods wrote 10,000 identical records); the next change is."""
    dms = FakeDMS(tmp_path / "logs")
    gateway = await gateway_on(dms, tmp_path / "state", owner="did:key:gw", clock=clock)
    try:
        await create(gateway, pod(uid(1)))
        await until(lambda: gateway.book.records[uid(1)].dms_status == "Running", "running")
    finally:
        await gateway.close()
    store = _CountingStore(tmp_path / "state")
    asked = dms.asked["deployment/status"]
    gateway = await gateway_on(
        dms, tmp_path / "state", owner="did:key:gw", clock=clock, store=store
    )
    try:
        await until(lambda: dms.asked["deployment/status"] > asked, "a status asked after restart")
        dms.live()[0].status = "Completed"
        await until(lambda: gateway.book.records[uid(1)].phase == Phase.TERMINAL, "completed")
    finally:
        await gateway.close()
    assert store.phases == [Phase.TERMINAL]


async def test_a_create_writes_its_first_attempt_at_once(tmp_path: Path, clock: FixedClock) -> None:
    """A create records the pod's first deployment attempt, which the actor then makes:
    four writes to Running (the attempt in line for capacity, admitted, deployed, its first
    status), not a pending record that the actor wrote again as the attempt at once."""
    await _written_until_running(tmp_path, clock, create_it=True)


async def test_a_pending_pod_an_earlier_gateway_recorded_is_deployed(
    tmp_path: Path, clock: FixedClock
) -> None:
    """A store written by a gateway that recorded new pods pending: the pod's first attempt
    is recorded, then made."""
    body = json.dumps({"pod": pod(uid(1)), "container": [{"name": "main"}]}).encode()
    pending = PodRecord(
        uid=uid(1),
        namespace="default",
        name="p-0001",
        jid=job_id(uid(1)),
        request=parse_create_body(body)[0].to_json(),
    )
    earlier = PodStore(tmp_path / "state")
    await earlier.put(uid(1), pending.to_map())
    await earlier.close()
    await _written_until_running(tmp_path, clock, create_it=False)


async def _written_until_running(tmp_path: Path, clock: FixedClock, *, create_it: bool) -> None:
    """A gateway on the store under ``tmp_path`` (creating pod 1 first, or resuming it) writes
    the first attempt, its admission, then its deployment and first status: four writes, one
    deployment."""
    dms = FakeDMS(tmp_path / "logs")
    store = _CountingStore(tmp_path / "state")
    gateway = await gateway_on(
        dms, tmp_path / "state", owner="did:key:gw", clock=clock, store=store
    )
    try:
        if create_it:
            await create(gateway, pod(uid(1)))
        await until(lambda: gateway.book.records[uid(1)].dms_status == "Running", "running")
    finally:
        await gateway.close()
    assert store.phases == [Phase.QUEUED, Phase.DEPLOYING, Phase.RUNNING, Phase.RUNNING]
    assert store.attempts == [1, 1, 1, 1]
    assert dms.asked["deployment/new"] == 1


# --- the frozen heap -------------------------------------------------------------------------


class _Cycle:
    """An object in a reference cycle: only the cyclic collector frees it."""

    def __init__(self) -> None:
        self.me = self


@pytest.fixture
def thawed() -> Iterator[None]:
    """Whatever a test freezes is the collector's again after it."""
    yield
    gc.unfreeze()


@pytest.fixture
def freezer(thawed: None) -> Iterator[HeapFreezer]:
    """A freezer as a gateway's (two pods a freeze), closed after the test."""
    freezer = HeapFreezer(every=2)
    yield freezer
    freezer.close()


def test_garbage_made_after_a_freeze_is_collected_as_ever(freezer: HeapFreezer) -> None:
    freezer.took(2)
    assert gc.get_freeze_count() > 0
    later = _Cycle()
    gone = weakref.ref(later)
    del later
    gc.collect()
    assert gone() is None


def test_pods_let_go_settle_as_pods_taken_on_do(
    freezer: HeapFreezer, monkeypatch: pytest.MonkeyPatch
) -> None:
    passes: list[object] = []
    monkeypatch.setattr(gc, "collect", lambda *args: passes.append(args) or 0)
    freezer.let_go()
    assert passes == []
    freezer.took()  # one pod came, one went: two since the last freeze
    assert passes == [()]
    freezer.let_go(2)
    assert passes == [(), ()]


def test_what_is_made_while_frozen_pods_are_freed_does_not_pile_up_young(
    freezer: HeapFreezer,
) -> None:
    """Every free of a frozen object lowers the young generation's count: while pods are
    deleted, Python's own young collections stop, and what is made meanwhile piles up, for
    one collection to walk later. Each pod let go here frees 100 frozen objects and makes 100
    that live on; the pile stays at a settle's worth of pods, not the 200 pods' 20,000."""
    pods = [[[n] for n in range(100)] for _ in range(200)]
    freezer.settle()
    made: list[list[int]] = []
    for _ in range(200):
        pod = pods.pop()
        while pod:  # a deleted pod's objects are freed as the new work goes on
            pod.pop()
            made.append([0])
        freezer.let_go()
    assert len(gc.get_objects(generation=0)) < 2_000


def test_what_live_pods_renew_at_each_poll_does_not_pile_up_young(
    freezer: HeapFreezer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A followed pod frees what its last poll made (frozen, or made since) and makes it anew
    at each poll, so the young count stays low and Python's own young collections stop: in
    the steady state of polling, what the pods renew piled up until one collection walked it
    all (~90 ms at 10,000 pods). Here 200 pods of 16 objects each are polled three times
    over; the pile stays at the polls' worth between two freezes, not the 3,200 objects that
    all the pods renewed."""
    monkeypatch.setattr(heap, "POLLS_BETWEEN_FREEZES", 8)
    pods = [[[n] for n in range(16)] for _ in range(200)]
    freezer.settle()
    for _ in range(3):
        for index in range(len(pods)):
            pods[index] = [[n] for n in range(16)]  # the last poll's objects are freed
            freezer.polled()
    assert len(gc.get_objects(generation=0)) < 1_000


def test_a_freezer_closed_twice_is_closed_once(freezer: HeapFreezer) -> None:
    """A gateway may be closed twice (a test's own close, then its fixture's): the second
    close, and a pod taken on after, leave the collector as the first close left it."""
    freezer.took(2)
    freezer.close()
    freezer.close()
    freezer.took(2)
    assert gc.get_freeze_count() == 0
    assert freezer._collected not in gc.callbacks


@pytest.fixture
def collector_off() -> Iterator[None]:
    """Only reference counting frees objects meanwhile; the cyclic collector then saves what
    it finds unreachable in ``gc.garbage`` instead of freeing it."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()


def _cyclic_garbage_of_ours() -> list[str]:
    """What the cyclic collector finds unreachable now that comes from the gateway's code."""
    gc.set_debug(gc.DEBUG_SAVEALL)
    gc.collect()
    modules = (getattr(o, "__module__", None) or type(o).__module__ for o in gc.garbage)
    return sorted({m for m in modules if isinstance(m, str) and m.startswith("dmsgw.")})


def _watching(clock: FixedClock) -> tuple[asyncio.Event, Snapshot]:
    """A gateway's snapshot that sets the event once pod 1's ensemble is seen running."""
    following = asyncio.Event()

    def published(record: PodRecord) -> PodStatus:
        if record.uid == uid(1) and record.dms_status == "Running":
            following.set()
        return snapshot_of(record, now_ns=clock())

    return following, published


async def _create_and_delete_two_pods(
    gateway: Gateway, following: asyncio.Event
) -> list[weakref.ref[Any]]:
    """Pod 1 deleted while its ensemble is followed (``following`` is set), pod 2 while it
    deploys; returns weak references to their actors and tasks (and pod 1's follower task),
    taken before the deletes, once both actors have ended and the supervisor has let go of
    them."""
    specs = [pod(uid(n)) for n in (1, 2)]
    await create(gateway, specs[0])
    await asyncio.wait_for(following.wait(), WAIT_S)
    await create(gateway, specs[1])
    refs = [gateway.registry.require(f"pod/{uid(n)}") for n in (1, 2)]
    actors = [ref._actor for ref in refs]  # type: ignore[attr-defined]
    tasks = [ref._task for ref in refs]  # type: ignore[attr-defined]  # none while idle
    follows = actors[0]._task  # pod 1's follow (pod 2's deploy may not have started)
    alive = [weakref.ref(o) for o in (*actors, *tasks, follows) if o is not None]
    del actors, tasks, follows
    for spec in specs:
        await gateway.delete(k8s.Pod.model_validate(spec))
    stopped = (ref.wait_stopped() for ref in refs)  # type: ignore[attr-defined]
    await asyncio.wait_for(asyncio.gather(*stopped), WAIT_S)
    del refs
    # The supervisor lets go of the refs in its own thread, before it answers this (an
    # internal step with no public sign, which a test of what stays in memory must wait for).
    await bridge.call(gateway._supervisor_proxy.which_children())
    return alive


async def test_a_deleted_pod_leaves_no_reference_cycle(
    tmp_path: Path, clock: FixedClock, collector_off: None
) -> None:
    """Reference counting alone frees a deleted pod (its actor, its follower, their tasks), so
    that a frozen heap never needs a pass to let go of it. Nothing the creates, the
    translations and the deletes made is left in a cycle either."""
    dms = FakeDMS(tmp_path / "logs")
    following, snapshot = _watching(clock)
    gateway = await gateway_on(
        dms, tmp_path / "state", owner="did:key:gw", clock=clock, snapshot=snapshot
    )
    try:
        alive = await _create_and_delete_two_pods(gateway, following)
        assert [o() for o in alive] == [None] * len(alive)
        assert _cyclic_garbage_of_ours() == []
    finally:
        await gateway.close()


async def test_deleted_pods_leave_the_frozen_heap_without_a_thaw(
    tmp_path: Path, clock: FixedClock, thawed: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A gateway that freezes its heap after every two pods: its deleted pods are freed while
    the heap stays frozen (no pass over every pod while serving); closing thaws it."""
    thaws: list[object] = []
    unfreeze = gc.unfreeze
    monkeypatch.setattr(gc, "unfreeze", lambda: thaws.append(()) or unfreeze())
    dms = FakeDMS(tmp_path / "logs")
    following, snapshot = _watching(clock)
    gateway = await gateway_on(
        dms,
        tmp_path / "state",
        owner="did:key:gw",
        clock=clock,
        freeze_every=2,
        snapshot=snapshot,
    )
    try:
        alive = await _create_and_delete_two_pods(gateway, following)
        assert gc.get_freeze_count() > 0
        assert [o() for o in alive] == [None] * len(alive)
        assert thaws == []
    finally:
        await gateway.close()
    assert thaws == [()]
    assert gc.get_freeze_count() == 0


async def test_a_gateway_collects_what_was_made_before_it_freezes_its_resume(
    tmp_path: Path, clock: FixedClock, thawed: None
) -> None:
    """The resume freezes without a collection (a pass over the pods it resumed would be
    long): garbage the process made before it starts, a command line's parser say, is
    collected first, not frozen for good."""
    made_before = _Cycle()
    gone = weakref.ref(made_before)
    del made_before
    gc.disable()  # no collection of Python's own gets there first
    try:
        gateway = await gateway_on(
            FakeDMS(tmp_path / "logs"), tmp_path / "state", owner="o", clock=clock, freeze_every=2
        )
    finally:
        gc.enable()
    try:
        assert gone() is None
    finally:
        await gateway.close()


async def test_a_restarts_pods_count_as_taken_on_once_their_actors_start(
    tmp_path: Path, clock: FixedClock, thawed: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The resume freezes what it read without a pass; the actors it asks for start turns
    later, and what their starts make is settled every so many pods, as a create's is. Never
    counted, 100,000 resumed actors were all walked by the first settle that came (3.6 s)."""
    dms = FakeDMS(tmp_path / "logs")
    await _stored_running_pods(dms, tmp_path / "state", clock, 4)
    settles: list[bool] = []
    settle = HeapFreezer.settle

    def counted(self: HeapFreezer, *, collect: bool = True) -> None:
        settles.append(collect)
        settle(self, collect=collect)

    monkeypatch.setattr(HeapFreezer, "settle", counted)
    gate = ClosedTurns()  # no pod actor starts until it opens
    again = await gateway_on(
        dms, tmp_path / "state", owner="did:key:gw", clock=clock, freeze_every=2, turns=gate
    )
    try:
        # What came before the resume, then the resume's freeze; no actor has started yet.
        assert settles == [True, False]
        gate.open.set()
        await until(lambda: len(settles) == 4, "the started actors settled")
        assert settles == [True, False, True, True]  # then one per two starts
    finally:
        await again.close()


async def test_a_followed_pods_polls_settle_the_gateways_heap(
    tmp_path: Path, clock: FixedClock, thawed: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The gateway's pod actors hand their followers its freezer: polls alone settle it."""
    polls_at_settles: list[int] = []
    settle = HeapFreezer.settle

    def counted(self: HeapFreezer, *, collect: bool = True) -> None:
        polls_at_settles.append(self._polls)
        settle(self, collect=collect)

    monkeypatch.setattr(HeapFreezer, "settle", counted)
    monkeypatch.setattr(heap, "POLLS_BETWEEN_FREEZES", 2)
    dms = FakeDMS(tmp_path / "logs")
    gateway = await gateway_on(
        dms, tmp_path / "state", owner="did:key:gw", clock=clock, freeze_every=1_000
    )
    try:
        await create(gateway, pod(uid(1)))
        await until(lambda: 2 in polls_at_settles, "a settle after two polls")
    finally:
        await gateway.close()


async def test_the_pods_a_gateway_follows_set_how_often_each_polls(
    tmp_path: Path, clock: FixedClock
) -> None:
    """The gateway's followers share one pace: with 3 pods followed and 10 polls a second for
    all, each waits at most the policy's longest wait (0.1 s here) but no less than 0.3 s; a
    deleted pod no longer counts.

    The pace is read inside the gateway: no public answer counts the pods followed, and the
    waits it sets show outside only as real time between polls (no timing in the suite)."""
    dms = FakeDMS(tmp_path / "logs")
    pods = [uid(n) for n in range(3)]
    gateway = await gateway_on(
        dms, tmp_path / "state", owner="did:key:gw", clock=clock, polls_per_s=10.0
    )
    try:
        await asyncio.gather(*(create(gateway, pod(u)) for u in pods))
        await until(lambda: gateway._pace.followed == 3, "three pods followed")
        assert gateway._pace.stretched(0.1) == pytest.approx(0.3)
        await gateway.delete(k8s.Pod.model_validate(pod(pods[0])))
        await until(lambda: gateway._pace.followed == 2, "the deleted pod no longer followed")
    finally:
        await gateway.close()


async def test_pods_taken_on_while_the_collector_is_paused_wait_for_its_settle(
    freezer: HeapFreezer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Actors that start while a restart still resumes (the collector paused) settle nothing
    on their own: a settle's pass then would walk every record the resume has read; the
    resume's own freeze, after it, takes what they made."""
    passes: list[object] = []
    monkeypatch.setattr(gc, "collect", lambda *args: passes.append(args) or 0)
    with freezer.paused():
        freezer.took(3)
        for _ in range(heap.POLLS_BETWEEN_FREEZES):
            freezer.polled()
    assert passes == []
    freezer.settle(collect=False)
    freezer.took()
    assert passes == []  # counted from the resume's freeze: one pod since
    freezer.took()
    assert passes == [()]


@pytest.mark.parametrize(
    "body",
    [
        "create_v05_example.json",
        "create_v04_quickstart.json",
        "pod_full.json",
    ],
)
def test_a_stored_request_reads_back_as_the_create_body_did(
    body: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a record keeps (the request as the model writes it) is read back without the
    ``/create`` checks, to the pod those checks read from it; and to the pod the create
    itself parsed, which a create hands on instead of parsing the stored copy again: the
    same spec, metadata and sent data, written alike (its status's times are written, and so
    read back, to the second; the gateway reads none of them)."""
    raw = (DATA / body).read_bytes()
    if body.startswith("pod_"):
        raw = json.dumps({"pod": json.loads(raw), "container": []}).encode()
    created = parse_create_body(raw)[0]
    stored = created.to_json()
    monkeypatch.setattr(pod_record, "_parsed", collections.OrderedDict())
    read = parsed_request(stored)
    assert read == parse_create_body(stored)[0]
    assert read.to_json() == stored
    assert read.pod.spec == created.pod.spec
    assert read.pod.metadata == created.pod.metadata
    assert read.pod.status.pod_ip == created.pod.status.pod_ip
    assert read.model_copy(update={"pod": created.pod}) == created


def test_the_parsed_requests_are_shared_by_the_loop_and_a_restarts_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A restart reads the ended pods' requests in a worker thread while the loop may read
    others: every read answers its own request, and the cache keeps its bound."""
    monkeypatch.setattr(pod_record, "_parsed", collections.OrderedDict())
    monkeypatch.setattr(pod_record, "PARSED_REQUESTS", 4)
    requests = [
        RetrievedPodData.model_validate({"pod": {"metadata": {"uid": f"u{n}"}}}) for n in range(8)
    ]
    stored = [(data.to_json(), data.pod.metadata.uid) for data in requests]

    def reader(offset: int) -> list[bool]:
        return [
            pod_record.parsed_request(raw).pod.metadata.uid == uid
            for _ in range(300)
            for raw, uid in stored[offset:] + stored[:offset]
        ]

    switching = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads take turns between any two steps
    try:
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            answers = [ok for oks in pool.map(reader, range(4)) for ok in oks]
    finally:
        sys.setswitchinterval(switching)
    assert all(answers) and len(answers) == 4 * 300 * 8
    assert len(pod_record._parsed) <= 4


async def test_a_create_parses_its_body_once(
    tmp_path: Path, clock: FixedClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pod a create parsed and checked is the one its actor deploys and shows: the
    stored copy of its request is not parsed again on the pod's way to Running (~0.1 ms a
    create)."""
    monkeypatch.setattr(pod_record, "_parsed", collections.OrderedDict())
    parses: list[bytes] = []
    parse = RetrievedPodData.model_validate_json

    def counting(request: bytes) -> RetrievedPodData:
        parses.append(request)
        return parse(request)

    monkeypatch.setattr(RetrievedPodData, "model_validate_json", counting)
    dms = FakeDMS(tmp_path / "logs")
    gateway = await gateway_on(dms, tmp_path / "state", owner="did:key:gw", clock=clock)
    try:
        await create(gateway, pod(uid(1)))
        await until(lambda: gateway.book.records[uid(1)].started_ns > 0, "running")
    finally:
        await gateway.close()
    assert parses == []


def test_the_parsed_requests_kept_are_the_most_recently_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A bounded number of parsed requests is kept, the least recently read dropped first."""
    monkeypatch.setattr(pod_record, "_parsed", collections.OrderedDict())
    monkeypatch.setattr(pod_record, "PARSED_REQUESTS", 2)
    first, second, third = (
        parse_create_body(json.dumps({"pod": pod(uid(n))}).encode())[0].to_json() for n in (1, 2, 3)
    )
    kept = parsed_request(first)
    parsed_request(second)
    assert parsed_request(first) is kept  # read again: now the most recent
    parsed_request(third)
    assert list(pod_record._parsed) == [first, third]


def test_what_a_full_collection_leaves_is_frozen(freezer: HeapFreezer) -> None:
    """Python's own full collections freeze what they leave, as a settle does: the state
    that live pods make after they settle is not walked by every later pass."""
    frozen = gc.get_freeze_count()
    kept = [_Cycle() for _ in range(8)]
    gone = weakref.ref(_Cycle())
    gc.collect()  # a full collection, as Python's own rule runs one
    assert gone() is None
    assert gc.get_freeze_count() >= frozen + len(kept)


def test_resumed_pods_are_frozen_without_a_pass_over_them(
    freezer: HeapFreezer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pass over 10,000 resumed pods held the loop ~1 s and found nothing to collect."""
    passes: list[object] = []
    monkeypatch.setattr(gc, "collect", lambda *args: passes.append(args) or 0)
    with freezer.paused():
        resumed = [_Cycle() for _ in range(8)]
    freezer.settle(collect=False)
    assert passes == []
    assert gc.get_freeze_count() >= len(resumed)
    freezer.took(2)  # pods taken on later: collected, then frozen
    assert passes == [()]


async def test_a_restart_freezes_its_resumed_pods_without_a_pass(
    tmp_path: Path, clock: FixedClock, thawed: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    dms = FakeDMS(tmp_path / "logs")
    gateway = await gateway_on(dms, tmp_path / "state", owner="did:key:gw", clock=clock)
    try:
        await create(gateway, pod(uid(1)))
        await until(lambda: gateway.book.records[uid(1)].dms_status == "Running", "running")
    finally:
        await gateway.close()
    passes: list[object] = []
    monkeypatch.setattr(gc, "collect", lambda *args: passes.append("a pass") or 0)
    load_each = PodStore.load_each
    monkeypatch.setattr(
        PodStore, "load_each", lambda self, read: passes.append("read") or load_each(self, read)
    )
    frozen = gc.get_freeze_count()
    enable = gc.enable
    young_at_enable: list[int] = []

    def enabling() -> None:
        """The collector comes back: what it finds young, its first pass walks (the resumed
        pods, at 10,000 pods 175 ms, unless they were frozen first)."""
        young_at_enable.append(gc.get_count()[0])
        enable()

    monkeypatch.setattr(gc, "enable", enabling)
    gateway = await gateway_on(
        dms, tmp_path / "state", owner="did:key:gw", clock=clock, freeze_every=2
    )
    try:
        assert gc.get_freeze_count() > frozen
        assert passes == ["a pass", "read"]  # what came before; none over the pods read
        assert young_at_enable == [0]
    finally:
        await gateway.close()


def test_the_collector_waits_while_pods_are_resumed_and_runs_again_after(
    freezer: HeapFreezer,
) -> None:
    with pytest.raises(RuntimeError), freezer.paused():
        assert not gc.isenabled()
        raise RuntimeError("a resume that fails")
    assert gc.isenabled()
    with HeapFreezer(every=0).paused():  # a gateway that does not freeze leaves it alone
        assert gc.isenabled()


# --- the remembered /status bodies -------------------------------------------------------------


def test_the_status_bodies_of_100000_pods_are_all_remembered() -> None:
    """interLink polls each pod with its own body: 100,000 pods of a few KiB each are
    100,000 bodies remembered, none forgotten for the others."""
    memo = _BodyMemo(max_entries=MEMO_ENTRIES, max_bytes=MEMO_BYTES)
    for i in range(100_000):
        pods = ((f"00000000-0000-4000-8000-{i:012d}", "default", f"pod-{i}", 1, 4000),)
        memo.put(i.to_bytes(4), held_bytes(pods), pods)
    assert memo.get((0).to_bytes(4)) is not None
