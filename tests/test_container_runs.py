"""A container's runs from the pod wrapper's stderr markers and the DMS's allocation statuses:
the marker format, the ledger that reconciles both sources, and the log reads that feed it."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgpack
import pytest

from dmsgw.behaviors.catalog import DEPLOYMENT_LOGS, Behavior
from dmsgw.behaviors.deployment import DeploymentLogsResponse
from dmsgw.behaviors.node import DMSBehaviorError
from dmsgw.interlink.logs import dms_logs as logs
from dmsgw.interlink.logs.dms_logs import READ_ON_LOOP_BYTES, lines_after, new_lines, read_logs
from dmsgw.interlink.pods.run_reads import read_runs
from dmsgw.interlink.records.container_runs import Runs
from dmsgw.interlink.records.pod_record import PodRecord
from dmsgw.interlink.records.probe_state import ProbeState
from dmsgw.interlink.translate.run_markers import Marker, markers, strip_marker
from dmsgw.interlink.wire.bodies import ContainerLogOpts

START, EXIT = b"dmsgw.io/started\n", b"dmsgw.io/exit-code=%d\n"

# --- the markers ------------------------------------------------------------------------------


def test_markers_are_read_in_order_even_after_unterminated_output() -> None:
    text = START + b"oops\n" + b"partial" + EXIT % 3 + START + b"tail" + EXIT % 0
    assert list(markers(text)) == [Marker(None), Marker(3), Marker(None), Marker(0)]


@pytest.mark.parametrize(
    "line",
    [
        b"dmsgw.io/exit-code=256",  # not an exit status
        b"dmsgw.io/exit-code=",
        b"dmsgw.io/exit-code=-1",
        b"dmsgw.io/exit-code=3 and more",
        b"dmsgw.io/exit-code=1234",
        b"dmsgw.io/started!",
        b"DMSGW.IO/STARTED",
        b"\xff\xfe garbage",
    ],
)
def test_garbled_markers_are_not_markers(line: bytes) -> None:
    assert list(markers(line + b"\n")) == []
    assert strip_marker(line + b"\n") == line + b"\n"


def test_markers_are_kept_out_of_the_log_lines() -> None:
    assert strip_marker(START) == b""
    assert strip_marker(EXIT % 3) == b""
    assert strip_marker(b"partial" + EXIT % 3) == b"partial\n"
    assert strip_marker(b"plain line\n") == b"plain line\n"


# --- the ledger -------------------------------------------------------------------------------


def read(runs: Runs, text: bytes) -> Runs:
    return runs.read(markers(text), runs.read_to + len(text))


def test_an_exit_marker_gives_the_ended_run_its_code() -> None:
    runs = read(Runs(), START)
    assert (runs.started, runs.running, runs.last_exit_code) == (1, True, None)
    runs = read(runs, b"oops\n" + EXIT % 3)
    assert (runs.started, runs.ended, runs.last_exit_code) == (1, 1, 3)
    assert runs.read_to == len(START + b"oops\n" + EXIT % 3)
    # The failed status of the same run changes nothing.
    assert runs.saw("failed", deployment_ended=False, wrapped=True) == runs


def test_a_run_without_its_exit_marker_ended_with_an_unknown_code() -> None:
    """Its wrapper was killed with it (a stop that came to SIGKILL): a later start or the
    allocation's status ends it, and the code stays unknown."""
    restarted = read(Runs(), START + START)
    assert (restarted.started, restarted.ended, restarted.exit_code) == (2, 1, None)
    failed = read(Runs(), START).saw("failed", deployment_ended=False, wrapped=True)
    assert (failed.ended, failed.last_exit_code) == (1, None)
    gone = read(Runs(), START).saw("running", deployment_ended=True, wrapped=True)
    assert (gone.ended, gone.last_exit_code) == (1, None)


def test_a_late_exit_marker_fills_in_the_code_the_status_could_not_give() -> None:
    failed = read(Runs(), START).saw("failed", deployment_ended=False, wrapped=True)
    assert read(failed, EXIT % 4).last_exit_code == 4
    assert read(failed, EXIT % 4).ended == 1


def test_an_exit_whose_start_was_not_read_still_counts_one_run() -> None:
    runs = read(Runs(), EXIT % 2)
    assert (runs.started, runs.ended, runs.last_exit_code) == (1, 1, 2)


def test_an_allocation_that_ended_without_any_marker_ran_once() -> None:
    for wrapped in (True, False):
        runs = Runs().saw("completed", deployment_ended=True, wrapped=wrapped)
        assert (runs.started, runs.ended, runs.last_exit_code) == (1, 1, None)
        assert runs.saw("completed", deployment_ended=True, wrapped=wrapped) == runs


