"""Containers' lives through the plugin API over the embedded devnet: real exit codes, OOM
kills, lifecycle hooks, probes and restarts. The DMS reports none of the exit codes: they come
from the pod wrapper's markers in each container's stderr, which the container's own log (as
``/getLogs`` serves it) does not show.

Waiting is on the gateway's answers (bounded /status polls), never on a fixed sleep.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from tests.test_gateway_e2e import plugin
from tests.test_gateway_pods import _container, _create, _logs, _pod, _wait_all_terminated

__all__ = ["plugin"]  # the fixture, re-exported for pytest

HOG = "b = b'x' * (160 << 20); import time; time.sleep(30)"
"""Holds 160 MiB for longer than any test waits."""


async def test_each_container_reports_its_own_exit_code(plugin: Any) -> None:
    client, _ = plugin
    spec = _pod(
        [_container("bad", "echo oops >&2; exit 3"), _container("good", "echo fine")],
        init=[_container("setup", "echo set up >&2")],
    )
    await _create(client, spec)
    status = await _wait_all_terminated(client, spec)
    ended = {
        c["name"]: (c["state"]["terminated"]["exitCode"], c["state"]["terminated"]["reason"])
        for c in (*status["initContainers"], *status["containers"])
    }
    assert ended == {"setup": (0, "Completed"), "bad": (3, "Error"), "good": (0, "Completed")}
    # The wrapper's markers are the gateway's: the containers' own logs do not show them.
    assert await _logs(client, spec, "bad") == "oops\n"
    assert await _logs(client, spec, "setup") == "set up\n"
    assert (await client.post("/delete", data=json.dumps(spec))).status == 200


async def test_a_container_over_its_memory_limit_is_oom_killed(plugin: Any) -> None:
    client, _ = plugin
    hog = _container("hog", "")
    hog["command"] = [sys.executable, "-c", HOG]
    hog["resources"] = {"limits": {"memory": "64Mi"}}
    spec = _pod([hog, _container("light", "echo fine")])
    await _create(client, spec)
    status = await _wait_all_terminated(client, spec)
    ended = {
        c["name"]: (c["state"]["terminated"]["exitCode"], c["state"]["terminated"]["reason"])
        for c in status["containers"]
    }
    assert ended == {"hog": (137, "OOMKilled"), "light": (0, "Completed")}
    assert (await client.post("/delete", data=json.dumps(spec))).status == 200
