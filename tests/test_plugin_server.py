"""The plugin API as interLink 0.6.2 calls it, over a fake backend.

Each route gets the bodies interLink sends (``tests/data/interlink``: the 0.5+ object and the
0.4 list on ``/create``, JSON bodies on GET), and each answer is checked the way interLink
reads it: exactly 200 with the Go type's JSON, or a status code with one line of text.
Synchronisation uses events the fake backend sets, never sleeps.
"""

from __future__ import annotations

import asyncio
import collections
import json
import os
import shutil
import stat
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, cast

import pytest
from aiohttp import ClientSession, UnixConnector, web
from aiohttp.test_utils import TestClient

from dmsgw.actors.turns import PER_TURN
from dmsgw.errors import DmsgwError
from dmsgw.interlink.plugin_errors import BackendUnavailable
from dmsgw.interlink.server import (
    SESSION_HEADER,
    AddressError,
    Health,
    ListenAddress,
    Metrics,
    MetricsError,
    PluginServer,
    ServeError,
    ServerOptions,
    operator_app,
    routes,
)
from tests.support.fake_backend import (
    INTERLINK,
    FakeBackend,
    body,
    loopback_options,
    start_serve,
)
from tests.support.pod_bodies import UID

QUICKSTART_UID = "1df0a37e-a29b-426b-9b14-43f95dfc5a2f"
UNKNOWN_UID = "99999999-9999-4999-8999-999999999999"
TEXT = "text/plain"


@pytest.fixture
def backend() -> FakeBackend:
    fake = FakeBackend()
    fake.release.set()
    return fake


Client = TestClient[web.Request, web.Application]
MakeClient = Callable[..., Awaitable[Client]]


@pytest.fixture
def make_client(
    backend: FakeBackend, aiohttp_client: Callable[..., Awaitable[Client]]
) -> MakeClient:
    async def make(metrics: Metrics | None = None, **options: Any) -> Client:
        server = PluginServer(backend, ServerOptions(**options), metrics or Metrics())
        return await aiohttp_client(server.app(), headers=INTERLINK)

    return make


def logs_body(*, follow: bool, uid: str = UID) -> bytes:
    request = json.loads(body("logs_request.json"))
    request["PodUID"] = uid
    request["Opts"]["Follow"] = follow
    return json.dumps(request).encode()


async def one_line(response: Any) -> str:
    text: str = await response.text()
    assert response.content_type == TEXT
    assert "\n" not in text and "Traceback" not in text
    return text


# --- /create ---------------------------------------------------------------------------------


async def test_create_object_body(make_client: MakeClient, backend: FakeBackend) -> None:
    client = await make_client()
    response = await client.post("/create", data=body("create_v05_example.json"))
    assert response.status == 200
    assert response.content_type == "application/json"
    assert await response.json() == {"PodUID": UID, "PodJID": "job-0b8c6f6e"}
    assert [[p.pod.metadata.uid for p in call] for call in backend.created] == [[UID]]


