"""A pod's life when the world around it fails: the DMS forgets its deployment, the GPU catalog
is not known yet, the root supervisor gives up.

Over the in-memory DMS of :mod:`tests.support.gateway_fakes` (an injected clock, bounded waits
on the gateway's own state), and once over the embedded devnet, whose answers mirror the DMS's.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import ClientSession
from aiohttp.test_utils import TestClient, TestServer

from dmsgw.actors.supervision import Backoff, Intensity
from dmsgw.behaviors.node import DMSBehaviorError
from dmsgw.behaviors.resources import GPU
from dmsgw.clock import FixedClock
from dmsgw.devnet.devnet import Devnet
from dmsgw.devnet.handlers_deployment import NOT_FOUND, NOT_RUNNING, ORCHESTRATOR_NOT_FOUND
from dmsgw.interlink.app import start_backend
from dmsgw.interlink.capacity.resource_actor import Capacity, GpuCatalog, ResourceActor
from dmsgw.interlink.configuration.serve_config import load_config
from dmsgw.interlink.gateway import Gateway
from dmsgw.interlink.plugin_errors import BackendGaveUpError
from dmsgw.interlink.pods.pod_translation import Translator
from dmsgw.interlink.records.pod_record import DEPLOYMENT_LOST, INIT_CONTAINER_FAILED, Phase
from dmsgw.interlink.server import (
    ListenAddress,
    Metrics,
    PluginServer,
    Serve,
    ServeInfo,
    ServerOptions,
)
from dmsgw.interlink.state.pod_store import PodStore
from dmsgw.interlink.wire.bodies import PingResponse
from dmsgw.transport.rest import DMSError, DMSErrorKind, DMSTimeoutError, TransportError
from tests.support.devnet_gateways import gateway_config
from tests.support.gateway_fakes import (
    FAST,
    ROOMY,
    WAIT_S,
    FakeDMS,
    create,
    gateway_on,
    pod,
    poll,
    uid,
    until,
)

OWNER = "did:key:the-gateway"
P100 = GPU(vendor="NVIDIA", model="Tesla P100-PCIE-16GB", vram=16 << 30)
GPU_LIMITS = {"resources": {"limits": {"nunet.gpu.nvidia.tesla.p100.16gb": "1"}}}


@pytest.fixture
def dms(tmp_path: Path) -> FakeDMS:
    return FakeDMS(tmp_path / "logs", free=dataclasses.replace(ROOMY, gpus=(P100,)))


@pytest.fixture
async def backend(dms: FakeDMS, clock: FixedClock, tmp_path: Path) -> AsyncIterator[Gateway]:
    gateway = await gateway_on(dms, tmp_path / "state", owner=OWNER, clock=clock)
    yield gateway
    await gateway.close()


@pytest.fixture
async def client(backend: Gateway, tmp_path: Path) -> AsyncIterator[TestClient[Any, Any]]:
    """interLink's view of the backend: the plugin API over HTTP."""
    config = load_config(
        env={"DMSGW_DEVNET": "1", "DMSGW_STATE_PATH": str(tmp_path / "unused.sqlite3")}
    )
    server = PluginServer(backend, config.server_options(), Metrics(process=False))
    client = TestClient(
        TestServer(server.app(), host="127.0.0.1"), headers={"Content-Type": "application/json"}
    )
    await client.start_server()
    yield client
    await client.close()


def _logs_body(spec: dict[str, Any]) -> str:
    meta = spec["metadata"]
    return json.dumps(
        {
            "Namespace": meta["namespace"],
            "PodUID": meta["uid"],
            "PodName": meta["name"],
            "ContainerName": "main",
            "Opts": {},
        }
    )


# --- a deployment the DMS no longer knows --------------------------------------------------


NEWEST_NOT_FOUND = "failed to get deployment: failed to find deployment by ID: %!w(<nil>)"
"""The newest DMS's ``status`` and ``manifest`` for an ensemble it does not know: its
deployment store's ``Get`` wraps a nil error when no document matches."""


