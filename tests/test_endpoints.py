"""Services a user can reach: a pod's endpoints from the DMS's manifest, the operator port's
per-pod JSON (behind the front door), the devnet's forwarding of public ports, and a pod's
HTTP answer fetched through its reported endpoint, end to end on the embedded devnet."""

from __future__ import annotations

import asyncio
import errno
import json
import logging
import os
import socket
import subprocess
import urllib.request
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import ClientError, ClientSession
from aiohttp.test_utils import TestClient

from dmsgw.behaviors.status import EnsembleManifest
from dmsgw.clock import NS_PER_SECOND, FixedClock
from dmsgw.devnet.devnet import Devnet
from dmsgw.devnet.forwarding import AllocationNetworks
from dmsgw.devnet.netns import (
    GATEWAY,
    NETNS_DIR,
    AllocationNamespace,
    Namespaces,
    in_namespace,
    remove_stale,
    veth_name,
)
from dmsgw.devnet.sandbox import Isolation, SandboxError
from dmsgw.devnet.userns import UserNamespaces
from dmsgw.devnet_files.devnet_record import process_start_time
from dmsgw.interlink.records.endpoints import endpoints_of
from dmsgw.interlink.records.pod_record import PodRecord
from dmsgw.interlink.reports.pod_report import PodReport
from dmsgw.interlink.reports.pod_usage import UsageBook
from dmsgw.interlink.server import Health, Metrics, Pods, operator_app
from dmsgw.interlink.translate.wrapper import UNWRAPPED_ANNOTATION
from dmsgw.interlink.wire import k8s
from tests.support.devnet_gateways import (
    PYTHON,
    needs_namespaces,
    needs_python,
    no_dms,
    pod_view,
    serving,
)
from tests.support.fake_backend import FakeBackend, loopback_options, start_serve
from tests.support.gateway_fakes import FakeDMS, create, gateway_on, pod, uid, until, until_async

Client = TestClient[Any, Any]
TOKEN = "s3cret-operator-token"
PEER = "12D3KooWEndpointPeer"


