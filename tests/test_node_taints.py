"""An outage is not an eviction (decision 85): the ping answers 200 with ``NoSchedule`` taints
while the gateway cannot take new pods well, and each taint goes when its cause does.

The last test plays interLink 0.6.2's virtual kubelet and Kubernetes around the gateway's
plugin API, on an injected clock: the VK pings every 30 s and marks its node not Ready on any
answer but 200 (``nodeUpdate``), replaces the node's taints but its own with those of a 200
ping (``updateNodeTaints``), and polls the pods; Kubernetes taints a node that is not Ready
``node.kubernetes.io/not-ready:NoExecute`` and evicts (deletes) each pod once its toleration
of 300 s has run out. A DMS that goes away for longer than that, then comes back, must leave
every pod running.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from dmsgw.behaviors.catalog import DEPLOYMENT_LIST, Behavior
from dmsgw.behaviors.resources import CPU, RAM, Disk, Resources
from dmsgw.clock import NS_PER_SECOND, FixedClock, system_clock
from dmsgw.devnet.devnet import Devnet
from dmsgw.interlink.app import start_backend
from dmsgw.interlink.capacity.node_taints import (
    CAPACITY_EXHAUSTED,
    DMS_UNREACHABLE,
    GRANT,
    GRANT_MARGIN_S,
    NO_PEERS,
    NodeState,
    has_room,
    node_taints,
    ping_status,
)
from dmsgw.interlink.capacity.resource_actor import Capacity, ResourceActor
from dmsgw.interlink.gateway import Gateway
from dmsgw.interlink.reports.pod_report import PodReport
from dmsgw.interlink.reports.pod_usage import UsageBook
from dmsgw.interlink.server import Metrics, PluginServer, ServerOptions
from dmsgw.interlink.server.operator_port import Health
from dmsgw.interlink.wire.bodies import PingResponse, TaintResponse
from dmsgw.keys.ucan.token import format_second
from dmsgw.transport.rest import TransportError
from tests.support.devnet_gateways import gateway_config
from tests.support.gateway_fakes import FakeDMS, gateway_on, pod, uid, until

START_NS = 1_700_000_000 * NS_PER_SECOND
ROOMY = Resources(cpu=CPU(cores=4.0), ram=RAM(size=8 << 30), disk=Disk(size=64 << 30))
FULL = Resources(cpu=CPU(cores=0.0), ram=RAM(size=8 << 30))
ROOMY_BUT_NO_RAM = Resources(cpu=CPU(cores=4.0))
HOUR_NS = 3600 * NS_PER_SECOND


def _keys(taints: list[TaintResponse] | None) -> list[str]:
    return [f"{t.key}={t.value}:{t.effect}" for t in taints or ()]


# --- the causes, one by one ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("state", "taints"),
    [
        (NodeState(START_NS, 1), []),
        (NodeState(START_NS, None, dms_error="refused"), [f"{DMS_UNREACHABLE}=true:NoSchedule"]),
        (NodeState(START_NS, 0), [f"{NO_PEERS}=true:NoSchedule"]),
        (NodeState(START_NS, 2, room=False), [f"{CAPACITY_EXHAUSTED}=true:NoSchedule"]),
        (NodeState(START_NS, 2, room=True), []),
        (NodeState(START_NS, 1, grant_expiry_ns=START_NS + 2 * HOUR_NS), []),
        (
            NodeState(START_NS, 1, grant_expiry_ns=START_NS + HOUR_NS),
            [f"{GRANT}=expiring:NoSchedule"],
        ),
        (NodeState(START_NS, 1, grant_expiry_ns=START_NS), [f"{GRANT}=expired:NoSchedule"]),
        (
            NodeState(START_NS, None, grant_expiry_ns=START_NS - 1, dms_error="refused"),
            [f"{DMS_UNREACHABLE}=true:NoSchedule", f"{GRANT}=expired:NoSchedule"],
        ),
    ],
)
def test_each_cause_is_its_own_no_schedule_taint(state: NodeState, taints: list[str]) -> None:
    assert _keys(node_taints(state)) == taints
    assert (ping_status(state) == "ok") is not taints


def test_a_peer_has_room_with_a_free_core_and_free_memory() -> None:
    assert has_room([FULL, ROOMY]) and not has_room([FULL, Resources(), ROOMY_BUT_NO_RAM])
    assert not has_room([])


def test_the_status_says_since_when_the_dms_is_silent_and_why() -> None:
    state = NodeState(
        START_NS + 420 * NS_PER_SECOND,
        None,
        dms_error="the DMS does not answer: connection refused",
        dms_silent_since_ns=START_NS,
    )
    assert ping_status(state) == (
        "degraded: the DMS has not answered since 2023-11-14T22:13:20Z (420 s: the DMS does "
        "not answer: connection refused); running pods show their last known status"
    )


def test_a_taintless_ping_still_sends_an_empty_list_that_clears_the_node() -> None:
    """interLink leaves the taints alone when ``taints`` is absent: the gateway's must be
    cleared by an explicit empty list."""
    assert json.loads(PingResponse(status="ok", taints=[]).to_json()) == {
        "status": "ok",
        "taints": [],
    }


# --- the ping over a DMS that comes and goes ---------------------------------------------


class OutageDMS(FakeDMS):
    """The fake DMS, which can go away altogether (``down``) or keep answering while its
    peers do not report free resources (``peers_silent``)."""

    down = False
    peers_silent = False

    async def __call__(self, behavior: Behavior[Any, Any], payload: Any = None, **kw: Any) -> Any:
        silent = self.peers_silent and behavior.name.endswith("resources/free")
        if self.down or silent:
            await asyncio.sleep(0)
            raise TransportError(f"{behavior.name}: connection refused")
        return await super().__call__(behavior, payload, **kw)


@pytest.fixture
def clock() -> FixedClock:
    return FixedClock(START_NS)


@pytest.fixture
def dms(tmp_path: Path) -> OutageDMS:
    return OutageDMS(tmp_path / "logs", free=ROOMY)


def _capacity(dms: OutageDMS, clock: FixedClock, grant: list[int | None]) -> Capacity:
    return Capacity(
        ResourceActor.start(dms, ttl_s=20.0, clock=clock),
        pods_capacity=10,
        clock=clock,
        grant_expiry=lambda: grant[0],
    )


async def test_each_taint_is_set_by_its_cause_and_cleared_when_it_ends(
    dms: OutageDMS, clock: FixedClock
) -> None:
    grant: list[int | None] = [START_NS + 10 * HOUR_NS]
    capacity = _capacity(dms, clock, grant)

    async def ping_after(seconds: float) -> PingResponse:
        clock.advance(seconds)  # past the actor's cache of 20 s
        return await capacity.ping()

    try:
        healthy = await capacity.ping()
        assert (healthy.status, healthy.taints) == ("ok", [])
        assert healthy.resources is not None and healthy.resources.cpu == "4"

        dms.down = True
        down = await ping_after(30)
        assert _keys(down.taints) == [f"{DMS_UNREACHABLE}=true:NoSchedule"]
        assert down.resources is None  # interLink keeps the capacity it had
        assert capacity.silent_since() == clock()
        dms.down = False
        assert (await ping_after(30)).taints == []
        assert capacity.silent_since() is None

        dms.peers_silent = True
        assert _keys((await ping_after(30)).taints) == [f"{NO_PEERS}=true:NoSchedule"]
        dms.peers_silent = False
        dms.free = FULL
        assert _keys((await ping_after(30)).taints) == [f"{CAPACITY_EXHAUSTED}=true:NoSchedule"]
        dms.free = ROOMY
        assert (await ping_after(30)).taints == []

        grant[0] = clock() + int(GRANT_MARGIN_S * NS_PER_SECOND) + 60 * NS_PER_SECOND
        assert (await ping_after(30)).taints == []
        assert _keys((await ping_after(60)).taints) == [f"{GRANT}=expiring:NoSchedule"]
        clock.advance(GRANT_MARGIN_S)
        assert _keys((await capacity.ping()).taints) == [f"{GRANT}=expired:NoSchedule"]
        grant[0] = clock() + 10 * HOUR_NS  # renewed
        assert (await capacity.ping()).taints == []
    finally:
        await capacity.close()


# --- interLink's virtual kubelet and Kubernetes, around the plugin API --------------------

Client = TestClient[web.Request, web.Application]
INTERLINK = {"Content-Type": "application/json"}
PING_PERIOD_S = 30.0  # interLink's nodeUpdate loop
NOT_READY_TOLERATION_S = 300.0  # the DefaultTolerationSeconds admission plugin's
SYSTEM_TAINT = "virtual-node.interlink/no-schedule"


class VirtualNode:
    """What interLink 0.6.2's virtual kubelet and Kubernetes do with the plugin's answers."""

    def __init__(self, plugin: Client, clock: FixedClock, pods: list[dict[str, Any]]) -> None:
        self.plugin = plugin
        self.clock = clock
        self.pods = {p["metadata"]["uid"]: p for p in pods}
        self.ready = True
        self.taints = [f"{SYSTEM_TAINT}=true:NoSchedule"]
        self.not_ready_since: int | None = None
        self.evicted: list[str] = []
        self.phases: dict[str, str] = {}

    async def tick(self) -> None:
        """One period of the VK's node loop, a status poll, and the taint manager."""
        self.clock.advance(PING_PERIOD_S)
        await self.ping()
        await self.poll()
        await self.evict()

    async def ping(self) -> None:
        async with self.plugin.get("/status", data=b"[]", headers=INTERLINK) as answer:
            body = await answer.read()
            self.ready = answer.status == 200
        if not self.ready:
            self.not_ready_since = self.not_ready_since or self.clock()
            return
        self.not_ready_since = None
        reply = json.loads(body)
        if reply.get("taints") is not None:
            kept = [t for t in self.taints if t.startswith(SYSTEM_TAINT + "=")]
            self.taints = kept + [
                f"{t['key']}={t.get('value', '')}:{t['effect']}" for t in reply["taints"]
            ]

    async def poll(self) -> None:
        data = json.dumps(list(self.pods.values())).encode()
        async with self.plugin.get("/status", data=data, headers=INTERLINK) as answer:
            assert answer.status == 200, await answer.text()
            for entry in await answer.json():
                states = [c["state"] for c in entry["containers"]]
                self.phases[entry["UID"]] = (
                    "Running" if all("running" in s for s in states) else "Other"
                )

    async def evict(self) -> None:
        """The taint manager: a node not Ready carries ``not-ready:NoExecute``, which the pods
        tolerate for 300 s; then each is deleted, and the VK sends ``/delete``."""
        if self.not_ready_since is None:
            return
        if self.clock() - self.not_ready_since < NOT_READY_TOLERATION_S * NS_PER_SECOND:
            return
        for uid_, spec in list(self.pods.items()):
            async with self.plugin.post("/delete", json=spec) as answer:
                assert answer.status == 200, await answer.text()
            del self.pods[uid_]
            self.evicted.append(uid_)


