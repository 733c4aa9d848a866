"""The operator port's pods: ``/pods``, ``/stats/summary`` and the per-pod series, over a pod
report fed by a stand-in DMS; the usage book's rules (absent, never zero; rates over the DMS's
own timestamps; one refresh for reads that come together); the DMS call outcomes; and
``dmsgw pods``' table and ``--watch``.
"""

from __future__ import annotations

import asyncio
import io
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from dmsgw.behaviors.catalog import Behavior
from dmsgw.behaviors.deployment import DeploymentStatusRequest, DeploymentStatusResponse
from dmsgw.behaviors.executor_stats import CPUUsageStats, ExecutorStats, MemoryStats
from dmsgw.behaviors.node import DMSBehaviorError, NotGrantedError
from dmsgw.cli import main
from dmsgw.cli.pods import table, watch
from dmsgw.clock import NS_PER_SECOND, FixedClock
from dmsgw.interlink.records.pod_record import Phase, PodRecord
from dmsgw.interlink.records.snapshots import Shown
from dmsgw.interlink.reports.pod_report import PodReport
from dmsgw.interlink.reports.pod_usage import ContainerUsage, UsageBook
from dmsgw.interlink.server import (
    Health,
    ListenAddress,
    Metrics,
    Pods,
    ServerOptions,
    operator_app,
)
from dmsgw.interlink.server.metrics import call_outcome
from dmsgw.interlink.wire.bodies import PodStatus
from dmsgw.transport.rest import DMSErrorKind, DMSTimeoutError

TOKEN = "s3cret-operator-token"
EVIL = "http://evil.example"
POD_ROUTES = ("/pods", "/stats/summary", "/metrics")
STARTED = "2026-11-25T10:00:00Z"


def _stats(cpu_ns: int, memory: int, at_ms: int) -> ExecutorStats:
    return ExecutorStats(
        cpu_usage=CPUUsageStats(total_usage=cpu_ns),
        memory=MemoryStats(usage=memory),
        timestamp=at_ms,
    )


class FakeDms:
    """Answers ``deployment/status`` with the next usage it was given for each ensemble."""

    def __init__(self) -> None:
        self.usage: dict[str, Any] = {}
        self.calls = 0
        self.error: str | None = None

    async def __call__(self, behavior: Behavior[Any, Any], payload: Any = None, **_: Any) -> Any:
        assert isinstance(payload, DeploymentStatusRequest) and payload.include_usage
        self.calls += 1
        await asyncio.sleep(0)
        if self.error is not None:
            raise DMSBehaviorError(behavior.name, self.error)
        return DeploymentStatusResponse(
            status="Running", allocation_usage=self.usage.get(payload.id)
        )


def _record(name: str = "web", phase: str = Phase.RUNNING) -> PodRecord:
    return PodRecord(
        uid=f"uid-{name}", namespace="ns", name=name, jid="", request=b"", phase=phase,
        ensemble_id=f"ens-{name}", restarts=2,
    )  # fmt: skip


def _snapshot(name: str = "web", state: dict[str, Any] | None = None) -> Shown:
    state = state if state is not None else {"running": {"startedAt": STARTED}}
    return Shown.of(
        PodStatus.model_validate(
            {
                "name": name,
                "UID": f"uid-{name}",
                "namespace": "ns",
                "containers": [{"name": "app", "state": state, "ready": True, "restartCount": 1}],
            }
        )
    )


def _report(dms: FakeDms, clock: FixedClock, *pods: tuple[PodRecord, Shown | None]) -> PodReport:
    return PodReport(lambda: list(pods), UsageBook(dms, clock=clock, min_interval_s=1.0))


async def test_usage_rates_come_from_two_measurements_of_the_dms() -> None:
    dms, clock = FakeDms(), FixedClock(NS_PER_SECOND)
    report = _report(dms, clock, (_record(), _snapshot()))
    dms.usage["ens-web"] = {"pod.app": _stats(2 * NS_PER_SECOND, 50 << 20, 10_000)}
    await report.refresh()
    (first,) = report.views()
    assert "usageNanoCores" not in first["containers"][0]["usage"]["cpu"]  # one measurement
    assert first["usage"]["memory"] == {
        "time": "1970-01-01T00:00:10Z", "workingSetBytes": 50 << 20, "usageBytes": 50 << 20
    }  # fmt: skip
    dms.usage["ens-web"] = {"pod.app": _stats(3 * NS_PER_SECOND, 60 << 20, 14_000)}
    await report.refresh()  # within min_interval_s: the last answer serves
    assert dms.calls == 1
    clock.advance(1.0)
    await report.refresh()
    (second,) = report.views()
    cpu = second["containers"][0]["usage"]["cpu"]
    assert cpu["usageNanoCores"] == 250_000_000  # 1 s of CPU over 4 s: a quarter core
    assert cpu["usageCoreNanoSeconds"] == 3 * NS_PER_SECOND


