"""The gateway end to end: interLink's plugin API over the gateway actors over the embedded devnet.

Waiting is on the gateway's own answers (a bounded number of /status polls, each awaiting the
pod actor's next published change), never on a fixed sleep.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from dmsgw.behaviors.catalog import DEPLOYMENT_LIST
from dmsgw.behaviors.dms_version import UnsupportedDmsError
from dmsgw.interlink import app
from dmsgw.interlink.app import DmsConnection, start_backend
from dmsgw.interlink.configuration.serve_config import load_config
from dmsgw.interlink.gateway import job_id
from dmsgw.interlink.server import Metrics
from tests.support.plugin_api import wait_state

UID = "0b8c6f6e-3d4a-4f0e-9c1e-2f9a7d1b5e11"


def pod(
    uid: str = UID, *, args: str = "echo hello from the dms; echo bye", policy: str = "Never"
) -> dict[str, Any]:
    return {
        "metadata": {"name": f"p-{uid[:6]}", "namespace": "default", "uid": uid},
        "spec": {
            "restartPolicy": policy,
            "containers": [
                {"name": "main", "image": "busybox", "command": ["sh", "-c"], "args": [args]}
            ],
        },
    }


async def test_a_pod_runs_completes_logs_and_is_deleted(plugin: Any) -> None:
    client, _ = plugin
    spec = pod()
    resp = await client.post(
        "/create", data=json.dumps({"pod": spec, "container": [{"name": "main"}]})
    )
    assert resp.status == 200
    assert await resp.json() == {"PodUID": UID, "PodJID": job_id(UID)}
    done = await wait_state(client, spec, "terminated")
    assert done["JID"] == job_id(UID)
    assert done["containers"][0]["state"]["terminated"]["exitCode"] == 0
    logs = await client.get(
        "/getLogs",
        data=json.dumps(
            {
                "Namespace": "default",
                "PodUID": UID,
                "PodName": "p",
                "ContainerName": "main",
                "Opts": {"Tail": 1},
            }
        ),
    )
    assert logs.status == 200 and await logs.text() == "bye\n"
    assert (await client.post("/delete", data=json.dumps(spec))).status == 200
    assert (await client.post("/delete", data=json.dumps(spec))).status == 200  # idempotent


async def test_create_is_idempotent_on_uid(plugin: Any) -> None:
    client, backend = plugin
    spec = pod("11111111-2222-3333-4444-555555555555", args="sleep 30")
    body = json.dumps({"pod": spec, "container": [{"name": "main"}]})
    first = await (await client.post("/create", data=body)).json()
    second = await (
        await client.post(
            "/create", data=json.dumps([{"pod": spec, "container": [{"name": "main"}]}])
        )
    ).json()
    assert first == second
    await wait_state(client, spec, "running")
    listing = await backend.parts.invoke(DEPLOYMENT_LIST)
    assert len([d for d in listing.deployments or () if d.status == "Running"]) == 1
    await client.post("/delete", data=json.dumps(spec))


async def test_a_failing_container_reports_its_exit_code(plugin: Any) -> None:
    client, _ = plugin
    spec = pod("22222222-2222-3333-4444-555555555555", args="echo oops >&2; exit 3")
    await client.post("/create", data=json.dumps({"pod": spec, "container": [{"name": "main"}]}))
    ended = await wait_state(client, spec, "terminated")
    terminated = ended["containers"][0]["state"]["terminated"]
    assert (terminated["exitCode"], terminated["reason"]) == (3, "Error")


async def test_restart_policy_on_failure_redeploys_and_counts(plugin: Any) -> None:
    client, backend = plugin
    uid = "33333333-2222-3333-4444-555555555555"
    spec = pod(uid, args="exit 1", policy="OnFailure")
    await client.post("/create", data=json.dumps({"pod": spec, "container": [{"name": "main"}]}))
    for _ in range(400):
        record = backend.book.records[uid]
        if record.attempt >= 3:
            break
        await asyncio.sleep(0.05)
    assert record.restarts >= 2 and record.attempt >= 3
    await client.post("/delete", data=json.dumps(spec))


async def test_unknown_pods_end_instead_of_hanging(plugin: Any) -> None:
    client, _ = plugin
    stranger = pod("99999999-2222-3333-4444-555555555555")
    (status,) = await (await client.get("/status", data=json.dumps([stranger]))).json()
    assert status["containers"][0]["state"]["terminated"]["reason"] == "NotFound"
    logs = await client.get(
        "/getLogs",
        data=json.dumps(
            {"Namespace": "default", "PodUID": "nope", "ContainerName": "main", "Opts": {}}
        ),
    )
    assert logs.status == 404


async def test_the_ping_reports_the_devnet_capacity(plugin: Any) -> None:
    client, _ = plugin
    ping = await (await client.get("/status", data="[]")).json()
    assert ping["status"] == "ok"
    kinds = {a["resourceType"] for a in ping["resources"]["accelerators"]}
    assert "nunet.gpu.nvidia.tesla.p100.16gb" in kinds


async def test_gpu_classes_can_be_advertised_under_a_name_pods_may_request(
    tmp_path: Path,
) -> None:
    config = load_config(
        env={
            "DMSGW_DEVNET": "1",
            "DMSGW_STATE_PATH": str(tmp_path / "state.sqlite3"),
            "DMSGW_GPU_RESOURCE_PREFIX": "nunet.io/gpu.",
        }
    )
    backend = await start_backend(config, metrics=Metrics())
    try:
        ping = await backend.ping()
        assert ping.resources is not None
        kinds = {a.resource_type for a in ping.resources.accelerators}
        assert "nunet.io/gpu.nvidia.tesla.p100.16gb" in kinds
        assert not any(k.startswith("nunet.gpu.") for k in kinds)
    finally:
        await backend.close()


async def test_an_untranslatable_pod_fails_with_the_reason(plugin: Any) -> None:
    client, _ = plugin
    spec = pod("44444444-2222-3333-4444-555555555555")
    spec["spec"]["volumes"] = [{"name": "data", "nfs": {"server": "x", "path": "/"}}]
    spec["spec"]["containers"][0]["volumeMounts"] = [{"name": "data", "mountPath": "/data"}]
    await client.post("/create", data=json.dumps({"pod": spec, "container": [{"name": "main"}]}))
    ended = await wait_state(client, spec, "terminated")
    assert "nfs" in json.dumps(ended)


async def test_pods_resume_after_a_restart_of_the_gateway(tmp_path: Path) -> None:
    """Same state file, new gateway (the DMS side here is a new embedded devnet too, so the
    pod is redeployed rather than followed; the crash-only path with a DMS that outlives the
    gateway is tested with SIGKILL in test_gateway_recovery.py)."""
    config = load_config(
        env={"DMSGW_DEVNET": "1", "DMSGW_STATE_PATH": str(tmp_path / "state.sqlite3")}
    )
    first = await start_backend(config, metrics=Metrics())
    spec = pod("55555555-2222-3333-4444-555555555555", args="sleep 30")
    from dmsgw.interlink.wire.parsing import parse_create_body

    await first.create(
        parse_create_body(json.dumps({"pod": spec, "container": [{"name": "main"}]}).encode())
    )
    await first.close()
    second = await start_backend(config, metrics=Metrics())
    try:
        assert "55555555-2222-3333-4444-555555555555" in second.book.snapshots
    finally:
        await second.close()


async def test_the_gateway_shows_the_dms_version_and_refuses_a_dms_it_does_not_speak(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The embedded devnet is the newest DMS; a DMS the version check refuses stops the start
    with its message (the connection, and the devnet with it, closed)."""
    config = load_config(
        env={"DMSGW_DEVNET": "1", "DMSGW_STATE_PATH": str(tmp_path / "state.sqlite3")}
    )
    metrics = Metrics()
    backend = await start_backend(config, metrics=metrics)
    await backend.close()
    assert 'dmsgw_dms_info{version="v0.6"} 1.0' in metrics.render().decode()
    closed: list[bool] = []

    async def refuse(invoke: Any, where: str) -> str:
        raise UnsupportedDmsError(f"the DMS at {where} does not speak a wire this gateway knows")

    async def close(self: DmsConnection) -> None:
        closed.append(True)
        await real_close(self)

    real_close = DmsConnection.close
    monkeypatch.setattr(app, "learn_dms_version", refuse)
    monkeypatch.setattr(DmsConnection, "close", close)
    with pytest.raises(UnsupportedDmsError, match="does not speak a wire this gateway knows"):
        await start_backend(config, metrics=Metrics())
    assert closed == [True]