def test_an_allocation_never_placed_never_ran() -> None:
    for status in ("", "pending"):
        assert Runs().saw(status, deployment_ended=True, wrapped=True) == Runs()


def test_a_wrapped_container_starts_only_with_its_marker() -> None:
    """Its status may say ``running`` before the marker is read; counting that as a start too
    would count the run twice."""
    assert Runs().saw("running", deployment_ended=False, wrapped=True) == Runs()


def test_an_unwrapped_container_is_followed_by_its_statuses() -> None:
    runs = Runs()
    for status in ("pending", "running", "running", "restarting", "running", "failed"):
        runs = runs.saw(status, deployment_ended=False, wrapped=False)
    assert (runs.started, runs.ended, runs.last_exit_code) == (2, 2, None)


@pytest.mark.parametrize(
    "stored",
    [
        None,
        "garbage",
        {},
        {"started": "2", "ended": -1, "exit_code": "3", "read_to": None},
        {"unknown": 1},
    ],
)
def test_a_stored_ledger_that_is_missing_or_garbled_reads_as_empty(stored: Any) -> None:
    assert Runs.from_map(stored) == Runs()


def test_a_ledger_round_trips_through_its_map() -> None:
    runs = Runs(
        read_to=120,
        started=3,
        ended=2,
        exit_code=137,
        previous_exit_code=3,
        earlier_runs=4,
        earlier_ended=True,
        earlier_exit_code=None,
        started_ns=5,
        ended_ns=6,
        probes=ProbeState(
            reported=True, started=True, failing=(("readiness", "503"),), killed_by="liveness: 500"
        ),
    )
    stored = runs.to_map()
    read_back = msgpack.unpackb(msgpack.packb(stored))  # as the store keeps it
    assert read_back == stored  # a resumed pod compares what it reads with what it makes
    assert Runs.from_map(read_back) == runs


# --- reading the log --------------------------------------------------------------------------


def test_lines_after_returns_whole_lines_only(tmp_path: Path) -> None:
    path = tmp_path / "stderr.log"
    path.write_bytes(b"one\ntwo\nthr")
    assert lines_after(path, 0) == (b"one\ntwo\n", 8)
    assert lines_after(path, 8) == (b"", 8)
    assert lines_after(tmp_path / "missing.log", 5) == (b"", 5)
    path.write_bytes(b"one\ntwo\nthree\n")
    # More than the limit: the last 8 bytes are "o\nthree\n", of which one line is whole.
    assert lines_after(path, 0, limit=8) == (b"three\n", 14)
    # Exactly the last line: it is whole, since the byte before it ends a line.
    assert lines_after(path, 0, limit=6) == (b"three\n", 14)
    assert lines_after(path, 0, limit=5) == (b"", 14)


async def test_new_lines_reads_a_small_part_on_the_loop_and_a_large_one_on_a_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    threaded: list[int] = []
    to_thread = logs.asyncio.to_thread

    async def counted(function: Any, *args: Any) -> Any:
        threaded.append(args[2])  # the offset read from
        return await to_thread(function, *args)

    monkeypatch.setattr(logs.asyncio, "to_thread", counted)
    path = tmp_path / "stderr.log"
    line = b"x" * 63 + b"\n"
    bound = READ_ON_LOOP_BYTES // len(line)
    path.write_bytes(line * bound)  # exactly the bound: read on the loop
    small = await new_lines(path, 0)
    path.write_bytes(line * (bound + 1) + b"unterminated")
    large = await new_lines(path, 0)
    tail = await new_lines(path, len(line) + len(b"unterminated"))  # small again
    missing = await new_lines(tmp_path / "missing.log", 7)
    assert threaded == [0]  # only the large read left the loop
    assert small == (line * bound, READ_ON_LOOP_BYTES)
    assert large == (line * (bound + 1), len(line) * (bound + 1))
    assert tail[1] == len(line) * (bound + 1)
    assert missing == (b"", 7)


def _invoke(directory: str | Exception) -> Any:
    async def invoke(behavior: Behavior[Any, Any], payload: Any = None, **_: Any) -> Any:
        assert behavior is DEPLOYMENT_LOGS
        assert payload.allocation_name == "pod.main"
        if isinstance(directory, Exception):
            raise directory
        return DeploymentLogsResponse(logs_written_to=directory)

    return invoke


async def test_read_runs_takes_the_new_markers_of_the_log(tmp_path: Path) -> None:
    (tmp_path / "stderr.log").write_bytes(START + b"oops\n" + EXIT % 3)
    runs = await read_runs(_invoke(str(tmp_path)), "ens", "main", Runs(), uid="u")
    assert (runs.started, runs.last_exit_code) == (1, 3)
    assert await read_runs(_invoke(str(tmp_path)), "ens", "main", runs, uid="u") == runs


