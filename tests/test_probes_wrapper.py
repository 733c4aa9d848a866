"""The probes' pieces on their own: the wrapper's probe loops run with ``sh`` on tiny commands,
the markers they write, the ledger that folds them, and the container status that follows.
The whole path through the plugin API is in ``test_gateway_probes.py``.
"""

from __future__ import annotations

import os
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from dmsgw.behaviors.status import AllocationInfo
from dmsgw.interlink.records.container_runs import Runs
from dmsgw.interlink.records.pod_status import ContainerObservation, container_statuses
from dmsgw.interlink.records.probe_state import ProbeState
from dmsgw.interlink.state.pod_store import pack, unpack
from dmsgw.interlink.translate.inputs import Container
from dmsgw.interlink.translate.probes import probe_runs
from dmsgw.interlink.translate.run_markers import ProbeMarker, markers, probe_markers, strip_marker
from dmsgw.interlink.translate.wrapper import Hooks, wrapper_script
from dmsgw.interlink.wire import k8s
from tests.support.wrapper_runs import RUN_TIMEOUT_S, run_wrapper

"""A generous bound: the scripts below end within a few probe periods."""


def _exec(command: str, **timings: Any) -> dict[str, Any]:
    return {"exec": {"command": ["/bin/sh", "-c", command]}, "periodSeconds": 1, **timings}


def test_a_failed_liveness_probe_runs_pre_stop_then_terms_then_kills_after_the_grace(
    tmp_path: Path,
) -> None:
    spec = {
        "name": "main",
        "image": "x",
        "command": ["x"],
        "livenessProbe": _exec("echo sick; exit 1", failureThreshold=1),
    }
    # The command ignores TERM: only the KILL after the grace period ends it.
    done = run_wrapper(tmp_path, spec, "trap '' TERM; exec sleep 30", pre_stop="touch pre-stopped")
    assert done.returncode == 137
    assert (tmp_path / "pre-stopped").exists()
    assert done.stderr.decode().splitlines() == [
        "dmsgw.io/started",
        "dmsgw.io/probe=liveness:failing:exec /bin/sh -c 'echo sick; exit 1': sick",
        "dmsgw.io/probe=liveness:down",
        "dmsgw.io/exit-code=137",
    ]


def test_user_text_in_a_pre_stop_hook_is_never_taken_for_a_placeholder(tmp_path: Path) -> None:
    """``GRACE`` in a ``preStop`` command stays as written when probes are present (it once
    became the grace period: ``GRACEFUL`` wrote ``30FUL``), and so do the other names."""
    spec = {
        "name": "main",
        "image": "x",
        "command": ["x"],
        "livenessProbe": _exec("exit 1", failureThreshold=1),
    }
    words = "GRACEFUL-shutdown PRE_STOP PROBE_MARKER WGET_CURL_PYTHON3"
    hook = f"echo {words} > pre-stopped"
    done = run_wrapper(tmp_path, spec, "exec sleep 30", pre_stop=hook)
    assert done.returncode == 143
    assert (tmp_path / "pre-stopped").read_text() == words + "\n"