async def test_create_bodies_that_arrive_together_are_validated_a_few_per_turn(
    backend: FakeBackend, turn: Callable[[], int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Validating a pod is heavy, and interLink may send many creates at once (after a
    restart of either side): each ``/create`` body waits for a turn of the loop's gate."""
    server = PluginServer(backend, ServerOptions(), Metrics(process=False))
    raw = body("create_v05_example.json")

    async def read_at_once(_: web.Request) -> bytes:
        return raw  # every create reaches its validation in the same turn

    validated_in: list[int] = []
    parse = routes.parse_create_body

    def counted(data: bytes) -> Any:
        validated_in.append(turn())
        return parse(data)

    monkeypatch.setattr(server, "_body", read_at_once)
    monkeypatch.setattr(routes, "parse_create_body", counted)
    request = cast(web.Request, None)  # the handler reads nothing else of it
    answers = await asyncio.gather(*(server._create(request) for _ in range(3 * PER_TURN)))
    assert {answer.status for answer in answers} == {200}
    assert max(collections.Counter(validated_in).values()) == PER_TURN


async def test_create_list_body_answers_one_object(
    make_client: MakeClient, backend: FakeBackend
) -> None:
    client = await make_client()
    response = await client.post("/create", data=body("create_v04_quickstart.json"))
    assert response.status == 200
    assert await response.json() == {"PodUID": QUICKSTART_UID, "PodJID": "job-1df0a37e"}


async def test_create_list_of_two_answers_the_first(
    make_client: MakeClient, backend: FakeBackend
) -> None:
    pods = [json.loads(body("create_v05_example.json")) for _ in range(2)]
    pods[1]["pod"]["metadata"]["uid"] = UNKNOWN_UID
    client = await make_client()
    response = await client.post("/create", data=json.dumps(pods))
    assert await response.json() == {"PodUID": UID, "PodJID": "job-0b8c6f6e"}
    assert [p.pod.metadata.uid for p in backend.created[0]] == [UID, UNKNOWN_UID]


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"", "body: empty, expected JSON"),
        (b"{not json", "body: not JSON: Expecting property name enclosed in double quotes"),
        (b"[]", "body: the list of pods to create is empty"),
        (b'"pod"', "body: expected a JSON object (RetrievedPodData) or a list of them"),
        (b'{"container": []}', "pod: field required"),
        (b'{"pod": {"metadata": {"name": "x"}}}', "pod.metadata.uid: field required"),
    ],
)
async def test_create_bad_bodies_are_400_naming_the_problem(
    make_client: MakeClient, backend: FakeBackend, raw: bytes, message: str
) -> None:
    client = await make_client()
    response = await client.post("/create", data=raw)
    assert response.status == 400
    assert (await one_line(response)).startswith(message)
    assert backend.created == []


async def test_create_outliving_the_deadline_is_503_and_cancelled(
    make_client: MakeClient, backend: FakeBackend
) -> None:
    backend.hang = True
    client = await make_client(deadline_s=0.05)
    response = await client.post("/create", data=body("create_v05_example.json"))
    assert response.status == 503
    text = await one_line(response)
    assert text.startswith("create: no answer within the gateway's 0.05 s deadline")
    assert backend.cancelled.is_set()


async def test_backend_timeout_is_not_mistaken_for_the_deadline(
    make_client: MakeClient, backend: FakeBackend
) -> None:
    backend.error = TimeoutError()
    client = await make_client()
    response = await client.post("/create", data=body("create_v05_example.json"))
    assert response.status == 500
    assert await one_line(response) == "internal error (TimeoutError); see the gateway's log"


async def test_backend_errors_are_500_with_one_line(
    make_client: MakeClient, backend: FakeBackend
) -> None:
    backend.error = DmsgwError("store: disk full\n(while writing pod 0b8c6f6e)")
    client = await make_client()
    response = await client.post("/create", data=body("create_v05_example.json"))
    assert response.status == 500
    assert await one_line(response) == "store: disk full (while writing pod 0b8c6f6e)"


async def test_bugs_are_500_without_a_traceback(
    make_client: MakeClient, backend: FakeBackend, caplog: pytest.LogCaptureFixture
) -> None:
    backend.error = KeyError("secret internals")
    client = await make_client()
    response = await client.post("/delete", data=body("delete_request.json"))
    assert response.status == 500
    assert await one_line(response) == "internal error (KeyError); see the gateway's log"
    assert any(record.exc_info for record in caplog.records)  # the log keeps the traceback


# --- /delete ---------------------------------------------------------------------------------


async def test_delete(make_client: MakeClient, backend: FakeBackend) -> None:
    client = await make_client()
    response = await client.post("/delete", data=body("delete_request.json"))
    assert response.status == 200
    assert UID in await response.text()
    assert backend.deleted == [UID]


async def test_delete_needs_a_pod(make_client: MakeClient) -> None:
    client = await make_client()
    response = await client.post("/delete", data=b"[]")
    assert response.status == 400
    assert await one_line(response) == "body: expected a JSON object (a Pod), got an array"


# --- /status and the ping ------------------------------------------------------------------


@pytest.mark.parametrize("method", ["GET", "POST"])
async def test_status_with_a_json_body(make_client: MakeClient, method: str) -> None:
    client = await make_client()
    response = await client.request(method, "/status", data=body("status_request.json"))
    assert response.status == 200
    [status] = await response.json()
    assert status["UID"] == UID
    assert status["JID"] == "job-0b8c6f6e"
    assert status["containers"][0]["state"]["waiting"]["reason"] == "ContainerCreating"


