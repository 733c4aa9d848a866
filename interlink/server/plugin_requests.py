"""The plugin API's requests on ``/metrics``: how many were answered with which code, how long
each took and how many are being answered, by route and method.

interLink polls ``/status`` thousands of times a second, and prometheus_client's own metrics
lock and check themselves on every update (a counter's ``inc`` and a histogram's ``observe``
take three locks a request): a good part of what the gateway adds to aiohttp's own cost of a
known poll (bench/README.md, "The cost of a request"). Requests are answered on the event
loop's thread, which is also where ``/metrics``
is rendered, so they are counted here in plain numbers and turned into Prometheus families only
when scraped (:class:`PluginRequests` is a collector).
"""

from __future__ import annotations

import bisect
import itertools
import time
from collections.abc import Iterator

from prometheus_client import Histogram
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.samples import Sample

from .metrics import Metrics

BOUNDS_S = Histogram.DEFAULT_BUCKETS
"""The latency histogram's bucket bounds (s), the last one infinite."""

_LE = ["+Inf" if bound == float("inf") else repr(bound) for bound in BOUNDS_S]
"""The bounds as the exposition writes them (``le="0.005"``, ``le="+Inf"``)."""


class RouteRequests:
    """One route and method's answered requests: a count per status code and a latency
    histogram (each bucket counts its own, made cumulative when scraped)."""

    __slots__ = ("buckets", "codes", "created", "since", "total_s")

    def __init__(self) -> None:
        self.since = time.time()  # the histogram's creation time
        self.codes: dict[int, int] = {}
        self.created: dict[int, float] = {}  # when each code was first answered
        self.buckets = [0] * len(BOUNDS_S)
        self.total_s = 0.0

    def answered(self, status: int, elapsed_s: float) -> None:
        count = self.codes.get(status)
        if count is None:
            self.created[status] = time.time()
            count = 0
        self.codes[status] = count + 1
        self.buckets[bisect.bisect_left(BOUNDS_S, elapsed_s)] += 1
        self.total_s += elapsed_s


class InFlight:
    """The requests of one route being answered (whatever the method)."""

    __slots__ = ("count",)

    def __init__(self) -> None:
        self.count = 0


class PluginRequests:
    """Every route's and method's :class:`RouteRequests` and every route's :class:`InFlight`,
    as the families ``dmsgw_plugin_requests_total``, ``dmsgw_plugin_request_duration_seconds``
    and ``dmsgw_plugin_requests_in_flight`` (a prometheus_client collector). Routes and methods
    are the router's, never raw paths, so these stay few."""

    def __init__(self) -> None:
        self._routes: dict[tuple[str, str], tuple[InFlight, RouteRequests]] = {}
        self._in_flight: dict[str, InFlight] = {}

    def of(self, route: str, method: str) -> tuple[InFlight, RouteRequests]:
        """The in-flight count and the answers of ``route`` and ``method``."""
        series = self._routes.get((route, method))
        if series is None:
            in_flight = self._in_flight.setdefault(route, InFlight())
            series = self._routes[route, method] = (in_flight, RouteRequests())
        return series

    def describe(self) -> Iterator[Metric]:
        """The families' names, without samples: the registry refuses a clash with them."""
        return iter(self._families())

    def collect(self) -> Iterator[Metric]:
        requests, latency, in_flight = self._families()
        for (route, method), (_, answers) in self._routes.items():
            for code, count in answers.codes.items():
                labels = [route, method, str(code)]
                requests.add_metric(labels, count, created=answers.created[code])
            buckets = list(zip(_LE, itertools.accumulate(answers.buckets), strict=True))
            latency.add_metric([route, method], buckets, answers.total_s)
            created = {"route": route, "method": method}
            latency.samples.append(Sample(f"{latency.name}_created", created, answers.since))
        for route, busy in self._in_flight.items():
            in_flight.add_metric([route], busy.count)
        yield from (requests, latency, in_flight)

    @staticmethod
    def _families() -> tuple[CounterMetricFamily, HistogramMetricFamily, GaugeMetricFamily]:
        return (
            CounterMetricFamily(
                f"{Metrics.PREFIX}plugin_requests",
                "Plugin API requests answered.",
                labels=("route", "method", "code"),
            ),
            HistogramMetricFamily(
                f"{Metrics.PREFIX}plugin_request_duration_seconds",
                "Time to answer a plugin API request (to the end of a log stream).",
                labels=("route", "method"),
            ),
            GaugeMetricFamily(
                f"{Metrics.PREFIX}plugin_requests_in_flight",
                "Plugin API requests being answered.",
                labels=("route",),
            ),
        )
