"""Probes with the kubelet's semantics, through the plugin API over the embedded devnet: the
pod wrapper runs every probe (the DMS runs one health check, which restarts whatever fails),
and the container statuses follow what it reports.

The containers serve HTTP with the system's interpreter (the allocations' unprivileged user can
run it), logging each request's path; the test steers the answers through files in a host
directory. Waiting is on the gateway's answers and the container's log (bounded polls), never
on a fixed sleep.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from tests.support.plugin_api import container_logs, create_pod, delete_pod, pod_of, shell_container

PYTHON = "/usr/bin/python3"
SERVER = """
import http.server, os, sys
port, control = int(sys.argv[1]), sys.argv[2]
startups = 0
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        global startups
        code = 200
        if self.path == "/startup":
            startups += 1
            code = 503 if startups == 1 else 200  # starts on the second try
        elif self.path == "/ready" and os.path.exists(os.path.join(control, "unready")):
            code = 503
        elif self.path == "/healthz" and os.path.exists(os.path.join(control, "sick")):
            code = 500
        self.send_response(code)
        self.end_headers()
        print(self.path, code, flush=True)
    def log_message(self, *args):
        pass
http.server.HTTPServer(("127.0.0.1", port), Handler).serve_forever()
"""
"""Serves 503 on ``/startup`` once, then 200; 503 on ``/ready`` while ``<control>/unready``
exists; 500 on ``/healthz`` while ``<control>/sick`` does; logs ``<path> <status>``."""

DEADLINE_S = 60.0
DEVNET_TOOLS = ("unshare", "mount", "nsenter", "setpriv")
"""What the embedded devnet runs an allocation with, found on the allocation's ``PATH``."""

pytestmark = pytest.mark.skipif(not os.access(PYTHON, os.X_OK), reason=f"no {PYTHON}")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _server(name: str, port: int, control: Path, **fields: Any) -> dict[str, Any]:
    return {
        "name": name,
        "image": "python:3",
        "command": [PYTHON, "-c", SERVER, str(port), str(control)],
        **fields,
    }


def _http(path: str, port: int, **timings: Any) -> dict[str, Any]:
    return {"httpGet": {"path": path, "port": port}, "periodSeconds": 1, **timings}


async def _eventually(what: str, check: Callable[[], Awaitable[Any]]) -> Any:
    """Poll ``check`` until it returns something true (within a generous deadline)."""
    loop = asyncio.get_running_loop()
    end = loop.time() + DEADLINE_S
    while True:
        got = await check()
        if got:
            return got
        if loop.time() > end:
            raise AssertionError(f"never {what}")
        await asyncio.sleep(0.05)


async def _status(client: TestClient[Any, Any], spec: dict[str, Any]) -> dict[str, Any]:
    resp = await client.get("/status", data=json.dumps([spec]))
    assert resp.status == 200, await resp.text()
    (status,) = await resp.json()
    return {c["name"]: c for c in status["containers"]}


async def _until(
    client: TestClient[Any, Any],
    spec: dict[str, Any],
    name: str,
    done: Callable[[dict[str, Any]], bool],
    what: str,
) -> dict[str, Any]:
    """Container ``name``'s status once ``done`` holds for it."""

    async def check() -> dict[str, Any] | None:
        container = (await _status(client, spec))[name]
        return container if done(container) else None

    got: dict[str, Any] = await _eventually(f"{name}: {what}", check)
    return got


def _requests(log: str) -> list[tuple[str, int]]:
    return [(path, int(code)) for path, code in (line.split() for line in log.splitlines())]


async def test_every_probe_runs_with_the_kubelets_semantics(plugin: Any, host_dir: Path) -> None:
    """Startup, liveness and readiness all run (the server logs each path); nothing else is
    probed before the startup probe succeeds; ``started`` and ``ready`` follow them; a readiness
    failure flips ``ready`` without a restart; a liveness failure restarts under ``Always``."""
    client, _ = plugin
    port = _free_port()
    server = _server(
        "web",
        port,
        host_dir,
        startupProbe=_http("/startup", port, failureThreshold=10),
        livenessProbe=_http("/healthz", port, failureThreshold=1),
        readinessProbe=_http("/ready", port, failureThreshold=1),
    )
    spec = pod_of([server], policy="Always")
    spec["spec"]["terminationGracePeriodSeconds"] = 1
    await create_pod(client, spec)
    up = await _until(client, spec, "web", lambda c: c["ready"], "ready")
    assert (up["started"], up["restartCount"]) == (True, 0)

    async def all_probed() -> list[tuple[str, int]] | None:
        seen = _requests(await container_logs(client, spec, "web"))
        return seen if {"/healthz", "/ready"} <= {path for path, _ in seen} else None

    seen = await _eventually("probed /healthz and /ready", all_probed)
    started = seen.index(("/startup", 200))
    assert seen[:started] == [("/startup", 503)]
    assert {path for path, _ in seen[started + 1 :]} == {"/healthz", "/ready"}, seen

    (host_dir / "unready").touch()
    down = await _until(client, spec, "web", lambda c: not c["ready"], "unready")
    assert "running" in down["state"]
    assert (down["started"], down["restartCount"]) == (True, 0)
    (host_dir / "unready").unlink()
    await _until(client, spec, "web", lambda c: c["ready"], "ready again")

    (host_dir / "sick").touch()
    restarted = await _until(client, spec, "web", lambda c: c["restartCount"] >= 1, "restarted")
    ended = restarted["lastState"]["terminated"]
    assert ended["exitCode"] == 143  # TERMed, as the kubelet stops a container
    # the reason's wording is the HTTP client's (the first of wget, curl, python3 found)
    prefix = f"killed by the gateway: its liveness probe failed: HTTP GET http://127.0.0.1:{port}"
    assert ended["message"].startswith(f"{prefix}/healthz: "), ended["message"]
    assert "500" in ended["message"]
    await delete_pod(plugin, spec)


