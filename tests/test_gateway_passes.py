"""The gateway's background passes: orphan pods and stray ensembles, with pods created at
different times (an injected clock, advanced past the grace period between passes) and two
gateways sharing one DMS.

The rule under test: a pod is collected only once interLink, alive and polling other pods, has
not named it for a whole grace period; a gateway only ever collects or re-adopts ensembles that
carry its own owner label. Most tests run over an in-memory DMS
(:mod:`tests.support.gateway_fakes`); the last runs two real gateways over the embedded devnet.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from dmsgw.actors.scheduler import ManualScheduler
from dmsgw.actors.supervisor import Supervisor
from dmsgw.behaviors.catalog import DEPLOYMENT_LIST, DEPLOYMENT_NEW
from dmsgw.clock import FixedClock
from dmsgw.devnet.devnet import Devnet
from dmsgw.interlink import gateway as gateway_module
from dmsgw.interlink.app import start_backend
from dmsgw.interlink.gateway import ROOT_BACKOFF, Gateway
from dmsgw.interlink.pods.pod_actor import _TaskCrashed
from dmsgw.interlink.records.pod_record import POD_UID_KEY, Phase
from dmsgw.interlink.server import Metrics
from dmsgw.interlink.state.recovery import ORPHAN_GRACE_S, OWNER_KEY
from dmsgw.interlink.wire.parsing import parse_create_body
from tests.support.devnet_gateways import gateway_config
from tests.support.gateway_fakes import FakeDMS, create, gateway_on, pod, poll, uid, until

GRACE = ORPHAN_GRACE_S
ONE = "did:key:gateway-one"
TWO = "did:key:gateway-two"


@pytest.fixture
def dms(tmp_path: Path) -> FakeDMS:
    return FakeDMS(tmp_path / "logs")


@pytest.fixture
async def gateways() -> AsyncIterator[list[Gateway]]:
    """Every gateway a test starts, closed at its end."""
    started: list[Gateway] = []
    yield started
    for gateway in started:
        await gateway.close()


async def running(gateway: Gateway, dms: FakeDMS, *specs: dict[str, Any]) -> None:
    """Wait until each pod runs in exactly one deployment."""
    for spec in specs:
        u = spec["metadata"]["uid"]
        await until(
            lambda u=u: (
                len(dms.live(u)) == 1
                and gateway.book.records[u].phase == Phase.RUNNING
                and gateway.book.records[u].ensemble_id == dms.live(u)[0].id
            ),
            f"{u} running",
        )


# --- orphans: pods interLink no longer asks about ------------------------------------------


async def test_a_pod_created_after_the_grace_period_lives_until_interlink_skips_it(
    dms: FakeDMS, clock: FixedClock, tmp_path: Path, gateways: list[Gateway]
) -> None:
    """The issue's case: the gateway has been up longer than the grace period, a pod is
    created and not polled yet. It must survive every pass until interLink, polling others,
    has left it out for a whole grace period."""
    gateway = await gateway_on(dms, tmp_path / "state", owner=ONE, clock=clock)
    gateways.append(gateway)
    old, new, polled = pod(uid(1)), pod(uid(2)), pod(uid(3))
    await create(gateway, old)
    await running(gateway, dms, old)
    clock.advance(GRACE + 100)  # the gateway is long past its start
    await create(gateway, new)
    await create(gateway, polled)
    await running(gateway, dms, new, polled)
    await poll(gateway, old, polled)  # interLink has not polled the new pod yet
    assert await gateway.collect_orphans() == []
    clock.advance(GRACE - 1)
    await poll(gateway, old, polled)
    assert await gateway.collect_orphans() == []  # not yet a whole grace period
    clock.advance(2)
    await poll(gateway, old, polled)
    assert await gateway.collect_orphans() == [uid(2)]
    await until(lambda: not dms.live(uid(2)), "the forgotten pod's ensemble stopped")
    assert [len(dms.live(uid(n))) for n in (1, 3)] == [1, 1]


async def test_no_pod_is_collected_while_interlink_polls_no_pod(
    dms: FakeDMS, clock: FixedClock, tmp_path: Path, gateways: list[Gateway]
) -> None:
    """Without a poll naming some pod there is no proof that interLink forgot any: an hour of
    silence (interLink down, or only pinging) collects nothing."""
    gateway = await gateway_on(dms, tmp_path / "state", owner=ONE, clock=clock)
    gateways.append(gateway)
    specs = [pod(uid(n)) for n in range(3)]
    for n, spec in enumerate(specs):
        clock.advance(n * 100)
        await create(gateway, spec)
    await running(gateway, dms, *specs)
    for _ in range(6):
        clock.advance(GRACE * 2)
        await poll(gateway)  # interLink's ping: /status naming no pod
        assert await gateway.collect_orphans() == []
    assert all(len(dms.live(s["metadata"]["uid"])) == 1 for s in specs)


async def test_pods_resumed_after_a_restart_wait_for_interlink_to_skip_them(
    dms: FakeDMS, clock: FixedClock, tmp_path: Path, gateways: list[Gateway]
) -> None:
    """After a restart, a pod deleted while the gateway was down is collected once interLink,
    polling the others, has left it out for a grace period; not before, and never by the
    mere passing of time."""
    state = tmp_path / "state"
    first = await gateway_on(dms, state, owner=ONE, clock=clock)
    kept, deleted = pod(uid(1)), pod(uid(2))
    await create(first, kept)
    await create(first, deleted)
    await running(first, dms, kept, deleted)
    await first.close()
    clock.advance(3600)
    second = await gateway_on(dms, state, owner=ONE, clock=clock)
    gateways.append(second)
    await running(second, dms, kept, deleted)
    clock.advance(GRACE + 1)
    assert await second.collect_orphans() == []  # nobody polled: no proof of anything
    await poll(second, kept)
    assert await second.collect_orphans() == [uid(2)]
    await until(lambda: not dms.live(uid(2)), "the deleted pod's ensemble stopped")
    assert len(dms.live(uid(1))) == 1


# --- strays: ensembles no record knows -----------------------------------------------------


async def test_two_gateways_on_one_dms_keep_each_others_pods(
    dms: FakeDMS, clock: FixedClock, tmp_path: Path, gateways: list[Gateway]
) -> None:
    one = await gateway_on(dms, tmp_path / "one", owner=ONE, clock=clock)
    two = await gateway_on(dms, tmp_path / "two", owner=TWO, clock=clock)
    gateways += [one, two]
    mine, theirs = pod(uid(1)), pod(uid(2))
    await create(one, mine)
    clock.advance(120)  # created at different times
    await create(two, theirs)
    await running(one, dms, mine)
    await running(two, dms, theirs)
    assert dms.live(uid(1))[0].metadata[OWNER_KEY] == ONE
    assert dms.live(uid(2))[0].metadata[OWNER_KEY] == TWO
    for _ in range(4):  # pass after pass, each gateway polled for its own pod only
        clock.advance(GRACE)
        await poll(one, mine)
        await poll(two, theirs)
        assert await one.collect_orphans() == []
        assert await two.collect_orphans() == []
    assert len(dms.live(uid(1))) == 1 and len(dms.live(uid(2))) == 1


async def test_only_own_stray_ensembles_are_shut_down_and_only_after_the_grace_period(
    dms: FakeDMS, clock: FixedClock, tmp_path: Path, gateways: list[Gateway]
) -> None:
    """A gateway that lost its state finds its own ensemble with no record: a stray, shut down
    once interLink has polled other pods for a grace period without naming its pod. Another
    gateway's ensemble, and an old one without an owner label, are never touched."""
    lost = await gateway_on(dms, tmp_path / "lost", owner=ONE, clock=clock)
    other = await gateway_on(dms, tmp_path / "other", owner=TWO, clock=clock)
    gateways.append(other)
    stray, foreign = pod(uid(1)), pod(uid(2))
    await create(lost, stray)
    await create(other, foreign)
    await running(lost, dms, stray)
    await running(other, dms, foreign)
    await lost.close()
    unlabelled = await dms(
        DEPLOYMENT_NEW, _ensemble_request({POD_UID_KEY: uid(3)})
    )  # deployed by a gateway from before the owner label
    fresh = await gateway_on(dms, tmp_path / "lost-again", owner=ONE, clock=clock)
    gateways.append(fresh)
    known = pod(uid(4))
    await create(fresh, known)
    await running(fresh, dms, known)
    clock.advance(GRACE - 1)
    await poll(fresh, known)
    await fresh.collect_orphans()
    assert len(dms.live(uid(1))) == 1  # its pod may still be re-adopted
    clock.advance(1)
    await poll(fresh, known)
    await fresh.collect_orphans()
    assert dms.live(uid(1)) == []
    assert len(dms.live(uid(2))) == 1
    assert [d.id for d in dms.live(uid(3))] == [unlabelled.ensemble_id]
    assert len(dms.live(uid(4))) == 1


