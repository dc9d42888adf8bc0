"""The connector's /metrics is prometheus-client's exposition of its counters (the live
link's numbers are checked in tests/connector/test_connector.py)."""

from __future__ import annotations

from devyard.connector.metrics import Metrics, render

from ._prom import parse, value


def test_the_connector_exposition_parses_and_carries_every_counter() -> None:
    metrics = Metrics(tunnel="corp", role="standby", reconnects=2, rtt=0.25)
    metrics.dial_failures["nxdomain"] += 3
    metrics.go_away_received["replaced"] += 1
    metrics.bytes_in, metrics.bytes_out, metrics.opened_streams = 10, 20, 4
    samples = parse(render(metrics))
    assert value(samples, "devyard_connector_sessions", role="standby") == 1
    assert value(samples, "devyard_connector_sessions", role="active") == 0
    assert value(samples, "devyard_connector_reconnects_total") == 2
    assert value(samples, "devyard_connector_rtt_seconds") == 0.25
    assert value(samples, "devyard_connector_dial_failures_total", code="nxdomain") == 3
    assert value(samples, "devyard_connector_go_away_total", code="replaced") == 1
    assert value(samples, "devyard_connector_bytes_total", direction="in") == 10
    assert value(samples, "devyard_connector_bytes_total", direction="out") == 20
    assert value(samples, "devyard_connector_opened_streams_total") == 4
    assert value(samples, "devyard_connector_build_info") == 1
