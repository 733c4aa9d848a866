"""The plugin API's request metrics, kept in plain numbers and collected when scraped."""

from __future__ import annotations

import pytest

from dmsgw.interlink.server.metrics import Metrics
from dmsgw.interlink.server.plugin_requests import BOUNDS_S, PluginRequests


def _samples(metrics: Metrics) -> dict[str, float]:
    """``name{labels}`` → value, from the exposition as ``/metrics`` serves it."""
    lines = metrics.render().decode().splitlines()
    return {
        line.rpartition(" ")[0]: float(line.rpartition(" ")[2])
        for line in lines
        if not line.startswith("#")
    }


def test_answers_are_counted_by_code_and_timed_in_cumulative_buckets() -> None:
    metrics = Metrics(process=False)
    requests = metrics.collector(PluginRequests)
    in_flight, answers = requests.of("/status", "GET")
    for status, elapsed_s in [(200, 0.005), (200, 0.2), (404, 0.0051), (503, 20.0)]:
        answers.answered(status, elapsed_s)
    in_flight.count = 2
    samples = _samples(metrics)
    labels = 'method="GET",route="/status"'
    assert samples[f'dmsgw_plugin_requests_total{{code="200",{labels}}}'] == 2
    assert samples[f'dmsgw_plugin_requests_total{{code="404",{labels}}}'] == 1
    assert samples[f'dmsgw_plugin_requests_total{{code="503",{labels}}}'] == 1
    bucket = "dmsgw_plugin_request_duration_seconds_bucket"
    assert samples[f'{bucket}{{le="0.005",{labels}}}'] == 1  # a bound is its own bucket's
    assert samples[f'{bucket}{{le="0.01",{labels}}}'] == 2
    assert samples[f'{bucket}{{le="0.25",{labels}}}'] == 3
    assert samples[f'{bucket}{{le="10.0",{labels}}}'] == 3
    assert samples[f'{bucket}{{le="+Inf",{labels}}}'] == 4
    assert len([name for name in samples if name.startswith(bucket)]) == len(BOUNDS_S)
    assert samples[f"dmsgw_plugin_request_duration_seconds_count{{{labels}}}"] == 4
    assert samples[f"dmsgw_plugin_request_duration_seconds_sum{{{labels}}}"] == pytest.approx(
        20.2101
    )
    assert samples['dmsgw_plugin_requests_in_flight{route="/status"}'] == 2
    created = [name for name in samples if "_created" in name]
    assert len(created) == 4  # one per code, one for the histogram, as prometheus_client's own


def test_methods_of_a_route_share_its_in_flight_count() -> None:
    requests = PluginRequests()
    get, _ = requests.of("/status", "GET")
    post, _ = requests.of("/status", "POST")
    assert get is post
    assert requests.of("/status", "GET")[1] is not requests.of("/status", "POST")[1]


def test_one_collector_per_registry_and_its_names_are_reserved() -> None:
    metrics = Metrics(process=False)
    assert metrics.collector(PluginRequests) is metrics.collector(PluginRequests)
    with pytest.raises(ValueError, match="Duplicated timeseries"):
        metrics.counter("plugin_requests", "The same name again.")
