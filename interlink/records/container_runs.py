"""One container's runs, as the PodActor learns them across polls: exit codes and restarts.

Two sources feed it, and this ledger reconciles them without counting a run twice:

* the wrapper's markers (:mod:`dmsgw.interlink.translate.run_markers`) in the allocation's stderr,
  read from where the previous read stopped: a start marker opens a run, an exit marker ends it
  with its exit code; a start while a run is open means that run ended without a trace (its
  wrapper was killed), with an unknown exit code;
* the allocation's status in ``deployment/status``: a run still open when the allocation has
  ``failed``, ``completed`` or was stopped, or when the deployment has ended, ended without a
  marker (unknown exit code). A container that is not wrapped (no ``command``) has no markers,
  so its runs are known from the statuses alone: ``running`` opens one, ``restarting`` ends
  it; a restart between two polls goes unseen.

Runs after the first in one ensemble are the DMS's own restarts of the allocation (after a
failure under ``one_for_one``, or failed health checks); :meth:`Runs.next_ensemble` carries
their count and the last run's end over to the pod's next deployment, whose runs start again.
:meth:`Runs.observation` is what :func:`~dmsgw.interlink.records.pod_status.container_statuses`
needs: the current run's exit code and times, the previous run as ``lastState``, the restart count.

The restart count is the kubelet's: the runs that started over the pod's life, less the first
(decision 67). It grows when a run starts, not when one ends: a container waiting in back-off
after its fourth run shows 3, and one that never ran in a deployment (it failed before, or
waited for an init container) adds nothing for it.

The times are the gateway's: when a poll first showed a run started or ended (``at_ns`` of
:meth:`Runs.read` and :meth:`Runs.saw`; 0 is unknown). They are kept here, with the pod's record,
so that a snapshot taken later, or by a gateway that restarted, reports the same ``startedAt``
and ``finishedAt`` instead of the time it is taken.

Pure and immutable; :meth:`Runs.to_map` / :meth:`Runs.from_map` persist it in the pod record
(msgpack), where a missing or malformed field reads as its default.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any, NamedTuple

from ...behaviors.status import AllocationStatus
from ...clock import NS_PER_SECOND
from ..translate.run_markers import Marker, ProbeMarker
from ..wire import k8s
from ..wire.bodies import PodStatus
from .pod_status import CRASH_LOOP, FAILED_EXIT_CODE, ContainerObservation, terminated_state
from .probe_state import ProbeState

__all__ = ["OOM_EXIT_CODE", "Runs"]

OOM_EXIT_CODE = 137
"""128 + SIGKILL: what a process killed by the OOM killer exits with, as Docker reports it."""

_ENDED = frozenset(
    {
        AllocationStatus.FAILED,
        AllocationStatus.COMPLETED,
        AllocationStatus.STOPPED,
        AllocationStatus.TERMINATED,
    }
)


_UNKNOWN_CODE = "the run left no exit code (the DMS reports none)"
_COUNTS = ("read_to", "started", "ended", "earlier_runs")
_TIMES = (
    "started_ns",
    "ended_started_ns",
    "ended_ns",
    "previous_started_ns",
    "previous_ended_ns",
    "earlier_started_ns",
    "earlier_ended_ns",
)


class Runs(NamedTuple):
    """In the current ensemble: ``read_to``, how much of the allocation's stderr has been read
    for markers; ``started`` and ``ended``, runs seen to start and to end; ``exit_code`` and
    ``previous_exit_code``, those of the latest ended run and of the one before it (``None``:
    unknown). From the pod's earlier ensembles: ``earlier_runs``, the runs of the container
    that started in them; ``earlier_ended`` and ``earlier_exit_code``, the last run's end. Each
    ``*_ns`` is a time in Unix nanoseconds (0: unknown): ``started_ns`` the latest run's start,
    ``ended_started_ns`` and ``ended_ns`` the latest ended run's start and end, ``previous_*``
    those of the ended run before it, ``earlier_*`` those of the earlier ensembles' last run.

    A named tuple, not a frozen dataclass: a poll and a snapshot make several, and a frozen
    dataclass of 16 fields sets each field through ``object.__setattr__`` and is copied
    through ``dataclasses.replace``; a tuple takes a fraction of that (bench/README.md, "A
    pod's /status entry")."""

    read_to: int = 0
    started: int = 0
    ended: int = 0
    exit_code: int | None = None
    previous_exit_code: int | None = None
    earlier_runs: int = 0
    earlier_ended: bool = False
    earlier_exit_code: int | None = None
    probes: ProbeState = ProbeState()
    """What the wrapper's probes reported in the current ensemble (:mod:`.probe_state`)."""
    started_ns: int = 0
    ended_started_ns: int = 0
    ended_ns: int = 0
    previous_started_ns: int = 0
    previous_ended_ns: int = 0
    earlier_started_ns: int = 0
    earlier_ended_ns: int = 0
    log_dir: str = ""
    """Where the DMS last wrote the allocation's log files (``""``: not yet read in this
    ensemble): what ``/getLogs`` reads while the DMS does not answer (decision 140)."""

    @property
    def running(self) -> bool:
        """A run has started and not ended."""
        return self.started > self.ended

    @property
    def last_exit_code(self) -> int | None:
        """The exit code of the current run if it has ended (``None``: running or unknown)."""
        return None if self.running or not self.ended else self.exit_code

    @property
    def oom_killed(self) -> bool:
        """The current run ended killed for its memory: the wrapper reported 137 (the DMS has
        no OOM flag). Every allocation of a pod has a ``ram.size`` that the DMS enforces, and
        a stop by the gateway or the DMS that comes to SIGKILL kills the wrapper too, leaving
        no exit marker, so a 137 that the wrapper reports is the OOM killer's (or a command
        that exits 137 itself: decision 15)."""
        return self.last_exit_code == OOM_EXIT_CODE

    @property
    def latest(self) -> int:
        """The newest run's number over the pod's life (the first run is 1; 0: none started)."""
        return self.earlier_runs + self.started

    @property
    def restarts(self) -> int:
        """The container's restarts over the pod's life, the DMS's and the redeployments':
        every run that started after the first."""
        return max(self.earlier_runs + self.started - 1, 0)

    def _before_current(self) -> tuple[bool, int | None, int, int]:
        """Whether a run ended before the current one (the latest, ended or not), its code,
        start and end."""
        if self.running or not self.ended:  # the latest ended run came before this one
            if self.ended:
                return True, self.exit_code, self.ended_started_ns, self.ended_ns
        elif self.ended >= 2:
            return True, self.previous_exit_code, self.previous_started_ns, self.previous_ended_ns
        return (
            self.earlier_ended,
            self.earlier_exit_code,
            self.earlier_started_ns,
            self.earlier_ended_ns,
        )

    def observation(self) -> ContainerObservation:
        """The container as :func:`~dmsgw.interlink.records.pod_status.container_statuses` sees
        it."""
        ended, code, started_ns, ended_ns = self._before_current()
        last: k8s.ContainerState | None = None
        if ended:
            last = terminated_state(
                FAILED_EXIT_CODE if code is None else code,
                oom_killed=code == OOM_EXIT_CODE,
                # a probe's kill of the run before this one (a new run moved it there)
                message=_UNKNOWN_CODE if code is None else self.probes.previous_killed_by,
                started_at=_time(started_ns),
                finished_at=_time(ended_ns),
            )
        current_ended = not self.running and self.ended > 0
        return ContainerObservation(
            started_at=_time(self.ended_started_ns if current_ended else self.started_ns),
            finished_at=_time(self.ended_ns) if current_ended else None,
            exit_code=self.last_exit_code,
            oom_killed=self.oom_killed,
            restart_count=self.restarts,
            last_state=last,
            **self._probed(),
            running=self.running,
            ended=current_ended,
            unseen_start=not self.started and self.earlier_runs > 0,
        )

    def _probed(self) -> dict[str, Any]:
        """The :class:`ContainerObservation` fields that the wrapper's probes decide, once
        they have reported (until then the DMS health check, if any, decides)."""
        if not self.probes.reported:
            return {}
        ended_by = "" if self.running else self.probes.killed_by
        return {"started": self.probes.started, "ready": self.probes.ready, "message": ended_by}

    def read_probes(self, found: Iterable[ProbeMarker]) -> Runs:
        """The ledger after the probe markers ``found`` (read with the run markers)."""
        return self._replace(probes=self.probes.read(found))

    def next_ensemble(self) -> Runs:
        """The ledger for the pod's next deployment: the runs start again, the restarts and
        the last run's end carry over (a run still open was ended by the redeployment,
        with an unknown code)."""
        if self.running:
            ended, code, started_ns, ended_ns = True, None, self.started_ns, 0
        elif self.ended:
            ended, code = True, self.exit_code
            started_ns, ended_ns = self.ended_started_ns, self.ended_ns
        else:
            ended, code, started_ns, ended_ns = False, None, 0, 0
        if not ended:
            return Runs(
                earlier_runs=self.earlier_runs,
                earlier_ended=self.earlier_ended,
                earlier_exit_code=self.earlier_exit_code,
                earlier_started_ns=self.earlier_started_ns,
                earlier_ended_ns=self.earlier_ended_ns,
            )
        return Runs(
            earlier_runs=self.earlier_runs + self.started,
            earlier_ended=True,
            earlier_exit_code=code,
            earlier_started_ns=started_ns,
            earlier_ended_ns=ended_ns,
        )

    def _start(self, at_ns: int) -> Runs:
        return self._replace(started=self.started + 1, started_ns=at_ns)

    def _end(self, code: int | None, at_ns: int) -> Runs:
        """The latest run ended: it becomes the latest ended run, whose place the one before
        it takes."""
        return self._replace(
            ended=self.ended + 1,
            exit_code=code,
            previous_exit_code=self.exit_code,
            ended_started_ns=self.started_ns,
            ended_ns=at_ns,
            previous_started_ns=self.ended_started_ns,
            previous_ended_ns=self.ended_ns,
        )

    def read(self, found: Iterable[Marker], read_to: int, *, at_ns: int = 0) -> Runs:
        """The ledger after the markers ``found`` in stderr up to byte ``read_to``, read at
        ``at_ns``: what they show starting or ending did so by then."""
        runs = self._replace(read_to=read_to)
        for marker in found:
            if marker.exit_code is None:  # a run starts
                if runs.running:
                    runs = runs._end(None, at_ns)
                runs = runs._start(at_ns)
            elif runs.running:
                runs = runs._end(marker.exit_code, at_ns)
            elif runs.ended and runs.exit_code is None:
                # A run the status ended before its marker was read: the code is now known.
                runs = runs._replace(exit_code=marker.exit_code)
            else:  # its start marker was before what was read
                runs = runs._start(at_ns)._end(marker.exit_code, at_ns)
        return runs

    def saw(self, status: str, *, deployment_ended: bool, wrapped: bool, at_ns: int = 0) -> Runs:
        """The ledger after the allocation was seen in ``status`` (``""``: not listed) at
        ``at_ns``, once the markers of the same poll have been read."""
        if status in _ENDED and not self.started:  # it ran, and left no marker
            return self._start(at_ns)._end(None, at_ns)
        if self.running and (status in _ENDED or deployment_ended):
            return self._end(None, at_ns)
        if wrapped:  # the markers say when a wrapped container starts and restarts
            return self
        if status == AllocationStatus.RESTARTING and self.running:
            return self._end(None, at_ns)
        if status == AllocationStatus.RUNNING and not self.running:
            return self._start(at_ns)
        return self

    def to_map(self) -> dict[str, Any]:
        """The stored ledger: plain numbers and the log directory's path, but for the probes'
        state (no deep copy, as ``asdict`` makes)."""
        stored = self._asdict()
        stored["probes"] = self.probes.to_map()
        return stored

    @classmethod
    def from_map(cls, value: Any) -> Runs:
        """A stored ledger; what is missing or not of its type reads as the default."""
        if not isinstance(value, Mapping):
            return cls()
        counts = {
            name: value[name]
            for name in (*_COUNTS, *_TIMES)
            if type(value.get(name)) is int and value[name] >= 0
        }
        codes = {
            name: value[name]
            for name in ("exit_code", "previous_exit_code", "earlier_exit_code")
            if type(value.get(name)) is int
        }
        ended = value.get("earlier_ended") is True
        old = value.get("earlier_restarts")  # kept by a gateway that counted restarts so
        if "earlier_runs" not in counts and type(old) is int and old >= 0 and ended:
            counts["earlier_runs"] = old + 1
        probes = ProbeState.from_map(value.get("probes"))
        log_dir = value.get("log_dir")
        log_dir = log_dir if type(log_dir) is str and "\0" not in log_dir else ""
        return cls(**counts, **codes, earlier_ended=ended, probes=probes, log_dir=log_dir)


def _time(ns: int) -> datetime | None:
    """A stored time as Kubernetes reports it (``None``: unknown)."""
    return datetime.fromtimestamp(ns / NS_PER_SECOND, UTC) if ns else None


def latest_runs(status: PodStatus, runs: Mapping[str, Any]) -> list[k8s.ContainerStateTerminated]:
    """How each main container's latest run ended, for those whose run has ended: reported
    ``terminated``, or waiting to run again with that run as its last state. A waiting
    container counts only with a run of the current ensemble behind it (``runs``, the
    record's ledger): after a redeployment its last state is the previous ensemble's, which
    the redeployment already answered, and counting it again would stop the fresh ensemble."""
    latest = []
    for c in status.containers:
        waiting = c.state.waiting
        if c.state.terminated is not None:
            latest.append(c.state.terminated)
        elif (
            waiting is not None
            and waiting.reason == CRASH_LOOP
            and c.last_state.terminated
            and _ran_here(runs.get(c.name))
        ):
            latest.append(c.last_state.terminated)
    return latest


def _ran_here(ledger: Any) -> bool:
    """Whether a container's ledger shows a run that ended in the current ensemble (no
    ledger: nothing tells, so the status is taken as it is)."""
    return ledger is None or Runs.from_map(ledger).ended > 0