@pytest.fixture
async def gateway(dms: OutageDMS, clock: FixedClock, tmp_path: Path) -> AsyncIterator[Gateway]:
    capacity = _capacity(dms, clock, [None])
    gw = await gateway_on(
        dms, tmp_path / "state.sqlite3", owner="did:key:gw", clock=clock, capacity=capacity
    )
    try:
        yield gw
    finally:
        await gw.close()


async def test_a_dms_outage_longer_than_the_toleration_evicts_no_pod(
    gateway: Gateway,
    dms: OutageDMS,
    clock: FixedClock,
    aiohttp_client: Callable[..., Awaitable[Client]],
) -> None:
    plugin = await aiohttp_client(
        PluginServer(gateway, ServerOptions(), Metrics(process=False)).app()
    )
    specs = [pod(uid(n)) for n in range(3)]
    for spec in specs:
        body = {"pod": spec, "container": [{"name": "main"}]}
        async with plugin.post("/create", json=body) as answer:
            assert answer.status == 200, await answer.text()
    await until(
        lambda: [s.phase if s else "" for _, s in gateway.pods()] == ["Running"] * 3,
        "three pods running",
    )
    node = VirtualNode(plugin, clock, specs)
    await node.tick()
    assert (node.ready, node.taints) == (True, [f"{SYSTEM_TAINT}=true:NoSchedule"])
    assert set(node.phases.values()) == {"Running"}

    health = Health()
    health.serving(gateway)
    report = PodReport(
        gateway.pods, UsageBook(dms), clock=clock, stale_since=gateway.parts.capacity.silent_since
    )
    dms.down = True
    outage_ns = clock() + int(PING_PERIOD_S * NS_PER_SECOND)
    for _ in range(int(2 * NOT_READY_TOLERATION_S / PING_PERIOD_S)):  # ten minutes
        await node.tick()
        assert node.ready, "the node went not Ready during the outage"
        assert f"{DMS_UNREACHABLE}=true:NoSchedule" in node.taints
        assert set(node.phases.values()) == {"Running"}, node.phases
    assert node.evicted == []
    readiness = await health.report()
    assert readiness["ready"] and readiness["taints"] == [f"{DMS_UNREACHABLE}=true:NoSchedule"]
    assert readiness["degraded"].startswith("degraded: the DMS has not answered since")
    assert {v["staleSince"] for v in report.views()} == {format_second(outage_ns)}

    dms.down = False
    await node.tick()
    assert (node.ready, node.taints) == (True, [f"{SYSTEM_TAINT}=true:NoSchedule"])
    assert set(node.phases.values()) == {"Running"} and len(node.phases) == 3
    assert len(dms.live()) == 3 and dms.asked["deployment/shutdown"] == 0
    assert all("staleSince" not in v for v in report.views())
    assert "taints" not in await health.report()


