"""The Prometheus registry ``/metrics`` exposes, the event loop's stalls and the gateway's DMS
calls shown on it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any, TypeVar, cast

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.registry import Collector

from ...behaviors.node import CapabilityExpiredError, NotGrantedError
from ...errors import DmsgwError
from ...transport.rest import DMSError, DMSErrorKind

STALL_PROBE_S = 0.1
DMS_CALL_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
"""Latencies of DMS calls (s): a status read takes milliseconds, a deployment up to minutes."""

_Metric = TypeVar("_Metric", Counter, Gauge, Histogram)
_Collector = TypeVar("_Collector", bound=Collector)


class MetricsError(DmsgwError):
    """A metric registered twice with a different kind or labels."""


class Metrics:
    """The Prometheus registry ``/metrics`` exposes, shared by the server and the backend.

    Names get the ``dmsgw_`` prefix; asking again for a metric with the same kind and labels
    returns the one already registered (so a backend restarted in-process keeps counting),
    while a clash of kind or labels is a :class:`MetricsError`.
    """

    PREFIX = "dmsgw_"

    def __init__(self, *, process: bool = True) -> None:
        self.registry = CollectorRegistry()
        self._metrics: dict[str, tuple[Counter | Gauge | Histogram, tuple[str, ...]]] = {}
        self._collectors: dict[type[Collector], Collector] = {}
        if process:  # RSS, CPU, open files: what the 10,000-pod budget is judged by
            ProcessCollector(registry=self.registry)

    def counter(self, name: str, documentation: str, labels: Sequence[str] = ()) -> Counter:
        return self._metric(Counter, name, documentation, labels)

    def gauge(self, name: str, documentation: str, labels: Sequence[str] = ()) -> Gauge:
        return self._metric(Gauge, name, documentation, labels)

    def histogram(
        self,
        name: str,
        documentation: str,
        labels: Sequence[str] = (),
        buckets: Sequence[float] = Histogram.DEFAULT_BUCKETS,
    ) -> Histogram:
        return self._metric(Histogram, name, documentation, labels, buckets=buckets)

    def collector(self, kind: type[_Collector]) -> _Collector:
        """The registry's one collector of ``kind`` (a class made with no arguments), made
        and registered on the first ask: a server made again in-process keeps counting."""
        made = self._collectors.get(kind)
        if made is None:
            made = self._collectors[kind] = kind()
            self.registry.register(made)
        return cast(_Collector, made)

    def render(self) -> bytes:
        """The text exposition format (``CONTENT_TYPE_LATEST``)."""
        return generate_latest(self.registry)

    def _metric(
        self,
        kind: type[_Metric],
        name: str,
        documentation: str,
        labels: Sequence[str],
        **options: Any,
    ) -> _Metric:
        full = name if name.startswith(self.PREFIX) else self.PREFIX + name
        entry = self._metrics.get(full)
        if entry is not None:
            metric, known = entry
            if isinstance(metric, kind) and known == tuple(labels):
                return metric
            raise MetricsError(
                f"metric {full} exists as a {type(metric).__name__.lower()} "
                f"with labels {list(known)}"
            )
        created = kind(full, documentation, labels, registry=self.registry, **options)
        self._metrics[full] = (created, tuple(labels))
        return created


# --- the event loop's stalls ---------------------------------------------------------------


class LoopStalls:
    """How late the event loop wakes a timer, on ``/metrics``: the last probe's lateness and
    the longest seen. A timer fires late when a callback held the loop (a body parsed in one
    go, a garbage-collector pass, blocking I/O), and every request waited as long, probes
    included, so this is where an operator sees the next freeze."""

    def __init__(self, metrics: Metrics) -> None:
        self.last_s = 0.0
        self.longest_s = 0.0
        metrics.gauge(
            "event_loop_stall_seconds", "How late the event loop ran the last probe timer."
        ).set_function(lambda: self.last_s)
        metrics.gauge(
            "event_loop_stall_max_seconds",
            "The longest the event loop ran a probe timer late since the gateway started.",
        ).set_function(lambda: self.longest_s)

    def observe(self, late_s: float) -> None:
        """One probe's lateness (clock jitter can make it slightly negative: none)."""
        self.last_s = max(late_s, 0.0)
        self.longest_s = max(self.longest_s, self.last_s)

    async def watch(
        self, every_s: float = STALL_PROBE_S, *, clock: Callable[[], float] | None = None
    ) -> None:
        """Forever: sleep ``every_s`` and record how much later than due the loop woke us,
        on ``clock`` (the loop's own by default)."""
        now = clock if clock is not None else asyncio.get_running_loop().time
        while True:
            due = now() + every_s
            await asyncio.sleep(every_s)
            self.observe(now() - due)


# --- the gateway's DMS calls -----------------------------------------------------------------


_OUTCOMES: tuple[tuple[type[BaseException], str], ...] = (
    (asyncio.CancelledError, "cancelled"),
    (NotGrantedError, "not_granted"),
    (CapabilityExpiredError, "grant_expired"),
)
_NAMED_KINDS = (DMSErrorKind.NOT_FOUND, DMSErrorKind.TIMEOUT, DMSErrorKind.REFUSED)


def call_outcome(error: BaseException | None) -> str:
    """How a DMS call ended, as a metric label: ``ok``; ``not_found`` or ``error`` (the DMS
    answered an error); ``timeout`` or ``refused`` (its silence); ``not_granted`` or
    ``grant_expired`` (not sent); ``transport`` (unreachable, or a bad reply); ``cancelled``."""
    if error is None:
        return "ok"
    if isinstance(error, DMSError):
        return error.kind.name.lower() if error.kind in _NAMED_KINDS else "error"
    return next((name for kind, name in _OUTCOMES if isinstance(error, kind)), "transport")


class DmsCalls:
    """Every DMS call the gateway makes, by behavior and outcome, with its latency: the
    :class:`~dmsgw.behaviors.node.CallObserver` of the gateway's DMS client. One histogram
    gives both (its ``_count`` is the calls); a behavior name is one of the catalog's, so the
    labels stay few."""

    def __init__(self, metrics: Metrics) -> None:
        self._seconds = metrics.histogram(
            "dms_call_duration_seconds",
            "DMS calls the gateway made, by behavior and outcome, and how long each took.",
            ("behavior", "outcome"),
            buckets=DMS_CALL_BUCKETS,
        )

    def observe(self, behavior: str, error: BaseException | None, seconds: float) -> None:
        self._seconds.labels(behavior=behavior, outcome=call_outcome(error)).observe(seconds)
