"""What only the embedded devnet can show: faults, process execution, and its own bookkeeping.

Each test gets a fresh devnet (``embedded_devnet``); the fixture fails with a clear message when
``DMSGW_DEVNET_URL`` points at a real DMS. Calls still go through the gateway's client; the
devnet's objects are read only to see what a client cannot (exit codes, start order, logs).
"""

from __future__ import annotations

import asyncio
import base64
import os
import secrets
import time
from pathlib import Path

import aiohttp
import pytest

from dmsgw.behaviors.node import DMSBehaviorError
from dmsgw.devnet.devnet import Devnet
from dmsgw.devnet.executor import probe_isolation
from dmsgw.devnet.pytest_plugin import (
    EmbeddedDevnet,
    one_node_ensemble,
    shell_allocation,
    start_embedded,
)
from dmsgw.devnet.sandbox import Isolation
from dmsgw.gojson import marshal
from dmsgw.keys.crypto import Ed25519PrivKey
from dmsgw.keys.trust import provider_from_private_key
from dmsgw.keys.ucan import CapabilityContext
from dmsgw.transport import envelope as env
from dmsgw.transport.rest import DMSErrorKind, DMSTimeoutError, TransportError
from dmsgw.transport.security import SecurityContext

GIB = 1024**3
NS = 1_000_000_000


