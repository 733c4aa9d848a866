"""The plugin API's front door (issue 10): who may call, what a request may cost, how a client
that goes away is told apart from a bug, and the event-loop stall gauge.

Every entry point is checked for the requests a web page can make (cross-site, and through DNS
rebinding), for bodies that are not JSON, and for leaks of the token; ``/status`` for the work
one request may cause; and every route is fuzzed against a live server, which must answer each
request in bounded time, never with a 5xx or a traceback, and stay healthy.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import ClientSession, UnixConnector, web
from aiohttp.test_utils import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dmsgw.interlink.server import (
    CLIENT_GONE,
    Health,
    ListenAddress,
    LoopStalls,
    Metrics,
    PluginServer,
    ServerOptions,
    host_is_local,
    operator_app,
)
from dmsgw.interlink.wire import k8s, parsing
from dmsgw.interlink.wire.bodies import (
    CreateStruct,
    LogStruct,
    PingResponse,
    PodStatus,
    RetrievedPodData,
)
from dmsgw.interlink.wire.parsing import PodRef
from tests.support.fake_backend import (
    INTERLINK,
    FakeBackend,
    body,
    loopback_options,
    start_serve,
)
from tests.support.pod_bodies import UID

Client = TestClient[web.Request, web.Application]
AiohttpClient = Callable[..., Awaitable[Client]]

TOKEN = "s3cret-front-door-token"
EVIL = "http://evil.example"
# (method, path, a body interLink would send)
ROUTES = [
    ("POST", "/create", "create_v05_example.json"),
    ("POST", "/delete", "delete_request.json"),
    ("GET", "/status", "status_request.json"),
    ("POST", "/status", "status_request.json"),
    ("GET", "/getLogs", "logs_request.json"),
    ("POST", "/getLogs", "logs_request.json"),
]
OPERATOR_ROUTES = ["/healthz", "/readyz", "/metrics"]


class QuietBackend:
    """A backend that answers every well-formed request: whatever the front door lets in and
    the parsers accept reaches it, so any 5xx in these tests is the HTTP layer's."""

    def __init__(self) -> None:
        self.calls = 0

    async def create(self, pods: list[RetrievedPodData]) -> list[CreateStruct]:
        self.calls += 1
        return [CreateStruct(pod_uid=p.pod.metadata.uid, pod_jid="job") for p in pods]

    async def delete(self, pod: k8s.Pod) -> None:
        self.calls += 1

    def statuses_at_once(self, uids: list[str]) -> None:
        return None

    async def status(self, pods: list[PodRef]) -> list[PodStatus]:
        self.calls += 1
        return [
            PodStatus(
                name=ref.name,
                uid=ref.uid,
                namespace=ref.namespace,
                containers=[k8s.ContainerStatus(name="c")],
            )
            for ref in pods
        ]

    async def ping(self) -> PingResponse:
        return PingResponse(status="ok")

    def logs(self, request: LogStruct) -> AsyncIterator[bytes]:
        self.calls += 1
        return self._lines()

    async def _lines(self) -> AsyncIterator[bytes]:
        yield b"a line\n"

    async def close(self) -> None:
        pass


def uid_of(i: int) -> str:
    return f"00000000-0000-4000-8000-{i:012d}"


def pods_body(count: int) -> bytes:
    spec = {"containers": [{"name": "main", "image": "busybox"}]}
    pods = [{"metadata": {"name": f"p{i}", "uid": uid_of(i)}, "spec": spec} for i in range(count)]
    return json.dumps(pods).encode()


def create_body(change: Callable[[dict[str, Any]], None]) -> bytes:
    data = json.loads(body("create_v05_example.json"))
    change(data)
    return json.dumps(data).encode()


async def plugin_client(
    aiohttp_client: AiohttpClient, backend: Any, **options: Any
) -> tuple[Client, Metrics]:
    metrics = Metrics(process=False)
    server = PluginServer(backend, ServerOptions(**options), metrics)
    return await aiohttp_client(server.app()), metrics


async def text_of(response: Any) -> str:
    text: str = await response.text()
    assert "\n" not in text and "Traceback" not in text
    return text


