"""Services a user can reach: a pod's endpoints from the DMS's manifest, the operator port's
per-pod JSON (behind the front door), the devnet's forwarding of public ports, and a pod's
HTTP answer fetched through its reported endpoint, end to end on the embedded devnet."""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import ClientError, ClientSession
from aiohttp.test_utils import TestClient, TestServer

from dmsgw.behaviors.status import EnsembleManifest
from dmsgw.clock import NS_PER_SECOND, FixedClock
from dmsgw.devnet.devnet import Devnet
from dmsgw.devnet.forwarding import HostNetwork
from dmsgw.devnet.sandbox import SandboxError
from dmsgw.interlink import k8s
from dmsgw.interlink.app import start_backend
from dmsgw.interlink.endpoints import endpoints_of
from dmsgw.interlink.gateway import Gateway
from dmsgw.interlink.pod_record import PodRecord
from dmsgw.interlink.pod_report import PodReport
from dmsgw.interlink.server import Health, Metrics, PluginServer, Pods, operator_app
from dmsgw.interlink.usage import UsageBook
from tests.gateway_fakes import FAST, WAIT_S, FakeDMS, create, gateway_on, pod, uid, until
from tests.test_gateway_passes import _gateway_config
from tests.test_plugin_server import FakeBackend, loopback_options, start_serve

Client = TestClient[Any, Any]
TOKEN = "s3cret-operator-token"
PEER = "12D3KooWEndpointPeer"
PYTHON = shutil.which("python3", path="/usr/bin")
needs_python = pytest.mark.skipif(PYTHON is None, reason="needs /usr/bin/python3")


def web_pod(n: int, private: int, answer: str, **spec: Any) -> dict[str, Any]:
    """A pod whose container answers ``answer`` to any GET on ``private`` (loopback)."""
    server = (
        "import http.server as h, os\n"
        "class A(h.BaseHTTPRequestHandler):\n"
        "    def do_GET(self):\n"
        "        b = os.environ['ANSWER'].encode()\n"
        "        self.send_response(200)\n"
        "        self.send_header('Content-Length', str(len(b)))\n"
        "        self.end_headers()\n"
        "        self.wfile.write(b)\n"
        f"h.HTTPServer(('127.0.0.1', {private}), A).serve_forever()\n"
    )
    return pod(
        uid(n),
        command=[PYTHON, "-c", server],
        env=[{"name": "ANSWER", "value": answer}],
        ports=[{"name": "http", "containerPort": private}],
        **spec,
    )


# --- endpoints from the manifest ------------------------------------------------------------


MANIFEST = {
    "id": "ens",
    "allocations": {
        "pod.web": {
            "id": "ens_pod.web",
            "node_id": "pod",
            "dns_name": "web.internal",
            "ports": {"40123": 8080},
        },
        "pod.side": {"id": "ens_pod.side", "node_id": "pod", "dns_name": "side.internal"},
    },
    "nodes": {"pod": {"id": "pod", "peer": PEER, "pub_address": ["203.0.113.7"]}},
}


def spec_with(*containers: dict[str, Any]) -> k8s.Pod:
    return k8s.Pod.model_validate(
        {
            "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
            "spec": {"containers": list(containers)},
        }
    )


def test_an_endpoint_is_the_peers_public_address_and_the_public_port() -> None:
    manifest = EnsembleManifest.from_json(json.dumps(MANIFEST))
    pod_spec = spec_with(
        {"name": "web", "image": "x", "ports": [{"name": "http", "containerPort": 8080}]},
        {"name": "side", "image": "x", "ports": [{"containerPort": 9090}]},  # not published
    )
    assert endpoints_of(pod_spec, manifest) == [
        {
            "container": "web",
            "name": "http",
            "containerPort": 8080,
            "protocol": "TCP",
            "address": "203.0.113.7",
            "port": 40123,
            "peer": PEER,
            "internalDNS": "web.internal",
        }
    ]


