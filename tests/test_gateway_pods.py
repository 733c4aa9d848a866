"""Pods with several containers, volumes, init containers, restarts, early deletes and followed
logs, end to end: interLink's plugin API over the gateway over the embedded devnet.

Waiting is on the gateway's answers (bounded /status polls) or on files the test writes, never
on a fixed sleep standing in for an event. Mount paths are fresh ``/dmsgw-pods-<random>``
directories, which the devnet keeps inside its own work directory.
"""

from __future__ import annotations

import asyncio
import base64
import json
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from dmsgw.behaviors.catalog import DEPLOYMENT_LIST
from dmsgw.behaviors.status import DeploymentStatus
from dmsgw.interlink.translate import METADATA_POD_UID
from tests.test_gateway_e2e import plugin, wait_state

__all__ = ["plugin"]  # the fixture, re-exported for pytest

ENDED = {DeploymentStatus.COMPLETED.go_name, DeploymentStatus.FAILED.go_name}


@pytest.fixture
def base() -> Iterator[Path]:
    """A directory the pods mount their volumes under; it must never reach the host."""
    path = Path(f"/dmsgw-pods-{secrets.token_hex(4)}")
    yield path
    assert not path.exists(), f"{path} was written on the host"


def _uid() -> str:
    return f"7e57a11d-0000-4000-8000-{secrets.token_hex(6)}"


def _container(name: str, script: str, *mounts: tuple[str, Path], **fields: Any) -> Any:
    return {
        "name": name,
        "image": "busybox:1.36",
        "command": ["/bin/sh", "-c", script],
        "volumeMounts": [{"name": v, "mountPath": str(p)} for v, p in mounts],
        **fields,
    }


def _pod(
    containers: list[Any],
    *,
    init: list[Any] | None = None,
    volumes: list[Any] | None = None,
    policy: str = "Never",
) -> dict[str, Any]:
    uid = _uid()
    return {
        "metadata": {"name": f"p-{uid[-6:]}", "namespace": "default", "uid": uid},
        "spec": {
            "restartPolicy": policy,
            "initContainers": init or [],
            "containers": containers,
            "volumes": volumes or [],
        },
    }


async def _create(
    client: TestClient[Any, Any],
    spec: dict[str, Any],
    *,
    config_maps: list[Any] | None = None,
    secrets_: list[Any] | None = None,
) -> None:
    sent = [
        {"name": c["name"], "configMaps": config_maps or [], "secrets": secrets_ or []}
        for c in spec["spec"]["containers"]
    ]
    resp = await client.post("/create", data=json.dumps({"pod": spec, "container": sent}))
    assert resp.status == 200, await resp.text()


async def _wait_all_terminated(client: TestClient[Any, Any], spec: dict[str, Any]) -> Any:
    """Poll /status until every main container has terminated."""
    for _ in range(400):
        resp = await client.get("/status", data=json.dumps([spec]))
        assert resp.status == 200, await resp.text()
        (status,) = await resp.json()
        containers = status["containers"]
        if containers and all("terminated" in c["state"] for c in containers):
            return status
        await asyncio.sleep(0.05)
    raise AssertionError(f"{spec['metadata']['uid']} never ended: {status}")


def _log_request(spec: dict[str, Any], container: str, **opts: Any) -> str:
    return json.dumps(
        {
            "Namespace": "default",
            "PodUID": spec["metadata"]["uid"],
            "PodName": spec["metadata"]["name"],
            "ContainerName": container,
            "Opts": opts,
        }
    )


async def _logs(client: TestClient[Any, Any], spec: dict[str, Any], container: str) -> str:
    resp = await client.get("/getLogs", data=_log_request(spec, container))
    assert resp.status == 200, await resp.text()
    return await resp.text()


async def _live_ensembles(plugin: Any, uids: set[str]) -> list[Any]:
    """The deployments on the DMS for these pods that have not ended."""
    _, backend = plugin
    listing = await backend.parts.invoke(DEPLOYMENT_LIST)
    return [
        d
        for d in listing.deployments or ()
        if d.status not in ENDED and (d.metadata or {}).get(METADATA_POD_UID) in uids
    ]


async def test_containers_share_an_empty_dir(plugin: Any, base: Path) -> None:
    client, _ = plugin
    shared = base / "shared"
    spec = _pod(
        [
            _container("writer", f"echo hello from writer > {shared}/msg", ("scratch", shared)),
            _container(
                "reader",
                f"until [ -e {shared}/msg ]; do sleep 0.05; done; cat {shared}/msg",
                ("scratch", shared),
            ),
        ],
        volumes=[{"name": "scratch", "emptyDir": {}}],
    )
    await _create(client, spec)
    status = await _wait_all_terminated(client, spec)
    assert {c["name"]: c["state"]["terminated"]["exitCode"] for c in status["containers"]} == {
        "writer": 0,
        "reader": 0,
    }
    assert await _logs(client, spec, "reader") == "hello from writer\n"
    assert (await client.post("/delete", data=json.dumps(spec))).status == 200