# --- cross-site and DNS-rebinding requests (defect 1) ---------------------------------------


async def test_a_cross_site_simple_post_cannot_create_a_pod(
    aiohttp_client: AiohttpClient,
) -> None:
    """The attack of the issue: a page posts text/plain (no CORS preflight) to loopback."""
    backend = QuietBackend()
    client, _ = await plugin_client(aiohttp_client, backend)
    attack = create_body(
        lambda d: d["pod"]["spec"]["containers"][0].update(command=["sh", "-c", "id > /tmp/x"])
    )
    response = await client.post(
        "/create", data=attack, headers={"Content-Type": "text/plain", "Origin": EVIL}
    )
    assert response.status == 403
    assert await text_of(response) == (
        "origin: requests from web pages (with an Origin header) are refused"
    )
    assert backend.calls == 0


@pytest.mark.parametrize(("method", "path", "valid"), ROUTES)
@pytest.mark.parametrize("origin", [EVIL, "null", "http://127.0.0.1:4000"])
async def test_every_plugin_route_refuses_web_pages(
    aiohttp_client: AiohttpClient, method: str, path: str, valid: str, origin: str
) -> None:
    backend = QuietBackend()
    client, _ = await plugin_client(aiohttp_client, backend)
    headers = INTERLINK | {"Origin": origin}
    response = await client.request(method, path, data=body(valid), headers=headers)
    assert response.status == 403
    assert (await text_of(response)).startswith("origin: requests from web pages")
    assert backend.calls == 0


@pytest.mark.parametrize(("method", "path", "valid"), ROUTES)
@pytest.mark.parametrize("host", ["evil.example", "evil.example:{port}", "127.0.0.1:1", "[::1"])
async def test_every_plugin_route_refuses_another_host_name(
    aiohttp_client: AiohttpClient, method: str, path: str, valid: str, host: str
) -> None:
    """DNS rebinding: the page's own name resolves to 127.0.0.1, the browser sends that name."""
    backend = QuietBackend()
    client, _ = await plugin_client(aiohttp_client, backend)
    port = client.port
    headers = INTERLINK | {"Host": host.format(port=port)}
    response = await client.request(method, path, data=body(valid), headers=headers)
    assert response.status == 421
    assert await text_of(response) == (
        f"host: Host {host.format(port=port)!r} does not name this gateway; "
        f"use 127.0.0.1:{port} or localhost:{port}"
    )
    assert backend.calls == 0


@pytest.mark.parametrize(("method", "path", "valid"), ROUTES)
async def test_interlink_and_curl_host_names_are_served(
    aiohttp_client: AiohttpClient, method: str, path: str, valid: str
) -> None:
    client, _ = await plugin_client(aiohttp_client, QuietBackend())
    for host in (f"127.0.0.1:{client.port}", f"localhost:{client.port}"):
        headers = INTERLINK | {"Host": host}
        response = await client.request(method, path, data=body(valid), headers=headers)
        assert response.status == 200, await response.text()


async def test_a_unix_socket_serves_the_names_interlink_and_curl_send(tmp_path: Any) -> None:
    socket_path = tmp_path / "plugin.sock"
    task, _, stop = await start_serve(
        FakeBackend(), loopback_options(listen=ListenAddress(path=socket_path))
    )
    connector = UnixConnector(path=str(socket_path))
    async with ClientSession(connector=connector, headers=INTERLINK) as session:
        for host, status in [("unix", 200), ("localhost", 200), ("evil.example", 421)]:
            response = await session.get("http://unix/status", data=b"[]", headers={"Host": host})
            assert response.status == status, await response.text()
    stop.set()
    await task


