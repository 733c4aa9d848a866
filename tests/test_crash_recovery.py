"""Crash-only recovery, deterministically: what a restarted gateway does with a pod the last
one left half-way, against a scripted DMS (the chaos test, ``test_chaos.py``, hunts for these
at random; a defect it or a review found is pinned here)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from dmsgw.behaviors.catalog import Behavior
from dmsgw.behaviors.deployment import (
    DeploymentInfo,
    DeploymentListResponse,
    DeploymentStatusResponse,
    NewDeploymentResponse,
)
from dmsgw.clock import system_clock
from dmsgw.interlink.capacity.resource_actor import Capacity, ResourceActor
from dmsgw.interlink.gateway import Gateway, GatewayParts, job_id
from dmsgw.interlink.plugin_errors import BackendUnavailable
from dmsgw.interlink.records.pod_record import (
    ATTEMPT_KEY,
    POD_UID_KEY,
    Phase,
    PodPolicy,
    PodRecord,
    snapshot_of,
)
from dmsgw.interlink.state.pod_store import PodStore
from dmsgw.interlink.state.recovery import OWNER_KEY
from dmsgw.interlink.translate import TranslationOptions, pod_to_ensemble
from dmsgw.interlink.wire.bodies import RetrievedPodData
from dmsgw.interlink.wire.parsing import read_status_body
from dmsgw.transport.rest import DMSTimeoutError

UID = "5c0ffee0-1d2e-4f3a-9b4c-5d6e7f809112"
QUICK = PodPolicy(poll_min_s=0.01, poll_max_s=0.05, retry_min_s=0.01, retry_max_s=0.05)


@dataclasses.dataclass
class ScriptedDms:
    """Deployments by ensemble ID with their metadata; ``list_timeouts`` listings in a row go
    unanswered (HTTP 408) before the DMS answers again."""

    deployments: dict[str, dict[str, str]] = dataclasses.field(default_factory=dict)
    list_timeouts: int = 0
    followed: asyncio.Queue[str] = dataclasses.field(default_factory=asyncio.Queue)
    shut_down: list[str] = dataclasses.field(default_factory=list)

    async def invoke(self, b: Behavior[Any, Any], payload: Any = None, **_: Any) -> Any:
        behavior = b.name
        if behavior == "/dms/node/deployment/list":
            if self.list_timeouts:
                self.list_timeouts -= 1
                raise DMSTimeoutError(behavior)
            wanted = payload.metadata or {}
            return DeploymentListResponse(
                deployments=tuple(
                    DeploymentInfo(orchestrator_id=eid, status="Running", metadata=meta)
                    for eid, meta in self.deployments.items()
                    if all(meta.get(k) == v for k, v in wanted.items())
                )
            )
        if behavior == "/dms/node/deployment/new":
            ensemble_id = f"ensemble-{len(self.deployments) + 1}"
            self.deployments[ensemble_id] = dict(payload.ensemble.v1.metadata or {})
            return NewDeploymentResponse(status="OK", ensemble_id=ensemble_id)
        if behavior == "/dms/node/deployment/status":
            self.followed.put_nowait(payload.id)
            status = "Completed" if payload.id in self.shut_down else "Running"
            return DeploymentStatusResponse(status=status)
        if behavior == "/dms/node/deployment/shutdown":
            self.shut_down.append(payload.id)
            return None
        raise AssertionError(f"unexpected {behavior}")


def _record(**fields: Any) -> PodRecord:
    pod = {
        "metadata": {"name": "p", "namespace": "default", "uid": UID},
        "spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "main", "image": "busybox", "command": ["sleep", "60"]}],
        },
    }
    data = RetrievedPodData.model_validate({"pod": pod, "container": [{"name": "main"}]})
    return PodRecord(
        uid=UID, namespace="default", name="p", jid=job_id(UID), request=data.to_json(), **fields
    )


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[PodStore]:
    yield PodStore(tmp_path / "state.sqlite3")


async def _restart_on(store: PodStore, dms: ScriptedDms, owner: str = "") -> Gateway:
    """A gateway started on ``store``'s records, as after a SIGKILL of the previous one."""

    def translate(data: RetrievedPodData, generation: int) -> Any:
        return pod_to_ensemble(data, options=TranslationOptions(generation=generation))

    gateway = Gateway(
        GatewayParts(
            invoke=dms.invoke,
            store=store,
            translate=translate,
            snapshot=lambda record: snapshot_of(record, now_ns=system_clock()),
            capacity=Capacity(ResourceActor.start(dms.invoke), pods_capacity=10),
            loop=asyncio.get_running_loop(),
            policy=QUICK,
            owner=owner,
        )
    )
    await gateway.start()
    return gateway