async def test_a_devnet_dms_that_stops_and_comes_back_leaves_the_pod_running(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    aiohttp_client: Callable[..., Awaitable[Client]],
) -> None:
    """The same through ``dmsgw serve``'s backend over a devnet's REST API on loopback: the
    gateway's DMS node stops (its allocations keep running) for longer than the toleration
    and comes back; a pod created meanwhile waits and runs once it is back. The grant runs out
    within the hour all along, and says so."""
    monkeypatch.setenv("DMSGW_TEST_SCRYPT_N", "1024")
    clock = FixedClock(system_clock())  # the devnet checks the gateway's tokens by its own
    devnet = Devnet(seed="outage-taints")
    await devnet.start()
    backend = None
    try:
        config = gateway_config(devnet, tmp_path / "gw", seed=60, grant_s=GRANT_MARGIN_S / 2)
        backend = await start_backend(config, metrics=Metrics(), clock=clock)
        plugin = await aiohttp_client(
            PluginServer(backend, ServerOptions(), Metrics(process=False)).app()
        )
        spec = pod(uid(9), command=["sh", "-c", "exec sleep 300"])
        async with plugin.post("/create", json={"pod": spec, "container": [{"name": "main"}]}):
            pass
        await until(
            lambda: [s.phase if s else "" for _, s in backend.pods()] == ["Running"],
            "the pod runs on the devnet",
        )
        grant = f"{GRANT}=expiring:NoSchedule"
        node = VirtualNode(plugin, clock, [spec])
        await node.tick()
        assert node.taints == [f"{SYSTEM_TAINT}=true:NoSchedule", grant]

        await devnet.stop_node(0)
        for _ in range(int(2 * NOT_READY_TOLERATION_S / PING_PERIOD_S)):
            await node.tick()
            assert node.ready and f"{DMS_UNREACHABLE}=true:NoSchedule" in node.taints
            assert node.phases == {uid(9): "Running"}
        late = pod(uid(10), command=["sh", "-c", "exec sleep 300"])  # it tolerated the taint
        async with plugin.post("/create", json={"pod": late, "container": [{"name": "main"}]}):
            pass
        await devnet.restart_node(0)
        await node.tick()
        assert node.taints == [f"{SYSTEM_TAINT}=true:NoSchedule", grant]
        assert (node.evicted, node.phases) == ([], {uid(9): "Running"})
        await until(
            lambda: [s.phase if s else "" for _, s in backend.pods()] == ["Running"] * 2,
            "the pod created during the outage runs once the DMS is back",
        )
        listing = await backend.parts.invoke(DEPLOYMENT_LIST)
        assert [d.status for d in listing.deployments or ()] == ["Running"] * 2
    finally:
        if backend is not None:
            await backend.close()
        await devnet.stop()


class SlowBackend:
    """A backend whose ping waits on a DMS that is slow to answer."""

    def __init__(self) -> None:
        self.answer = asyncio.Event()

    async def ping(self) -> PingResponse:
        await self.answer.wait()
        return PingResponse(status="ok", taints=[])


async def test_readiness_answers_within_a_probes_second_when_the_dms_is_slow() -> None:
    """The kubelet gives a readiness probe 1 s by default: a ping still gathering after
    half of it is a degraded node, not a gateway to take out of its Service."""
    health = Health(ping_timeout_s=0.01)
    backend = SlowBackend()
    health.serving(backend)  # type: ignore[arg-type]
    report = await health.report()
    assert report["ready"] and report["degraded"] == (
        "degraded: the backend's ping took over 0.01 s"
    )
    backend.answer.set()
    assert "degraded" not in await health.report()
