"""The embedded devnet's host safety: allocations run unprivileged under a root devnet, die
with their devnet however it ends, and a dead devnet's working directory is removed by the
next one to start, never a live one's.

The SIGKILL tests run the devnet in a child process (``python -c``) and kill it; processes are
seen to end by polling ``/proc`` with a bound, never after a fixed sleep.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dmsgw.devnet.confinement import (
    IDENTITY_BASE,
    ConfinementError,
    RunAs,
    choose_run_as,
    describe_run_as,
    parse_run_as,
    unprivileged,
)
from dmsgw.devnet.devnet import Devnet
from dmsgw.devnet.executor import probe_isolation, resident_bytes
from dmsgw.devnet.pytest_plugin import one_node_ensemble, shell_allocation, start_embedded
from dmsgw.devnet.sandbox import Isolation

ISOLATIONS = sorted({Isolation.REWRITE, asyncio.run(probe_isolation())})
"""Path rewriting always; mount namespaces too where this process can make them (root)."""
ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(not ROOT, reason="only root can run allocations as another user")
GONE_WITHIN_S = 10.0


def _status(pid: int) -> dict[str, str]:
    """``/proc/<pid>/status`` as a map."""
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return dict(line.split(":\t", 1) for line in lines if ":\t" in line)


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie that nobody reaped yet does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def _wait_gone(pids: list[int]) -> list[int]:
    """Poll until none of ``pids`` runs, for at most :data:`GONE_WITHIN_S`; those still alive."""
    deadline = time.monotonic() + GONE_WITHIN_S
    while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.02)
    return [pid for pid in pids if _alive(pid)]


# --- who allocations run as ------------------------------------------------------------------


@needs_root
@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_a_root_devnet_runs_allocations_unprivileged(isolation: Isolation) -> None:
    """The set-up, the provision scripts, the command and the health check all run as the
    pod's own user (from the devnet's high range, not ``nobody``) with no supplementary
    group, cannot gain privileges, and can write their sandbox; they used to run as root."""
    ids = 'echo "$(id -u) $(id -g) $(id -G)"'
    own = f'[ "$(id -u)" = "$(stat -c %u "$HOME")" ] && [ "$(id -u)" -ge {IDENTITY_BASE} ]'
    check = ["sh", "-c", own]
    svc = shell_allocation(
        "service",
        f'{ids}; cat "$HOME/by-script"; echo x > "$HOME/mine" && echo wrote; exec sleep 60',
        provision=["who"],
        healthcheck={"type": "command", "exec": check, "interval": 10**8},
    )
    ensemble = one_node_ensemble({"svc": svc})
    script = f'{ids} > "$HOME/by-script"\n'
    ensemble["v1"]["scripts"] = {"who": base64.b64encode(script.encode()).decode()}
    h = start_embedded(nodes=1, seed=f"unprivileged-{isolation}", isolation=isolation)
    try:
        eid = h.dms.deployment.new(ensemble).ensemble_id
        assert h.wait_status(eid, "Running", "Failed") == "Running"
        plan = h.faults.allocation(eid, "svc").plan
        assert plan is not None and plan.run_as is not None
        user = plan.run_as
        assert user.uid >= IDENTITY_BASE and user != unprivileged()
        alone = f"{user.uid} {user.gid} {user.gid}"
        h.wait_for(
            lambda: h.stdout(eid, "n1.svc") == f"{alone}\n{alone}\nwrote\n",
            what="the command's and the script's ids",
        )
        pid = h.faults.allocation(eid, "svc").pid
        assert pid is not None
        status = _status(_command(pid, b"sleep\0"))
        assert status["Uid"].split() == [str(user.uid)] * 4  # real, effective, saved, fs
        assert status["Gid"].split() == [str(user.gid)] * 4
        assert status["Groups"].strip() == ""
        assert (status["NoNewPrivs"], int(status["CapEff"], 16)) == ("1", 0)

        def healthy() -> bool:
            info = h.dms.deployment.status(eid).allocation_info or {}
            return any(i.health == "healthy" for i in info.values())

        h.wait_for(healthy, what="the health check, run as the same user, to pass")
    finally:
        h.close()


def _command(pid: int, argv0: bytes) -> int:
    """The process of an allocation (``pid``: its main process) whose command line starts
    with ``argv0`` (in namespace isolation the main process is ``unshare``, whose child, the
    PID namespace's init, starts the command)."""
    for found in resident_bytes(pid):
        if Path(f"/proc/{found}/cmdline").read_bytes().startswith(argv0):
            return found
    raise AssertionError(f"no process of allocation {pid} runs {argv0!r}")


@needs_root
def test_the_user_can_be_chosen_but_never_root() -> None:
    assert choose_run_as(None) == unprivileged()
    assert choose_run_as(RunAs(1234, 5678)) == RunAs(1234, 5678)
    with pytest.raises(ConfinementError, match="never run as root"):
        choose_run_as(RunAs(0, 0))
    with pytest.raises(ConfinementError, match="never run as root"):
        choose_run_as(RunAs(1234, 0))
    assert "allocations run as uid" in describe_run_as(unprivileged())


def test_a_devnet_that_is_not_root_runs_allocations_as_its_own_user(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.setattr(os, "getegid", lambda: 1000)
    assert choose_run_as(None) is None
    assert choose_run_as(RunAs(1000, 1000)) is None
    with pytest.raises(ConfinementError, match="needs root"):
        choose_run_as(RunAs(1234, 1234))
    assert "this process's user (uid 1000): not root" in describe_run_as(None)


def test_run_as_is_parsed_from_user_and_group() -> None:
    nobody = unprivileged()
    assert parse_run_as("nobody").uid == nobody.uid
    assert parse_run_as("4321") == RunAs(4321, 4321)
    assert parse_run_as("4321:99") == RunAs(4321, 99)
    with pytest.raises(ConfinementError, match="no user 'no-such-user'"):
        parse_run_as("no-such-user")
    with pytest.raises(ConfinementError, match="no group 'no-such-group'"):
        parse_run_as("4321:no-such-group")


@needs_root
async def test_a_work_dir_the_allocations_user_cannot_reach_is_refused(host_dir: Path) -> None:
    locked = host_dir / "locked"
    locked.mkdir(mode=0o700)  # root's: the allocations' user may not enter
    devnet = Devnet(1, work_parent=locked)
    with pytest.raises(ConfinementError, match=f"cannot enter {locked}"):
        await devnet.start()
    await devnet.stop()


# --- dying with the devnet -------------------------------------------------------------------

CHILD = """
import json, sys
from dmsgw.devnet.executor import resident_bytes
from dmsgw.devnet.pytest_plugin import one_node_ensemble, shell_allocation, start_embedded

h = start_embedded(nodes=1, seed="killed", isolation=sys.argv[1])
script = "sleep 1000 & echo $!; wait"
eid = h.dms.deployment.new(one_node_ensemble({"svc": shell_allocation("service", script)}))
eid = eid.ensemble_id
h.wait_status(eid, "Running")
svc = h.faults.allocation(eid, "svc")
background = h.wait_for(lambda: svc.plan.stdout.read_text().strip(), what="the background sleep")
info = {"root": str(h.devnet.root), "watchdog": h.devnet.watchdog.pid}
others = sorted(set(resident_bytes(svc.pid)) - {svc.pid})  # host PIDs, not the namespace's
print(json.dumps({**info, "pids": [svc.pid, *others]}), flush=True)
sys.stdin.read()  # until killed
"""


@pytest.fixture
def children() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Devnets started in child processes; whatever is left of them is killed afterwards."""
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        proc.kill()
        proc.wait()


def _child_devnet(
    children: list[subprocess.Popen[bytes]], work_parent: Path, isolation: Isolation
) -> dict[str, Any]:
    """Start a devnet in a child process with a service whose command runs ``sleep 1000`` in
    the background; what it reports: its work dir, watchdog and the allocation's PIDs."""
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, isolation.value],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env={**os.environ, "TMPDIR": str(work_parent)},
    )
    children.append(proc)
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], 60)
    line = proc.stdout.readline() if ready else b""
    assert line, f"the child devnet did not start (exit status {proc.poll()})"
    info: dict[str, Any] = json.loads(line)
    info["proc"] = proc
    assert all(_alive(pid) for pid in info["pids"])
    return info


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_allocations_die_with_a_devnet_that_is_sigkilled(
    children: list[subprocess.Popen[bytes]], host_dir: Path, isolation: Isolation
) -> None:
    """The main process gets the parent-death signal, the watchdog kills the rest of its
    group (the background ``sleep``) and removes the working directory. Both used to live
    on, re-parented to PID 1, and the directory stayed."""
    child = _child_devnet(children, host_dir, isolation)
    child["proc"].kill()
    child["proc"].wait()
    assert _wait_gone([*child["pids"], child["watchdog"]]) == []
    assert not Path(child["root"]).exists()