async def test_reads_that_come_together_share_one_refresh() -> None:
    dms = FakeDms()
    report = _report(dms, FixedClock(NS_PER_SECOND), (_record(), _snapshot()))
    await asyncio.gather(*(report.refresh() for _ in range(5)))
    assert dms.calls == 1


@pytest.mark.parametrize(
    "answer",
    [
        {"pod.app": _stats(0, 0, 0)},  # the DMS's all-zero stats: the allocation is not running
        None,  # a DMS older than include_usage
        {"pod.other": _stats(5, 5, 5)},  # another container's
        "error",  # an executor without stats
    ],
    ids=["zero-stats", "older-dms", "other-allocation", "error"],
)
async def test_usage_the_dms_did_not_measure_is_absent(answer: Any) -> None:
    dms = FakeDms()
    if answer == "error":
        dms.error = "stats not supported by containerd executor yet"
    else:
        dms.usage["ens-web"] = answer
    report = _report(dms, FixedClock(NS_PER_SECOND), (_record(), _snapshot()))
    await report.refresh()
    (view,) = report.views()
    assert "usage" not in view and "usage" not in view["containers"][0]
    series = {
        s.name for family in report.collect() for s in family.samples if "container" in s.labels
    }
    assert series == set()


async def test_pods_not_running_are_not_asked_about() -> None:
    dms = FakeDms()
    ended = _snapshot("done", {"terminated": {"exitCode": 0, "reason": "Completed"}})
    report = _report(
        dms,
        FixedClock(NS_PER_SECOND),
        (_record("done", Phase.TERMINAL), ended),
        (_record("new", Phase.PENDING), None),
    )
    await report.refresh()
    assert dms.calls == 0
    assert [(v["name"], v["phase"]) for v in report.views()] == [
        ("done", "Succeeded"),
        ("new", "Pending"),
    ]
    phases = {
        s.labels["phase"]: s.value
        for family in report.collect()
        for s in family.samples
        if s.name == "dmsgw_pods_by_phase"
    }
    assert phases == {"Pending": 1, "Running": 0, "Succeeded": 1, "Failed": 0}


def test_a_rate_needs_a_second_of_measurements_and_a_restart_starts_over() -> None:
    def at(cpu_s: float, ms: int) -> ExecutorStats:
        return ExecutorStats(
            cpu_usage=CPUUsageStats(total_usage=int(cpu_s * NS_PER_SECOND)), timestamp=ms
        )

    first = ContainerUsage.of(at(1, 1_000), None)
    soon = ContainerUsage.of(at(1.01, 1_005), first)  # 5 ms: the kernel's tick, not a rate
    assert soon.cpu_nano_cores is None
    later = ContainerUsage.of(at(1.5, 2_000), soon)  # counted from the first: half a core
    assert later.cpu_nano_cores == NS_PER_SECOND // 2
    assert ContainerUsage.of(at(1.6, 2_010), later).cpu_nano_cores == NS_PER_SECOND // 2
    restarted = ContainerUsage.of(at(0.1, 3_000), later)
    assert restarted.cpu_nano_cores is None and restarted.cpu_core_ns == NS_PER_SECOND // 10


@pytest.mark.parametrize(
    ("error", "outcome"),
    [
        (None, "ok"),
        (DMSBehaviorError("/x", "deployment not found"), "not_found"),
        (DMSBehaviorError("/x", "boom"), "error"),
        (DMSTimeoutError("no reply"), "timeout"),
        (NotGrantedError("no"), "not_granted"),
        (asyncio.CancelledError(), "cancelled"),
        (OSError("refused"), "transport"),
    ],
)
def test_each_dms_call_has_an_outcome(error: BaseException | None, outcome: str) -> None:
    if isinstance(error, DMSTimeoutError):
        error.kind = DMSErrorKind.TIMEOUT
    assert call_outcome(error) == outcome


# --- the operator port ------------------------------------------------------------------------


def _pods_serving(dms: FakeDms) -> Pods:
    pods = Pods()
    pods.serving(_report(dms, FixedClock(NS_PER_SECOND), (_record(), _snapshot())))
    return pods


async def test_the_pod_routes_refuse_web_pages_and_other_host_names(aiohttp_client: Any) -> None:
    dms = FakeDms()
    dms.usage["ens-web"] = {"pod.app": _stats(NS_PER_SECOND, 1 << 20, 1_000)}
    client = await aiohttp_client(
        operator_app(Health(), Metrics(process=False), pods=_pods_serving(dms))
    )
    for path in POD_ROUTES:
        assert (await client.get(path)).status == 200
        refused = await client.get(path, headers={"Origin": EVIL})
        assert refused.status == 403
        assert (await refused.text()).startswith("origin: requests from web pages")
        rebound = await client.get(path, headers={"Host": f"evil.example:{client.port}"})
        assert rebound.status == 421
    assert dms.calls == 1  # refused requests asked the DMS nothing