def test_a_stopped_wrapper_runs_pre_stop_terms_and_kills_after_the_grace(tmp_path: Path) -> None:
    """Asked to stop, the wrapper runs ``preStop``, TERMs the command and, as the kubelet,
    KILLs it once the grace period (1 s here) has passed: it used to wait for the command
    for as long as the DMS let it."""
    container = Container("spec.containers[0]", k8s.Container(name="main", image="x"), None)
    script = wrapper_script(container, Hooks(pre_stop="touch pre-stopped"), "", (), 1)
    wrapper = subprocess.Popen(
        [
            "/bin/sh",
            "-c",
            script,
            "dmsgw-pod",
            "/bin/sh",
            "-c",
            "trap '' TERM; echo ready; exec sleep 60",
        ],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert wrapper.stdout is not None
        assert strip_marker(wrapper.stdout.readline()) == b""  # the run's start, on stdout too
        assert wrapper.stdout.readline() == b"ready\n"  # TERM is ignored from now on
        wrapper.terminate()
        assert wrapper.wait(timeout=RUN_TIMEOUT_S) == 137
        assert (tmp_path / "pre-stopped").exists()
    finally:
        wrapper.kill()
        wrapper.wait()
        assert wrapper.stdout is not None
        wrapper.stdout.close()


def test_readiness_failures_flip_ready_and_never_stop_the_command(tmp_path: Path) -> None:
    """Ready after one success, down after one failure (the thresholds), and the command runs
    on to its own end."""
    spec = {
        "name": "main",
        "image": "x",
        "command": ["x"],
        # succeeds once, then fails, counting its calls
        "readinessProbe": _exec("echo . >> calls; [ $(wc -l < calls) -le 1 ]", failureThreshold=1),
    }
    done = run_wrapper(
        tmp_path, spec, 'until [ "$(cat calls 2>/dev/null | wc -l)" -ge 3 ]; do sleep 0.1; done'
    )
    assert done.returncode == 0
    assert done.stderr.decode().splitlines() == [
        "dmsgw.io/started",
        "dmsgw.io/probe=readiness:ok",
        "dmsgw.io/probe=readiness:failing:exec /bin/sh -c "
        "'echo . >> calls; [ $(wc -l < calls) -le 1 ]': exit status 1",
        "dmsgw.io/probe=readiness:down",
        "dmsgw.io/exit-code=0",
    ]


_ENDINGS = {
    # a readiness probe that fails with output, the command ending by itself
    "the command's own end": (
        {"readinessProbe": _exec("echo . >> calls; echo not yet; exit 1", failureThreshold=1)},
        'until [ "$(cat calls 2>/dev/null | wc -l)" -ge 2 ]; do sleep 0.1; done',
        0,
        "readiness:failing:exec /bin/sh -c 'echo . >> calls; echo not yet; exit 1': not yet",
    ),
    # a liveness probe that stops the command, a readiness one beside it
    "a failed liveness probe": (
        {
            "livenessProbe": _exec("echo sick; exit 1", failureThreshold=1),
            "readinessProbe": _exec("echo fine"),
        },
        "exec sleep 30",
        143,
        "liveness:failing:exec /bin/sh -c 'echo sick; exit 1': sick",
    ),
    # a startup probe that fails: the prober ends before the command does
    "a failed startup probe": (
        {"startupProbe": _exec("echo booting; exit 1", failureThreshold=1)},
        "exec sleep 30",
        143,
        "startup:failing:exec /bin/sh -c 'echo booting; exit 1': booting",
    ),
}


@pytest.mark.parametrize("ending", list(_ENDINGS))
def test_the_probes_leave_no_file_behind_when_the_container_ends(
    tmp_path: Path, ending: str
) -> None:
    """Each check's output is read (the marker carries its last line), then removed; nothing
    of the probes is left in ``$TMPDIR`` once the wrapper exited (one file per probe per run
    was, until the pod's sandbox went)."""
    probes, command, code, failing = _ENDINGS[ending]
    temp = tmp_path / "tmp"
    temp.mkdir()
    spec = {"name": "main", "image": "x", "command": ["x"], **probes}
    done = run_wrapper(tmp_path, spec, command, env={**os.environ, "TMPDIR": str(temp)})
    assert done.returncode == code
    assert f"dmsgw.io/probe={failing}" in done.stderr.decode().splitlines()
    assert sorted(temp.rglob("*")) == []


def test_a_stopped_wrapper_removes_its_probes_files_before_it_exits(tmp_path: Path) -> None:
    """Asked to stop while its probes run, the wrapper ends them and removes their files
    before it exits (the container, and with it every process of the run, ends then)."""
    temp = tmp_path / "tmp"
    temp.mkdir()
    spec = {
        "name": "main",
        "image": "x",
        "command": ["x"],
        "livenessProbe": _exec("echo alive"),
        "readinessProbe": _exec("echo not yet; exit 1", failureThreshold=1),
    }
    container = Container("spec.containers[0]", k8s.Container.model_validate(spec), None)
    script = wrapper_script(container, Hooks(), "", probe_runs(container), 1)
    wrapper = subprocess.Popen(
        ["/bin/sh", "-c", script, "dmsgw-pod", "/bin/sh", "-c", "exec sleep 60"],
        cwd=tmp_path,
        env={**os.environ, "TMPDIR": str(temp)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        assert wrapper.stderr is not None
        failing = b"dmsgw.io/probe=readiness:failing:exec /bin/sh -c 'echo not yet; exit 1': "
        while not wrapper.stderr.readline().startswith(failing):  # a check's output was read
            assert wrapper.poll() is None
        wrapper.terminate()
        assert wrapper.wait(timeout=RUN_TIMEOUT_S) == 143
        assert sorted(temp.rglob("*")) == []
    finally:
        wrapper.kill()
        wrapper.wait()
        assert wrapper.stderr is not None
        wrapper.stderr.close()


# --- markers, ledger, status -----------------------------------------------------------------

_LOG = b"".join(
    [
        b"dmsgw.io/started\n",
        b"dmsgw.io/probe=startup:failing:HTTP GET http://127.0.0.1:80/s: status 503\n",
        b"partial output dmsgw.io/probe=startup:ok\n",
        b"dmsgw.io/probe=readiness:ok\n",
        b"dmsgw.io/probe=liveness:failing:exec false: exit status 1\n",
        b"dmsgw.io/probe=liveness:down\n",
        b"dmsgw.io/exit-code=143\n",
        b"dmsgw.io/started\n",
        b"dmsgw.io/probe=bogus:ok\n",
    ]
)


def test_probe_markers_are_read_in_order_with_the_runs_and_kept_out_of_the_logs() -> None:
    assert list(probe_markers(_LOG)) == [
        ProbeMarker(""),
        ProbeMarker("startup", "failing", "HTTP GET http://127.0.0.1:80/s: status 503"),
        ProbeMarker("startup", "ok"),
        ProbeMarker("readiness", "ok"),
        ProbeMarker("liveness", "failing", "exec false: exit status 1"),
        ProbeMarker("liveness", "down"),
        ProbeMarker(""),
    ]
    # the runs' markers are read as before, probe markers aside
    assert [m.exit_code for m in markers(_LOG)] == [None, 143, None]
    kept = b"".join(strip_marker(line) for line in _LOG.splitlines(keepends=True))
    assert kept == b"partial output \ndmsgw.io/probe=bogus:ok\n"


def test_the_ledger_follows_each_run_and_keeps_why_a_probe_killed_the_last() -> None:
    first = list(probe_markers(_LOG.rsplit(b"dmsgw.io/exit-code", 1)[0]))
    running = ProbeState().read(first)
    assert (running.started, running.ready, running.reported) == (True, True, True)
    assert running.reason("liveness") == "exec false: exit status 1"
    assert running.killed_by == (
        "killed by the gateway: its liveness probe failed: exec false: exit status 1"
    )
    after = running.read([ProbeMarker("")])  # the DMS restarted it
    assert (after.started, after.ready, after.reported, after.killed_by) == (
        False,
        False,
        False,
        "",
    )
    assert after.previous_killed_by == running.killed_by
    assert ProbeState.from_map(after.to_map()) == after
    assert ProbeState.from_map({"started": "yes", "failing": [["a"], 3]}) == ProbeState()
    down = running.read([ProbeMarker("readiness", "down")])
    assert (down.started, down.ready) == (True, False)


def test_runs_carry_the_probes_to_the_status_and_the_kill_to_the_last_state() -> None:
    runs = Runs().read(markers(_LOG), len(_LOG)).read_probes(probe_markers(_LOG))
    assert Runs.from_map(runs.to_map()) == runs
    assert unpack(pack(runs.to_map())) == runs.to_map()  # a resumed pod compares the two
    seen = runs.observation()
    assert seen.last_state is not None and seen.last_state.terminated is not None
    assert seen.last_state.terminated.exit_code == 143
    assert seen.last_state.terminated.message.startswith("killed by the gateway: its liveness")
    assert (seen.started, seen.ready) == (None, None)  # nothing reported yet in this run
    assert seen.restart_count == 1


@pytest.mark.parametrize(
    ("seen", "health", "ready", "started"),
    [
        (ContainerObservation(), "", False, False),  # nothing reported yet
        (ContainerObservation(), "healthy", True, True),  # an old deployment's DMS check
        (ContainerObservation(started=True, ready=False), "healthy", False, True),
        (ContainerObservation(started=True, ready=True), "", True, True),
        (ContainerObservation(started=False, ready=True), "", False, False),
    ],
)
def test_started_and_ready_follow_the_wrappers_probes_over_the_health_check(
    seen: ContainerObservation, health: str, ready: bool, started: bool
) -> None:
    probe = {"exec": {"command": ["true"]}}
    pod = k8s.Pod.model_validate(
        {
            "metadata": {"name": "p", "namespace": "default", "uid": "u"},
            "spec": {
                "containers": [
                    {"name": "main", "image": "x", "startupProbe": probe, "readinessProbe": probe}
                ]
            },
        }
    )
    info = AllocationInfo(
        allocation_id="e_pod.main", status="running", has_health_check=bool(health), health=health
    )
    (status,) = container_statuses(
        pod,
        "Running",
        now=datetime(2026, 1, 1, tzinfo=UTC),
        allocation_info={"e_pod.main": info},
        observations={"main": seen},
    ).containers
    assert (status.ready, status.started) == (ready, started)