async def test_status_of_an_unknown_uid_is_the_backends_answer(make_client: MakeClient) -> None:
    pods = json.loads(body("status_request.json"))
    pods[0]["metadata"]["uid"] = UNKNOWN_UID
    client = await make_client()
    response = await client.request("GET", "/status", data=json.dumps(pods))
    assert response.status == 200
    [status] = await response.json()
    assert status["UID"] == UNKNOWN_UID
    assert status["containers"][0]["state"]["terminated"]["exitCode"] == 404


@pytest.mark.parametrize("method", ["GET", "POST"])
async def test_ping_answers_capacity(make_client: MakeClient, method: str) -> None:
    client = await make_client()
    response = await client.request(method, "/status", data=b"[]")
    assert response.status == 200
    assert await response.json() == {
        "status": "ok",
        "resources": {"cpu": "8", "memory": "16Gi", "pods": "100"},
    }


async def test_ping_when_the_dms_is_unreachable_is_503(
    make_client: MakeClient, backend: FakeBackend
) -> None:
    backend.ping_error = BackendUnavailable("DMS http://127.0.0.1:9999 unreachable")
    client = await make_client()
    response = await client.request("GET", "/status", data=b"[]")
    assert response.status == 503
    assert await one_line(response) == "not ready: DMS http://127.0.0.1:9999 unreachable"


async def test_status_bad_body(make_client: MakeClient) -> None:
    client = await make_client()
    response = await client.request("GET", "/status", data=b'[{"metadata": {"name": "x"}}]')
    assert response.status == 400
    assert await one_line(response) == "[0].metadata.uid: field required"


# --- /getLogs ------------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["GET", "POST"])
async def test_logs(make_client: MakeClient, method: str, backend: FakeBackend) -> None:
    client = await make_client()
    response = await client.request(method, "/getLogs", data=logs_body(follow=False))
    assert response.status == 200
    assert response.content_type == TEXT
    assert await response.read() == b"line 1\n"
    assert backend.logs_closed.is_set()


async def test_logs_of_an_unknown_pod_are_404(make_client: MakeClient) -> None:
    client = await make_client()
    for follow in (False, True):
        response = await client.get("/getLogs", data=logs_body(follow=follow, uid=UNKNOWN_UID))
        assert response.status == 404
        assert await one_line(response) == f"no pod with uid {UNKNOWN_UID}"


async def test_logs_follow_streams_each_chunk_before_the_end(
    make_client: MakeClient, backend: FakeBackend
) -> None:
    client = await make_client()
    response = await client.get("/getLogs", data=logs_body(follow=True))
    assert response.status == 200
    assert await response.content.readexactly(7) == b"line 1\n"
    assert not backend.follow_gate.is_set()  # the backend is still holding the rest back
    backend.follow_gate.set()
    assert await response.content.read() == b"line 2\n"


async def test_logs_follow_ending_in_an_error_says_so_last(
    make_client: MakeClient, backend: FakeBackend
) -> None:
    backend.error = DmsgwError("DMS connection lost")
    backend.follow_gate.set()
    client = await make_client()
    response = await client.get("/getLogs", data=logs_body(follow=True))
    assert response.status == 200
    assert await response.read() == (
        b"line 1\nline 2\n\ndmsgw: log stream ended: DMS connection lost\n"
    )


async def test_logs_bad_body(make_client: MakeClient) -> None:
    client = await make_client()
    response = await client.get("/getLogs", data=b'{"PodUID": ""}')
    assert response.status == 400
    assert (await one_line(response)).startswith("PodUID: string should have at least 1")


# --- limits, methods, the session header ---------------------------------------------------


async def test_body_over_the_limit_is_413(make_client: MakeClient, backend: FakeBackend) -> None:
    client = await make_client(max_body_bytes=1024)
    response = await client.post("/create", data=b" " * 2048)
    assert response.status == 413
    assert await one_line(response) == "body: 2048 bytes is over the 1024-byte limit"

    async def chunked() -> AsyncIterator[bytes]:  # no Content-Length to check up front
        for _ in range(4):
            yield b" " * 512

    response = await client.post("/create", data=chunked())
    assert response.status == 413
    assert await one_line(response) == "body: over the 1024-byte limit"
    assert backend.created == []