def _children() -> set[int]:
    """PIDs of this process's children (from /proc)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == os.getpid():
                found.add(int(entry.name))
    return found


# --- the DMS's stages and bookkeeping ------------------------------------------------------


def test_a_deployment_goes_through_every_dms_status(embedded_devnet: EmbeddedDevnet) -> None:
    h = embedded_devnet
    eid = h.dms.deployment.new(
        one_node_ensemble({"svc": shell_allocation("service", "exec sleep 60")})
    ).ensemble_id
    assert h.wait_status(eid, "Running") == "Running"
    assert h.dms.deployment.shutdown(eid).ok
    assert [s.go_name for s in h.orchestrator(eid).history] == [
        "Preparing",
        "Generating",
        "Committing",
        "Provisioning",
        "Running",
        "ShuttingDown",
        "Completed",
    ]


def test_exit_codes_are_the_processes_own(embedded_devnet: EmbeddedDevnet) -> None:
    h = embedded_devnet
    ensemble = one_node_ensemble(
        {"ok": shell_allocation("task", "exit 0"), "bad": shell_allocation("task", "exit 3")}
    )
    eid = h.dms.deployment.new(ensemble).ensemble_id
    assert h.wait_status(eid, "Completed", "Failed") == "Completed"  # tasks only: all ended
    manifest = h.dms.deployment.manifest(eid).manifest
    assert {k: a.status for k, a in (manifest.allocations or {}).items()} == {
        "n1.ok": "completed",
        "n1.bad": "failed",
    }
    assert h.faults.allocation(eid, "bad").exit_code == 3
    assert h.faults.allocation(eid, "ok").exit_code == 0


def test_depends_on_orders_the_starts(embedded_devnet: EmbeddedDevnet) -> None:
    h = embedded_devnet
    ensemble = one_node_ensemble(
        {
            "alpha": shell_allocation("service", "exec sleep 60", depends_on=["zeta"]),
            "zeta": shell_allocation("service", "exec sleep 60"),
        }
    )
    eid = h.dms.deployment.new(ensemble).ensemble_id
    assert h.wait_status(eid, "Running") == "Running"
    alpha, zeta = h.faults.allocation(eid, "alpha"), h.faults.allocation(eid, "zeta")
    assert zeta.started_ns[0] < alpha.started_ns[0]


def test_an_impossible_request_fails_with_the_dms_error(embedded_devnet: EmbeddedDevnet) -> None:
    h = embedded_devnet
    greedy = shell_allocation("task", "true")
    greedy["resources"] = {**greedy["resources"], "gpus": [{"vram": GIB}] * 64}
    eid = h.dms.deployment.new(one_node_ensemble({"greedy": greedy})).ensemble_id
    assert h.wait_status(eid, "Failed") == "Failed"
    assert "failed to create deployment" in h.orchestrator(eid).error


def test_a_short_lived_request_is_refused_as_by_a_dms(embedded_devnet: EmbeddedDevnet) -> None:
    # The client refuses expiries under 60 s itself; a clock 70 s slow makes it send one
    # that has only 50 s left when the DMS sees it.
    def slow() -> int:
        return time.time_ns() - 70 * NS

    with (
        embedded_devnet.client(clock=slow) as late,
        pytest.raises(DMSBehaviorError, match="requested deployment time too short"),
    ):
        late.deployment.new(one_node_ensemble({"x": shell_allocation("task", "true")}))


def test_refusals_are_logged_with_the_dms_reason(embedded_devnet: EmbeddedDevnet) -> None:
    h = embedded_devnet
    node0 = h.devnet.nodes[0].node
    with h.stranger() as stranger, pytest.raises(DMSTimeoutError):
        stranger.peers.list(timeout=3)
    assert node0.dropped[-1].reason.startswith("requiring capabilities: not authorized")

    def an_hour_late() -> int:
        return time.time_ns() - 3600 * NS

    with h.client(clock=an_hour_late) as late, pytest.raises(DMSTimeoutError):
        late.peers.list(timeout=3)
    assert node0.dropped[-1].reason == "message expired"


def test_onboarding_changes_what_a_node_offers(embedded_devnet: EmbeddedDevnet) -> None:
    with embedded_devnet.client(node=1) as rtx:
        assert rtx.onboarding.status().onboarded
        assert rtx.onboarding.offboard().success
        assert not rtx.onboarding.status().onboarded
        with pytest.raises(DMSBehaviorError, match="not onboarded"):
            rtx.resources.onboarded()
        offer = {"cpu": {"cores": 4}, "ram": {"size": 8 * GIB}, "disk": {"size": 100 * GIB}}
        reply = rtx.onboarding.onboard({"GPUs": "0,2", "Config": {"onboarded_resources": offer}})
        assert reply.success and reply.config.is_onboarded
        onboarded = rtx.resources.onboarded().resources
        assert onboarded.cpu.cores == 4 and [g.index for g in onboarded.gpus or ()] == [0, 2]
        too_big = {**offer, "cpu": {"cores": 999}}
        with pytest.raises(DMSBehaviorError, match="onboarded resources exceed the machine"):
            rtx.onboarding.onboard({"Config": {"onboarded_resources": too_big}})


def test_the_capabilities_between_nodes_are_listed(embedded_devnet: EmbeddedDevnet) -> None:
    with embedded_devnet.client(caps=("/dms/cap",)) as admin:
        anchors = admin.cap.list()
    assert anchors.ok and not anchors.roots
    provided = {t.dms.issuer.uri for t in anchors.provide.present() if t.dms}
    others = {n.node.did.uri for n in embedded_devnet.devnet.nodes[1:]}
    assert provided == others and len(anchors.require.present()) == len(others)


def test_peers_connect_names_reachable_peers(embedded_devnet: EmbeddedDevnet) -> None:
    h = embedded_devnet
    peer = h.devnet.nodes[2].node.peer_id
    assert h.dms.peers.connect(f"/ip4/127.0.0.1/tcp/9000/p2p/{peer}").status == "CONNECTED"
    h.faults.partition([0], [2])
    with pytest.raises(DMSBehaviorError, match="no route to peer"):
        h.dms.peers.connect(f"/p2p/{peer}")


# --- execution ---------------------------------------------------------------------------


ISOLATIONS = sorted({Isolation.REWRITE, asyncio.run(probe_isolation())})
"""Path rewriting always; mount namespaces too where this process can make them (root)."""


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_volumes_keys_scripts_environment_and_workdir(isolation: Isolation, host_dir: Path) -> None:
    tag = secrets.token_hex(4)
    volume = host_dir
    (volume / "input.txt").write_text("payload\n")
    data = f"/srv/dmsgw-test-{tag}/data"
    key_path = f"/etc/dmsgw-test-{tag}/authorized_keys"
    script = (
        f'echo "$GREETING"; pwd; cat {data}/input.txt; cat {key_path}; cat "$HOME/prepared"; '
        f"echo written > {data}/result.txt"
    )
    allocation = shell_allocation(
        "task",
        script,
        volume=[{"type": "local", "mount_destination": data, "src": str(volume)}],
        keys=[{"type": "ssh", "file": f"ssh-ed25519 AAAA{tag}\n", "dest": key_path}],
        provision=["prepare"],
    )
    allocation["execution"]["params"] |= {
        "environment": ["GREETING=hello devnet"],
        "working_directory": "/work/dir",
    }
    ensemble = one_node_ensemble({"job": allocation})
    ensemble["v1"]["scripts"] = {
        "prepare": base64.b64encode(b'echo prepared > "$HOME/prepared"\n').decode()
    }
    h = start_embedded(seed=f"isolation-{isolation}", isolation=isolation)
    try:
        eid = h.dms.deployment.new(ensemble).ensemble_id
        assert h.wait_status(eid, "Completed", "Failed") == "Completed"
        lines = h.stdout(eid, "n1.job").splitlines()
    finally:
        h.close()
    assert lines[0] == "hello devnet"
    assert lines[1].endswith("/rootfs/work/dir")
    assert lines[2:] == ["payload", f"ssh-ed25519 AAAA{tag}", "prepared"]
    assert (volume / "result.txt").read_text() == "written\n"
    assert not Path(data).parent.exists() and not Path(key_path).parent.exists()


def test_health_checks_run_and_restart_the_unhealthy(embedded_devnet: EmbeddedDevnet) -> None:
    h = embedded_devnet
    check = {"type": "command", "interval": NS // 10}
    ensemble = one_node_ensemble(
        {
            "fine": shell_allocation(
                "service", "exec sleep 60", healthcheck={**check, "exec": ["true"]}
            ),
            "sick": shell_allocation(
                "service", "exec sleep 60", healthcheck={**check, "exec": ["false"]}
            ),
        }
    )
    eid = h.dms.deployment.new(ensemble).ensemble_id
    assert h.wait_status(eid, "Running") == "Running"

    def healthy() -> bool:
        info = h.dms.deployment.status(eid).allocation_info or {}
        return any(k.endswith(".fine") and i.health == "healthy" for k, i in info.items())

    h.wait_for(healthy, what="the healthy service to be reported healthy")
    sick = h.faults.allocation(eid, "sick")
    h.wait_for(lambda: len(sick.started_ns) >= 2, what="the sick service to be restarted")
    assert len(h.faults.allocation(eid, "fine").started_ns) == 1


# --- faults --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("policy", "restarted"),
    [("one_for_one", {"svc"}), ("one_for_all", {"svc", "peer"}), ("stay_down", set())],
)
def test_a_killed_allocation_is_handled_by_its_failure_recovery(
    embedded_devnet: EmbeddedDevnet, policy: str, restarted: set[str]
) -> None:
    h = embedded_devnet
    ensemble = one_node_ensemble(
        {
            "svc": shell_allocation("service", "echo up; exec sleep 60", failure_recovery=policy),
            "peer": shell_allocation("service", "exec sleep 60"),
        }
    )
    eid = h.dms.deployment.new(ensemble).ensemble_id
    assert h.wait_status(eid, "Running") == "Running"
    svc = h.faults.allocation(eid, "svc")
    h.wait_for(lambda: h.stdout(eid, "n1.svc") == "up\n", what="the first run's output")
    pid = h.faults.kill_allocation(eid, "svc")
    if restarted:
        h.wait_allocation(eid, "n1.svc", "running", timeout_s=5)
        h.wait_for(lambda: svc.pid not in (None, pid), what="a new process")
        both_runs = "up\nup\n"  # the log is appended to, run after run
        h.wait_for(lambda: h.stdout(eid, "n1.svc") == both_runs, what="the second run's output")
    else:
        h.wait_allocation(eid, "n1.svc", "failed")
        assert svc.exit_code == 137  # 128 + SIGKILL, as Docker reports it
    runs = {name: len(h.faults.allocation(eid, name).started_ns) for name in ("svc", "peer")}
    assert {name for name, count in runs.items() if count > 1} == restarted
    assert h.dms.deployment.status(eid).status == "Running"


def test_a_failing_task_under_one_for_one_runs_until_its_restarts_are_spent(
    embedded_devnet: EmbeddedDevnet,
) -> None:
    """A failed task being restarted has not ended: the ensemble completes only once every
    restart has failed too (it used to complete at the first failure, under the restart)."""
    h = embedded_devnet
    job = shell_allocation("task", "echo run; exit 1", failure_recovery="one_for_one")
    eid = h.dms.deployment.new(one_node_ensemble({"job": job})).ensemble_id
    assert h.wait_status(eid, "Completed", "Failed") == "Completed"
    runs = 1 + h.devnet.timeouts.max_restarts
    assert h.stdout(eid, "n1.job") == "run\n" * runs
    placed = h.orchestrator(eid).placed["n1.job"]
    assert (placed.status.value, placed.exit_code, placed.restarts) == ("failed", 1, runs - 1)


def test_a_task_that_failed_before_the_deployment_ran_gets_its_failure_recovery(
    embedded_devnet: EmbeddedDevnet, host_dir: Path
) -> None:
    """Failure recovery used to apply only to failures reported once the deployment was
    Running: a task that failed while a later one was still being set up stayed down."""
    h = embedded_devnet
    go = host_dir / "go"
    job = shell_allocation("task", "echo run; exit 1", failure_recovery="one_for_one")
    later = shell_allocation("task", "true", depends_on=["job"], provision=["wait"])
    ensemble = one_node_ensemble({"job": job, "later": later})
    wait = f"until [ -e {go} ]; do sleep 0.05; done\n"
    ensemble["v1"]["scripts"] = {"wait": base64.b64encode(wait.encode()).decode()}
    eid = h.dms.deployment.new(ensemble).ensemble_id

    def job_failed() -> bool:
        placed = h.orchestrator(eid).placed.get("n1.job")
        return placed is not None and placed.status.value == "failed"

    h.wait_for(job_failed, what="the task to fail while the other is set up")
    assert h.dms.deployment.status(eid).status == "Provisioning"
    go.touch()
    assert h.wait_status(eid, "Completed", "Failed") == "Completed"
    assert h.stdout(eid, "n1.job") == "run\n" * (1 + h.devnet.timeouts.max_restarts)


def test_a_stopped_node_comes_back_with_its_identity(embedded_devnet: EmbeddedDevnet) -> None:
    h = embedded_devnet
    entry = h.devnet.nodes[1]
    url, peer = entry.url, entry.node.peer_id
    with h.client(node=1) as other:
        assert other.peers.self().id == peer
        h.faults.stop_node(1)
        with pytest.raises(TransportError, match="cannot reach the DMS"):
            other.peers.self()
        with pytest.raises(DMSBehaviorError, match="failed to ping"):
            h.dms.peers.ping(peer)
        h.faults.restart_node(1)
        assert entry.url == url
        assert other.peers.self().id == peer
        assert other.public.hello().did == entry.node.did


def test_an_unreachable_pinned_peer_fails_the_deployment(embedded_devnet: EmbeddedDevnet) -> None:
    h = embedded_devnet
    peer = h.devnet.nodes[2].node.peer_id
    h.faults.stop_node(2)
    ensemble = one_node_ensemble({"x": shell_allocation("task", "true")}, peer=peer)
    eid = h.dms.deployment.new(ensemble).ensemble_id
    assert h.wait_status(eid, "Failed", timeout_s=1.0) == "Failed"
    assert "requesting bid to targeted peer" in h.orchestrator(eid).error


def test_dropped_bids_fail_a_deployment_until_healed(embedded_devnet: EmbeddedDevnet) -> None:
    h = embedded_devnet
    ensemble = one_node_ensemble({"x": shell_allocation("task", "true")})
    h.faults.drop("/dms/deployment/bid")
    assert h.wait_status(h.dms.deployment.new(ensemble).ensemble_id, "Failed") == "Failed"
    h.faults.heal()
    h.faults.partition([0], [1, 2])
    # node 0 would bid on its own request: only the other side of the partition may bid
    cut_off = one_node_ensemble({"x": shell_allocation("task", "true")})
    cut_off["v1"]["exclude_peers"] = [h.dms.peers.self().id]
    assert h.wait_status(h.dms.deployment.new(cut_off).ensemble_id, "Failed") == "Failed"
    h.faults.heal()
    slow = h.faults.delay(0.02, "/dms/deployment")
    assert h.wait_status(h.dms.deployment.new(ensemble).ensemble_id, "Completed") == "Completed"
    h.faults.remove_rule(slow)
    assert not h.devnet.network.rules


def test_a_failing_behavior_is_silent_like_any_refusal(embedded_devnet: EmbeddedDevnet) -> None:
    h = embedded_devnet
    h.faults.fail_behavior(0, "/dms/node/peers/list", "database is locked")
    with pytest.raises(DMSTimeoutError) as info:
        h.dms.peers.list(timeout=3)
    assert info.value.kind is DMSErrorKind.TIMEOUT  # the preflight knows of no refusal
    assert h.devnet.nodes[0].node.dropped[-1].reason == "database is locked"
    h.faults.fail_behavior(0, "/dms/node/peers/list", None)
    assert h.dms.peers.list().peers


def test_stopping_leaves_no_process_or_file_behind(tmp_path: Path) -> None:
    tag = secrets.token_hex(4)
    mount_root = Path(f"/srv/dmsgw-leftover-{tag}")
    volume = {"type": "local", "mount_destination": f"{mount_root}/v", "src": str(tmp_path)}
    ensemble = one_node_ensemble(
        {
            "svc": shell_allocation("service", "sleep 60 & exec sleep 60", volume=[volume]),
            "job": shell_allocation("task", "exec sleep 60"),
        }
    )
    h = start_embedded(seed="leftovers")
    root = h.devnet.root
    try:
        eid = h.dms.deployment.new(ensemble).ensemble_id
        assert h.wait_status(eid, "Running") == "Running"
        pids = [h.faults.allocation(eid, name).pid for name in ("svc", "job")]
        assert root is not None and root.is_dir() and all(pids)
    finally:
        h.close()
    assert not root.exists()
    assert not mount_root.exists()
    for pid in pids:
        assert pid is not None
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    assert not _children()


async def test_a_stopping_devnet_cuts_requests_in_flight_instead_of_waiting_for_them() -> None:
    """An ``invoke`` whose reply never comes waits until its message expires (an hour here);
    stopping the devnet must not wait for it, as a DMS that goes away does not."""
    devnet = Devnet(1, seed="stop-in-flight")
    await devnet.start()
    node = devnet.nodes[0].node
    key = Ed25519PrivKey(bytes(range(100, 132)))
    security = SecurityContext(key, CapabilityContext(provider_from_private_key(key)))
    source = env.Handle(security.id, security.did, env.Address(node.peer_id, "user-1"))
    msg = env.message(
        source,
        node.handle,
        "/nobody/answers",
        reply_to="/private/user/1",
        expire=time.time_ns() + 3600 * NS,
    )
    body = marshal(security.sign(msg))
    async with aiohttp.ClientSession() as session:

        async def invoke() -> int:
            async with session.post(devnet.urls[0] + "/api/v1/actor/invoke", data=body) as resp:
                return resp.status

        pending = asyncio.ensure_future(invoke())
        for _ in range(500):  # until the node has dropped it: the API now waits for a reply
            if node.dropped:
                break
            await asyncio.sleep(0.01)
        assert node.dropped[-1].reason == "unknown behavior"
        await asyncio.wait_for(devnet.stop(), timeout=30)  # a hang guard: it takes ~0.25 s
        with pytest.raises(aiohttp.ClientError):
            await pending


def test_an_allocation_without_a_command_is_refused_at_once_saying_why(
    embedded_devnet: EmbeddedDevnet,
) -> None:
    """The repository's own hello.yaml names an image and no ``cmd``: a DMS would pull and run
    the image; the devnet, which runs commands, refuses it when asked, naming the allocation,
    instead of retrying until the deadline and ending ``Failed`` without a reason."""
    hello = Path(__file__).parent / "data" / "ensembles" / "hello.yaml"
    with pytest.raises(DMSBehaviorError) as info:
        embedded_devnet.dms.deployment.new(str(hello))
    message = str(info.value)
    assert "allocation alloc1" in message
    assert "devnet limit, not a DMS rule" in message and "execution.cmd" in message
    assert "failed to validate ensemble configuration" not in message
    assert not embedded_devnet.dms.deployment.list().deployments


def test_a_volume_whose_host_path_does_not_exist_fails_at_once_saying_so(
    embedded_devnet: EmbeddedDevnet, host_dir: Path
) -> None:
    """A DMS's start would fail on the bind and the deployment would retry until its
    deadline; the devnet's nodes share this host, so ``deployment/new`` says it at once."""
    missing = host_dir / "not-here"
    allocation = shell_allocation("task", "true")
    allocation["volume"] = [{"type": "local", "src": str(missing), "mount_destination": "/d"}]
    with pytest.raises(DMSBehaviorError) as info:
        embedded_devnet.dms.deployment.new(one_node_ensemble({"job": allocation}))
    message = str(info.value)
    assert f"volume[0].src '{missing}': bind source path does not exist" in message
    assert not embedded_devnet.dms.deployment.list().deployments
