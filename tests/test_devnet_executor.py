"""The devnet's process executor as a DMS docker executor stand-in: provision scripts, named and
read-only volumes, stop signals, memory limits, and never writing outside its own directory.

Ensembles go through the gateway's client; the devnet's objects are read only for what a client
cannot see (exit codes, OOM kills, the orchestrator's failed attempts, volume directories).
Tests that must hold in both isolation modes start their own devnet in each.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import os
import re
import secrets
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dmsgw.behaviors.ensemble import SpecConfig, VolumeConfig
from dmsgw.devnet.cgroups import Cgroups
from dmsgw.devnet.confinement import unprivileged
from dmsgw.devnet.executor import OOM_ERROR, probe_isolation, resident_bytes
from dmsgw.devnet.protocol import AllocationDeploymentConfig
from dmsgw.devnet.pytest_plugin import (
    EmbeddedDevnet,
    one_node_ensemble,
    shell_allocation,
    start_embedded,
)
from dmsgw.devnet.sandbox import Isolation, SandboxError, plan_sandbox
from dmsgw.devnet.timeouts import TEST_TIMEOUTS

ISOLATIONS = sorted({Isolation.REWRITE, asyncio.run(probe_isolation())})
"""Path rewriting always; mount namespaces too where this process can make them (root)."""
MIB = 1 << 20
HOG = "x=$(head -c 167772160 /dev/zero | tr '\\0' x); sleep 30"
"""A shell holding 160 MiB for longer than any test waits (run by any user: no interpreter
that the allocations' user might not reach)."""


@pytest.fixture(params=ISOLATIONS)
def isolated(request: pytest.FixtureRequest) -> Iterator[EmbeddedDevnet]:
    """A fresh embedded devnet in each isolation mode."""
    handle = start_embedded(seed=f"executor-{request.param}", isolation=request.param)
    try:
        yield handle
    finally:
        handle.close()


def _with_scripts(allocations: dict[str, Any], scripts: dict[str, str], **node: Any) -> Any:
    ensemble = one_node_ensemble(allocations, **node)
    ensemble["v1"]["scripts"] = {
        name: base64.b64encode(body.encode()).decode() for name, body in scripts.items()
    }
    return ensemble


def _volume_dirs(h: EmbeddedDevnet) -> list[Path]:
    root = h.devnet.root
    assert root is not None
    return sorted(root.glob("*/volumes/*"))


def test_provision_scripts_write_declared_paths_inside_the_devnet(
    isolated: EmbeddedDevnet,
) -> None:
    """The safety rule: a provision script writing a declared volume path never reaches the
    host's file system, in either isolation mode (this once wrote /etc/cfg/app.conf)."""
    h = isolated
    top = Path(f"/dmsgw-test-{secrets.token_hex(4)}")
    conf = top / "etc" / "app.conf"
    volume = {"type": "local", "src": f"conf-{top.name}", "mount_destination": str(top / "etc")}
    ensemble = _with_scripts(
        {
            "svc": shell_allocation(
                "service", f"cat {conf}; exec sleep 60", volume=[volume], provision=["setup"]
            )
        },
        {"setup": f"mkdir -p {conf.parent}\nprintf 'x=1\\n' > {conf}\n"},
    )
    eid = h.dms.deployment.new(ensemble).ensemble_id
    assert h.wait_status(eid, "Running", "Failed") == "Running"
    h.wait_for(lambda: h.stdout(eid, "n1.svc") == "x=1\n", what="the configuration read back")
    if h.devnet.nodes[0].executor and h.devnet.nodes[0].executor.isolation is Isolation.REWRITE:
        assert not top.exists()  # no mount point either
    assert [p.name for p in _volume_dirs(h)] == [f"conf-{top.name}"]
    assert h.dms.deployment.shutdown(eid).ok
    assert h.wait_status(eid, "Completed") == "Completed"
    assert not top.exists()
    assert _volume_dirs(h) == []


def test_a_volume_over_tmp_hides_nothing_the_set_up_needs(isolated: EmbeddedDevnet) -> None:
    """The sandbox lives under /tmp: mounting a volume there must not hide the scripts, the
    key files or the other volumes' sources from the set-up."""
    h = isolated
    tag = secrets.token_hex(4)
    allocation = shell_allocation(
        "task",
        "cat /tmp/prepared /tmp/keys/id",
        volume=[{"type": "local", "src": f"tmp-{tag}", "mount_destination": "/tmp"}],
        keys=[{"type": "ssh", "file": f"key-{tag}\n", "dest": "/tmp/keys/id"}],
        provision=["setup"],
    )
    ensemble = _with_scripts({"job": allocation}, {"setup": "echo prepared > /tmp/prepared\n"})
    eid = h.dms.deployment.new(ensemble).ensemble_id
    assert h.wait_status(eid, "Completed", "Failed") == "Completed"
    assert h.stdout(eid, "n1.job") == f"prepared\nkey-{tag}\n"


def test_a_failing_provision_script_fails_the_start_with_its_stderr(
    embedded_devnet: EmbeddedDevnet,
) -> None:
    h = embedded_devnet
    ensemble = _with_scripts(
        {"job": shell_allocation("task", "echo never", provision=["setup"])},
        {"setup": "echo cannot prepare >&2\nexit 4\n"},
    )
    eid = h.dms.deployment.new(ensemble).ensemble_id
    assert h.wait_status(eid, "Failed", "Completed") == "Failed"
    reasons = "\n".join(h.orchestrator(eid).failures)
    assert re.search(
        r"start executor: allocation \S+job: provision script 'setup' exited with 4: "
        r"cannot prepare",
        reasons,
    ), reasons


def test_provision_scripts_have_their_own_time_limit() -> None:
    """Scripts may outlast the start timeout (they can wait for an init container); past
    ``provision_s`` they are killed and the start fails."""
    # start_s leaves room for making the allocation's network namespace under load
    timeouts = dataclasses.replace(TEST_TIMEOUTS, start_s=0.6, provision_s=1.5)
    h = start_embedded(seed="provision-time", timeouts=timeouts)
    try:
        slow = _with_scripts(
            {"svc": shell_allocation("service", "exec sleep 60", provision=["wait"])},
            {"wait": "sleep 0.9\n"},
        )
        eid = h.dms.deployment.new(slow).ensemble_id
        assert h.wait_status(eid, "Running", "Failed") == "Running"
        assert h.dms.deployment.shutdown(eid).ok

        stuck = _with_scripts(
            {"svc": shell_allocation("service", "exec sleep 60", provision=["wait"])},
            {"wait": "exec sleep 30\n"},
        )
        eid = h.dms.deployment.new(stuck).ensemble_id
        assert h.wait_status(eid, "Failed", "Running") == "Failed"
        failures = h.orchestrator(eid).failures
        assert any("did not finish within 1.5 s" in f for f in failures), failures
    finally:
        h.close()


@pytest.fixture
def one_user() -> Iterator[EmbeddedDevnet]:
    """A devnet running every pod as one user (as a devnet that is not root does), where
    deployments may share a named volume as Docker's do."""
    h = start_embedded(1, seed="one-user", run_as=unprivileged() if os.geteuid() == 0 else None)
    try:
        yield h
    finally:
        h.close()


def test_named_volumes_are_shared_and_removed_with_their_last_user(
    one_user: EmbeddedDevnet,
) -> None:
    h = one_user
    name = f"shared-{secrets.token_hex(4)}"
    peer = h.dms.peers.self().id
    volume = [{"type": "local", "src": name, "mount_destination": "/shared"}]
    writer = one_node_ensemble(
        {"w": shell_allocation("service", "echo hi > /shared/msg; exec sleep 60", volume=volume)},
        peer=peer,
    )
    reader = one_node_ensemble(
        {
            "r": shell_allocation(
                "service",
                "until [ -e /shared/msg ]; do sleep 0.05; done; cat /shared/msg; exec sleep 60",
                volume=volume,
            )
        },
        peer=peer,
    )
    first = h.dms.deployment.new(writer).ensemble_id
    second = h.dms.deployment.new(reader).ensemble_id
    for eid in (first, second):
        assert h.wait_status(eid, "Running", "Failed") == "Running"
    h.wait_for(lambda: h.stdout(second, "n1.r") == "hi\n", what="the reader to see the file")
    (directory,) = _volume_dirs(h)
    assert directory.name == name and directory.parent.parent.name == "node0"
    assert h.dms.deployment.shutdown(first).ok
    assert h.wait_status(first, "Completed") == "Completed"
    assert (directory / "msg").read_text() == "hi\n"  # the reader still uses it
    assert h.dms.deployment.shutdown(second).ok
    assert h.wait_status(second, "Completed") == "Completed"
    assert not directory.exists()


@pytest.mark.parametrize("src", ["a b", ".hidden", "data/x"])
def test_a_volume_source_that_is_neither_path_nor_name_is_refused(src: str, tmp_path: Path) -> None:
    """The orchestrator's validation refuses these first; the sandbox never turns one into a
    path outside the node's volume directory all the same."""
    config = AllocationDeploymentConfig(
        execution=SpecConfig(type="docker", params={"cmd": ["true"]}),
        volume=(VolumeConfig(type="local", src=src, mount_destination="/data"),),
    )
    with pytest.raises(SandboxError, match=re.escape(repr(src))):
        plan_sandbox(tmp_path / "alloc", config, Isolation.REWRITE, volumes=tmp_path / "volumes")


def test_shutdown_terms_the_main_process_only_then_kills_the_group(
    embedded_devnet: EmbeddedDevnet,
) -> None:
    """As ``docker stop``: the main process gets SIGTERM and decides what its children get;
    the rest of the group is SIGKILLed."""
    h = embedded_devnet
    child = "echo child $$; trap 'echo child-term' TERM; while :; do sleep 0.05; done"
    script = f"trap 'echo main-term; exit 0' TERM; sh -c \"{child}\" & while :; do sleep 0.05; done"
    eid = h.dms.deployment.new(
        one_node_ensemble({"svc": shell_allocation("service", script)})
    ).ensemble_id
    assert h.wait_status(eid, "Running", "Failed") == "Running"
    svc = h.faults.allocation(eid, "svc")
    started = h.wait_for(
        lambda: re.fullmatch(r"child (\d+)\n", h.stdout(eid, "n1.svc")), what="the child"
    )
    assert svc.pid is not None
    group = resident_bytes(svc.pid)  # its processes, by their PIDs on the host
    h.background.call(svc.shutdown())  # what a deployment's shutdown does to each allocation
    assert svc.plan is not None  # read on disk: a deployment's shutdown would remove it
    assert svc.plan.stdout.read_text() == f"{started.group(0)}main-term\n"
    assert svc.exit_code == 0
    assert len(group) >= 3  # the main shell, its child's shell, and at least a sleep
    for pid in group:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_memory_beyond_ram_size_is_killed_as_an_oom(embedded_devnet: EmbeddedDevnet) -> None:
    h = embedded_devnet
    hog = shell_allocation("task", HOG)
    hog["resources"] = {**hog["resources"], "ram": {"size": 64 * MIB}}
    eid = h.dms.deployment.new(one_node_ensemble({"hog": hog})).ensemble_id
    h.wait_allocation(eid, "n1.hog", "failed")
    allocation = h.faults.allocation(eid, "hog")
    assert (allocation.exit_code, allocation.oom_killed) == (137, True)
    record = h.orchestrator(eid).placed["n1.hog"]
    assert (record.exit_code, record.error) == (137, OOM_ERROR)


def test_where_no_cgroup_can_be_written_memory_is_sampled(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The fallback: the hog is seen by sampling (it holds its memory long enough)."""
    monkeypatch.setattr(Cgroups, "probe", classmethod(lambda cls, name: cls(())))
    h = start_embedded(seed="executor-sampled")
    try:
        assert "sampled resident memory" in h.devnet.cgroups.describe()  # type: ignore[union-attr]
        hog = shell_allocation("task", HOG)
        hog["resources"] = {**hog["resources"], "ram": {"size": 64 * MIB}}
        eid = h.dms.deployment.new(one_node_ensemble({"hog": hog})).ensemble_id
        h.wait_allocation(eid, "n1.hog", "failed")
        allocation = h.faults.allocation(eid, "hog")
        assert (allocation.exit_code, allocation.oom_killed) == (137, True)
        assert h.orchestrator(eid).placed["n1.hog"].error == OOM_ERROR
    finally:
        h.close()


def test_the_oom_kill_takes_the_largest_process_and_its_parent_lives_on(
    embedded_devnet: EmbeddedDevnet,
) -> None:
    """As the kernel's OOM killer in a Docker container's memory cgroup: the hog dies, the
    shell that started it sees 137 and ends the run with its own status."""
    h = embedded_devnet
    hog = f"sh -c {shlex.quote(HOG)}"
    shell = shell_allocation("task", f'{hog}; echo "child ended with $?"; exit 5')
    shell["resources"] = {**shell["resources"], "ram": {"size": 64 * MIB}}
    eid = h.dms.deployment.new(one_node_ensemble({"shell": shell})).ensemble_id
    h.wait_allocation(eid, "n1.shell", "failed")
    assert h.stdout(eid, "n1.shell") == "child ended with 137\n"
    allocation = h.faults.allocation(eid, "shell")
    assert (allocation.exit_code, allocation.oom_killed) == (5, True)
    assert h.orchestrator(eid).placed["n1.shell"].error == OOM_ERROR


SPIKE = ["/usr/bin/python3", "-c", "bytearray(200 * 1024 * 1024)"]
"""Takes 200 MiB and exits at once: over sooner than any sampling could notice (the system's
interpreter, which the allocations' unprivileged user can run, unlike this test's)."""


def _kernel_limits(h: EmbeddedDevnet) -> None:
    """Skip unless this host lets the devnet set kernel limits (and has the spike's Python)."""
    cgroups = h.devnet.cgroups
    if cgroups is None or not cgroups.memory:
        pytest.skip("this host lets the devnet write no memory cgroup")
    if not os.access(SPIKE[0], os.X_OK):
        pytest.skip(f"no {SPIKE[0]}")


def test_a_burst_too_short_to_sample_is_killed_by_the_kernel(
    embedded_devnet: EmbeddedDevnet,
) -> None:
    h = embedded_devnet
    _kernel_limits(h)
    spike = shell_allocation("task", "")
    spike["execution"]["params"]["cmd"] = SPIKE
    spike["resources"] = {**spike["resources"], "ram": {"size": 50 * MIB}}
    eid = h.dms.deployment.new(one_node_ensemble({"spike": spike})).ensemble_id
    h.wait_allocation(eid, "n1.spike", "failed")
    allocation = h.faults.allocation(eid, "spike")
    assert (allocation.exit_code, allocation.oom_killed) == (137, True)
    assert h.orchestrator(eid).placed["n1.spike"].error == OOM_ERROR


def _group_file(pid: int, controller: str, name: str) -> str:
    """A file of the control group ``pid`` is in for ``controller`` (v1, or v2's single)."""
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if controller in controllers.split(",") or not controllers:
            for mount in Path("/proc/self/mountinfo").read_text().splitlines():
                fields, _, tail = mount.partition(" - ")
                parts, rest = fields.split(), tail.split()
                kind_matches = rest[0] == ("cgroup" if controllers else "cgroup2")
                if kind_matches and (not controllers or controller in rest[2].split(",")):
                    directory = Path(parts[4]) / os.path.relpath(path, parts[3])
                    if (directory / name).exists():
                        return (directory / name).read_text().strip()
    raise AssertionError(f"process {pid} has no {controller} group with {name}")


def test_the_cpu_and_memory_limits_are_the_kernels(embedded_devnet: EmbeddedDevnet) -> None:
    """``cpu.cores`` becomes a CFS quota (Docker's ``NanoCPUs``), ``ram.size`` a hard limit,
    on the group the allocation's process is in from its start."""
    h = embedded_devnet
    _kernel_limits(h)
    if "cpu" not in h.devnet.cgroups.hierarchies:  # type: ignore[union-attr]
        pytest.skip("this host lets the devnet write no cpu cgroup")
    svc = shell_allocation("service", "sleep 30")
    svc["resources"] = {**svc["resources"], "cpu": {"cores": 0.5}, "ram": {"size": 64 * MIB}}
    eid = h.dms.deployment.new(one_node_ensemble({"svc": svc})).ensemble_id
    assert h.wait_status(eid, "Running", "Failed") == "Running"
    pid = h.faults.allocation(eid, "svc").pid
    assert pid is not None
    v2 = h.devnet.cgroups.hierarchies["cpu"].v2  # type: ignore[union-attr]
    if v2:
        assert _group_file(pid, "cpu", "cpu.max") == "50000 100000"
        assert _group_file(pid, "memory", "memory.max") == str(64 * MIB)
    else:
        assert _group_file(pid, "cpu", "cpu.cfs_quota_us") == "50000"
        assert _group_file(pid, "memory", "memory.limit_in_bytes") == str(64 * MIB)
    assert h.dms.deployment.shutdown(eid).ok


def test_a_set_up_that_failed_leaves_no_cgroup_of_its_run(embedded_devnet: EmbeddedDevnet) -> None:
    """A failed provision script ends its run: the run's groups go with it, not at the
    devnet's stop (a retried deployment would otherwise pile them up)."""
    h = embedded_devnet
    cgroups = h.devnet.cgroups
    if cgroups is None or not cgroups.hierarchies:
        pytest.skip("this host lets the devnet write no cgroup")
    ensemble = _with_scripts(
        {"job": shell_allocation("task", "echo never", provision=["setup"])},
        {"setup": "exit 4\n"},
    )
    eid = h.dms.deployment.new(ensemble).ensemble_id
    assert h.wait_status(eid, "Failed", "Completed") == "Failed"
    runs = [
        group.name
        for hierarchy in cgroups.hierarchies.values()
        for group in hierarchy.directory.iterdir()
        if group.is_dir() and group.name.startswith(f"{eid}")
    ]
    assert runs == []


@pytest.mark.skipif(os.geteuid() != 0, reason="a user per pod needs a root devnet")
def test_with_a_user_per_pod_another_deployments_volume_is_refused(
    embedded_devnet: EmbeddedDevnet,
) -> None:
    """Naming another pod's volume would be a way into its files: refused, saying why."""
    h = embedded_devnet
    name = f"mine-{secrets.token_hex(4)}"
    peer = h.dms.peers.self().id
    volume = [{"type": "local", "src": name, "mount_destination": "/mine"}]
    owner = shell_allocation("service", "echo secret > /mine/x; exec sleep 60", volume=volume)
    first = h.dms.deployment.new(one_node_ensemble({"o": owner}, peer=peer)).ensemble_id
    assert h.wait_status(first, "Running", "Failed") == "Running"
    thief = shell_allocation("service", "cat /mine/x; exec sleep 60", volume=volume)
    second = h.dms.deployment.new(one_node_ensemble({"t": thief}, peer=peer)).ensemble_id
    assert h.wait_status(second, "Failed", "Running") == "Failed"
    reasons = " ".join([*h.orchestrator(second).failures, h.orchestrator(second).error])
    assert f"volume {name!r} belongs to another deployment" in reasons
