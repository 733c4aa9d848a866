"""A container's probes as its wrapper reported them: ``started``, ``ready``, and why a probe
fails or killed the container.

The pod wrapper (:mod:`dmsgw.interlink.translate.wrapper`) runs the probes with the kubelet's
semantics and writes their outcomes on the container's stderr (:func:`~dmsgw.interlink.
run_markers.probe_markers`); this ledger folds them, run by run: a new run starts neither
started nor ready, as a restarted container does under the kubelet. Pure and immutable;
persisted inside the container's :class:`~dmsgw.interlink.records.container_runs.Runs`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from ..translate.run_markers import ProbeMarker

__all__ = ["ProbeState"]

_KILLING = frozenset({"liveness", "startup", "tunnel"})
"""The probes whose ``down`` makes the wrapper kill the command, as the kubelet does (and the
pod's tunnel, whose end leaves the pod unreachable)."""


class ProbeState(NamedTuple):
    """In the current run: ``reported``, whether the wrapper reported any probe outcome yet
    (until then the DMS health check, if any, decides); ``started`` (the startup probe
    succeeded) and ``ready`` (the readiness probe's latest verdict); ``failing``, the probes
    failing now with their latest reason; ``killed_by``, why a probe killed the run.
    ``previous_killed_by``: the same for the run before. A named tuple, as
    :class:`~dmsgw.interlink.records.container_runs.Runs` is, for the same reason."""

    reported: bool = False
    started: bool = False
    ready: bool = False
    failing: tuple[tuple[str, str], ...] = ()
    killed_by: str = ""
    previous_killed_by: str = ""

    def read(self, found: Iterable[ProbeMarker]) -> ProbeState:
        """The state after the markers ``found`` (runs' starts included), in order."""
        state = self
        for marker in found:
            state = state._after(marker)
        return state

    def _after(self, marker: ProbeMarker) -> ProbeState:
        if not marker.probe:  # a new run: nothing is started or ready yet
            return ProbeState(previous_killed_by=self.killed_by)
        others = tuple(entry for entry in self.failing if entry[0] != marker.probe)
        state = self._replace(reported=True)
        if marker.event == "failing":
            return state._replace(failing=(*others, (marker.probe, marker.reason)))
        if marker.event == "ok":
            return state._replace(
                failing=others,
                started=state.started or marker.probe == "startup",
                ready=state.ready or marker.probe == "readiness",
            )
        # down: the probe reached its failure threshold
        if marker.probe == "readiness":
            return state._replace(ready=False)
        if marker.probe in _KILLING:
            reason = self.reason(marker.probe) or "it failed"
            what = "tunnel" if marker.probe == "tunnel" else f"{marker.probe} probe"
            return state._replace(killed_by=f"killed by the gateway: its {what} failed: {reason}")
        return state

    def reason(self, probe: str) -> str:
        """Why ``probe`` fails now (``""``: it does not)."""
        return next((why for kind, why in self.failing if kind == probe), "")

    def to_map(self) -> dict[str, Any]:
        """The map to store, as the store gives it back (lists, not tuples): a resumed pod
        compares what it observes with what it stored, and a tuple never equals the list it
        is stored as (every resumed pod was saved and read again). Its fields are plain
        values: no deep copy, as ``asdict`` makes (a fifth of a pod's first status)."""
        stored = self._asdict()
        stored["failing"] = [list(entry) for entry in self.failing]
        return stored

    @classmethod
    def from_map(cls, value: Any) -> ProbeState:
        """A stored state; what is missing or not of its type reads as the default."""
        if not isinstance(value, Mapping):
            return cls()
        flags = {
            name: value[name]
            for name in ("reported", "started", "ready")
            if type(value.get(name)) is bool
        }
        texts = {
            name: value[name]
            for name in ("killed_by", "previous_killed_by")
            if type(value.get(name)) is str
        }
        entries = value.get("failing")
        failing = tuple(
            (str(entry[0]), str(entry[1]))
            for entry in (entries if isinstance(entries, (list, tuple)) else ())
            if isinstance(entry, (list, tuple)) and len(entry) == 2
        )
        return cls(**flags, **texts, failing=failing)