@pytest.mark.parametrize(
    ("host", "sockname", "local"),
    [
        ("127.0.0.1:4000", ("127.0.0.1", 4000), True),
        ("localhost:4000", ("127.0.0.1", 4000), True),
        ("LocalHost:4000", ("127.0.0.1", 4000), True),
        ("localhost", ("127.0.0.1", 80), True),
        ("localhost", ("127.0.0.1", 4000), False),
        ("localhost:4001", ("127.0.0.1", 4000), False),
        ("localhost.:4000", ("127.0.0.1", 4000), False),
        ("evil.example:4000", ("127.0.0.1", 4000), False),
        ("127.0.0.2:4000", ("127.0.0.1", 4000), False),
        ("[::1]:4000", ("::1", 4000, 0, 0), True),
        ("[0:0::1]:4000", ("::1", 4000, 0, 0), True),
        ("localhost:4000", ("::1", 4000, 0, 0), True),
        ("127.0.0.1:4000", ("::1", 4000, 0, 0), False),
        ("10.0.0.5:4001", ("10.0.0.5", 4001), True),
        ("localhost:4001", ("10.0.0.5", 4001), False),
        ("10.0.0.5:4001", ("::ffff:10.0.0.5", 4001, 0, 0), True),
        ("unix", "/run/dmsgw/plugin.sock", True),
        ("localhost", "/run/dmsgw/plugin.sock", True),
        ("evil.example", "/run/dmsgw/plugin.sock", False),
        ("", ("127.0.0.1", 4000), False),
        ("[::1", ("::1", 4000, 0, 0), False),
        ("[::1]x", ("::1", 4000, 0, 0), False),
        ("127.0.0.1:http", ("127.0.0.1", 4000), False),
        ("127.0.0.1:4000:1", ("127.0.0.1", 4000), False),
        ("127.0.0.1:4000", None, False),
    ],
)
def test_which_host_names_are_local(host: str, sockname: object, local: bool) -> None:
    assert host_is_local(host, sockname) is local


@pytest.mark.parametrize(("method", "path", "valid"), ROUTES)
@pytest.mark.parametrize(
    ("content_type", "shown"),
    [
        ("text/plain", "'text/plain'"),
        ("application/x-www-form-urlencoded", "'application/x-www-form-urlencoded'"),
        ("multipart/form-data; boundary=x", "'multipart/form-data'"),
        ("application/octet-stream", "'application/octet-stream'"),
        (None, ""),
    ],
)
async def test_every_plugin_route_takes_only_json_bodies(
    aiohttp_client: AiohttpClient,
    method: str,
    path: str,
    valid: str,
    content_type: str | None,
    shown: str,
) -> None:
    backend = QuietBackend()
    client, _ = await plugin_client(aiohttp_client, backend)
    if content_type is None:
        response = await client.request(
            method, path, data=body(valid), skip_auto_headers=["Content-Type"]
        )
        expected = "content-type: send the body as Content-Type: application/json"
    else:
        headers = {"Content-Type": content_type}
        response = await client.request(method, path, data=body(valid), headers=headers)
        expected = f"content-type: send the body as application/json, not {shown}"
    assert response.status == 415
    assert await text_of(response) == expected
    assert backend.calls == 0


@pytest.mark.parametrize(
    "content_type", ["application/json; charset=utf-8", "Application/JSON", "application/json;"]
)
async def test_json_with_parameters_is_json(
    aiohttp_client: AiohttpClient, content_type: str
) -> None:
    client, _ = await plugin_client(aiohttp_client, QuietBackend())
    headers = {"Content-Type": content_type}
    response = await client.post("/create", data=body("create_v05_example.json"), headers=headers)
    assert response.status == 200


async def test_the_operator_port_refuses_web_pages_and_other_host_names(
    aiohttp_client: AiohttpClient,
) -> None:
    health = Health()
    health.serving(QuietBackend())
    client = await aiohttp_client(operator_app(health, Metrics(process=False)))
    for path in OPERATOR_ROUTES:
        assert (await client.get(path)).status == 200
        refused = await client.get(path, headers={"Origin": EVIL})
        assert refused.status == 403
        assert (await text_of(refused)).startswith("origin: requests from web pages")
        rebound = await client.get(path, headers={"Host": f"evil.example:{client.port}"})
        assert rebound.status == 421
        assert (await text_of(rebound)).startswith("host: Host 'evil.example:")