@pytest.mark.parametrize(
    "error",
    [
        NEWEST_NOT_FOUND,
        f"failed to get deployment: {NOT_FOUND}",  # status and manifest, the devnet
        NOT_FOUND,  # status, older DMSs
        f"failed to get orchestrator: {ORCHESTRATOR_NOT_FOUND}",  # logs; status, v0.5
        ORCHESTRATOR_NOT_FOUND,  # shutdown
    ],
)
def test_the_dms_saying_it_does_not_know_a_deployment_is_a_not_found(error: str) -> None:
    kind = DMSBehaviorError("/dms/node/deployment/status", error).kind
    assert kind is DMSErrorKind.NOT_FOUND


@pytest.mark.parametrize(
    "exc",
    [
        DMSBehaviorError("/dms/node/deployment/shutdown", NOT_RUNNING),
        DMSBehaviorError("/dms/node/deployment/new", "node not found for allocation x"),
        DMSBehaviorError(  # a deployment store that fails is not one without the deployment
            "/dms/node/deployment/status",
            "failed to get deployment: failed to find deployment by ID: database not open",
        ),
        DMSTimeoutError("/dms/node/deployment/status"),
    ],
)
def test_other_dms_errors_are_not_a_lost_deployment(exc: DMSError) -> None:
    assert exc.kind is not DMSErrorKind.NOT_FOUND


def test_a_transport_failure_is_no_answer_of_the_dms() -> None:
    assert not isinstance(TransportError("/dms/node/deployment/status: 404"), DMSError)


async def test_a_pod_whose_deployment_the_dms_lost_fails_saying_so(
    backend: Gateway, dms: FakeDMS, client: TestClient[Any, Any]
) -> None:
    gateway = backend
    spec = pod(uid(1))
    await create(gateway, spec)
    await until(lambda: len(dms.live(uid(1))) == 1, "deployed")
    (lost,) = dms.live(uid(1))
    await until(lambda: gateway.book.snapshots[uid(1)].containers[0].state.running, "running")
    dms.forget(lost.id)
    await until(lambda: gateway.book.snapshots[uid(1)].containers[0].state.terminated, "ended")
    record = gateway.book.records[uid(1)]
    assert (record.phase, record.reason) == (Phase.TERMINAL, DEPLOYMENT_LOST)
    (status,) = await poll(gateway, spec)
    main = status.containers[0]
    assert main.state.terminated is not None and not main.ready
    assert f"the DMS no longer knows deployment {lost.id}" in main.state.terminated.message
    answer = await client.get("/getLogs", data=_logs_body(spec))
    assert answer.status == 404
    assert f"no longer knows deployment {lost.id}" in await answer.text()
    assert dms.asked["deployment/new"] == 1  # restartPolicy Never: not deployed again


@pytest.mark.parametrize("policy", ["Always", "OnFailure"])
async def test_a_pod_whose_deployment_the_dms_lost_is_deployed_again_if_its_policy_says_so(
    gateway_and_dms: tuple[Gateway, FakeDMS], policy: str
) -> None:
    gateway, dms = gateway_and_dms
    await create(gateway, pod(uid(2), policy=policy))
    await until(lambda: len(dms.live(uid(2))) == 1, "deployed")
    (lost,) = dms.live(uid(2))
    dms.forget(lost.id)
    await until(
        lambda: [d.id for d in dms.live(uid(2))] == [gateway.book.records[uid(2)].ensemble_id],
        "deployed again",
    )
    record = gateway.book.records[uid(2)]
    assert (record.phase, record.restarts, record.attempt) == (Phase.RUNNING, 1, 2)
    assert record.previous_ensemble_id == lost.id


async def test_a_gateway_that_stopped_while_a_failed_pod_was_ending_shuts_its_ensemble_down(
    dms: FakeDMS, clock: FixedClock, tmp_path: Path
) -> None:
    """A pod that an init container's failure ended (``restartPolicy: Never``) is recorded
    ``ending`` before its ensemble is shut down: a gateway that stopped meanwhile leaves the
    ensemble running, and the next one, reading the record, shuts it down (the DMS lets it
    once it runs) and records the pod terminal."""
    first = await gateway_on(dms, tmp_path / "state", owner=OWNER, clock=clock)
    await create(first, pod(uid(3)))
    await until(lambda: len(dms.live(uid(3))) == 1, "deployed")
    await first.close()
    store = PodStore(tmp_path / "state")
    (stored,) = store.load_all()
    await store.put(uid(3), {**stored, "phase": Phase.ENDING, "reason": INIT_CONTAINER_FAILED})
    await store.close()
    again = await gateway_on(dms, tmp_path / "state", owner=OWNER, clock=clock)
    try:
        await until(lambda: again.book.records[uid(3)].phase == Phase.TERMINAL, "terminal")
        assert dms.live(uid(3)) == []
        assert dms.asked["deployment/shutdown"] == 1
    finally:
        await again.close()


