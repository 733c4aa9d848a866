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

from dmsgw.behaviors.catalog import DEPLOYMENT_LIST
from dmsgw.behaviors.status import DeploymentStatus
from dmsgw.devnet.devnet import Devnet
from dmsgw.devnet.timeouts import TEST_TIMEOUTS
from dmsgw.interlink.translate import METADATA_POD_UID
from tests.support.plugin_api import (
    container_logs,
    create_pod,
    delete_pod,
    log_request,
    open_plugin,
    pod_of,
    shell_container,
    wait_all_terminated,
    wait_state,
)

ENDED = {DeploymentStatus.COMPLETED.go_name, DeploymentStatus.FAILED.go_name}


@pytest.fixture
def base() -> Iterator[Path]:
    """A directory the pods mount their volumes under; it must never reach the host."""
    path = Path(f"/dmsgw-pods-{secrets.token_hex(4)}")
    yield path
    assert not path.exists(), f"{path} was written on the host"


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
    spec = pod_of(
        [
            shell_container(
                "writer", f"echo hello from writer > {shared}/msg", ("scratch", shared)
            ),
            shell_container(
                "reader",
                f"until [ -e {shared}/msg ]; do sleep 0.05; done; cat {shared}/msg",
                ("scratch", shared),
            ),
        ],
        volumes=[{"name": "scratch", "emptyDir": {}}],
    )
    await create_pod(client, spec)
    status = await wait_all_terminated(client, spec)
    assert {c["name"]: c["state"]["terminated"]["exitCode"] for c in status["containers"]} == {
        "writer": 0,
        "reader": 0,
    }
    assert await container_logs(client, spec, "reader") == "hello from writer\n"
    await delete_pod(plugin, spec)  # done: the mount points the devnet made are gone with it


async def test_config_map_and_secret_reach_the_env_and_the_files(plugin: Any, base: Path) -> None:
    client, _ = plugin
    cfg, sec = base / "cfg", base / "sec"
    script = f'echo "mode=$MODE token=$TOKEN"; cat {cfg}/app.conf {sec}/token'
    env = [
        {"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": "app", "key": "mode"}}},
        {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "token"}}},
    ]
    spec = pod_of(
        [shell_container("main", script, ("cfg", cfg), ("sec", sec), env=env)],
        volumes=[
            {"name": "cfg", "configMap": {"name": "app"}},
            {"name": "sec", "secret": {"secretName": "creds"}},
        ],
    )
    await create_pod(
        client,
        spec,
        config_maps=[{"metadata": {"name": "app"}, "data": {"mode": "fast", "app.conf": "x=1\n"}}],
        secrets_=[
            {"metadata": {"name": "creds"}, "data": {"token": base64.b64encode(b"s3cr3t").decode()}}
        ],
    )
    done = await wait_state(client, spec, "terminated")
    assert done["containers"][0]["state"]["terminated"]["exitCode"] == 0
    assert await container_logs(client, spec, "main") == "mode=fast token=s3cr3t\nx=1\ns3cr3t"


async def test_init_containers_run_in_order_before_the_main_container(
    plugin: Any, base: Path
) -> None:
    client, _ = plugin
    work = base / "work"
    spec = pod_of(
        [shell_container("main", f"echo main >> {work}/order; cat {work}/order", ("work", work))],
        init=[
            shell_container("first", f"echo first >> {work}/order", ("work", work)),
            shell_container("second", f"echo second >> {work}/order", ("work", work)),
        ],
        volumes=[{"name": "work", "emptyDir": {}}],
    )
    await create_pod(client, spec)
    done = await wait_state(client, spec, "terminated")
    assert done["containers"][0]["state"]["terminated"]["exitCode"] == 0
    assert await container_logs(client, spec, "main") == "first\nsecond\nmain\n"
    inits = {c["name"]: c["state"] for c in done.get("initContainers") or ()}
    assert all(s["terminated"]["exitCode"] == 0 for s in inits.values()), inits


async def test_restart_policy_always_redeploys_a_container_that_exits_0(plugin: Any) -> None:
    client, _ = plugin
    spec = pod_of([shell_container("main", "echo once")], policy="Always")
    await create_pod(client, spec)
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
        spec = pod_of([shell_container("main", "exec sleep 30")])
        uid = spec["metadata"]["uid"]
        uids.add(uid)
        await create_pod(client, spec)
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
    spec = pod_of(
        [
            shell_container(
                "main",
                f"echo first; until [ -e {go} ]; do sleep 0.05; done; echo second",
            )
        ]
    )
    await create_pod(client, spec)
    await wait_state(client, spec, "running")
    resp = await client.get("/getLogs", data=log_request(spec, "main", Follow=True))
    assert resp.status == 200, await resp.text()
    first = await asyncio.wait_for(resp.content.readline(), 10)
    assert first == b"first\n"
    assert not go.exists()  # so the container is still waiting: the line came live
    go.touch()
    rest = await asyncio.wait_for(resp.content.read(), 10)  # ends with the container
    assert rest == b"second\n"
    done = await wait_state(client, spec, "terminated")
    assert done["containers"][0]["state"]["terminated"]["exitCode"] == 0


async def test_a_delete_gives_the_pod_its_grace_period_through_the_dms(tmp_path: Path) -> None:
    """Issue 26, item 9, end to end: ``/delete`` of a pod whose container flushes for longer
    than the DMS's own stop timeout (``shutdown_s``, 2 s in tests) but within its
    ``terminationGracePeriodSeconds`` lets it end by itself (0), where it was SIGKILLed
    (137): the gateway hands the grace to the DMS, whose shutdown waits it out."""
    devnet = Devnet(timeouts=TEST_TIMEOUTS)
    assert devnet.timeouts.shutdown_s < 3
    script = "trap 'sleep 3; echo flushed; exit 0' TERM; echo up; while :; do sleep 0.05; done"
    spec = pod_of([shell_container("main", script)])
    spec["spec"]["terminationGracePeriodSeconds"] = 20
    async with open_plugin(tmp_path, devnet=devnet) as plugin:
        client, backend = plugin
        await create_pod(client, spec)
        await wait_state(client, spec, "running")
        ensemble = backend.book.records[spec["metadata"]["uid"]].ensemble_id
        found = [n.provider.find(ensemble, "main") for n in devnet.nodes if n.provider]
        (main,) = [a for a in found if a is not None]
        assert main.plan is not None
        for _ in range(400):
            if b"up\n" in main.plan.stdout.read_bytes():
                break
            await asyncio.sleep(0.05)
        await delete_pod(plugin, spec)
        for _ in range(400):
            if main.exit_code is not None:
                break
            await asyncio.sleep(0.05)
        assert main.exit_code == 0, "the flush was cut short by a kill"