async def test_metrics_off_loopback_need_the_token_and_the_probes_do_not(
    aiohttp_client: AiohttpClient,
) -> None:
    options = ServerOptions(
        operator_listen=ListenAddress.parse("0.0.0.0:4001"), operator_token=TOKEN
    )
    assert options.metrics_token == TOKEN
    health = Health()
    health.serving(QuietBackend())
    app = operator_app(health, Metrics(process=False), metrics_token=options.metrics_token)
    client = await aiohttp_client(app)
    refused = await client.get("/metrics")
    assert refused.status == 401
    assert refused.headers["WWW-Authenticate"] == "Bearer"
    wrong = await client.get("/metrics", headers={"Authorization": "Bearer nope"})
    assert await text_of(wrong) == "authorization: wrong bearer token"
    good = {"Authorization": f"Bearer {TOKEN}", "Host": "prometheus.scrape.target:4001"}
    assert (await client.get("/metrics", headers=good)).status == 200
    for probe in ("/healthz", "/readyz"):
        assert (await client.get(probe)).status == 200  # kubelet sends no token


async def test_the_plugin_api_on_a_unix_socket_never_asks_for_a_token(
    aiohttp_client: AiohttpClient, tmp_path: Path
) -> None:
    """interLink sends no token: with one configured (for the operator port, or by mistake),
    a plugin API on a unix socket, whose mode is its credential, still answers it (issue 29)."""
    socket_path = ListenAddress.parse(f"unix://{tmp_path}/plugin.sock")
    options = ServerOptions(listen=socket_path, token=TOKEN, operator_token="op-token")
    assert (options.plugin_token, options.metrics_token) == (None, None)
    client, _ = await plugin_client(aiohttp_client, QuietBackend(), listen=socket_path, token=TOKEN)
    assert (await client.get("/status", data=b"[]", headers=INTERLINK)).status == 200
    on_tcp, _ = await plugin_client(
        aiohttp_client, QuietBackend(), listen=ListenAddress.parse("0.0.0.0:0"), token=TOKEN
    )
    assert (await on_tcp.get("/status", data=b"[]", headers=INTERLINK)).status == 401


async def test_a_token_vouches_for_any_host_name(aiohttp_client: AiohttpClient) -> None:
    """Behind a proxy that adds the token, Host is the proxy's name: the token is checked."""
    client, _ = await plugin_client(
        aiohttp_client, QuietBackend(), listen=ListenAddress.parse("0.0.0.0:0"), token=TOKEN
    )
    headers = INTERLINK | {"Host": "gateway.example", "Authorization": f"Bearer {TOKEN}"}
    assert (await client.get("/status", data=b"[]", headers=headers)).status == 200
    crossing = headers | {"Origin": EVIL}
    assert (await client.get("/status", data=b"[]", headers=crossing)).status == 403