async def test_a_pod_whose_deployment_the_newest_dms_lost_fails_too(
    gateway_and_dms: tuple[Gateway, FakeDMS],
) -> None:
    """The newest DMS reads status from its deployment store, which says so differently."""
    gateway, dms = gateway_and_dms
    dms.unknown_deployment = NEWEST_NOT_FOUND
    await create(gateway, pod(uid(5)))
    await until(lambda: len(dms.live(uid(5))) == 1, "deployed")
    dms.forget(dms.live(uid(5))[0].id)
    await until(lambda: gateway.book.records[uid(5)].phase == Phase.TERMINAL, "ended")
    assert gateway.book.records[uid(5)].reason == DEPLOYMENT_LOST


@pytest.fixture
async def gateway_and_dms(
    dms: FakeDMS, clock: FixedClock, tmp_path: Path
) -> AsyncIterator[tuple[Gateway, FakeDMS]]:
    gateway = await gateway_on(dms, tmp_path / "state", owner=OWNER, clock=clock)
    yield gateway, dms
    await gateway.close()


async def test_a_pod_whose_devnet_deployment_vanished_fails_and_its_logs_are_404(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same over the devnet: its answers for an unknown deployment are the DMS's."""
    monkeypatch.setenv("DMSGW_TEST_SCRYPT_N", "1024")
    devnet = Devnet(seed="lost-deployment")
    await devnet.start()
    config = gateway_config(devnet, tmp_path / "gw", seed=140)
    gateway = await start_backend(config, metrics=Metrics(process=False), policy=FAST)
    server = PluginServer(gateway, config.server_options(), Metrics(process=False))
    client = TestClient(
        TestServer(server.app(), host="127.0.0.1"), headers={"Content-Type": "application/json"}
    )
    await client.start_server()
    try:
        spec = pod(uid(3), command=["sh", "-c", "exec sleep 60"])
        body = json.dumps({"pod": spec, "container": [{"name": "main"}]})
        assert (await client.post("/create", data=body)).status == 200
        await until(lambda: gateway.book.snapshots[uid(3)].containers[0].state.running, "running")
        deployments = devnet.nodes[0].deployments
        assert deployments is not None
        deployments.orchestrators.pop(gateway.book.records[uid(3)].ensemble_id).close()
        await until(lambda: gateway.book.snapshots[uid(3)].containers[0].state.terminated, "ended")
        (status,) = await (await client.get("/status", data=json.dumps([spec]))).json()
        assert (
            "no longer knows deployment"
            in status["containers"][0]["state"]["terminated"]["message"]
        )
        answer = await client.get("/getLogs", data=_logs_body(spec))
        assert (answer.status, "no longer knows" in await answer.text()) == (404, True)
    finally:
        await client.close()
        await gateway.close()
        await devnet.stop()


# --- the actor alone changes its record -----------------------------------------------------


class _WriterRecordingStore(PodStore):
    """A store that notes which task wrote each record, and the phase written."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.writers: list[tuple[str, str]] = []

    async def put(self, uid: str, record: dict[str, Any]) -> None:
        task = asyncio.current_task()
        self.writers.append((task.get_name() if task else "", record["phase"]))
        await super().put(uid, record)


async def test_only_the_pod_actor_changes_and_saves_its_record(
    dms: FakeDMS, clock: FixedClock, tmp_path: Path
) -> None:
    """Decision 8: the follower task does the DMS I/O and only reports back; once the create
    has recorded the pod (its first attempt), the actor alone changes the pod's record and
    saves it, one message at a time (here through a first deployment, a deployment the DMS
    lost, and the deployment again that ``Always`` asks)."""
    store = _WriterRecordingStore(tmp_path / "state")
    gateway = await gateway_on(dms, tmp_path / "state", owner=OWNER, clock=clock, store=store)
    try:
        await asyncio.create_task(create(gateway, pod(uid(7), policy="Always")), name="interLink")
        await until(lambda: len(dms.live(uid(7))) == 1, "deployed")
        (lost,) = dms.live(uid(7))
        dms.forget(lost.id)
        record = gateway.book.records[uid(7)]
        await until(lambda: (record.attempt, record.phase) == (2, Phase.RUNNING), "redeployed")
    finally:
        await gateway.close()
    assert {task for task, _ in store.writers} == {"interLink", "actor:PodActor"}
    attempts = [w for w in store.writers if w[1] in (Phase.QUEUED, Phase.DEPLOYING)]
    assert attempts == [
        ("interLink", Phase.QUEUED),  # the first attempt, waiting for DMS capacity
        ("actor:PodActor", Phase.DEPLOYING),
        ("actor:PodActor", Phase.QUEUED),
        ("actor:PodActor", Phase.DEPLOYING),
    ]


# --- the GPU catalog, before the first ping ------------------------------------------------


async def _gateway_translating_with(
    catalog: GpuCatalog, dms: FakeDMS, clock: FixedClock, tmp_path: Path
) -> Gateway:
    """A gateway whose translation knows the GPU classes of ``catalog``, which its capacity's
    resource actor fills (as ``dmsgw serve`` wires them)."""
    capacity = Capacity(ResourceActor.start(dms, catalog=catalog), pods_capacity=10)
    translate = Translator(catalog, capacity.free_resources)
    return await gateway_on(
        dms, tmp_path / "state", owner=OWNER, clock=clock, translate=translate, capacity=capacity
    )


async def test_a_gpu_pod_before_the_first_ping_waits_for_the_catalog(
    dms: FakeDMS, clock: FixedClock, tmp_path: Path
) -> None:
    """A GPU pod deployed before interLink's first ping (as every pod resumed after a
    restart is) waits for the peers' GPU catalog, through a DMS that does not answer yet,
    and is deployed once the catalog is known."""
    catalog = GpuCatalog()
    gateway = await _gateway_translating_with(catalog, dms, clock, tmp_path)
    try:
        dms.reachable = False
        await create(gateway, pod(uid(4), **GPU_LIMITS))
        await until(lambda: dms.asked["peers/self"] >= 3, "the catalog asked for again")
        record = gateway.book.records[uid(4)]
        assert (record.phase, record.reason, dms.deployments) == (Phase.QUEUED, "", {})
        dms.reachable = True
        await until(lambda: len(dms.live(uid(4))) == 1, "deployed")
        assert catalog.loaded and "nvidia.tesla.p100.16gb" in catalog.models
    finally:
        await gateway.close()


async def test_a_pod_that_needs_a_gpu_no_peer_has_still_fails_once_the_catalog_is_known(
    dms: FakeDMS, clock: FixedClock, tmp_path: Path
) -> None:
    catalog = GpuCatalog()
    gateway = await _gateway_translating_with(catalog, dms, clock, tmp_path)
    try:
        rtx = {"resources": {"limits": {"nunet.gpu.nvidia.rtx.3090.24gb": "1"}}}
        await create(gateway, pod(uid(5), **rtx))
        await until(lambda: gateway.book.records[uid(5)].phase == Phase.TERMINAL, "failed")
        assert "no reachable DMS peer reports a GPU" in gateway.book.records[uid(5)].message
    finally:
        await gateway.close()


# --- the root supervisor gives up ------------------------------------------------------------


def _buggy_translation(data: Any, generation: int) -> Any:
    raise RuntimeError("a bug in the translation")


async def test_the_gateway_says_when_its_root_supervisor_gives_up(
    dms: FakeDMS, clock: FixedClock, tmp_path: Path
) -> None:
    gateway = await gateway_on(
        dms,
        tmp_path / "state",
        owner=OWNER,
        clock=clock,
        translate=_buggy_translation,
        intensity=Intensity(max_restarts=2, period_s=60.0),
        backoff=Backoff(min_s=0.001, max_s=0.002),
    )
    try:
        assert not gateway.gave_up.done()
        await create(gateway, pod(uid(6)))
        reason = await asyncio.wait_for(gateway.gave_up, WAIT_S)
        assert "the pod supervisor gave up" in reason
    finally:
        await gateway.close()


class _GivingUpBackend:
    """A backend whose supervision gives up when told to; its close waits for the test."""

    def __init__(self) -> None:
        self.gave_up: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self.may_close = asyncio.Event()
        self.closed = False

    async def create(self, pods: Any) -> Any:
        return []

    async def delete(self, pod: Any) -> None:
        return None

    async def status(self, pods: Any) -> Any:
        return []

    def statuses_at_once(self, uids: Any) -> None:
        return None

    async def ping(self) -> PingResponse:
        return PingResponse(status="ok")

    def logs(self, request: Any) -> Any:
        raise AssertionError("not asked")

    async def close(self) -> None:
        await self.may_close.wait()
        self.closed = True


async def test_serve_reports_not_ready_then_fails_when_the_backend_gives_up() -> None:
    backend = _GivingUpBackend()
    started: asyncio.Future[ServeInfo] = asyncio.get_running_loop().create_future()
    stop = asyncio.Event()  # never set by the gateway: only the test's own cleanup sets it

    async def factory(_: Metrics) -> Any:
        return backend

    ports = {"listen": ListenAddress(port=0), "operator_listen": ListenAddress(port=0)}
    serving = Serve(factory, ServerOptions(**ports)).run(started=started.set_result, stop=stop)
    serve = asyncio.create_task(serving)
    try:
        info = await asyncio.wait_for(started, WAIT_S)
        async with ClientSession() as session:
            assert (await session.get(info.operator.endpoint("/readyz"))).status == 200
            backend.gave_up.set_result("the pod supervisor gave up: too many restarts")
            for _ in range(int(WAIT_S / 0.01)):
                answer = await session.get(info.operator.endpoint("/readyz"))
                if answer.status == 503:
                    break
                await asyncio.sleep(0.01)
            assert answer.status == 503, "/readyz stayed ready after the backend gave up"
        assert not serve.done()  # not ready first, then the shutdown
        backend.may_close.set()
        with pytest.raises(BackendGaveUpError, match="too many restarts"):
            await asyncio.wait_for(serve, WAIT_S)
        assert backend.closed
    finally:
        stop.set()
        backend.may_close.set()
        await asyncio.gather(serve, return_exceptions=True)


GIVING_UP_GATEWAY = """
import asyncio, sys, types
from dmsgw import cli
from dmsgw.interlink.wire.bodies import PingResponse

