"""The logs the gateway keeps of the runs it saw end (decision 69): each run's part of the
allocation's files, bounded, private, the newest two per container, until the pod is deleted;
and which run a log request asks for, by the kubelet's rule."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import pytest

from dmsgw.behaviors.catalog import DEPLOYMENT_LOGS
from dmsgw.behaviors.deployment import DeploymentLogsResponse
from dmsgw.interlink.logs import kept_logs
from dmsgw.interlink.logs.dms_logs import run_part
from dmsgw.interlink.logs.kept_logs import KeptLogs, NoRunError, wanted_run
from dmsgw.interlink.pods.run_reads import keep_last_runs
from dmsgw.interlink.records.container_runs import Runs
from dmsgw.interlink.wire import k8s

START = b"dmsgw.io/started\n"


def _files(directory: Path, stdout: bytes, stderr: bytes) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "stdout.log").write_bytes(stdout)
    (directory / "stderr.log").write_bytes(stderr)
    return directory


def _part(path: Path, run: int | None) -> bytes:
    begin, end = run_part(path, run)
    return path.read_bytes()[begin:end]


def test_each_run_of_an_allocations_files_is_cut_at_its_start_marker(tmp_path: Path) -> None:
    path = tmp_path / "stdout.log"
    path.write_bytes(START + b"one\n" + b"partial" + START + b"two\nthree\n" + START)
    assert [_part(path, run) for run in (1, 2, 3)] == [b"one\n", b"two\nthree\n", b""]
    assert _part(path, 4) == b"" and _part(path, None) == path.read_bytes()
    path.write_bytes(b"no markers: an unwrapped container\n")
    assert _part(path, 2) == path.read_bytes()
    assert run_part(tmp_path / "missing.log", 1) == (0, 0)


async def test_the_newest_two_runs_are_kept_privately_until_the_pod_is_deleted(
    tmp_path: Path,
) -> None:
    logs = _files(
        tmp_path / "dms", START + b"out 1\n" + START + b"out 2\n" + START + b"out 3\n", START * 3
    )
    kept = KeptLogs.beside(tmp_path / "state" / "pods.sqlite3")
    (tmp_path / "state").mkdir()
    for run in (1, 2, 3):
        await kept.keep("uid-1", "main", run + 4, logs, run)
    assert [kept.directory("uid-1", "main", run) is None for run in (5, 6, 7)] == [
        True,
        False,
        False,
    ]
    seventh = kept.directory("uid-1", "main", 7)
    assert seventh is not None and (seventh / "stdout.log").read_bytes() == b"out 3\n"
    for path in (kept.root, seventh.parent, seventh):
        assert stat.S_IMODE(path.stat().st_mode) == 0o700
    assert stat.S_IMODE((seventh / "stdout.log").stat().st_mode) == 0o600
    assert os.stat(seventh / "stdout.log").st_mtime_ns == os.stat(logs / "stdout.log").st_mtime_ns
    await kept.forget("uid-1")
    assert kept.directory("uid-1", "main", 7) is None
    assert kept.root.exists()  # other pods' runs stay


async def test_a_kept_run_is_its_last_bytes_from_a_whole_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(kept_logs, "KEPT_RUN_BYTES", 10)
    logs = _files(tmp_path / "dms", START + b"first line\nsecond\nlast\n", b"")
    kept = KeptLogs(tmp_path / "kept")
    await kept.keep("u", "c", 1, logs, 1)
    directory = kept.directory("u", "c", 1)
    assert directory is not None and (directory / "stdout.log").read_bytes() == b"last\n"


def _status(state: k8s.ContainerState, *, ran_before: bool) -> k8s.ContainerStatus:
    last = k8s.ContainerState(
        terminated=k8s.ContainerStateTerminated(exit_code=1) if ran_before else None
    )
    return k8s.ContainerStatus(
        name="c", state=state, last_state=last, ready=False, restart_count=0, image="i", image_id=""
    )


RUNNING = k8s.ContainerState(running=k8s.ContainerStateRunning())
BACKOFF = k8s.ContainerState(waiting=k8s.ContainerStateWaiting(reason="CrashLoopBackOff"))
CREATING = k8s.ContainerState(waiting=k8s.ContainerStateWaiting(reason="ContainerCreating"))
ENDED = k8s.ContainerState(terminated=k8s.ContainerStateTerminated(exit_code=2))


def test_previous_is_the_run_in_last_state_and_the_current_one_the_newest() -> None:
    """Four runs over two deployments (the fourth running): Previous is the third; backing
    off after the fourth, Previous and the logs are both the fourth's, as the kubelet
    serves a container that waits to run again."""
    fourth = Runs(earlier_runs=2, started=2, ended=1)
    assert wanted_run(_status(RUNNING, ran_before=True), fourth, previous=True) == 3
    assert wanted_run(_status(RUNNING, ran_before=True), fourth, previous=False) == 4
    ended = Runs(earlier_runs=2, started=2, ended=2)
    assert wanted_run(_status(BACKOFF, ran_before=True), ended, previous=True) == 4
    assert wanted_run(_status(BACKOFF, ran_before=True), ended, previous=False) == 4
    assert wanted_run(_status(ENDED, ran_before=True), ended, previous=True) == 3
    redeployed = ended.next_ensemble()  # waiting to start in the next deployment
    assert wanted_run(_status(CREATING, ran_before=True), redeployed, previous=True) == 4


def test_previous_of_a_container_that_never_restarted_is_the_callers_mistake() -> None:
    with pytest.raises(NoRunError):
        wanted_run(_status(RUNNING, ran_before=False), Runs(started=1), previous=True)
    with pytest.raises(NoRunError):
        wanted_run(_status(CREATING, ran_before=False), Runs(), previous=True)
    # The first run, shown running before its marker was read, is the current one.
    assert wanted_run(_status(RUNNING, ran_before=False), Runs(), previous=False) == 1


def test_a_new_deployments_run_shown_before_its_marker_is_the_next_run() -> None:
    """A deployment lost with its first run; the next one runs, its start marker unread: the
    logs are the new run's (2, of the current deployment), Previous the lost one's (1)."""
    redeployed = Runs(started=1).next_ensemble()
    shown = _status(RUNNING, ran_before=True).model_copy(update={"container_id": "dms://e2_pod.c"})
    assert wanted_run(shown, redeployed, previous=False, ensemble_id="e2") == 2
    assert wanted_run(shown, redeployed, previous=True, ensemble_id="e2") == 1
    # shown before the pod moved on to deployment e3: run 1 was that one's, not a new one
    assert wanted_run(shown, redeployed, previous=False, ensemble_id="e3") == 1
    assert wanted_run(shown, redeployed, previous=False, ensemble_id="") == 1  # backing off


async def test_a_run_kept_on_the_way_is_kept_again_grown_before_its_ensemble_stops(
    tmp_path: Path,
) -> None:
    """The exit marker on stderr can be read before the run's last stdout line reached the
    file (two pipes): the copy kept then is refreshed before the ensemble stops, and a later
    fetch that gives less never shortens it."""
    logs = _files(tmp_path / "dms", START, START + b"dmsgw.io/exit 1\n")
    kept = KeptLogs.beside(tmp_path / "state" / "pods.sqlite3")
    (tmp_path / "state").mkdir()
    await kept.keep("uid-1", "init", 1, logs, 1)  # on the way: stdout not in yet

    async def invoke(behavior: Any, request: Any, **_: Any) -> DeploymentLogsResponse:
        assert behavior is DEPLOYMENT_LOGS
        return DeploymentLogsResponse(logs_written_to=str(logs))

    runs = {"init": Runs(started=1, ended=1, exit_code=1).to_map()}
    (logs / "stdout.log").write_bytes(START + b"init\n")
    await keep_last_runs(invoke, kept, "uid-1", "ens-1", runs)
    first = kept.directory("uid-1", "init", 1)
    assert first is not None and (first / "stdout.log").read_bytes() == b"init\n"
    (logs / "stdout.log").write_bytes(START)  # a DMS that gives less later
    await keep_last_runs(invoke, kept, "uid-1", "ens-1", runs)
    assert (first / "stdout.log").read_bytes() == b"init\n"


async def test_the_runs_the_status_still_names_outlive_the_newest_two_until_it_moves_on(
    tmp_path: Path,
) -> None:
    """Runs end faster than they are reported: the follower keeps runs 6 and 7 while the
    pod's status still shows run 5 in ``lastState``; run 5 is spared until a keep no longer
    names it (a ``Previous`` log request meanwhile would have found it gone)."""
    logs = _files(tmp_path / "dms", START + b"5\n" + START + b"6\n" + START + b"7\n", START * 3)
    kept = KeptLogs.beside(tmp_path / "state" / "pods.sqlite3")
    (tmp_path / "state").mkdir()
    for run in (1, 2, 3):
        await kept.keep("uid-1", "main", run + 4, logs, run, spare_from=4)
    assert [kept.directory("uid-1", "main", run) is not None for run in (5, 6, 7)] == [True] * 3
    await kept.keep("uid-1", "main", 7, logs, 3, spare_from=6)
    assert [kept.directory("uid-1", "main", run) is not None for run in (5, 6, 7)] == [
        False,
        True,
        True,
    ]
