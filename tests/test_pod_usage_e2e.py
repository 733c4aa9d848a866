"""Real usage per pod, end to end: ``dmsgw serve``'s wiring (:class:`Serve` over
``start_backend``) on the embedded devnet, whose allocations are measured from the kernel.

A pod that burns a core and holds ~24 MiB shows non-zero CPU and memory on all three views
(``/metrics``, ``/stats/summary``, ``/pods``); a DMS that cannot report usage leaves every
usage series and field absent, never zero. Waiting is bounded polling of the gateway's own
answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from dmsgw.behaviors.catalog import Behavior
from dmsgw.behaviors.deployment import DeploymentStatusRequest
from dmsgw.behaviors.node import DMSBehaviorError
from dmsgw.cli import main
from dmsgw.interlink.app import start_backend
from dmsgw.interlink.configuration.serve_config import load_config
from dmsgw.interlink.gateway import Gateway
from dmsgw.interlink.records.pod_record import PodPolicy
from dmsgw.interlink.reports.pod_usage import UsageBook
from dmsgw.interlink.server import ListenAddress, Metrics, Serve, ServeInfo, ServerOptions
from tests.support.deploy_files import alert_metrics

DASHBOARD = Path(__file__).resolve().parent.parent / "docs" / "grafana-dashboard.json"
FAST = PodPolicy(poll_min_s=0.05, poll_max_s=0.2, retry_min_s=0.05, restart_min_s=0.05)
WAIT_S = 60.0
HELD_BYTES = 24 * 1024 * 1024
BURN = f"x=$(head -c {HELD_BYTES} /dev/zero | tr '\\0' a); echo holding; while :; do :; done"

Wrap = Callable[[Any], Any]
"""What a test puts between the usage book and the DMS (identity: the devnet as it is)."""


def pod(uid: str, script: str) -> dict[str, Any]:
    return {
        "metadata": {"name": f"burner-{uid[:4]}", "namespace": "team-a", "uid": uid},
        "spec": {
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "burn",
                    "image": "busybox",
                    "command": ["sh", "-c", script],
                    "resources": {"limits": {"cpu": "1", "memory": "256Mi"}},
                }
            ],
        },
    }


@contextlib.asynccontextmanager
async def _serve(
    tmp_path: Path, wrap: Wrap
) -> AsyncIterator[tuple[ServeInfo, Gateway, aiohttp.ClientSession]]:
    config = load_config(
        env={"DMSGW_DEVNET": "1", "DMSGW_STATE_PATH": str(tmp_path / "state.sqlite3")}
    )
    gateways: list[Gateway] = []

    async def factory(metrics: Metrics) -> Gateway:
        gateway = await start_backend(config, metrics=metrics, policy=FAST)
        assert gateway.pod_report is not None
        gateway.pod_report.usage = UsageBook(wrap(gateway.parts.invoke), min_interval_s=0.0)
        gateways.append(gateway)
        return gateway

    options = ServerOptions(listen=ListenAddress(port=0), operator_listen=ListenAddress(port=0))
    started: asyncio.Future[ServeInfo] = asyncio.get_running_loop().create_future()
    stop = asyncio.Event()
    run = Serve(factory, options).run(started=started.set_result, stop=stop)
    serving = asyncio.ensure_future(run)
    info = await asyncio.wait_for(started, WAIT_S)
    async with aiohttp.ClientSession() as session:
        try:
            yield info, gateways[0], session
        finally:
            stop.set()
            await asyncio.wait_for(serving, WAIT_S)


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[tuple[ServeInfo, Gateway, aiohttp.ClientSession]]:
    async with _serve(tmp_path, lambda invoke: invoke) as up:
        yield up


def _without_usage(invoke: Any) -> Any:
    """A DMS older than ``include_usage``: Go drops the field it does not know."""

    async def older(behavior: Behavior[Any, Any], payload: Any = None, **kw: Any) -> Any:
        if isinstance(payload, DeploymentStatusRequest):
            payload = DeploymentStatusRequest(id=payload.id)
        return await invoke(behavior, payload, **kw)

    return older


def _stats_unsupported(invoke: Any) -> Any:
    """A DMS whose executor has no stats (containerd's): the status with usage is an error."""

    async def failing(behavior: Behavior[Any, Any], payload: Any = None, **kw: Any) -> Any:
        if isinstance(payload, DeploymentStatusRequest) and payload.include_usage:
            raise DMSBehaviorError(
                behavior.name,
                "failed to invoke allocation stats for pod.burn: failed to retrieve "
                "allocation stats: stats not supported by containerd executor yet",
            )
        return await invoke(behavior, payload, **kw)

    return failing


async def _get(session: aiohttp.ClientSession, info: ServeInfo, route: str) -> Any:
    async with session.get(f"http://{info.operator}{route}") as resp:
        assert resp.status == 200, await resp.text()
        return await (resp.text() if route == "/metrics" else resp.json())


async def _create(session: aiohttp.ClientSession, info: ServeInfo, spec: dict[str, Any]) -> None:
    body = json.dumps({"pod": spec, "container": [{"name": "burn"}]})
    headers = {"Content-Type": "application/json"}
    async with session.post(f"http://{info.plugin}/create", data=body, headers=headers) as resp:
        assert resp.status == 200, await resp.text()


async def _until(check: Callable[[], Awaitable[Any]], what: str) -> Any:
    """``check()`` until it gives something true (bounded)."""
    deadline = asyncio.get_running_loop().time() + WAIT_S
    while not (found := await check()):
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"never within {WAIT_S} s: {what}")
        await asyncio.sleep(0.05)
    return found