class Backend:
    def __init__(self):
        loop = asyncio.get_running_loop()
        self.gave_up = loop.create_future()
        loop.call_soon(self.gave_up.set_result, "the pod supervisor gave up: test")
    async def create(self, pods): return []
    async def delete(self, pod): pass
    async def status(self, pods): return []
    def statuses_at_once(self, uids): return None
    async def ping(self): return PingResponse(status="ok")
    def logs(self, request): raise AssertionError
    async def close(self): print("closed", flush=True)

async def start_backend(config, *, metrics):
    return Backend()

module = types.ModuleType("dmsgw.interlink.app")
module.start_backend = start_backend
sys.modules["dmsgw.interlink.app"] = module
sys.exit(cli.main(sys.argv[1:]))
"""


def test_dmsgw_serve_exits_non_zero_when_the_backend_gives_up(tmp_path: Path) -> None:
    script = tmp_path / "gateway.py"
    script.write_text(GIVING_UP_GATEWAY)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DMSGW_", "DMS_"))}
    env["XDG_STATE_HOME"] = str(tmp_path / "state")
    argv = [sys.executable, str(script), "serve", "--devnet", "--listen", "127.0.0.1:0"]
    argv += ["--operator-listen", "127.0.0.1:0", "--log-format", "text"]
    done = subprocess.run(
        argv, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60, check=False
    )
    assert done.returncode != 0
    assert "closed" in done.stdout  # shut down in order, then failed
    assert "dmsgw: error: the pod supervisor gave up: test" in done.stderr