async def test_liveness_failure_under_never_ends_the_pod_exec_and_tcp_probes_run(
    plugin: Any, host_dir: Path
) -> None:
    """Under ``restartPolicy: Never`` a failed liveness probe ends the container for good (the
    pod is then Failed); exec and tcpSocket probes set ``started`` and ``ready``."""
    client, _ = plugin
    port = _free_port()
    doomed = shell_container(
        "doomed",
        "exec sleep 60",
        livenessProbe={"exec": {"command": ["false"]}, "periodSeconds": 1, "failureThreshold": 1},
    )
    served = _server(
        "served",
        port,
        host_dir,
        startupProbe={"exec": {"command": ["true"]}, "periodSeconds": 1},
        readinessProbe={"tcpSocket": {"port": port}, "periodSeconds": 1},
    )
    spec = pod_of([doomed, served])
    # A grace the TERM is honoured well within on a loaded machine: a kill after it (137)
    # would say the liveness stop did not reach the command.
    spec["spec"]["terminationGracePeriodSeconds"] = 5
    await create_pod(client, spec)
    both = await _eventually(
        "doomed ended and served ready",
        lambda: _settled(client, spec),
    )
    ended = both["doomed"]["state"]["terminated"]
    assert (ended["exitCode"], both["doomed"]["restartCount"]) == (143, 0)
    assert ended["message"] == (
        "killed by the gateway: its liveness probe failed: exec false: exit status 1"
    )
    assert (both["served"]["started"], both["served"]["ready"]) == (True, True)
    await delete_pod(plugin, spec)


async def _settled(client: TestClient[Any, Any], spec: dict[str, Any]) -> dict[str, Any] | None:
    now = await _status(client, spec)
    if "terminated" in now["doomed"]["state"] and now["served"]["ready"]:
        return now
    return None


async def test_a_probe_whose_tool_the_image_lacks_fails_and_says_so(
    plugin: Any, host_dir: Path
) -> None:
    """No wget, curl or python3 for an httpGet probe, no nc, bash or python3 for a tcpSocket
    one: the probe fails (never a silent skip), the container's log says what is missing at
    once, and a liveness probe's kill carries the reason in the container's status."""
    client, _ = plugin
    # What the wrapper needs (and the devnet's confinement, which runs in the same
    # environment), and none of the probes' tools.
    tools = host_dir / "bin"
    tools.mkdir()
    for name in ("sleep", "date", "grep", "tail", "cut", "tr", *DEVNET_TOOLS):
        found = shutil.which(name)
        if found:
            (tools / name).symlink_to(found)
    bare = shell_container(
        "bare",
        "exec sleep 60",
        env=[{"name": "PATH", "value": str(tools)}],
        readinessProbe={"httpGet": {"path": "/", "port": 1}, "periodSeconds": 1},
        livenessProbe={"tcpSocket": {"port": 1}, "periodSeconds": 1, "failureThreshold": 2},
    )
    spec = pod_of([bare])
    spec["spec"]["terminationGracePeriodSeconds"] = 1
    await create_pod(client, spec)
    ended = await _until(client, spec, "bare", lambda c: "terminated" in c["state"], "ended")
    assert not ended["ready"]
    assert ended["state"]["terminated"]["message"] == (
        "killed by the gateway: its liveness probe failed: TCP 127.0.0.1:1: the image has none "
        "of nc, bash, python3, which a tcpSocket probe needs"
    )
    assert (await container_logs(client, spec, "bare")).splitlines() == [
        "dmsgw: the liveness probe (tcpSocket) cannot run: the image has none of nc, bash, python3",
        "dmsgw: the readiness probe (httpGet) cannot run: the image has none of wget, curl, "
        "python3",
    ]
    await delete_pod(plugin, spec)
