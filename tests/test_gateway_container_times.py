"""Container times and exit codes as the kubelet reports them, through the plugin API over the
embedded devnet: a run's ``startedAt`` and ``finishedAt`` are stamped once, when the gateway
first sees the run start or end (with its injected clock), and stay put across polls and a
restart of the gateway; an init container is ``running`` while it runs and reports its own exit
code as soon as it ends, and the containers after it show that they never ran.

The gateway's clock is a :class:`~dmsgw.clock.FixedClock` the test moves: a time that follows
the clock (the defect) shows as a jump. The waits are bounded polls of ``/status``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from dmsgw.behaviors.catalog import DEPLOYMENT_STATUS
from dmsgw.behaviors.deployment import DeploymentStatusRequest
from dmsgw.clock import NS_PER_SECOND, FixedClock
from dmsgw.devnet.devnet import Devnet
from dmsgw.devnet.timeouts import DEVNET_TIMEOUTS, Timeouts
from dmsgw.interlink import app
from dmsgw.interlink.gateway import Gateway
from dmsgw.interlink.records.pod_record import INIT_CONTAINER_FAILED, Phase, PodRecord, snapshot_of
from dmsgw.interlink.state.pod_store import PodStore
from tests.support.gateway_fakes import FAST
from tests.support.plugin_api import Plugin, create_pod, open_plugin, pod_of, shell_container

T0 = 1_700_000_000
Status = dict[str, Any]


@pytest.fixture
def clock() -> FixedClock:
    return FixedClock(T0 * NS_PER_SECOND)


@pytest.fixture
def devnet_timeouts() -> Timeouts:
    """The embedded devnet's timings (a test parametrizes them)."""
    return DEVNET_TIMEOUTS


@pytest.fixture
async def plugin(
    tmp_path: Path, clock: FixedClock, devnet_timeouts: Timeouts, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Plugin]:
    """The plugin API of a gateway on its embedded devnet, whose clock the test holds."""
    monkeypatch.setattr(app, "Devnet", functools.partial(Devnet, timeouts=devnet_timeouts))
    async with open_plugin(tmp_path, policy=FAST, clock=clock) as opened:
        yield opened