async def test_config_map_and_secret_reach_the_env_and_the_files(plugin: Any, base: Path) -> None:
    client, _ = plugin
    cfg, sec = base / "cfg", base / "sec"
    script = f'echo "mode=$MODE token=$TOKEN"; cat {cfg}/app.conf {sec}/token'
    env = [
        {"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": "app", "key": "mode"}}},
        {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "token"}}},
    ]
    spec = _pod(
        [_container("main", script, ("cfg", cfg), ("sec", sec), env=env)],
        volumes=[
            {"name": "cfg", "configMap": {"name": "app"}},
            {"name": "sec", "secret": {"secretName": "creds"}},
        ],
    )
    await _create(
        client,
        spec,
        config_maps=[{"metadata": {"name": "app"}, "data": {"mode": "fast", "app.conf": "x=1\n"}}],
        secrets_=[
            {"metadata": {"name": "creds"}, "data": {"token": base64.b64encode(b"s3cr3t").decode()}}
        ],
    )
    done = await wait_state(client, spec, "terminated")
    assert done["containers"][0]["state"]["terminated"]["exitCode"] == 0
    assert await _logs(client, spec, "main") == "mode=fast token=s3cr3t\nx=1\ns3cr3t"


async def test_init_containers_run_in_order_before_the_main_container(
    plugin: Any, base: Path
) -> None:
    client, _ = plugin
    work = base / "work"
    spec = _pod(
        [_container("main", f"echo main >> {work}/order; cat {work}/order", ("work", work))],
        init=[
            _container("first", f"echo first >> {work}/order", ("work", work)),
            _container("second", f"echo second >> {work}/order", ("work", work)),
        ],
        volumes=[{"name": "work", "emptyDir": {}}],
    )
    await _create(client, spec)
    done = await wait_state(client, spec, "terminated")
    assert done["containers"][0]["state"]["terminated"]["exitCode"] == 0
    assert await _logs(client, spec, "main") == "first\nsecond\nmain\n"
    inits = {c["name"]: c["state"] for c in done.get("initContainers") or ()}
    assert all(s["terminated"]["exitCode"] == 0 for s in inits.values()), inits


async def test_restart_policy_always_redeploys_a_container_that_exits_0(plugin: Any) -> None:
    client, _ = plugin
    spec = _pod([_container("main", "echo once")], policy="Always")
    await _create(client, spec)
    for _ in range(400):
        (status,) = await (await client.get("/status", data=json.dumps([spec]))).json()
        if status["containers"][0].get("restartCount", 0) >= 2:
            break
        await asyncio.sleep(0.05)
    else:
        raise AssertionError(f"never restarted twice: {status}")
    # Each run is a new ensemble; the ended ones were stopped, not left running.
    assert len(await _live_ensembles(plugin, {spec["metadata"]["uid"]})) <= 1
    assert (await client.post("/delete", data=json.dumps(spec))).status == 200


async def test_delete_while_deploying_leaves_no_live_ensemble(plugin: Any) -> None:
    """Deletes land a few milliseconds apart after /create, so that some arrive before the
    deployment request, some while the DMS handles it and some once it has answered."""
    client, backend = plugin
    uids: set[str] = set()
    for delay_ms in range(10):
        spec = _pod([_container("main", "exec sleep 30")])
        uid = spec["metadata"]["uid"]
        uids.add(uid)
        await _create(client, spec)
        await asyncio.sleep(delay_ms / 1000)
        assert (await client.post("/delete", data=json.dumps(spec))).status == 200
        for _ in range(400):  # the pod actor ends once its ensemble is stopped
            if uid not in backend.book.records:
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError(f"{uid} was never deleted")
        assert uid not in backend.book.snapshots
        assert await _live_ensembles(plugin, {uid}) == []
    # A deployment request that the delete cut short would have been accepted by now.
    await asyncio.sleep(0.5)
    assert await _live_ensembles(plugin, uids) == []


async def test_followed_logs_stream_until_the_container_ends(plugin: Any, host_dir: Path) -> None:
    client, _ = plugin
    go = host_dir / "go"  # a host path: the test's signal to the container
    spec = _pod(
        [
            _container(
                "main",
                f"echo first; until [ -e {go} ]; do sleep 0.05; done; echo second",
            )
        ]
    )
    await _create(client, spec)
    await wait_state(client, spec, "running")
    resp = await client.get("/getLogs", data=_log_request(spec, "main", Follow=True))
    assert resp.status == 200, await resp.text()
    first = await asyncio.wait_for(resp.content.readline(), 10)
    assert first == b"first\n"
    assert not go.exists()  # so the container is still waiting: the line came live
    go.touch()
    rest = await asyncio.wait_for(resp.content.read(), 10)  # ends with the container
    assert rest == b"second\n"
    done = await wait_state(client, spec, "terminated")
    assert done["containers"][0]["state"]["terminated"]["exitCode"] == 0