async def test_wrong_method_and_path(make_client: MakeClient) -> None:
    metrics = Metrics(process=False)
    client = await make_client(metrics)
    response = await client.get("/create")
    assert response.status == 405
    assert response.headers["Allow"] == "POST"
    assert await one_line(response) == "405: Method Not Allowed"
    response = await client.request("HEAD", "/status")
    assert (response.status, response.headers["Allow"]) == (405, "GET,POST")
    response = await client.post("/pinglink", data=b"[]")
    assert response.status == 404
    assert await one_line(response) == "404: Not Found"
    response = await client.get("/nothing", headers={"Origin": "https://example.com"})
    assert response.status == 403  # the front door comes first, whatever the path
    text = metrics.render().decode()
    for line in [  # scans of random paths are one series, "unmatched"
        'dmsgw_plugin_requests_total{code="404",method="POST",route="unmatched"} 1.0',
        'dmsgw_plugin_requests_total{code="403",method="GET",route="unmatched"} 1.0',
        'dmsgw_plugin_requests_total{code="405",method="GET",route="unmatched"} 1.0',
    ]:
        assert line in text.splitlines()


async def test_every_request_is_logged_with_the_session(
    make_client: MakeClient, caplog: pytest.LogCaptureFixture
) -> None:
    client = await make_client()
    caplog.set_level("DEBUG", logger="dmsgw.plugin")
    headers = {SESSION_HEADER: "CreatePod#12345"}
    await client.post("/create", data=b"{}", headers=headers)
    await client.get("/status", data=b"[]", headers={SESSION_HEADER: "PingInterLink#7"})
    records = [r for r in caplog.records if r.name == "dmsgw.plugin"]
    assert [(r.getMessage(), r.session, r.levelname) for r in records] == [
        ("POST /create 400", "CreatePod#12345", "WARNING"),
        ("GET /status 200", "PingInterLink#7", "DEBUG"),
    ]
    assert records[0].error == "pod: field required"


# --- the bearer token ----------------------------------------------------------------------


def test_non_loopback_without_a_token_is_refused() -> None:
    with pytest.raises(ServeError, match=r"0\.0\.0\.0:4000, which is not loopback, needs a bearer"):
        ServerOptions(listen=ListenAddress.parse("0.0.0.0:4000"))
    ServerOptions(listen=ListenAddress.parse("0.0.0.0:4000"), token="s3cret-token")
    ServerOptions(listen=ListenAddress.parse("/tmp/dmsgw.sock"))


async def test_bearer_token_is_checked_on_every_request(make_client: MakeClient) -> None:
    client = await make_client(listen=ListenAddress.parse("0.0.0.0:0"), token="s3cret-token")
    for headers, expected in [
        ({}, "authorization: send the gateway's token as Authorization: Bearer"),
        ({"Authorization": "Basic czNjcmV0"}, "authorization: send the gateway's token"),
        ({"Authorization": "Bearer wrong"}, "authorization: wrong bearer token"),
    ]:
        for method, path in [("GET", "/status"), ("POST", "/create"), ("GET", "/getLogs")]:
            response = await client.request(method, path, data=b"[]", headers=headers)
            assert response.status == 401
            assert response.headers["WWW-Authenticate"] == "Bearer"
            assert (await one_line(response)).startswith(expected)
    good = {"Authorization": "Bearer s3cret-token"}
    assert (await client.get("/status", data=b"[]", headers=good)).status == 200


# --- options, addresses, metrics registry ---------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("4000", "127.0.0.1:4000"),
        ("localhost:4100", "127.0.0.1:4100"),
        ("http://127.0.0.1:4000", "127.0.0.1:4000"),
        ("[::1]:4000", "[::1]:4000"),
        ("0.0.0.0", "0.0.0.0:4000"),
        ("gateway.example:80", "gateway.example:80"),
        ("unix:///run/dmsgw/plugin.sock", "unix:///run/dmsgw/plugin.sock"),
        ("/run/dmsgw/plugin.sock", "unix:///run/dmsgw/plugin.sock"),
    ],
)
def test_listen_addresses(text: str, expected: str) -> None:
    assert str(ListenAddress.parse(text)) == expected