async def test_an_unanswered_listing_does_not_deploy_an_attempt_twice(store: PodStore) -> None:
    """Killed after the DMS accepted attempt 1 but before recording it: on restart the
    listing that would find it goes unanswered once (a loaded DMS). Deploying then would
    run the pod twice; the listing is asked again instead."""
    dms = ScriptedDms(
        deployments={"ensemble-0": {POD_UID_KEY: UID, ATTEMPT_KEY: "1"}}, list_timeouts=1
    )
    await store.put(UID, _record(phase=Phase.DEPLOYING, attempt=1).to_map())
    gateway = await _restart_on(store, dms)
    try:
        async with asyncio.timeout(10):  # does not hang
            followed = await dms.followed.get()
        assert followed == "ensemble-0"
        assert list(dms.deployments) == ["ensemble-0"]
    finally:
        await gateway.close()


async def test_an_unanswered_listing_does_not_leak_the_ensemble_of_a_deleted_pod(
    store: PodStore,
) -> None:
    """Killed after a delete was recorded for a pod whose deployment the DMS had accepted
    but the gateway had not recorded: on restart the listing goes unanswered once. Taking
    that for "no ensemble" would leave the deleted pod running; it is asked again."""
    dms = ScriptedDms(
        deployments={"ensemble-0": {POD_UID_KEY: UID, ATTEMPT_KEY: "1"}}, list_timeouts=1
    )
    await store.put(UID, _record(phase=Phase.DELETING, attempt=1).to_map())
    gateway = await _restart_on(store, dms)
    try:
        actor = gateway.registry.get(f"pod/{UID}")
        assert actor is not None
        async with asyncio.timeout(10):  # does not hang
            await actor.wait_stopped()  # type: ignore[attr-defined]
        assert dms.shut_down == ["ensemble-0"]
        assert store.load_all() == []
    finally:
        await gateway.close()


async def test_an_unanswered_listing_never_reports_a_running_pod_gone(store: PodStore) -> None:
    """The state file was lost, and interLink asks about a pod carrying this gateway's
    ``JobID``: the listing that would find its ensemble goes unanswered. Answering "no record"
    would end a running pod for good in Kubernetes; the poll is refused as not ready (503),
    and the next one re-adopts the pod."""
    owner = "did:key:z6MkOwner"
    dms = ScriptedDms(
        deployments={"ensemble-0": {POD_UID_KEY: UID, ATTEMPT_KEY: "1", OWNER_KEY: owner}},
        list_timeouts=1,
    )
    gateway = await _restart_on(store, dms, owner=owner)
    pod = {
        "metadata": {
            "name": "p",
            "namespace": "default",
            "uid": UID,
            "annotations": {"JobID": job_id(UID)},
        },
        "spec": {"containers": [{"name": "main", "image": "busybox"}]},
    }
    (ref,) = await read_status_body(json.dumps([pod]).encode())
    try:
        with pytest.raises(BackendUnavailable, match="the DMS did not answer"):
            await gateway.status([ref])
        (status,) = await gateway.status([ref])
        assert status.uid == UID and gateway.registry.get(f"pod/{UID}") is not None
    finally:
        await gateway.close()