def test_a_new_devnet_removes_what_a_dead_one_left_but_not_a_live_ones(
    children: list[subprocess.Popen[bytes]], host_dir: Path
) -> None:
    """With its watchdog killed first, a SIGKILLed devnet leaves its working directory: the
    next devnet to start removes it, and leaves those of devnets still running in another
    process and in its own."""
    dead = _child_devnet(children, host_dir, Isolation.REWRITE)
    alive = _child_devnet(children, host_dir, Isolation.REWRITE)
    os.kill(dead["watchdog"], signal.SIGKILL)
    assert _wait_gone([dead["watchdog"]]) == []
    dead["proc"].kill()
    dead["proc"].wait()
    main, background = dead["pids"]
    assert _wait_gone([main]) == []  # the parent-death signal, even without the watchdog
    os.kill(background, signal.SIGKILL)  # which alone would have ended the rest
    assert Path(dead["root"]).is_dir()

    async def start_two() -> dict[str, bool]:
        first, second = Devnet(1, work_parent=host_dir), Devnet(1, work_parent=host_dir)
        await first.start()
        await second.start()  # a second devnet in this process, the first one running
        try:
            assert first.root is not None and second.root is not None
            return {
                "dead one's": Path(dead["root"]).exists(),
                "first's": first.root.is_dir(),
                "second's": second.root.is_dir(),
                "other process's": Path(alive["root"]).is_dir(),
            }
        finally:
            await second.stop()
            await first.stop()

    left = asyncio.run(start_two())
    assert left == {"dead one's": False, "first's": True, "second's": True, "other process's": True}