async def test_a_gateway_re_adopts_only_its_own_ensembles(
    dms: FakeDMS, clock: FixedClock, tmp_path: Path, gateways: list[Gateway]
) -> None:
    first = await gateway_on(dms, tmp_path / "first", owner=ONE, clock=clock)
    spec = pod(uid(1))
    await create(first, spec)
    await running(first, dms, spec)
    await first.close()
    stranger = await gateway_on(dms, tmp_path / "stranger", owner=TWO, clock=clock)
    gateways.append(stranger)
    (status,) = await poll(stranger, spec)
    assert status.containers[0].state.terminated.reason == "NotFound"
    assert stranger.book.records == {}
    same = await gateway_on(dms, tmp_path / "state-lost", owner=ONE, clock=clock)
    gateways.append(same)
    await poll(same, spec)
    assert same.book.records[uid(1)].ensemble_id == dms.live(uid(1))[0].id
    assert len(dms.live(uid(1))) == 1


def _ensemble_request(metadata: dict[str, str]) -> Any:
    from dmsgw.behaviors.deployment import NewDeploymentRequest
    from dmsgw.behaviors.ensemble import EnsembleConfig, EnsembleConfigV1

    return NewDeploymentRequest(EnsembleConfig(v1=EnsembleConfigV1(metadata=metadata)))