def web_pod(n: int, private: int, answer: str, public: int, **spec: Any) -> dict[str, Any]:
    """A pod whose container answers ``answer`` to any GET on ``private`` (every address of
    its network, as a container's server must listen to be reached through its port),
    published at ``public`` (a port the test knows free: one the gateway picks may be, by
    chance, a port a connection of this host holds)."""
    server = (
        "import http.server as h, os\n"
        "class A(h.BaseHTTPRequestHandler):\n"
        "    def do_GET(self):\n"
        "        b = os.environ['ANSWER'].encode()\n"
        "        self.send_response(200)\n"
        "        self.send_header('Content-Length', str(len(b)))\n"
        "        self.end_headers()\n"
        "        self.wfile.write(b)\n"
        f"h.HTTPServer(('', {private}), A).serve_forever()\n"
    )
    return pod(
        uid(n),
        command=[PYTHON, "-c", server],
        env=[{"name": "ANSWER", "value": answer}],
        ports=[{"name": "http", "containerPort": private, "hostPort": public}],
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


def test_two_entries_of_one_container_port_are_each_reported_with_their_own_public_port() -> None:
    """The manifest maps public to private ports: two entries of one ``containerPort`` (one
    with a ``hostPort``) lead to one private port, and each keeps its own public port."""
    twice = json.loads(json.dumps(MANIFEST))
    twice["allocations"]["pod.web"]["ports"] = {"40123": 8080, "20001": 8080}
    manifest = EnsembleManifest.from_json(json.dumps(twice))
    pod_spec = spec_with(
        {
            "name": "web",
            "image": "x",
            "ports": [
                {"name": "a", "containerPort": 8080},
                {"name": "b", "containerPort": 8080, "hostPort": 40123},
            ],
        }
    )
    found = [(e["name"], e["port"]) for e in endpoints_of(pod_spec, manifest)]
    assert found == [("a", 20001), ("b", 40123)]


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


def _report() -> PodReport:
    """The gateway's pods as the operator port reads them: :data:`RECORD` alone."""
    return PodReport(lambda: [(RECORD, None)], UsageBook(no_dms))


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
    network = AllocationNetworks()
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
    network = AllocationNetworks()
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
    network = AllocationNetworks()
    try:
        with pytest.raises(SandboxError, match=f"public port {port} cannot be opened"):
            await network.open("a_pod.web", {str(port): 8080})
        await network.open("b_pod.web", {"0": 8080})  # the private port was not kept
    finally:
        await network.close("b_pod.web")
        taken.close()


# --- end to end on the embedded devnet --------------------------------------------------------


async def fetch(endpoint: dict[str, Any]) -> str:
    """The answer of the pod's server through ``endpoint`` (a running pod's server may not
    listen yet: asked again until it answers)."""
    url = f"http://{endpoint['address']}:{endpoint['port']}/"
    answers: list[str] = []
    async with ClientSession() as session:

        async def answered() -> bool:
            try:
                async with session.get(url) as answer:
                    answers.append(await answer.text())
                    return True
            except ClientError:
                return False

        await until_async(answered, f"the pod's server answers at {url}")
    return answers[0]


def _namespaces_of(devnet: Devnet) -> list[str]:
    """The network namespaces the devnet made (and has not removed)."""
    assert devnet.root is not None
    made = NETNS_DIR.glob(f"{devnet.root.name}-*")
    return sorted(p.name for p in made if not p.name.endswith("-hub"))


def _in_hub(devnet: Devnet, namespace: str) -> bool:
    """Whether ``namespace``'s veth has its end in the devnet's hub."""
    assert devnet.root is not None
    hub = f"{devnet.root.name}-hub"
    show = ["ip", "-n", hub, "link", "show", veth_name(namespace)]
    return subprocess.run(show, capture_output=True, check=False, timeout=10).returncode == 0


@needs_python
@needs_namespaces
async def test_a_pods_http_answer_through_its_reported_endpoint(
    tmp_path: Path,
    unused_tcp_port_factory: Callable[[], int],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """``/create``, ``/status`` until running, the endpoint from the operator port, then the
    pod's own answer through it — for two pods whose containers both listen on one port, each
    in a network namespace of its own, whose DMS health checks (an HTTP GET and a command, both
    against the container's 127.0.0.1) run inside it; from inside, a pod reaches the other's public
    port at the host's address, and nothing beyond the host; deleted, their namespaces and
    veths go."""
    caplog.set_level(logging.INFO, logger="dmsgw.interlink.pods.pod_actor")
    port = unused_tcp_port_factory()
    http_probe = {"httpGet": {"path": "/", "port": port}, "periodSeconds": 1}
    connect = f"import socket; socket.create_connection(('127.0.0.1', {port}), 2)"
    exec_probe = {"exec": {"command": [PYTHON, "-c", connect]}, "periodSeconds": 1}
    publics = [unused_tcp_port_factory(), unused_tcp_port_factory()]
    first = web_pod(1, port, "hello from p-0001", publics[0], livenessProbe=http_probe)
    second = web_pod(2, port, "hello from p-0002", publics[1], livenessProbe=exec_probe)
    for spec in (first, second):  # unwrapped: the liveness probe is the devnet's health check
        spec["metadata"]["annotations"][UNWRAPPED_ANNOTATION] = "main"
    async with serving(tmp_path, network_namespaces=True) as s:
        await s.create(first)
        await s.create(second)
        endpoints = [await s.endpoint(first), await s.endpoint(second)]
        assert [(e["containerPort"], e["address"], e["port"]) for e in endpoints] == [
            (port, "127.0.0.1", public) for public in publics
        ]
        assert [await fetch(e) for e in endpoints] == ["hello from p-0001", "hello from p-0002"]
        for spec in (first, second):  # probes against the container's own 127.0.0.1
            await until(lambda spec=spec: s.health(spec) == "healthy", "its probe passes")
        inside = s.namespace(first)
        url = f"http://{GATEWAY}:{endpoints[1]['port']}/"
        reply = await in_namespace(inside, lambda: urllib.request.urlopen(url, timeout=5).read())
        assert reply == b"hello from p-0002"  # the other pod's public port, at the host
        with pytest.raises(OSError) as beyond:  # no NAT: no route beyond the host
            await in_namespace(inside, lambda: socket.create_connection(("192.0.2.1", 80), 5))
        assert beyond.value.errno == errno.ENETUNREACH
        records = [r for r in caplog.records if r.name == "dmsgw.interlink.pods.pod_actor"]
        reachable = {r.getMessage() for r in records if "reachable at" in r.getMessage()}
        assert reachable == {
            f"pod default/p-000{n} reachable at main:{port} -> 127.0.0.1:{e['port']}"
            for n, e in enumerate(endpoints, 1)
        }
        made = _namespaces_of(s.devnet)
        assert len(made) == 2
        assert all(_in_hub(s.devnet, name) for name in made)
        for spec in (first, second):
            assert (await s.plugin.post("/delete", data=json.dumps(spec))).status == 200
        await until(lambda: not _namespaces_of(s.devnet), "the namespaces removed")
        assert not any(_in_hub(s.devnet, name) for name in made)
        for e in endpoints:  # and their public ports closed
            with socket.create_server(("127.0.0.1", e["port"])):
                pass


@needs_python
async def test_on_a_shared_network_a_second_pod_on_a_port_fails_at_once_saying_why(
    tmp_path: Path, unused_tcp_port_factory: Callable[[], int]
) -> None:
    """Without network namespaces (forced here; a devnet that is not root has none) the
    allocations share the host's network: the first pod answers through its endpoint (and
    to its probe), and a second one on the same port fails at once with the reason in its
    status, rather than retrying until its deadline with the reason in the devnet's log
    only."""
    port, publics = unused_tcp_port_factory(), [unused_tcp_port_factory() for _ in "ab"]
    http_probe = {"httpGet": {"path": "/", "port": port}, "periodSeconds": 1}
    async with serving(tmp_path, network_namespaces=False) as s:
        first = web_pod(1, port, "hello from p-0001", publics[0], livenessProbe=http_probe)
        first["metadata"]["annotations"][UNWRAPPED_ANNOTATION] = "main"  # the devnet's check
        await s.create(first)
        assert await fetch(await s.endpoint(first)) == "hello from p-0001"
        await until(lambda: s.health(first) == "healthy", "its probe, from the host, passes")
        second = web_pod(2, port, "hello from p-0002", publics[1])
        await s.create(second)
        states: list[dict[str, Any]] = []

        async def ended() -> bool:
            states.append(await s.state(second))
            return "terminated" in states[-1]

        await until_async(ended, "the second pod ends")
        message = states[-1]["terminated"].get("message", "")
        assert f"private port {port} is already used by allocation" in message
        assert "share the host's network" in message


# --- network namespaces -----------------------------------------------------------------------


async def _ip(*args: str) -> None:
    proc = await asyncio.create_subprocess_exec("ip", *args)
    assert await proc.wait() == 0, f"ip {' '.join(args)}"


@needs_namespaces
async def test_namespaces_a_killed_devnet_left_are_removed_at_the_next_start() -> None:
    """A devnet killed with SIGKILL leaves its namespaces and veths: the next one to start
    removes those whose devnet no longer runs, and leaves a live devnet's alone."""
    ended = await asyncio.create_subprocess_exec("true")
    await ended.wait()
    dead = f"dmsgw-devnet-{ended.pid}.1-left-1"  # that process never started at tick 1
    live = f"dmsgw-devnet-{os.getpid()}.{process_start_time(os.getpid())}-live-1"
    for name in (dead, live):
        await _ip("netns", "add", name)
        await _ip("link", "add", veth_name(name), "type", "veth", "peer", "eth0", "netns", name)
    try:
        await remove_stale()
        assert not (NETNS_DIR / dead).exists()
        assert not Path("/sys/class/net", veth_name(dead)).exists()
        assert (NETNS_DIR / live).exists()
        assert Path("/sys/class/net", veth_name(live)).exists()
    finally:
        for name in (live, dead):
            await Namespaces("test").remove(AllocationNamespace(name, ""))


async def test_without_root_allocations_share_the_hosts_network(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A devnet that is not root makes no hub namespaces (nor, where the kernel refuses user
    namespaces, any), says so once in its start line, and one asked for them says why it
    cannot have them."""
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.setattr(UserNamespaces, "probe", _refused)
    assert await Namespaces.probe("dmsgw-devnet-x") is None
    caplog.set_level(logging.INFO, logger="dmsgw.devnet.devnet")
    devnet = Devnet(nodes=1, seed="shared", isolation=Isolation.REWRITE)
    await devnet.start()
    try:
        assert devnet.networks.namespaces is None
        (started,) = [r.getMessage() for r in caplog.records if "work dir" in r.getMessage()]
        assert "allocations share the host's network" in started
    finally:
        await devnet.stop()
    wanting = Devnet(nodes=1, seed="shared", network_namespaces=True)
    try:
        with pytest.raises(SandboxError, match="network namespaces need root"):
            await wanting.start()
    finally:
        await wanting.stop()


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
        await until(lambda: gateway.board.parked == 1, "the follow parked (decision 79)")
        await gateway.board.list_once()  # parked before any listing: woken to poll once more
        await until(lambda: gateway.board.parked == 1, "the follow parked again")
        assert dms.asked["deployment/status"] >= 3
        assert dms.asked["deployment/manifest"] == 1
        view = pod_view(gateway, "default", "p-0005")
        assert (view["node"], view["peer"]) == ("pod", PEER)
        assert view["endpoints"] == []  # the manifest publishes no port
    finally:
        await gateway.close()


async def test_an_ended_deployment_publishes_no_endpoint(tmp_path: Path) -> None:
    """The ports of an ensemble that has ended are no longer published: the view drops its
    endpoints then, rather than show them until a next deployment runs."""
    dms = FakeDMS(tmp_path / "logs")
    dms.manifest = EnsembleManifest.from_json(
        json.dumps(
            {
                "allocations": {
                    "pod.main": {"node_id": "pod", "ports": {"40123": 8080}},
                },
                "nodes": {"pod": {"id": "pod", "peer": PEER, "pub_address": ["203.0.113.7"]}},
            }
        )
    )
    clock = FixedClock(1_700_000_000 * NS_PER_SECOND)
    gateway = await gateway_on(dms, tmp_path / "state", owner="did:key:gw", clock=clock)
    try:
        ports = [{"containerPort": 8080}]
        await create(gateway, pod(uid(6), command=["sleep", "60"], ports=ports))
        await until(lambda: bool(pod_view(gateway, "default", "p-0006")["endpoints"]), "endpoints")
        dms.live()[0].status = "Completed"
        await until(lambda: gateway.book.records[uid(6)].phase == "terminal", "ended")
        view = pod_view(gateway, "default", "p-0006")
        assert view["endpoints"] == [] and view["node"] == "pod"  # where it ran: kept
    finally:
        await gateway.close()


async def _refused(self: UserNamespaces) -> tuple[bool, bool]:
    return False, False
