"""interLink's plugin API of a gateway on its embedded devnet, driven as interLink drives it:
the pods it sends, its ``/create``, ``/status`` polls, ``/getLogs`` and ``/delete``.

Waiting is on the gateway's own answers (a bounded number of ``/status`` polls, or its book of
pods), never on a fixed sleep. The ``plugin`` fixture (``tests/conftest.py``) opens one.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from aiohttp.test_utils import TestClient, TestServer

from dmsgw.clock import Clock, system_clock
from dmsgw.devnet.devnet import Devnet
from dmsgw.interlink.app import start_backend
from dmsgw.interlink.configuration.serve_config import load_config
from dmsgw.interlink.gateway import Gateway
from dmsgw.interlink.records.pod_record import PodPolicy
from dmsgw.interlink.server import Metrics, PluginServer

Plugin = tuple[TestClient[Any, Any], Gateway]
"""A plugin API's test client and the gateway behind it."""

DEVNET_FAST = PodPolicy(poll_min_s=0.05, poll_max_s=0.2, retry_min_s=0.05, restart_min_s=0.05)
"""A pod's pace on the devnet: short enough that a test sees every change soon."""


@contextlib.asynccontextmanager
async def open_plugin(
    tmp_path: Path,
    *,
    policy: PodPolicy = DEVNET_FAST,
    clock: Clock = system_clock,
    devnet: Devnet | None = None,
) -> AsyncIterator[Plugin]:
    """The plugin API of a gateway on its embedded devnet (``devnet``, else a default one),
    its pods following ``policy`` on ``clock``."""
    config = load_config(
        env={"DMSGW_DEVNET": "1", "DMSGW_STATE_PATH": str(tmp_path / "state.sqlite3")}
    )
    metrics = Metrics()
    backend = await start_backend(
        config, metrics=metrics, policy=policy, clock=clock, devnet=devnet
    )
    server = PluginServer(backend, config.server_options(), metrics)
    # with the Content-Type interLink sends on every plugin request
    client = TestClient(
        TestServer(server.app(), host="127.0.0.1"),
        headers={"Content-Type": "application/json"},
    )
    await client.start_server()
    try:
        yield client, backend
    finally:
        await client.close()
        await backend.close()


async def wait_state(
    client: TestClient[Any, Any], spec: dict[str, Any], state: str
) -> dict[str, Any]:
    """Poll /status (as interLink does) until the main container reaches ``state``."""
    for _ in range(400):
        resp = await client.get("/status", data=json.dumps([spec]))
        assert resp.status == 200, await resp.text()
        (status,) = await resp.json()
        container = status["containers"][0]
        if state in container["state"]:
            return status
        await asyncio.sleep(0.05)  # interLink's poll interval, shortened
    raise AssertionError(f"{spec['metadata']['uid']} never reached {state}: {status}")


def random_uid() -> str:
    """A pod UID no other test (nor an earlier run on the same devnet) uses."""
    return f"7e57a11d-0000-4000-8000-{secrets.token_hex(6)}"


def shell_container(name: str, script: str, *mounts: tuple[str, Path], **fields: Any) -> Any:
    """A busybox container running ``script``, mounting each ``(volume, path)`` of ``mounts``."""
    return {
        "name": name,
        "image": "busybox:1.36",
        "command": ["/bin/sh", "-c", script],
        "volumeMounts": [{"name": v, "mountPath": str(p)} for v, p in mounts],
        **fields,
    }


def pod_of(
    containers: list[Any],
    *,
    init: list[Any] | None = None,
    volumes: list[Any] | None = None,
    policy: str = "Never",
) -> dict[str, Any]:
    """A pod of these containers (after ``init``), as interLink sends it, with a fresh UID."""
    uid = random_uid()
    return {
        "metadata": {"name": f"p-{uid[-6:]}", "namespace": "default", "uid": uid},
        "spec": {
            "restartPolicy": policy,
            "initContainers": init or [],
            "containers": containers,
            "volumes": volumes or [],
        },
    }


async def create_pod(
    client: TestClient[Any, Any],
    spec: dict[str, Any],
    *,
    config_maps: list[Any] | None = None,
    secrets_: list[Any] | None = None,
) -> None:
    """``/create`` as interLink sends it: the pod with these config maps and secrets."""
    sent = [
        {"name": c["name"], "configMaps": config_maps or [], "secrets": secrets_ or []}
        for c in spec["spec"]["containers"]
    ]
    resp = await client.post("/create", data=json.dumps({"pod": spec, "container": sent}))
    assert resp.status == 200, await resp.text()


async def wait_all_terminated(client: TestClient[Any, Any], spec: dict[str, Any]) -> Any:
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


def log_request(spec: dict[str, Any], container: str, **opts: Any) -> str:
    """The body of interLink's ``/getLogs`` for ``container`` of the pod, with ``opts``."""
    return json.dumps(
        {
            "Namespace": "default",
            "PodUID": spec["metadata"]["uid"],
            "PodName": spec["metadata"]["name"],
            "ContainerName": container,
            "Opts": opts,
        }
    )


async def container_logs(client: TestClient[Any, Any], spec: dict[str, Any], container: str) -> str:
    """The whole log of ``container`` of the pod, as ``/getLogs`` answers it."""
    resp = await client.get("/getLogs", data=log_request(spec, container))
    assert resp.status == 200, await resp.text()
    return await resp.text()


async def delete_pod(plugin: Plugin, spec: dict[str, Any]) -> None:
    """``/delete``, then wait until the pod's ensemble has been stopped (its actor ends)."""
    client, backend = plugin
    assert (await client.post("/delete", data=json.dumps(spec))).status == 200
    for _ in range(400):
        if spec["metadata"]["uid"] not in backend.book.records:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{spec['metadata']['uid']} was never deleted")