# --- two real gateways over the embedded devnet ---------------------------------------------


async def test_two_gateways_on_one_devnet_keep_each_others_pods(
    tmp_path: Path, clock: FixedClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DMSGW_TEST_SCRYPT_N", "1024")
    devnet = Devnet(seed="two-gateways")
    await devnet.start()
    backends = []
    try:
        for n in (1, 2):
            config = gateway_config(devnet, tmp_path / f"gw{n}", seed=100 + n)
            backends.append(await start_backend(config, metrics=Metrics(), clock=clock))
        specs = [pod(uid(n), command=["sh", "-c", "exec sleep 60"]) for n in (1, 2)]
        for backend, spec in zip(backends, specs, strict=True):
            body = json.dumps({"pod": spec, "container": [{"name": "main"}]}).encode()
            await backend.create(parse_create_body(body))
            clock.advance(60)
        for gateway, spec in zip(backends, specs, strict=True):
            await until(
                lambda g=gateway, u=spec["metadata"]["uid"]: (
                    g.book.snapshots[u].containers[0].state.running is not None
                ),
                "the pod runs",
            )
        for _ in range(3):
            clock.advance(GRACE)
            for backend, spec in zip(backends, specs, strict=True):
                await poll(backend, spec)
            for backend in backends:
                assert await backend.collect_orphans() == []
        listing = await backends[0].parts.invoke(DEPLOYMENT_LIST)
        owners = {
            d.metadata[POD_UID_KEY]: d.metadata[OWNER_KEY]
            for d in listing.deployments
            if d.status == "Running"
        }
        assert owners == {uid(n): b.parts.owner for n, b in zip((1, 2), backends, strict=True)}
        assert len(set(owners.values())) == 2
    finally:
        for backend in backends:
            await backend.close()
        await devnet.stop()


async def test_a_delete_while_a_pod_actor_awaits_its_restart_is_carried_out(
    dms: FakeDMS, tmp_path: Path, clock: FixedClock, gateways: list[Gateway]
) -> None:
    """interLink deletes a pod whose actor crashed and has not been restarted yet (interLink
    never retries a delete): the delete is recorded, and whoever runs the pod next (the
    restarted actor, or a gateway started on the same state) shuts its ensemble down."""
    first = await gateway_on(dms, tmp_path / "state.sqlite3", owner=ONE, clock=clock)
    await create(first, pod(uid(1)))
    await until(lambda: len(dms.live(uid(1))) == 1, "deployed")
    actor = first.registry.get(f"pod/{uid(1)}")
    assert actor is not None
    actor.stop()  # as if it crashed: no live actor while the record is not terminal
    await actor.wait_stopped()  # type: ignore[attr-defined]
    deleted = parse_create_body(json.dumps({"pod": pod(uid(1))}).encode())[0].pod
    await first.delete(deleted)
    await first.delete(deleted)  # again, before the restart: the delete is recorded already
    await first.close()
    gateways.append(await gateway_on(dms, tmp_path / "state.sqlite3", owner=ONE, clock=clock))
    await until(lambda: dms.live(uid(1)) == [], "the deleted pod's ensemble shut down")


async def test_a_delete_of_an_ended_pod_whose_actor_awaits_its_restart_is_carried_out(
    dms: FakeDMS,
    tmp_path: Path,
    clock: FixedClock,
    gateways: list[Gateway],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """interLink deletes a pod that has ended while its actor has crashed and awaits its
    restart (the supervisor's timers are the test's): the delete is recorded as for a pod
    that has not ended, and the restarted actor carries it out. Dropping the record instead
    left the restart without one: it failed (a KeyError, a crash counted against the root
    supervisor's intensity) and was tried again and again."""
    timers = ManualScheduler(FixedClock())
    monkeypatch.setattr(gateway_module, "Supervisor", _timed_by(timers), raising=True)
    gateway = await gateway_on(dms, tmp_path / "state.sqlite3", owner=ONE, clock=clock)
    gateways.append(gateway)
    spec = pod(uid(1))
    await create(gateway, spec)
    await until(lambda: len(dms.live(uid(1))) == 1, "deployed")
    dms.live(uid(1))[0].status = "Completed"
    await until(lambda: gateway.book.records[uid(1)].phase == Phase.TERMINAL, "ended")
    actor = gateway.registry.get(f"pod/{uid(1)}")
    assert actor is not None
    actor.tell(_TaskCrashed(RuntimeError("a bug")))
    await until(lambda: not actor.is_alive() and timers.pending() != [], "restart due")
    await gateway.delete(parse_create_body(json.dumps({"pod": spec}).encode())[0].pod)
    timers.advance(ROOT_BACKOFF.max_s * 2)
    await until(lambda: gateway.registry.get(f"pod/{uid(1)}") is None, "the pod forgotten")
    assert uid(1) not in gateway.book.records and uid(1) not in gateway.book.snapshots
    assert gateway.parts.store.load_all() == []
    assert timers.pending() == []  # no restart due any more
    assert "failed to start" not in caplog.text


def _timed_by(timers: ManualScheduler) -> Any:
    """The gateway's supervisor, its restart timers ``timers``."""

    class TimedSupervisor:
        @staticmethod
        def start(**kwargs: Any) -> Any:
            return Supervisor.start(scheduler=timers, **kwargs)

    return TimedSupervisor


async def test_two_polls_at_once_re_adopt_a_pod_once(
    dms: FakeDMS, clock: FixedClock, tmp_path: Path, gateways: list[Gateway]
) -> None:
    """The state was lost and interLink asks about one pod twice at once: both polls find
    its ensemble, and the pod is taken on once (one actor, one record), not twice."""
    first = await gateway_on(dms, tmp_path / "first", owner=ONE, clock=clock)
    spec = pod(uid(1))
    await create(first, spec)
    await running(first, dms, spec)
    await first.close()
    same = await gateway_on(dms, tmp_path / "state-lost", owner=ONE, clock=clock)
    gateways.append(same)
    both = await asyncio.gather(poll(same, spec), poll(same, spec))
    assert [s.uid for (s,) in both] == [uid(1), uid(1)]
    assert list(same.book.records) == [uid(1)]
    assert len(dms.live(uid(1))) == 1
