"""Deletes that race a pod's create, deletes whose store write fails, and a UID created again
while (or after) its delete runs (issue 26, items 8 and 10; decision 070).

Over the in-memory DMS of :mod:`tests.support.gateway_fakes`: an injected clock,
bounded waits on the gateway's own state, and stores and DMSs held at the step a test needs.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from dmsgw.behaviors.deployment import DeploymentShutdownResponse
from dmsgw.clock import FixedClock
from dmsgw.interlink.gateway import Gateway
from dmsgw.interlink.records.pod_record import Phase
from dmsgw.interlink.state.pod_store import PodStore, StoreError
from dmsgw.interlink.wire import k8s
from tests.support.fake_dms_plugin import fake_dms_plugin
from tests.support.gateway_fakes import WAIT_S, FakeDMS, create, gateway_on, pod, uid, until

OWNER = "did:key:the-gateway"


class HeldStore(PodStore):
    """A store whose writes wait while ``held`` is clear, and fail while ``failing``."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.held = asyncio.Event()
        self.held.set()
        self.failing = False
        self.waiting = 0

    async def put(self, uid: str, record: dict[str, Any]) -> None:
        self.waiting += 1
        await self.held.wait()
        self.waiting -= 1
        if self.failing:
            raise StoreError(f"cannot write the state file {self.path}: database or disk is full")
        await super().put(uid, record)


class SlowShutdownDMS(FakeDMS):
    """A DMS whose shutdowns take effect only once ``done`` is set (a container that takes
    its grace period to stop)."""

    def __init__(self, logs: Path) -> None:
        super().__init__(logs)
        self.done = asyncio.Event()
        self.done.set()
        self.asked_to_stop: set[str] = set()

    def about_one(self, name: str, payload: Any) -> Any:
        ident = getattr(payload, "id", "")
        if name == "deployment/shutdown" and not self.done.is_set() and ident in self.deployments:
            self.asked_to_stop.add(ident)
            return DeploymentShutdownResponse(ok=True)  # and the ensemble runs on
        return super().about_one(name, payload)


@pytest.fixture
def dms(tmp_path: Path) -> SlowShutdownDMS:
    return SlowShutdownDMS(tmp_path / "logs")


@pytest.fixture
def store(tmp_path: Path) -> HeldStore:
    return HeldStore(tmp_path / "state")


@pytest.fixture
async def gateway(
    dms: SlowShutdownDMS, store: HeldStore, clock: FixedClock, tmp_path: Path
) -> AsyncIterator[Gateway]:
    gateway = await gateway_on(dms, tmp_path / "state", owner=OWNER, clock=clock, store=store)
    yield gateway
    dms.done.set()
    store.held.set()
    store.failing = False
    await gateway.close()


def _cluster_copy(n: int) -> k8s.Pod:
    """The pod as ``/delete`` receives it (the cluster's copy)."""
    return k8s.Pod.model_validate(pod(uid(n)))


async def test_a_delete_during_the_create_waits_for_it_and_shuts_the_pod_down(
    gateway: Gateway, dms: SlowShutdownDMS, store: HeldStore
) -> None:
    store.held.clear()
    creating = asyncio.ensure_future(create(gateway, pod(uid(1))))
    await until(lambda: store.waiting == 1, "the create is writing its record")
    deleting = asyncio.ensure_future(gateway.delete(_cluster_copy(1)))
    await asyncio.sleep(0)  # one turn: the delete has looked (it used to answer at once)
    assert not deleting.done(), "the delete answered before the create it must undo"
    store.held.set()
    async with asyncio.timeout(WAIT_S):
        await asyncio.gather(creating, deleting)
    await until(lambda: uid(1) not in gateway.book.records, "the pod is forgotten")
    assert dms.live(uid(1)) == []