def dashboard_metrics() -> set[str]:
    """Every series the dashboard's panels and variables query."""
    dashboard = json.loads(DASHBOARD.read_text())
    queries = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    queries += [v["definition"] for v in dashboard["templating"]["list"] if "definition" in v]
    assert queries, "the dashboard queries nothing"
    return {name for q in queries for name in re.findall(r"\bdmsgw_[a-z0-9_]+", q)}


def _samples(text: str, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {
        tuple(sorted(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name
    }


async def test_a_busy_pod_shows_real_usage_on_every_view(
    served: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    info, _, session = served
    uid = "7a0c4b8e-1111-4a2b-9c3d-5e6f7a8b9c0d"
    await _create(session, info, pod(uid, BURN))

    async def measured() -> dict[str, Any] | None:
        (view,) = await _get(session, info, "/pods")
        usage = view["containers"][0].get("usage", {})
        busy = usage.get("cpu", {}).get("usageNanoCores", 0) > 100_000_000  # over 0.1 core
        held = usage.get("memory", {}).get("workingSetBytes", 0) >= HELD_BYTES
        return view if busy and held and view["phase"] == "Running" else None

    view = await _until(measured, "the burner's CPU and memory in /pods")
    assert (view["namespace"], view["phase"], view["uid"]) == ("team-a", "Running", uid)
    assert view["usage"]["memory"]["usageBytes"] > 0

    summary = await _get(session, info, "/stats/summary")
    (stats,) = summary["pods"]
    assert stats["podRef"] == {"name": f"burner-{uid[:4]}", "namespace": "team-a", "uid": uid}
    (container,) = stats["containers"]
    assert container["cpu"]["usageCoreNanoSeconds"] > 0
    assert container["memory"]["workingSetBytes"] >= HELD_BYTES

    text = await _get(session, info, "/metrics")
    labels = (("container", "burn"), ("namespace", "team-a"), ("pod", f"burner-{uid[:4]}"))
    assert _samples(text, "dmsgw_container_cpu_usage_seconds_total")[labels] > 0
    assert _samples(text, "dmsgw_container_memory_working_set_bytes")[labels] >= HELD_BYTES
    assert _samples(text, "dmsgw_pods_by_phase")[(("phase", "Running"),)] == 1
    calls = _samples(text, "dmsgw_dms_call_duration_seconds_count")
    status_ok = (("behavior", "/dms/node/deployment/status"), ("outcome", "ok"))
    deployed = (("behavior", "/dms/node/deployment/new"), ("outcome", "ok"))
    assert calls[status_ok] >= 2 and calls[deployed] == 1
    exported = {s.name for f in text_string_to_metric_families(text) for s in f.samples}
    assert dashboard_metrics() - exported == set(), "the dashboard queries series never exported"
    assert alert_metrics() - exported == set(), "the alert rules query series never exported"

    capsys.readouterr()
    assert await asyncio.to_thread(main, ["pods", "--operator", str(info.operator)]) == 0
    header, row = capsys.readouterr().out.splitlines()
    cells = dict(zip(header.split(), row.split(), strict=True))
    assert cells["NAME"] == f"burner-{uid[:4]}" and cells["STATUS"] == "Running"
    assert int(cells["CPU"].removesuffix("m")) > 0
    assert int(cells["MEMORY"].removesuffix("Mi")) >= HELD_BYTES >> 20


@pytest.mark.parametrize("dms", [_without_usage, _stats_unsupported], ids=["older", "no-stats"])
async def test_usage_a_dms_cannot_report_is_absent_not_zero(tmp_path: Path, dms: Wrap) -> None:
    async with _serve(tmp_path, dms) as (info, gateway, session):
        uid = "7a0c4b8e-2222-4a2b-9c3d-5e6f7a8b9c0d"
        await _create(session, info, pod(uid, "echo up; sleep 60"))

        async def running() -> Any:
            views = await _get(session, info, "/pods")
            return views if views and views[0]["phase"] == "Running" else None

        (view,) = await _until(running, "the pod running")
        await _get(session, info, "/pods")  # a second refresh: a rate would exist by now
        (view,) = await _get(session, info, "/pods")
        assert "usage" not in view and "usage" not in view["containers"][0]
        (stats,) = (await _get(session, info, "/stats/summary"))["pods"]
        assert "cpu" not in stats and "memory" not in stats
        assert set(stats["containers"][0]) == {"name", "startTime"}
        text = await _get(session, info, "/metrics")
        for name in (
            "dmsgw_container_cpu_usage_seconds_total",
            "dmsgw_container_cpu_usage_cores",
            "dmsgw_container_memory_working_set_bytes",
        ):
            assert _samples(text, name) == {}, name
        assert gateway.pod_report is not None
