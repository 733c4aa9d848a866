"""Containers' lives through the plugin API over the embedded devnet: real exit codes, OOM
kills, lifecycle hooks, probes and restarts. The DMS reports none of the exit codes: they come
from the pod wrapper's markers in each container's stderr, which the container's own log (as
``/getLogs`` serves it) does not show.

Waiting is on the gateway's answers (bounded /status polls), never on a fixed sleep.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from dmsgw.devnet.cgroups import Cgroups
from tests.support.plugin_api import (
    container_logs,
    create_pod,
    delete_pod,
    pod_of,
    shell_container,
    wait_all_terminated,
)

SPIKE = ["/usr/bin/python3", "-c", "bytearray(200 * 1024 * 1024)"]
"""Takes 200 MiB and exits at once (the system's interpreter: the allocations' unprivileged
user can run it, unlike this test's)."""
HOG = "x=$(head -c 167772160 /dev/zero | tr '\\0' x); sleep 30"
"""Holds 160 MiB for longer than any test waits (a shell: the devnet's allocations run as an
unprivileged user, who may not reach this test's interpreter)."""


async def test_each_container_reports_its_own_exit_code(plugin: Any) -> None:
    client, _ = plugin
    spec = pod_of(
        [shell_container("bad", "echo oops >&2; exit 3"), shell_container("good", "echo fine")],
        init=[shell_container("setup", "echo set up >&2")],
    )
    await create_pod(client, spec)
    status = await wait_all_terminated(client, spec)
    ended = {
        c["name"]: (c["state"]["terminated"]["exitCode"], c["state"]["terminated"]["reason"])
        for c in (*status["initContainers"], *status["containers"])
    }
    assert ended == {"setup": (0, "Completed"), "bad": (3, "Error"), "good": (0, "Completed")}
    # The wrapper's markers are the gateway's: the containers' own logs do not show them.
    assert await container_logs(client, spec, "bad") == "oops\n"
    assert await container_logs(client, spec, "setup") == "set up\n"
    await delete_pod(plugin, spec)


async def test_a_container_over_its_memory_limit_is_oom_killed(plugin: Any) -> None:
    client, _ = plugin
    hog = shell_container("hog", "")
    hog["command"] = ["/bin/sh", "-c", HOG]
    hog["resources"] = {"limits": {"memory": "64Mi"}}
    spec = pod_of([hog, shell_container("light", "echo fine")])
    await create_pod(client, spec)
    status = await wait_all_terminated(client, spec)
    ended = {
        c["name"]: (c["state"]["terminated"]["exitCode"], c["state"]["terminated"]["reason"])
        for c in status["containers"]
    }
    assert ended == {"hog": (137, "OOMKilled"), "light": (0, "Completed")}
    await delete_pod(plugin, spec)


async def test_a_burst_over_the_memory_limit_ends_oom_killed(plugin: Any) -> None:
    """A container that takes 200 MiB against a 50 MiB limit and exits at once ends
    ``OOMKilled`` (137; under ``restartPolicy: Never`` the pod is then ``Failed``) however
    short its burst: the kernel enforces the limit (where the devnet may write a memory
    cgroup)."""
    client, _ = plugin
    probe = Cgroups.probe(f"dmsgw-test-{os.getpid()}")
    probe.remove()
    if not probe.memory:
        pytest.skip("this host lets the devnet write no memory cgroup")
    if not os.access(SPIKE[0], os.X_OK):
        pytest.skip(f"no {SPIKE[0]}")
    spike = shell_container("spike", "")
    spike["command"] = SPIKE
    spike["resources"] = {"limits": {"memory": "50Mi"}}
    spec = pod_of([spike])
    await create_pod(client, spec)
    status = await wait_all_terminated(client, spec)
    (container,) = status["containers"]
    ended = container["state"]["terminated"]
    assert (ended["exitCode"], ended["reason"]) == (137, "OOMKilled")
    await delete_pod(plugin, spec)


async def _until(
    client: TestClient[Any, Any], spec: dict[str, Any], done: Callable[[dict[str, Any]], bool]
) -> list[dict[str, Any]]:
    """Poll /status until ``done(status)``; every status seen, in order."""
    seen = []
    for _ in range(400):
        resp = await client.get("/status", data=json.dumps([spec]))
        assert resp.status == 200, await resp.text()
        (status,) = await resp.json()
        seen.append(status)
        if done(status):
            return seen
        await asyncio.sleep(0.05)
    raise AssertionError(f"{spec['metadata']['uid']} never got there: {seen[-1]}")


def _by_name(status: dict[str, Any]) -> dict[str, Any]:
    return {c["name"]: c for c in status["containers"]}


def _probe(kind: str, passes: bool) -> dict[str, Any]:
    command = ["true" if passes else "false"]
    return {f"{kind}Probe": {"exec": {"command": command}, "periodSeconds": 1}}


def _failing(backend: Any, uid: str, name: str) -> bool:
    """Whether the wrapper reported a failure of a container's probe, as the gateway last
    read it."""
    probes = backend.book.records[uid].runs.get(name, {}).get("probes") or {}
    return bool(probes.get("failing"))


async def test_lifecycle_hooks_run_around_the_container(plugin: Any, host_dir: Path) -> None:
    client, _ = plugin
    started, stopped = host_dir / "post-started", host_dir / "pre-stopped"
    hooks = {
        "postStart": {"exec": {"command": ["sh", "-c", f"echo post-start; touch {started}"]}},
        "preStop": {"exec": {"command": ["sh", "-c", f"echo pre-stop > {stopped}"]}},
    }
    script = f"until [ -e {started} ]; do sleep 0.05; done; echo main; exec sleep 60"
    spec = pod_of([shell_container("main", script, lifecycle=hooks)])
    await create_pod(client, spec)
    await _until(client, spec, lambda s: "running" in s["containers"][0]["state"])
    for _ in range(400):
        logs = await container_logs(client, spec, "main")
        if logs == "post-start\nmain\n":
            break
        await asyncio.sleep(0.05)
    else:
        raise AssertionError(f"the hook's and the command's output: {logs!r}")
    assert not stopped.exists()
    await delete_pod(plugin, spec)
    assert stopped.read_text() == "pre-stop\n"


async def test_readiness_and_startup_probes_set_ready_and_started(plugin: Any) -> None:
    client, backend = plugin
    sleeper = "exec sleep 60"
    spec = pod_of(
        [
            shell_container("ready-ok", sleeper, **_probe("readiness", True)),
            shell_container("ready-bad", sleeper, **_probe("readiness", False)),
            shell_container("start-ok", sleeper, **_probe("startup", True)),
            shell_container("start-bad", sleeper, **_probe("startup", False)),
        ],
        policy="Always",
    )
    uid = spec["metadata"]["uid"]
    await create_pod(client, spec)

    def settled(status: dict[str, Any]) -> bool:
        c = _by_name(status)
        return (
            c["ready-ok"]["ready"]
            and c["start-ok"]["started"]
            and "running" in c["ready-bad"]["state"]
            and _failing(backend, uid, "ready-bad")
            and c["start-bad"]["restartCount"] >= 1  # a failed startup probe kills, as kubelet's
        )

    seen = await _until(client, spec, settled)
    last = _by_name(seen[-1])
    assert (last["ready-ok"]["ready"], last["ready-ok"]["started"]) == (True, True)
    assert (last["start-ok"]["ready"], last["start-ok"]["started"]) == (True, True)
    assert (last["ready-bad"]["ready"], last["ready-bad"]["started"]) == (False, True)
    assert last["ready-bad"]["restartCount"] == 0  # readiness never restarts
    assert (last["start-bad"]["ready"], last["start-bad"]["started"]) == (False, False)
    # A failing probe never let its container count as ready, however it was polled.
    assert not any(_by_name(s)[n]["ready"] for s in seen for n in ("ready-bad", "start-bad"))
    await delete_pod(plugin, spec)


async def test_a_failing_liveness_probe_restarts_the_container(plugin: Any) -> None:
    client, _ = plugin
    spec = pod_of(
        [shell_container("main", "echo up; exec sleep 60", **_probe("liveness", False))],
        policy="Always",
    )
    await create_pod(client, spec)
    seen = await _until(
        client,
        spec,
        lambda s: (
            s["containers"][0]["restartCount"] >= 1 and "running" in s["containers"][0]["state"]
        ),
    )
    main = seen[-1]["containers"][0]
    # The wrapper stopped it (SIGTERM, as the kubelet) and the DMS started it again.
    assert main["lastState"]["terminated"]["exitCode"] == 143
    assert main["lastState"]["terminated"]["reason"] == "Error"
    await delete_pod(plugin, spec)