@pytest.mark.parametrize(
    "problem", ["refused", "no directory", "unreadable", "a fifo", "a NUL byte"]
)
async def test_a_log_that_cannot_be_read_is_said_so(tmp_path: Path, problem: str) -> None:
    """A log that is not a regular file is not read: a FIFO opened as files are would hold the
    event loop (the read is made on it) until something wrote to it. Should that come back,
    a writer opened after 5 s turns the hang into a failure. A directory named with a NUL
    byte, which no file call takes, is the DMS's mistake, said as such."""
    (tmp_path / "dir" / "stderr.log").mkdir(parents=True)  # unreadable: a directory
    (tmp_path / "fifo").mkdir()
    fifo = tmp_path / "fifo" / "stderr.log"
    os.mkfifo(fifo)
    released: list[Path] = []
    release = threading.Timer(5.0, _write_once, (fifo, released))
    release.daemon = True
    release.start()
    invoke = _invoke(
        {
            "refused": DMSBehaviorError("/dms/node/deployment/logs", "no such allocation"),
            "no directory": "",
            "unreadable": str(tmp_path / "dir"),
            "a fifo": str(tmp_path / "fifo"),
            "a NUL byte": str(tmp_path) + "\0x",
        }[problem]
    )
    before = Runs(read_to=7, started=1)
    try:
        assert await read_runs(invoke, "ens", "main", before, uid="u") is None
    finally:
        release.cancel()
    assert released == []  # nothing waited for a writer


def _write_once(fifo: Path, released: list[Path]) -> None:
    """Open ``fifo`` for writing, which lets a reader blocked on opening it go on."""
    released.append(fifo)
    with contextlib.suppress(OSError):  # no reader: nothing to release
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))


async def test_a_log_not_written_yet_has_no_new_markers(tmp_path: Path) -> None:
    before = Runs(read_to=7, started=1)
    directory = str(tmp_path / "empty")
    read = await read_runs(_invoke(directory), "ens", "main", before, uid="u")
    assert read == before._replace(log_dir=directory)  # only where the DMS writes them


async def test_the_markers_are_not_part_of_the_container_log(tmp_path: Path) -> None:
    (tmp_path / "stdout.log").write_bytes(b"out\n")
    (tmp_path / "stderr.log").write_bytes(START + b"err" + EXIT % 3)

    @contextlib.asynccontextmanager
    async def fetch() -> AsyncIterator[Path]:
        yield tmp_path

    chunks = [c async for c in read_logs(fetch, ContainerLogOpts(), running=lambda: False)]
    assert b"".join(chunks) == b"out\nerr\n"
    tail = read_logs(fetch, ContainerLogOpts(Tail=1), running=lambda: False)
    assert b"".join([c async for c in tail]) == b"err\n"


def test_only_a_run_the_wrapper_saw_end_with_137_was_oom_killed() -> None:
    assert read(Runs(), START + EXIT % 137).oom_killed
    assert not read(Runs(), START + EXIT % 143).oom_killed
    # Killed with its wrapper (a stop that came to SIGKILL): no marker, no OOM verdict.
    assert not read(Runs(), START).saw("failed", deployment_ended=False, wrapped=True).oom_killed
    # Restarted since: the current run is not the one that was killed.
    assert not read(Runs(), START + EXIT % 137 + START).oom_killed


# --- restarts and the previous run ------------------------------------------------------------


def _last(runs: Runs) -> tuple[int, str, str] | None:
    terminated = runs.observation().last_state
    if terminated is None or terminated.terminated is None:
        return None
    t = terminated.terminated
    return t.exit_code, t.reason, t.message


def test_the_dms_restarts_of_a_container_are_counted_with_the_previous_run() -> None:
    first = read(Runs(), START)
    assert (first.observation().restart_count, _last(first)) == (0, None)
    again = read(first, EXIT % 3 + START)  # failed, restarted by the DMS
    assert again.observation().restart_count == 1
    assert _last(again) == (3, "Error", "")
    oom = read(again, EXIT % 137 + START)
    assert oom.observation().restart_count == 2
    assert _last(oom) == (137, "OOMKilled", "")
    ended = read(oom, EXIT % 0)  # the current run ended: lastState is the one before
    seen = ended.observation()
    assert (seen.exit_code, seen.restart_count, _last(ended)) == (0, 2, (137, "OOMKilled", ""))


def test_a_previous_run_without_an_exit_code_is_reported_as_unknown() -> None:
    killed = read(Runs(), START + START)  # the first run's wrapper died with it
    code, reason, message = _last(killed) or (0, "", "")
    assert (code, reason) == (1, "Error") and "no exit code" in message