async def test_the_pod_routes_off_loopback_need_the_token(aiohttp_client: Any) -> None:
    options = ServerOptions(
        operator_listen=ListenAddress.parse("0.0.0.0:4001"), operator_token=TOKEN
    )
    metrics = Metrics(process=False)
    pods = _pods_serving(FakeDms())
    app = operator_app(Health(), metrics, metrics_token=options.metrics_token, pods=pods)
    client = await aiohttp_client(app)
    good = {"Authorization": f"Bearer {TOKEN}", "Host": "ops.example:4001"}
    for path in POD_ROUTES:
        refused = await client.get(path)
        assert refused.status == 401 and refused.headers["WWW-Authenticate"] == "Bearer"
        assert (await client.get(path, headers={"Authorization": "Bearer no"})).status == 401
        assert (await client.get(path, headers=good)).status == 200


async def test_before_the_gateway_serves_the_pod_routes_say_so(aiohttp_client: Any) -> None:
    client = await aiohttp_client(operator_app(Health(), Metrics(process=False), pods=Pods()))
    for path in ("/pods", "/stats/summary"):
        answer = await client.get(path)
        assert answer.status == 503
        assert await answer.text() == "pods: the gateway is not serving yet"
    assert (await client.get("/metrics")).status == 200


async def test_metrics_list_each_measured_container_once(aiohttp_client: Any) -> None:
    dms = FakeDms()
    dms.usage["ens-web"] = {"pod.app": _stats(3 * NS_PER_SECOND, 7 << 20, 1_000)}
    metrics = Metrics(process=False)
    pods = _pods_serving(dms)
    metrics.registry.register(pods)
    client = await aiohttp_client(operator_app(Health(), metrics, pods=pods))
    text = await (await client.get("/metrics")).text()
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    labels = (("container", "app"), ("namespace", "ns"), ("pod", "web"))
    assert samples[("dmsgw_container_cpu_usage_seconds_total", labels)] == 3.0
    assert samples[("dmsgw_container_memory_working_set_bytes", labels)] == 7 << 20
    assert ("dmsgw_container_cpu_usage_cores", labels) not in samples  # one measurement
    assert samples[("dmsgw_pod_restarts_total", (("namespace", "ns"), ("pod", "web")))] == 2


# --- dmsgw pods -------------------------------------------------------------------------------


def _view(**usage: Any) -> dict[str, Any]:
    view: dict[str, Any] = {
        "namespace": "ns", "name": "web", "phase": "Running", "restarts": 1, "node": "pod",
        "peer": "P1", "containers": [
            {"name": "i", "init": True, "ready": False, "state": {"terminated": {"exitCode": 0}}},
            {"name": "app", "init": False, "ready": True, "state": {"running": {}}},
        ],
    }  # fmt: skip
    if usage:
        view["usage"] = usage
    return view


def test_the_table_reads_like_kubectl_with_usage() -> None:
    busy = _view(cpu={"usageNanoCores": 870_000_000}, memory={"workingSetBytes": 25 << 20})
    waiting = {"waiting": {"reason": "CrashLoopBackOff"}}
    busy["endpoints"] = [
        {"address": "203.0.113.7", "port": 40123, "containerPort": 8080},
        {"address": "", "peer": "P1", "port": 40124, "containerPort": 9090},
    ]
    crashing = _view() | {
        "name": "crash",
        "containers": [{"name": "app", "ready": False, "state": waiting}],
    }
    head = "NAMESPACE   NAME    READY   STATUS             RESTARTS   CPU      MEMORY   NODE   PEER"
    assert table([busy, crashing]).splitlines() == [
        head + "   ENDPOINTS",
        "ns          web     1/1     Running            1          870m     25Mi     pod    P1  "
        "   203.0.113.7:40123->8080,P1:40124->9090",
        "ns          crash   0/1     CrashLoopBackOff   1          <none>   <none>   pod    P1  "
        "   <none>",
    ]


def test_watch_prints_the_table_again_until_ctrl_c() -> None:
    out, naps = io.StringIO(), []
    views = iter([[_view()], [_view(memory={"workingSetBytes": 1 << 20})]])

    def nap(seconds: float) -> None:
        naps.append(seconds)
        if len(naps) == 2:
            raise KeyboardInterrupt

    assert watch(lambda: next(views), out, interval_s=0.5, sleep=nap) == 0
    tables = out.getvalue().strip().split("\n\n")
    assert naps == [0.5, 0.5] and len(tables) == 2 and "1Mi" in tables[1]


@pytest.mark.parametrize("interval", ["nan", "inf", "0", "-1"])
def test_watch_interval_that_is_no_period_is_refused_by_name(
    interval: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--interval nan`` passed ``<= 0`` and reached ``time.sleep``, which raised a traceback."""
    argv = ["pods", "--operator", "127.0.0.1:1", "-w", "--interval", interval]
    assert main(argv) == 2
    assert f"--interval: {interval} is not a positive number of seconds" in capsys.readouterr().err