def test_a_peer_without_a_public_address_still_names_the_peer() -> None:
    plain = json.loads(json.dumps(MANIFEST))
    plain["nodes"]["pod"]["pub_address"] = None
    manifest = EnsembleManifest.from_json(json.dumps(plain))
    pod_spec = spec_with({"name": "web", "image": "x", "ports": [{"containerPort": 8080}]})
    ((endpoint,),) = [endpoints_of(pod_spec, manifest)]
    assert (endpoint["address"], endpoint["peer"], endpoint["port"]) == ("", PEER, 40123)


# --- the operator port's per-pod JSON ---------------------------------------------------------


RECORD = PodRecord(
    uid="u-1",
    namespace="ns",
    name="web",
    jid="dmsgw-u-1",
    request=b"{}",
    phase="running",
    ensemble_id="ens",
    dms_status="Running",
    observed={"endpoints": [{"container": "web", "port": 40123}]},
)


async def _no_dms(*_: Any, **__: Any) -> Any:
    raise AssertionError("a pod without a snapshot is not measured")


def _report() -> PodReport:
    """The gateway's pods as the operator port reads them: :data:`RECORD` alone."""
    return PodReport(lambda: [(RECORD, None)], UsageBook(_no_dms))


def _pods() -> Pods:
    pods = Pods()
    pods.serving(_report())
    return pods


async def test_the_operator_port_shows_a_pod_and_its_endpoints(
    aiohttp_client: Callable[..., Awaitable[Client]],
) -> None:
    health = Health()
    client = await aiohttp_client(operator_app(health, Metrics(process=False), pods=_pods()))
    answer = await client.get("/pods/ns/web")
    assert answer.status == 200
    view = await answer.json()
    assert (view["namespace"], view["name"], view["uid"], view["phase"]) == (
        "ns",
        "web",
        "u-1",
        "Pending",
    )
    assert view["endpoints"] == [{"container": "web", "port": 40123}]
    missing = await client.get("/pods/ns/nope")
    assert (missing.status, await missing.text()) == (404, "the gateway has no pod ns/nope")


async def test_a_pods_view_is_behind_the_front_door(
    aiohttp_client: Callable[..., Awaitable[Client]],
) -> None:
    """The view names where a pod's services listen: like ``/metrics``, it needs the token
    when one is set, and web pages and foreign host names are refused whatever the token."""
    app = operator_app(Health(), Metrics(process=False), metrics_token=TOKEN, pods=_pods())
    client = await aiohttp_client(app)
    assert (await client.get("/pods/ns/web")).status == 401
    wrong = await client.get("/pods/ns/web", headers={"Authorization": "Bearer nope"})
    assert wrong.status == 401
    good = {"Authorization": f"Bearer {TOKEN}"}
    assert (await client.get("/pods/ns/web", headers=good)).status == 200
    web_page = await client.get("/pods/ns/web", headers=good | {"Origin": "http://evil.example"})
    assert web_page.status == 403
    open_app = operator_app(Health(), Metrics(process=False), pods=_pods())
    open_client = await aiohttp_client(open_app)
    rebound = await open_client.get(
        "/pods/ns/web", headers={"Host": f"evil.example:{open_client.port}"}
    )
    assert rebound.status == 421


class ViewingBackend(FakeBackend):
    """A backend that has pods to show, as the gateway does."""

    def __init__(self) -> None:
        super().__init__()
        self.pod_report = _report()


@pytest.mark.parametrize(("backend", "status"), [(ViewingBackend, 200), (FakeBackend, 503)])
async def test_serve_shows_the_backends_pods_on_the_operator_port(
    backend: type[FakeBackend], status: int
) -> None:
    """``dmsgw serve`` asks its backend for the pod (created after the operator port opened);
    a backend without a pod report has none to show."""
    task, info, stop = await start_serve(backend(), loopback_options())
    try:
        async with ClientSession() as session:
            answer = await session.get(info.operator.endpoint("/pods/ns/web"))
            assert answer.status == status
    finally:
        stop.set()
        await task