def _at(seconds: int) -> str:
    return datetime.fromtimestamp(T0 + seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _by_name(status: Status) -> dict[str, Status]:
    return {c["name"]: c for c in (*status.get("initContainers", ()), *status["containers"])}


async def _until(
    client: TestClient[Any, Any], spec: Status, done: Callable[[dict[str, Status]], bool]
) -> dict[str, Status]:
    """Poll ``/status`` as interLink does (bounded) until ``done`` holds of the containers."""
    for _ in range(400):
        resp = await client.get("/status", data=json.dumps([spec]))
        assert resp.status == 200, await resp.text()
        (status,) = await resp.json()
        containers = _by_name(status)
        if done(containers):
            return containers
        await asyncio.sleep(0.05)
    raise AssertionError(f"never got there: {containers}")


def _in(state: str, *names: str) -> Callable[[dict[str, Status]], bool]:
    return lambda containers: all(state in containers[name]["state"] for name in names)


async def test_a_runs_times_stay_put_when_others_change_and_across_a_restart(
    plugin: Any, clock: FixedClock, tmp_path: Path
) -> None:
    client, gateway = plugin
    spec = pod_of([shell_container("short", "sleep 0.6"), shell_container("long", "sleep 2")])
    await create_pod(client, spec)
    await _until(client, spec, _in("running", "short", "long"))
    clock.advance(10)
    seen = await _until(client, spec, _in("terminated", "short"))
    assert seen["long"]["state"]["running"]["startedAt"] == _at(0)  # not when "short" ended
    short = seen["short"]["state"]["terminated"]
    assert (short["startedAt"], short["finishedAt"]) == (_at(0), _at(10))
    clock.advance(10)
    seen = await _until(client, spec, _in("terminated", "long"))
    short, long = (seen[name]["state"]["terminated"] for name in ("short", "long"))
    assert (short["startedAt"], short["finishedAt"]) == (_at(0), _at(10))  # stays put
    assert (long["startedAt"], long["finishedAt"]) == (_at(0), _at(20))
    await gateway.close()
    # A gateway started again reads its pods' records: the times are in them.
    (stored,) = PodStore(tmp_path / "state.sqlite3").load_all()
    again = snapshot_of(PodRecord.from_map(stored), now_ns=(T0 + 99) * NS_PER_SECOND)
    short_again = again.containers[0].state.terminated
    assert short_again is not None and short_again.finished_at is not None
    assert short_again.finished_at.timestamp() == T0 + 10


DEADLINE_S = 24.0
"""The devnet's deadline for a deployment (a DMS's is the request's expiry minus 15 s: ~105 s
for the gateway's requests); the test needs it to pass, so it is short, but long enough that
the gateway sees the init container fail well before it. The devnet retries the provisioning
every ~1.4 s, each attempt running the init container for 1 s, and the gateway sees a run's
end only if it reads the log before the attempt is reverted, a few ms later (decision 46):
it saw the first attempt's in 11 runs of 12 and the ninth's in one, 12.4 s in, past the
12 s deadline this test had."""


@pytest.mark.parametrize(
    "devnet_timeouts", [dataclasses.replace(DEVNET_TIMEOUTS, deploy_deadline_s=DEADLINE_S)]
)
async def test_an_init_container_runs_then_fails_with_its_own_code_and_the_rest_never_run(
    plugin: Any, clock: FixedClock, tmp_path: Path
) -> None:
    """Under ``restartPolicy: Never`` the pod fails as soon as its init container does, not
    when the DMS gives up retrying the provisioning that waits for it: the init container
    ``terminated`` with its own code, and at once the main container ``terminated`` as never
    run (the virtual kubelet fails the pod), while the DMS still retries. The gateway shuts the
    ensemble down (the DMS shuts down only a running deployment: this one ends at its deadline)
    and then records the pod terminal, as a restarted gateway reads it."""
    client, gateway = plugin
    spec = pod_of(
        [shell_container("main", "sleep 600")],
        init=[shell_container("init", "sleep 1; exit 2")],
    )
    uid = spec["metadata"]["uid"]
    await create_pod(client, spec)
    running = await _until(client, spec, _in("running", "init"))
    assert running["init"]["state"]["running"]["startedAt"] == _at(0)
    assert running["main"]["state"]["waiting"]["reason"] == "PodInitializing"
    ensemble = gateway.book.records[uid].ensemble_id
    clock.advance(5)
    ended = await _until(client, spec, _in("terminated", "init"))
    assert await _deployment_status(gateway, ensemble) not in ("Failed", "Completed")
    init = ended["init"]["state"]["terminated"]
    assert (init["exitCode"], init["startedAt"], init["finishedAt"]) == (2, _at(0), _at(5))
    main = ended["main"]["state"]["terminated"]  # every container terminated: the pod Failed
    assert main["exitCode"] != 0 and "init container 'init' failed" in main["message"], main
    assert gateway.book.records[uid].phase == Phase.ENDING  # the ensemble is being shut down
    await _until_true(lambda: _phase(gateway, uid), Phase.TERMINAL)
    assert await _deployment_status(gateway, ensemble) == "Failed"  # ended, not left running
    await gateway.close()
    (stored,) = PodStore(tmp_path / "state.sqlite3").load_all()
    record = PodRecord.from_map(stored)
    assert (record.phase, record.reason) == (Phase.TERMINAL, INIT_CONTAINER_FAILED)
    again = _by_name(json.loads(snapshot_of(record, now_ns=(T0 + 99) * NS_PER_SECOND).to_json()))
    assert again["init"]["state"]["terminated"]["exitCode"] == 2
    assert again["init"]["state"]["terminated"]["finishedAt"] == _at(5)
    assert "init container 'init' failed" in again["main"]["state"]["terminated"]["message"]


async def _deployment_status(gateway: Gateway, ensemble: str) -> str:
    reply = await gateway.parts.invoke(DEPLOYMENT_STATUS, DeploymentStatusRequest(ensemble))
    return str(reply.status)


async def _phase(gateway: Gateway, uid: str) -> str:
    return gateway.book.records[uid].phase


async def _until_true(ask: Callable[[], Awaitable[str]], wanted: str) -> None:
    """Ask (bounded: past the devnet's deadline) until the answer is ``wanted``."""
    for _ in range(int(DEADLINE_S / 0.05) + 400):
        if (got := await ask()) == wanted:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"still {got!r}, not {wanted!r}")


def test_a_pod_that_failed_before_it_ran_ends_at_one_time_whatever_the_snapshot() -> None:
    """A pod the DMS refused has no runs: its containers end when the pod ended, as recorded,
    not at the time of each snapshot (a restarted gateway's included)."""
    spec = pod_of([shell_container("main", "true")])
    record = PodRecord(
        uid=spec["metadata"]["uid"],
        namespace="default",
        name=spec["metadata"]["name"],
        jid="j",
        request=json.dumps({"pod": spec, "container": [{"name": "main"}]}).encode(),
        phase=Phase.TERMINAL,
        reason="ProviderFailed",
        message="no peer can run it",
        finished_ns=(T0 + 3) * NS_PER_SECOND,
    )
    for later in (5, 500):
        snapshot = snapshot_of(record, now_ns=(T0 + later) * NS_PER_SECOND)
        terminated = snapshot.containers[0].state.terminated
        assert terminated is not None and terminated.finished_at is not None
        assert terminated.finished_at.timestamp() == T0 + 3