@pytest.mark.parametrize(
    ("text", "loopback"),
    [("127.0.0.1:1", True), ("[::1]:1", True), ("/x.sock", True), ("0.0.0.0:1", False),
     ("10.0.0.1:1", False), ("gateway.example:1", False)],
)  # fmt: skip
def test_loopback(text: str, loopback: bool) -> None:
    assert ListenAddress.parse(text).is_loopback is loopback


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty address"),
        ("::1:4000", "write an IPv6 address in brackets"),
        ("127.0.0.1:99999", "the port must be a number from 0 to 65535"),
        (":4000", "give a host"),
        ("http://127.0.0.1:4000/api", "an address has no path"),
        ("bad_host!:1", "is neither an IP address nor a host name"),
        ("unix://", "the unix socket path is empty"),
        ("/" + "x" * 200, "a unix socket path is at most 107 bytes long"),
    ],
)
def test_bad_listen_addresses(text: str, message: str) -> None:
    with pytest.raises(AddressError, match=message):
        ListenAddress.parse(text)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"deadline_s": 0}, "deadline_s must be above 0 and at most 110 s"),
        ({"deadline_s": 120}, "interLink waits 120 s"),
        ({"max_body_bytes": 0}, "max_body_bytes must be positive"),
        ({"shutdown_grace_s": -1}, "shutdown_grace_s cannot be negative"),
    ],
)
def test_bad_options(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ServeError, match=message):
        ServerOptions(**options)


def test_token_is_not_in_the_options_repr() -> None:
    assert "s3cret" not in repr(ServerOptions(token="s3cret-token"))


def test_metrics_registry_returns_the_same_metric_and_refuses_clashes() -> None:
    metrics = Metrics(process=False)
    pods = metrics.gauge("pods", "Pods by phase.", ("phase",))
    assert metrics.gauge("dmsgw_pods", "Pods by phase.", ("phase",)) is pods
    with pytest.raises(MetricsError, match=r"dmsgw_pods exists as a gauge with labels \['phase'\]"):
        metrics.counter("pods", "Pods.")
    with pytest.raises(MetricsError):
        metrics.gauge("pods", "Pods.", ("node",))


# --- the operator app ----------------------------------------------------------------------


async def test_metrics_count_requests_and_show_backend_metrics(
    make_client: MakeClient, aiohttp_client: Callable[..., Awaitable[Client]]
) -> None:
    metrics = Metrics()
    phases = metrics.gauge("pods", "Pods the gateway follows, by phase.", ("phase",))
    phases.labels("running").set(3)
    client = await make_client(metrics)
    await client.post("/create", data=body("create_v05_example.json"))
    await client.post("/create", data=b"{")
    await client.get("/status", data=b"[]")
    health = Health()
    operator = await aiohttp_client(operator_app(health, metrics))
    response = await operator.get("/metrics")
    assert response.status == 200
    assert response.content_type == TEXT
    text = await response.text()
    for line in [
        'dmsgw_plugin_requests_total{code="200",method="POST",route="/create"} 1.0',
        'dmsgw_plugin_requests_total{code="400",method="POST",route="/create"} 1.0',
        'dmsgw_plugin_requests_total{code="200",method="GET",route="/status"} 1.0',
        'dmsgw_plugin_request_duration_seconds_count{method="POST",route="/create"} 2.0',
        'dmsgw_plugin_requests_in_flight{route="/create"} 0.0',
        'dmsgw_pods{phase="running"} 3.0',
    ]:
        assert line in text.splitlines()
    assert "process_resident_memory_bytes" in text


async def test_healthz_and_readyz(
    backend: FakeBackend, aiohttp_client: Callable[..., Awaitable[Client]]
) -> None:
    health = Health()
    client = await aiohttp_client(operator_app(health, Metrics(process=False)))

    async def check(path: str, status: int) -> dict[str, Any]:
        response = await client.get(path)
        assert response.status == status
        report: dict[str, Any] = await response.json()
        return report

    starting = await check("/healthz", 200)
    assert starting["live"] is True and starting["ready"] is False
    assert starting["reason"] == "the gateway is starting"
    await check("/readyz", 503)
    health.serving(backend)
    serving = await check("/readyz", 200)
    assert (serving["status"], serving["ready"]) == ("serving", True)
    backend.ping_error = BackendUnavailable("DMS unreachable")
    down = await check("/healthz", 200)  # still live: a restart would not bring the DMS back
    assert (down["ready"], down["reason"]) == (False, "DMS unreachable")
    await check("/readyz", 503)


