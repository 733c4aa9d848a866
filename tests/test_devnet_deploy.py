"""Deployments end to end through the gateway's client, on the ``dms_devnet`` fixture.

Everything here goes through ``dmsgw.connect`` and uses only what a DMS answers, so the module
runs unchanged against a real DMS devnet (``DMSGW_DEVNET_URL``); by default it runs against the
embedded one. Waiting is polling through the client, bounded by the handle's settle time.
"""

from __future__ import annotations

import secrets
from pathlib import Path

import pytest

from dmsgw.behaviors.node import DMSBehaviorError
from dmsgw.behaviors.resources import Resources
from dmsgw.behaviors.typed_client import ClientArgumentError
from dmsgw.devnet.pytest_plugin import (
    SMALL_RESOURCES,
    DevnetHandle,
    one_node_ensemble,
    shell_allocation,
)
from dmsgw.transport.rest import DMSTimeoutError

GIB = 1024**3


def _held(resources: Resources) -> tuple[float, int, int]:
    return (resources.cpu.cores, resources.ram.size, resources.disk.size)


def _peer_of(dms_devnet: DevnetHandle, ensemble_id: str, node: str = "n1") -> str:
    manifest = dms_devnet.dms.deployment.manifest(ensemble_id).manifest
    return (manifest.nodes or {})[node].peer