async def test_deletes_during_hundreds_of_creates_all_take_effect(
    gateway: Gateway, dms: SlowShutdownDMS, store: HeldStore
) -> None:
    count = 250
    store.held.clear()
    creates = [asyncio.ensure_future(create(gateway, pod(uid(n)))) for n in range(count)]
    await until(lambda: store.waiting == count, "every create is writing its record")
    deletes = [asyncio.ensure_future(gateway.delete(_cluster_copy(n))) for n in range(count)]
    store.held.set()
    async with asyncio.timeout(WAIT_S * 3):
        await asyncio.gather(*creates, *deletes)
    await until(lambda: not gateway.book.records, "every pod is forgotten")
    assert dms.live() == []


async def test_a_delete_whose_store_write_fails_is_not_acknowledged_and_a_retry_completes_it(
    gateway: Gateway, dms: SlowShutdownDMS, store: HeldStore
) -> None:
    await create(gateway, pod(uid(2)))
    await until(lambda: len(dms.live(uid(2))) == 1, "the pod runs")
    store.failing = True
    with pytest.raises(StoreError, match="disk is full"):
        await gateway.delete(_cluster_copy(2))
    assert len(dms.live(uid(2))) == 1, "nothing was saved, so nothing may change"
    assert [r.phase for r, _ in gateway.pods() if r.uid == uid(2)] == [Phase.RUNNING]
    store.failing = False
    await gateway.delete(_cluster_copy(2))
    await until(lambda: uid(2) not in gateway.book.records, "the retried delete completes")
    assert dms.live(uid(2)) == []


async def test_a_create_during_the_delete_of_its_uid_waits_and_makes_the_pod_afresh(
    gateway: Gateway, dms: SlowShutdownDMS, clock: FixedClock
) -> None:
    await create(gateway, pod(uid(3)))
    await until(lambda: len(dms.live(uid(3))) == 1, "the pod runs")
    (old,) = dms.live(uid(3))
    dms.done.clear()
    await gateway.delete(_cluster_copy(3))
    await until(lambda: old.id in dms.asked_to_stop, "the old ensemble is being shut down")
    clock.advance(1)
    again = asyncio.ensure_future(create(gateway, pod(uid(3))))
    await asyncio.sleep(0)
    assert not again.done(), "the create answered for the pod that is going"
    dms.done.set()
    async with asyncio.timeout(WAIT_S):
        await again
    await until(lambda: len(dms.live(uid(3))) == 1, "the pod made afresh runs")
    (new,) = dms.live(uid(3))
    assert new.id != old.id
    assert gateway.book.records[uid(3)].phase != Phase.DELETING


async def test_a_pod_made_again_after_its_delete_never_adopts_the_old_ensemble(
    gateway: Gateway, dms: SlowShutdownDMS, clock: FixedClock
) -> None:
    await create(gateway, pod(uid(4)))
    await until(lambda: len(dms.live(uid(4))) == 1, "the pod runs")
    (old,) = dms.live(uid(4))
    await gateway.delete(_cluster_copy(4))
    await until(lambda: uid(4) not in gateway.book.records, "the delete is done")
    clock.advance(60)
    await create(gateway, pod(uid(4)))
    await until(lambda: len(dms.live(uid(4))) == 1, "the new pod runs its own ensemble")
    assert dms.live(uid(4))[0].id != old.id
    assert old.status == "Completed"


async def test_a_create_refused_with_409_while_a_delete_outlasts_the_wait(
    dms: SlowShutdownDMS, clock: FixedClock, tmp_path: Path
) -> None:
    async with fake_dms_plugin(tmp_path, dms, clock=clock, recreate_wait_s=0.05) as (client, _):
        body = json.dumps({"pod": pod(uid(5)), "container": []})
        assert (await client.post("/create", data=body)).status == 200
        await until(lambda: len(dms.live(uid(5))) == 1, "the pod runs")
        dms.done.clear()
        try:
            assert (await client.post("/delete", data=json.dumps(pod(uid(5))))).status == 200
            answer = await client.post("/create", data=body)
            assert answer.status == 409
            assert "still being deleted" in await answer.text()
        finally:
            dms.done.set()