# --- Serve: start, drain, stop ---------------------------------------------------------------


async def test_serve_drains_in_flight_requests_then_closes_the_backend() -> None:
    backend = FakeBackend()
    task, info, stop = await start_serve(backend, loopback_options())
    async with ClientSession(headers=INTERLINK) as session:
        assert (await session.get(info.healthz)).status == 200
        create = asyncio.create_task(
            session.post(f"{info.plugin.url}/create", data=body("create_v05_example.json"))
        )
        logs = await session.get(f"{info.plugin.url}/getLogs", data=logs_body(follow=True))
        await backend.entered.wait()
        stop.set()
        # The follow stream ends when the server has begun to stop, with /create in flight.
        assert await logs.read() == b"line 1\n"
        assert not backend.closed and not create.done()
        backend.release.set()
        response = await create
        assert response.status == 200
        assert (await response.json())["PodUID"] == UID
    await task
    assert backend.closed


async def test_serve_ends_follow_streams_on_stop() -> None:
    backend = FakeBackend()
    task, info, stop = await start_serve(backend, loopback_options())
    async with ClientSession(headers=INTERLINK) as session:
        response = await session.get(f"{info.plugin.url}/getLogs", data=logs_body(follow=True))
        assert await response.content.readexactly(7) == b"line 1\n"
        stop.set()
        assert await response.content.read() == b""  # ended cleanly, not cut off
    await task
    assert backend.logs_closed.is_set() and backend.closed


async def test_serve_on_a_unix_socket(tmp_path: Path, backend: FakeBackend) -> None:
    socket_path = tmp_path / "plugin.sock"
    options = loopback_options(listen=ListenAddress(path=socket_path))
    task, info, stop = await start_serve(backend, options)
    assert info.plugin.path == socket_path
    connector = UnixConnector(path=str(socket_path))
    async with ClientSession(connector=connector, headers=INTERLINK) as session:
        response = await session.get("http://unix/status", data=b"[]")
        assert response.status == 200
    with pytest.raises(ServeError, match="another process is listening on"):
        await start_serve(FakeBackend(), options)
    stop.set()
    await task
    assert not socket_path.exists()


async def test_the_plugin_socket_is_its_owners_alone_whatever_the_umask(
    backend: FakeBackend,
) -> None:
    """The plugin API's default exposure: a unix socket of mode 0600, in a directory made
    0700 if missing. Under a permissive umask it used to be 0777, so any local user (and a
    pod sharing the host) could create and delete pods through it."""
    parent = Path(tempfile.mkdtemp(prefix="dmsgw-socket-"))
    parent.chmod(0o755)  # others may pass through: the socket's mode alone keeps them out
    socket_path = parent / "interlink" / "plugin.sock"
    previous = os.umask(0)
    try:
        task, _info, stop = await start_serve(
            backend, loopback_options(listen=ListenAddress(path=socket_path))
        )
    finally:
        os.umask(previous)
    try:
        assert stat.S_IMODE(socket_path.parent.stat().st_mode) == 0o700
        assert stat.S_IMODE(socket_path.stat().st_mode) == 0o600
        if os.geteuid() == 0:  # another user, where the socket's directory lets it pass
            socket_path.parent.chmod(0o711)
            connect = f"import socket; socket.socket(socket.AF_UNIX).connect({str(socket_path)!r})"
            other = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
            tried = await asyncio.create_subprocess_exec(
                *other, "/usr/bin/python3", "-I", "-c", connect, stderr=asyncio.subprocess.PIPE
            )
            _, err = await asyncio.wait_for(tried.communicate(), 30)
            assert tried.returncode != 0 and b"PermissionError" in err, err
    finally:
        stop.set()
        await task
        shutil.rmtree(parent, ignore_errors=True)


async def test_serve_refuses_an_address_in_use(backend: FakeBackend) -> None:
    task, info, stop = await start_serve(backend, loopback_options())
    taken = loopback_options(listen=info.plugin)
    with pytest.raises(ServeError, match=f"cannot listen on {info.plugin}: .*in use"):
        await start_serve(FakeBackend(), taken)
    stop.set()
    await task