def _gateway_pods(gateway: Gateway) -> Pods:
    assert gateway.pod_report is not None
    pods = Pods()
    pods.serving(gateway.pod_report)
    return pods


def _view(gateway: Gateway, namespace: str, name: str) -> dict[str, Any]:
    """The gateway's view of a pod, as ``GET /pods/{namespace}/{name}`` shows it."""
    view = PodReport(gateway.pods, UsageBook(_no_dms)).view(namespace, name)
    assert view is not None, f"no pod {namespace}/{name}"
    return view


# --- the devnet's forwarding ------------------------------------------------------------------


async def _echo_server() -> tuple[asyncio.Server, int]:
    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"echo:" + await reader.read(100))
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(echo, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


async def _ask(port: int, data: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(data)
    writer.write_eof()
    answer = await reader.read()
    writer.close()
    return answer


async def test_a_public_port_reaches_the_private_port_while_the_allocation_lives(
    unused_tcp_port: int,
) -> None:
    server, private = await _echo_server()
    network = HostNetwork()
    try:
        await network.open("ens_pod.web", {str(unused_tcp_port): private})
        assert network.public_ports("ens_pod.web") == [unused_tcp_port]
        assert await asyncio.wait_for(_ask(unused_tcp_port, b"hi"), 10) == b"echo:hi"
        await network.close("ens_pod.web")
        assert network.public_ports("ens_pod.web") == []
        with pytest.raises(OSError):
            await _ask(unused_tcp_port, b"hi")
    finally:
        await network.close("ens_pod.web")
        server.close()


async def test_two_allocations_cannot_listen_on_one_private_port(
    unused_tcp_port_factory: Callable[[], int],
) -> None:
    network = HostNetwork()
    first, second = unused_tcp_port_factory(), unused_tcp_port_factory()
    try:
        await network.open("a_pod.web", {str(first): 8080})
        with pytest.raises(
            SandboxError, match=r"private port 8080 is already used by allocation a_pod\.web"
        ):
            await network.open("b_pod.web", {str(second): 8080})
        assert network.public_ports("b_pod.web") == []
        await network.close("a_pod.web")
        await network.open("b_pod.web", {str(second): 8080})  # given back with the first
    finally:
        await network.close("a_pod.web")
        await network.close("b_pod.web")


async def test_a_public_port_in_use_refuses_the_allocation() -> None:
    taken = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = taken.sockets[0].getsockname()[1]
    network = HostNetwork()
    try:
        with pytest.raises(SandboxError, match=f"public port {port} cannot be opened"):
            await network.open("a_pod.web", {str(port): 8080})
        await network.open("b_pod.web", {"0": 8080})  # the private port was not kept
    finally:
        await network.close("b_pod.web")
        taken.close()


# --- end to end on the embedded devnet --------------------------------------------------------


@needs_python
async def test_a_pods_http_answer_through_its_reported_endpoint(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    unused_tcp_port: int,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """``/create``, ``/status`` until running, the endpoint from the operator port, then the
    pod's own answer through it; a second pod listening on the same private port is refused
    with the reason, as the devnet's allocations share the host's network."""
    caplog.set_level(logging.INFO, logger="dmsgw.interlink.pod")
    monkeypatch.setenv("DMSGW_TEST_SCRYPT_N", "1024")
    devnet = Devnet(seed="endpoints")
    await devnet.start()
    config = _gateway_config(devnet, tmp_path / "gw", seed=170)
    gateway = await start_backend(config, metrics=Metrics(process=False))
    gateway.parts.policy = FAST
    plugin = TestClient(
        TestServer(PluginServer(gateway, config.server_options(), Metrics(process=False)).app()),
        headers={"Content-Type": "application/json"},
    )
    operator = TestClient(
        TestServer(operator_app(Health(), Metrics(process=False), pods=_gateway_pods(gateway)))
    )
    await plugin.start_server()
    await operator.start_server()
    try:
        first = web_pod(1, unused_tcp_port, "hello from p-0001")
        body = json.dumps({"pod": first, "container": [{"name": "main"}]})
        assert (await plugin.post("/create", data=body)).status == 200

        async def running() -> bool:
            (status,) = await (await plugin.get("/status", data=json.dumps([first]))).json()
            return bool(status["containers"][0]["state"].get("running"))

        await until_async(running, "the web pod runs")
        await until(lambda: bool(_view(gateway, "default", "p-0001")["endpoints"]), "endpoint")
        view = await (await operator.get("/pods/default/p-0001")).json()
        (endpoint,) = view["endpoints"]
        assert (endpoint["containerPort"], endpoint["address"]) == (unused_tcp_port, "127.0.0.1")
        url = f"http://{endpoint['address']}:{endpoint['port']}/"
        answers: list[str] = []
        async with ClientSession() as session:

            async def answered() -> bool:
                try:
                    async with session.get(url) as answer:
                        answers.append(await answer.text())
                        return True
                except ClientError:  # the pod's server runs but does not listen yet
                    return False

            await until_async(answered, "the pod's server answers through its endpoint")
        assert answers == ["hello from p-0001"]
        reachable = [r.getMessage() for r in caplog.records if "reachable at" in r.getMessage()]
        assert reachable == [
            f"pod default/p-0001 reachable at main:{unused_tcp_port} -> "
            f"127.0.0.1:{endpoint['port']}"
        ]

        second = web_pod(2, unused_tcp_port, "hello from p-0002")
        body = json.dumps({"pod": second, "container": [{"name": "main"}]})
        assert (await plugin.post("/create", data=body)).status == 200

        deployments = devnet.nodes[0].deployments
        assert deployments is not None

        def refusals() -> list[str]:
            ensemble = gateway._records[uid(2)].ensemble_id
            orchestrator = deployments.orchestrators.get(ensemble)
            return orchestrator.failures if orchestrator is not None else []

        reason = f"private port {unused_tcp_port} is already used by allocation"
        await until(lambda: any(reason in f for f in refusals()), "the second pod refused")
    finally:
        await plugin.close()
        await operator.close()
        await gateway.close()
        await devnet.stop()


async def until_async(done: Callable[[], Awaitable[bool]], what: str) -> None:
    """:func:`until` for a check that must await (an HTTP poll), bounded as it is."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT_S
    while not await done():
        if loop.time() > deadline:
            raise AssertionError(f"never happened within {WAIT_S} s: {what}")
        await asyncio.sleep(0.05)


# --- what looking endpoints up costs -----------------------------------------------------------


@pytest.mark.parametrize("ports", [[], [{"containerPort": 8080}]])
async def test_the_running_manifest_is_read_once_for_every_pod(
    tmp_path: Path, ports: list[dict[str, Any]]
) -> None:
    """10,000 running pods poll the DMS's status: each asks for the manifest once its
    deployment runs, and once only, for where it runs (node and peer, with or without ports)
    and, with ports, its endpoints."""
    dms = FakeDMS(tmp_path / "logs")
    dms.manifest = EnsembleManifest.from_json(
        json.dumps(
            {
                "allocations": {
                    "pod.main": {"node_id": "pod", "handle": {"addr": {"host": PEER}}},
                },
            }
        )
    )
    clock = FixedClock(1_700_000_000 * NS_PER_SECOND)
    gateway = await gateway_on(dms, tmp_path / "state", owner="did:key:gw", clock=clock)
    try:
        spec = pod(uid(5), policy="Always", command=["sleep", "60"], ports=ports)
        await create(gateway, spec)
        await until(lambda: dms.asked["deployment/status"] >= 5, "five status polls")
        assert dms.asked["deployment/manifest"] == 1
        view = _view(gateway, "default", "p-0005")
        assert (view["node"], view["peer"]) == ("pod", PEER)
        assert view["endpoints"] == []  # the manifest publishes no port
    finally:
        await gateway.close()