def test_restarts_and_the_last_run_carry_over_to_the_next_deployment() -> None:
    old = read(Runs(), START + EXIT % 2 + START + EXIT % 5)
    new = old.next_ensemble()
    assert (new.started, new.read_to, new.restarts) == (0, 0, 1)
    assert _last(new) == (5, "Error", "")  # waiting or running: the old ensemble's last run
    assert _last(read(new, START)) == (5, "Error", "")
    assert _last(read(new, START + EXIT % 0)) == (5, "Error", "")
    assert read(new, START + EXIT % 0 + START).restarts == 3  # four runs started
    # A deployment in which the container never ran keeps what came before.
    assert new.next_ensemble() == new
    assert Runs().next_ensemble() == Runs()


def test_a_run_the_redeployment_cut_short_is_the_last_one() -> None:
    cut = read(Runs(), START + EXIT % 137 + START).next_ensemble()
    code, reason, message = _last(cut)
    assert (code, reason) == (1, "Error") and "no exit code" in message


def test_a_record_whose_stored_ledger_is_garbled_loads_with_an_empty_one() -> None:
    stored = {"uid": "u", "namespace": "d", "name": "p", "jid": "j", "request": b"{}"}
    assert PodRecord.from_map({**stored, "runs": "garbage"}).runs == {}
    assert PodRecord.from_map({**stored, "runs": {"main": {}}}).runs == {"main": {}}


def _seconds(at: Any) -> float | None:
    return None if at is None else at.timestamp()


def test_each_run_keeps_the_times_it_was_seen_to_start_and_end_across_ensembles() -> None:
    """The times are stamped when a poll first shows a run start or end, kept in the ledger
    (persisted with the pod's record) and carried to the run's last state."""
    s = 1_000_000_000
    first = Runs().read(markers(START), 10, at_ns=100 * s)
    running = first.observation()
    assert (_seconds(running.started_at), running.finished_at, running.running) == (100, None, True)
    ended = first.read(markers(EXIT % 3), 20, at_ns=107 * s)
    seen = ended.observation()
    assert (_seconds(seen.started_at), _seconds(seen.finished_at)) == (100, 107)
    again = Runs.from_map(ended.to_map()).read(markers(START), 30, at_ns=120 * s)
    last = again.observation().last_state
    assert last is not None and last.terminated is not None
    times = (_seconds(last.terminated.started_at), _seconds(last.terminated.finished_at))
    assert times == (100, 107)
    assert _seconds(again.observation().started_at) == 120
    redeployed = again.read(markers(EXIT % 1), 40, at_ns=130 * s).next_ensemble()
    carried = Runs.from_map(redeployed.to_map()).observation().last_state
    assert carried is not None and carried.terminated is not None
    times = (_seconds(carried.terminated.started_at), _seconds(carried.terminated.finished_at))
    assert times == (120, 130)


# --- the kubelet's restart count ----------------------------------------------------------------


def test_the_restart_count_grows_when_a_run_starts_not_when_one_ends() -> None:
    """The kubelet's rule: four runs that ended, the fifth not started yet (the pod backs
    off, or is being deployed again), show 3 restarts; the fifth run's start makes it 4."""
    runs = Runs()
    for deployment in range(2):  # two runs in each deployment: one first, one restart
        runs = read(runs, START + EXIT % 1 + START + EXIT % 1)
        if deployment == 0:
            runs = runs.next_ensemble()
    assert runs.observation().restart_count == 3
    waiting = runs.next_ensemble()  # redeployed, its container not started yet
    assert waiting.observation().restart_count == 3
    assert read(waiting, START).observation().restart_count == 4


def test_a_deployment_in_which_the_container_never_ran_adds_no_restart() -> None:
    ran_once = read(Runs(), START + EXIT % 3).next_ensemble()
    never_ran = ran_once.next_ensemble().next_ensemble()
    assert never_ran.observation().restart_count == 0
    assert read(never_ran, START).observation().restart_count == 1


def test_a_ledger_stored_with_counted_restarts_reads_as_runs() -> None:
    old = {"earlier_restarts": 2, "earlier_ended": True, "earlier_exit_code": 1}
    assert Runs.from_map(old).earlier_runs == 3
    assert read(Runs.from_map(old), START).observation().restart_count == 3


def test_where_the_dms_wrote_the_logs_is_kept_for_the_current_ensemble_only() -> None:
    """``/getLogs`` reads the live run there while the DMS does not answer (decision 140): it
    survives the record's round trip, a garbled one reads as unknown, and the next
    deployment's files are elsewhere."""
    runs = read(Runs(), START)._replace(log_dir="/var/dms/logs/e1/main")
    assert Runs.from_map(msgpack.unpackb(msgpack.packb(runs.to_map()))) == runs
    for garbled in (7, b"/x", "/x\0y"):
        assert Runs.from_map({**runs.to_map(), "log_dir": garbled}).log_dir == ""
    assert runs.next_ensemble().log_dir == ""