def test_a_task_and_a_service_run_complete_log_and_shut_down(dms_devnet: DevnetHandle) -> None:
    dms = dms_devnet.dms
    marker = secrets.token_hex(4)
    ensemble = one_node_ensemble(
        {
            "job": shell_allocation("task", f"echo out-{marker}; echo err-{marker} >&2"),
            "web": shell_allocation("service", "exec sleep 300"),
        }
    )
    reply = dms.deployment.new(ensemble)
    assert reply.status == "OK" and reply.ensemble_id
    eid = reply.ensemble_id

    assert dms_devnet.wait_status(eid, "Running", "Failed") == "Running"
    job = dms_devnet.wait_allocation(eid, "n1.job", "completed")
    assert job.type == "task" and job.dns_name == "job.internal"
    assert dms.deployment.status(eid).status == "Running"  # the service still runs

    peer = _peer_of(dms_devnet, eid)
    held = dms.resources.allocated(to=peer).resources
    assert _held(held) == (0.5, GIB // 4, GIB // 4)  # the finished task gave its share back

    logs = dms.deployment.logs(eid, "job")  # the name in the ensemble: one node runs it
    assert (logs.allocation, logs.stdout, logs.stderr) == (
        "n1.job",
        f"out-{marker}\n",
        f"err-{marker}\n",
    )
    assert str(logs) == f"out-{marker}\nerr-{marker}\n"
    raw = dms.invoke("/dms/node/deployment/logs", {"EnsembleID": eid, "AllocationName": "n1.job"})
    assert (Path(raw.logs_written_to) / "stdout.log").read_text() == f"out-{marker}\n"

    free_before = dms.resources.free(to=peer).resources
    assert dms.deployment.shutdown(eid).ok
    assert dms_devnet.wait_status(eid, "Completed") == "Completed"
    manifest = dms.deployment.manifest(eid).manifest
    assert {k: a.status for k, a in (manifest.allocations or {}).items()} == {
        "n1.job": "completed",
        "n1.web": "completed",
    }
    free_after = dms.resources.free(to=peer).resources
    assert free_after.cpu.cores == free_before.cpu.cores + 0.5
    assert free_after.ram.size == free_before.ram.size + GIB // 4
    assert _held(dms.resources.allocated(to=peer).resources) == (0.0, 0, 0)
    listed = {d.orchestrator_id: d.status for d in dms.deployment.list().deployments or ()}
    assert listed[eid] == "Completed"


def test_shutdown_and_logs_need_a_known_running_deployment(dms_devnet: DevnetHandle) -> None:
    dms = dms_devnet.dms
    reply = dms.deployment.new(one_node_ensemble({"once": shell_allocation("task", "true")}))
    eid = reply.ensemble_id
    assert dms_devnet.wait_status(eid, "Completed", "Failed") == "Completed"
    with pytest.raises(DMSBehaviorError, match="deployment is not running"):
        dms.deployment.shutdown(eid)
    with pytest.raises(DMSBehaviorError, match="deployment not found"):
        dms.deployment.status("no-such-deployment")
    with pytest.raises(DMSBehaviorError, match=r"node not found for allocation n1\.nope"):
        dms.invoke("/dms/node/deployment/logs", {"EnsembleID": eid, "AllocationName": "n1.nope"})
    with pytest.raises(ClientArgumentError, match=r"has no allocation 'nope' \(it has: n1\.once\)"):
        dms.deployment.logs(eid, "nope")


def test_a_pinned_peer_is_honoured(dms_devnet: DevnetHandle) -> None:
    dms = dms_devnet.dms
    others = sorted(dms.peers.list().peers or ())
    assert others, "the devnet needs a peer besides the one the gateway talks to"
    for peer in (others[-1], dms.peers.self().id):
        reply = dms.deployment.new(
            one_node_ensemble({"pin": shell_allocation("task", "true")}, peer=peer)
        )
        eid = reply.ensemble_id
        assert dms_devnet.wait_status(eid, "Completed", "Failed") == "Completed"
        assert _peer_of(dms_devnet, eid) == peer


def test_excluded_peers_get_nothing(dms_devnet: DevnetHandle) -> None:
    dms = dms_devnet.dms
    others = sorted(dms.peers.list().peers or ())
    ensemble = one_node_ensemble({"x": shell_allocation("task", "true")})
    # the orchestrating node bids on its own request too, so it is excluded as well
    ensemble["v1"]["exclude_peers"] = [dms.peers.self().id, *others[:-1]]
    eid = dms.deployment.new(ensemble).ensemble_id
    assert dms_devnet.wait_status(eid, "Completed", "Failed") == "Completed"
    assert _peer_of(dms_devnet, eid) == others[-1]


def test_more_gpus_than_any_node_has_fails_as_a_dms_does(dms_devnet: DevnetHandle) -> None:
    dms = dms_devnet.dms
    greedy = shell_allocation("task", "true")
    greedy["resources"] = {**SMALL_RESOURCES, "gpus": [{"vram": GIB, "vendor": "NVIDIA"}] * 64}
    reply = dms.deployment.new(one_node_ensemble({"greedy": greedy}))
    assert reply.status == "OK"  # a DMS accepts it, then finds no node that bids
    assert dms_devnet.wait_status(reply.ensemble_id, "Failed", "Running") == "Failed"
    with pytest.raises(DMSBehaviorError, match="deployment is not running"):
        dms.deployment.shutdown(reply.ensemble_id)


def test_an_invalid_ensemble_is_refused_with_the_reasons(dms_devnet: DevnetHandle) -> None:
    broken = one_node_ensemble({"a": shell_allocation("task", "true", depends_on=["ghost"])})
    with pytest.raises(DMSBehaviorError, match="failed to validate ensemble configuration") as info:
        dms_devnet.dms.deployment.new(broken)
    assert "ghost" in str(info.value)


def test_a_call_without_the_capability_is_dropped_as_a_408(dms_devnet: DevnetHandle) -> None:
    with dms_devnet.stranger() as stranger, pytest.raises(DMSTimeoutError) as info:
        stranger.peers.list(timeout=3)
    assert info.value.verdict is not None and not info.value.verdict.accepted


def test_an_expired_envelope_is_dropped_as_a_408(dms_devnet: DevnetHandle) -> None:
    import time

    def an_hour_late() -> int:
        return time.time_ns() - 3600 * 1_000_000_000

    with dms_devnet.stranger(clock=an_hour_late) as late, pytest.raises(DMSTimeoutError):
        late.peers.list(timeout=3)


def test_resources_and_onboarding_answer_in_dms_units(dms_devnet: DevnetHandle) -> None:
    dms = dms_devnet.dms
    assert dms.onboarding.status().onboarded in (True, False)
    spec = dms.hardware.spec().resources
    assert spec.cpu.cores > 0 and spec.ram.size >= GIB and spec.disk.size >= GIB
    status = dms.public.status()
    assert status.status == "OK" and status.resources.ram.size == spec.ram.size
    free, onboarded = dms.resources.free().resources, dms.resources.onboarded().resources
    assert free.cpu.cores <= onboarded.cpu.cores <= spec.cpu.cores