async def test_no_token_in_answers_metrics_or_logs(
    aiohttp_client: AiohttpClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    metrics = Metrics(process=False)
    server = PluginServer(
        QuietBackend(),
        ServerOptions(listen=ListenAddress.parse("0.0.0.0:0"), token=TOKEN),
        metrics,
    )
    client = await aiohttp_client(server.app())
    health = Health()
    operator = await aiohttp_client(operator_app(health, metrics, metrics_token=TOKEN))
    answers = []
    for auth in ("", "Bearer wrong", f"Bearer {TOKEN}x", f"Basic {TOKEN}", f"Bearer {TOKEN}"):
        headers = INTERLINK | ({"Authorization": auth} if auth else {})
        for method, path, valid in ROUTES:
            response = await client.request(method, path, data=body(valid), headers=headers)
            answers.append(await response.text())
        for path in OPERATOR_ROUTES:
            answers.append(await (await operator.get(path, headers=headers)).text())
    metrics_text = await (
        await operator.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    ).text()
    assert "dmsgw_plugin_requests_total" in metrics_text
    for text in [*answers, metrics_text, caplog.text]:
        assert TOKEN not in text


# --- what one request may cost (defect 2) ------------------------------------------------------


async def test_thousands_of_unknown_pods_cost_linear_work(
    aiohttp_client: AiohttpClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each unknown pod used to re-read the whole body: 1,000 pods took 21 s. Count the pods
    read (each checks the pod's identity: once as the body is read, once as the backend
    reads the unknown pod whole), and stop a quadratic run early."""
    pods = 3_000
    checks = 0
    check = parsing._check_identity

    def counting(meta: Any, root: str) -> None:
        nonlocal checks
        checks += 1
        assert checks <= 3 * pods, "the body is read again for every pod"
        check(meta, root)

    monkeypatch.setattr(parsing, "_check_identity", counting)
    client, _ = await plugin_client(aiohttp_client, FakeBackend())  # asks ref.pod() of each
    response = await client.get("/status", data=pods_body(pods), headers=INTERLINK)
    assert response.status == 200, await response.text()
    statuses = await response.json()
    assert [s["UID"] for s in statuses] == [uid_of(i) for i in range(pods)]
    assert checks == 2 * pods


async def test_a_status_body_naming_too_many_pods_is_413_naming_the_limit(
    aiohttp_client: AiohttpClient,
) -> None:
    backend = QuietBackend()
    client, _ = await plugin_client(aiohttp_client, backend)
    limit = parsing.MAX_PODS_PER_REQUEST
    response = await client.get("/status", data=pods_body(limit + 1), headers=INTERLINK)
    assert response.status == 413
    assert await text_of(response) == (
        f"body: names more than {limit} pods; one request may name at most {limit}"
    )
    assert backend.calls == 0


async def test_reading_a_huge_status_body_keeps_to_the_deadline(
    aiohttp_client: AiohttpClient,
) -> None:
    """Reading the body is part of the request: it is cancelled with it, and answered 503
    long before interLink gives up, instead of holding the event loop to the end."""
    backend = QuietBackend()
    client, _ = await plugin_client(aiohttp_client, backend, deadline_s=0.001)
    response = await client.get("/status", data=pods_body(10_000), headers=INTERLINK)
    assert response.status == 503
    assert (await text_of(response)).startswith(
        "status: no answer within the gateway's 0.001 s deadline"
    )
    assert backend.calls == 0


# --- pods that could only fail later (defects 5 and 6) -------------------------------------


async def test_a_pod_without_containers_is_refused_at_create(
    aiohttp_client: AiohttpClient,
) -> None:
    backend = QuietBackend()
    client, _ = await plugin_client(aiohttp_client, backend)

    def no_containers(data: dict[str, Any]) -> None:
        data["pod"]["spec"]["containers"] = []

    for raw in (create_body(no_containers), json.dumps([json.loads(create_body(no_containers))])):
        response = await client.post("/create", data=raw, headers=INTERLINK)
        assert response.status == 400
        assert (await text_of(response)).endswith(
            "pod.spec.containers: a pod needs at least one container"
        )
    assert backend.calls == 0


@pytest.mark.parametrize("uid", ["../..", "a; id > /tmp/x", "$(id)", "pod-1", UID + "0"])
async def test_a_uid_that_is_not_a_uuid_is_refused_at_create(
    aiohttp_client: AiohttpClient, uid: str
) -> None:
    backend = QuietBackend()
    client, _ = await plugin_client(aiohttp_client, backend)
    raw = create_body(lambda d: d["pod"]["metadata"].update(uid=uid))
    response = await client.post("/create", data=raw, headers=INTERLINK)
    assert response.status == 400
    assert (await text_of(response)).startswith(
        f"pod.metadata.uid: {json.dumps(uid)} is not a UUID"
    )
    assert backend.calls == 0


# --- clients that go away or never finish (defect 7) ---------------------------------------


class _Requests(logging.Handler):
    """Wakes a test when the plugin server has logged a request."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []
        self.logged = asyncio.Event()

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)
        if hasattr(record, "status"):
            self.logged.set()


@pytest.fixture
def requests_logged() -> Any:
    handler = _Requests()
    logger = logging.getLogger("dmsgw.plugin")
    logger.addHandler(handler)
    previous = logger.level
    logger.setLevel(logging.DEBUG)
    yield handler
    logger.removeHandler(handler)
    logger.setLevel(previous)


async def _send_part_of_a_body(client: Client) -> tuple[asyncio.StreamReader, Any]:
    reader, writer = await asyncio.open_connection(client.host, client.port)
    writer.write(
        f"POST /create HTTP/1.1\r\nHost: {client.host}:{client.port}\r\n"
        'Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"pod":'.encode()
    )
    await writer.drain()
    return reader, writer


async def test_a_client_that_goes_away_mid_body_is_not_a_server_error(
    aiohttp_client: AiohttpClient, requests_logged: _Requests
) -> None:
    backend = QuietBackend()
    client, metrics = await plugin_client(aiohttp_client, backend)
    _, writer = await _send_part_of_a_body(client)
    writer.close()
    await writer.wait_closed()
    await requests_logged.logged.wait()
    [record] = [r for r in requests_logged.records if hasattr(r, "status")]
    assert (record.levelname, record.status, record.exc_info) == ("INFO", CLIENT_GONE, None)
    assert not [r for r in requests_logged.records if r.levelno >= logging.ERROR]
    text = metrics.render().decode()
    counted = f'{{code="{CLIENT_GONE}",method="POST",route="/create"}} 1.0'
    assert f"dmsgw_plugin_requests_total{counted}" in text
    assert 'code="500"' not in text
    assert backend.calls == 0


async def test_a_body_that_never_arrives_is_408(aiohttp_client: AiohttpClient) -> None:
    backend = QuietBackend()
    client, _ = await plugin_client(aiohttp_client, backend, body_timeout_s=0.05)
    reader, writer = await _send_part_of_a_body(client)
    try:
        async with asyncio.timeout(30):
            head = await reader.readuntil(b"\r\n\r\n")
            length = next(
                int(line.split(b":")[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length:")
            )
            text = (await reader.readexactly(length)).decode()
    finally:
        writer.close()
    assert head.startswith(b"HTTP/1.1 408 ")
    assert b"Connection: close" in head
    assert text == "body: not received within 0.05 s"
    assert backend.calls == 0


# --- the event loop's stalls ---------------------------------------------------------------


def test_stalls_keep_the_last_and_the_longest() -> None:
    metrics = Metrics(process=False)
    stalls = LoopStalls(metrics)
    for late in (0.01, 0.5, -0.002, 0.02):
        stalls.observe(late)
    assert (stalls.last_s, stalls.longest_s) == (0.02, 0.5)
    text = metrics.render().decode().splitlines()
    assert "dmsgw_event_loop_stall_seconds 0.02" in text
    assert "dmsgw_event_loop_stall_max_seconds 0.5" in text


class _ClockStopped(Exception):  # noqa: N818 (an event of the test, not an error)
    """The fake clock has no more readings: the watch ends."""


async def test_the_watch_measures_lateness_on_its_clock() -> None:
    stalls = LoopStalls(Metrics(process=False))
    readings = iter([10.0, 10.3, 11.0, 11.05])  # each probe: when it slept, when it woke

    def clock() -> float:
        try:
            return next(readings)
        except StopIteration:
            raise _ClockStopped from None

    with pytest.raises(_ClockStopped):
        await stalls.watch(0.0, clock=clock)
    assert stalls.longest_s == pytest.approx(0.3)
    assert stalls.last_s == pytest.approx(0.05)


async def test_a_blocked_event_loop_shows_on_the_gauge() -> None:
    """The loop is blocked on purpose (the stimulus, not a wait): the watch cannot wake until
    it is free again, so the stall it records is at least the block minus its period."""

    class Recorded(LoopStalls):
        def __init__(self, metrics: Metrics) -> None:
            super().__init__(metrics)
            self.seen = asyncio.Event()

        def observe(self, late_s: float) -> None:
            super().observe(late_s)
            self.seen.set()

    stalls = Recorded(Metrics(process=False))
    watch = asyncio.ensure_future(stalls.watch(0.05))
    await asyncio.sleep(0)  # the watch now sleeps, due 0.05 s from now
    time.sleep(0.3)
    stalls.seen.clear()
    await stalls.seen.wait()
    watch.cancel()
    assert stalls.longest_s >= 0.25


async def test_serve_exposes_the_stall_gauge() -> None:
    task, info, stop = await start_serve(FakeBackend(), loopback_options())
    async with ClientSession() as session:
        text = await (await session.get(info.metrics)).text()
    stop.set()
    await task
    assert "dmsgw_event_loop_stall_max_seconds" in text
    assert "dmsgw_event_loop_stall_seconds" in text


# --- fuzzing every route --------------------------------------------------------------------

_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=10),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)


@st.composite
def _mutated(draw: st.DrawFn, valid: str) -> bytes:
    """A body interLink would send, with one value replaced or removed somewhere inside."""
    document = json.loads(body(valid))
    parent: Any = None
    key: Any = None
    node: Any = document
    for _ in range(draw(st.integers(0, 8))):
        if not isinstance(node, dict | list) or not node:
            break
        key = draw(st.sampled_from(list(node) if isinstance(node, dict) else range(len(node))))
        parent, node = node, node[key]
    if parent is None:
        return json.dumps(draw(_json_values)).encode()
    if draw(st.booleans()):
        del parent[key]
    else:
        parent[key] = draw(_json_values)
    return json.dumps(document).encode()


_CONTENT_TYPES = st.sampled_from(
    ["application/json", "application/json; charset=utf-8", "APPLICATION/JSON", "text/plain",
     "application/x-www-form-urlencoded", "application/jsonx", "", "multipart/form-data"]
)  # fmt: skip
_HOSTS = st.sampled_from(
    ["{local}", "localhost:{port}", "evil.example", "evil.example:{port}", "127.0.0.1",
     "[::1]:{port}", "localhost:{port}0", "[", ":{port}", "x" * 300]
)  # fmt: skip


def _expected(origin: str | None, host: str, port: int, content_type: str) -> int | None:
    """What the front door must answer, or ``None`` if the request gets past it."""
    if origin is not None:
        return 403
    if host not in (f"127.0.0.1:{port}", f"localhost:{port}"):
        return 421
    if content_type.split(";")[0].strip().lower() != "application/json":
        return 415
    return None


@pytest.fixture
async def fuzzed(aiohttp_client: AiohttpClient) -> tuple[Client, Client]:
    backend = QuietBackend()
    metrics = Metrics(process=False)
    server = PluginServer(backend, ServerOptions(), metrics)
    health = Health()
    health.serving(backend)
    return (
        await aiohttp_client(server.app()),
        await aiohttp_client(operator_app(health, metrics)),
    )


@pytest.mark.parametrize(("method", "path", "valid"), ROUTES)
@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
async def test_fuzzed_requests_never_get_a_server_error(
    fuzzed: tuple[Client, Client], method: str, path: str, valid: str, data: st.DataObject
) -> None:
    client, operator = fuzzed
    raw = data.draw(st.one_of(_mutated(valid), st.binary(max_size=200)), label="body")
    content_type, origin, host = "application/json", None, f"127.0.0.1:{client.port}"
    if data.draw(st.booleans(), label="headers other than interLink's"):
        content_type = data.draw(_CONTENT_TYPES, label="content_type")
        origin = data.draw(st.none() | st.sampled_from([EVIL, "null"]), label="origin")
        host = data.draw(_HOSTS, label="host").format(
            local=f"127.0.0.1:{client.port}", port=client.port
        )
    headers = {"Content-Type": content_type, "Host": host}
    if origin is not None:
        headers["Origin"] = origin
    async with asyncio.timeout(30):  # every answer in bounded time
        response = await client.request(method, path, data=raw, headers=headers)
        text = await response.text()
    assert response.status < 500, text
    assert "Traceback" not in text
    refused = _expected(origin, host, client.port, content_type)
    if refused is not None:
        assert response.status == refused, text
    if response.status != 200:
        assert response.content_type == "text/plain" and "\n" not in text
    async with asyncio.timeout(30):  # and the gateway is still healthy
        health = await operator.get("/healthz")
        assert health.status == 200 and (await health.json())["ready"] is True
