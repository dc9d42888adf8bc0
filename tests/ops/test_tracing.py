"""Device-request traces (core.tracing): one device API request through the real edge to a
real host daemon is one trace, the host's span a child of the server's; off, nothing."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from devyard.core import tracing
from tests.polling import eventually
from tests.server.gateway.conftest import open_gateway_rig


@pytest.fixture
def exporters() -> Iterator[dict[str, InMemorySpanExporter]]:
    made = {"server": InMemorySpanExporter(), "hostd": InMemorySpanExporter()}
    try:
        yield made
    finally:
        tracing.disable(tracing.SERVER)
        tracing.disable(tracing.HOSTD)


def _one(spans: tuple[ReadableSpan, ...]) -> ReadableSpan:
    assert len(spans) == 1, [(s.name, dict(s.attributes or {})) for s in spans]
    return spans[0]


async def _ended(exporter: InMemorySpanExporter) -> ReadableSpan:
    """The one span *exporter* holds, once it ended (a span ends just after its response)."""
    await eventually(lambda: bool(exporter.get_finished_spans()))
    return _one(exporter.get_finished_spans())


async def test_a_device_request_is_one_trace_server_to_host(
    tmp_path: Path, exporters: dict[str, InMemorySpanExporter]
) -> None:
    async with open_gateway_rig(tmp_path) as rig:
        instance = await rig.create("android")
        status: dict[str, Any] = instance["status"]
        instance_id = instance["metadata"]["id"]
        auth = {"Authorization": f"Bearer {status['token']}"}
        async with httpx.AsyncClient(headers=auth) as client:

            async def screenshot() -> None:
                response = await client.get(status["apiUrl"] + "/screenshot?scale=1")
                assert response.status_code == 200, response.text

            # on, both sides: one trace, the host's span under the server's
            tracing.enable(tracing.SERVER, exporters["server"], batch=False)
            tracing.enable(tracing.HOSTD, exporters["hostd"], batch=False)
            await screenshot()
            server = await _ended(exporters["server"])
            host = await _ended(exporters["hostd"])
            assert server.context is not None and host.context is not None
            assert host.context.trace_id == server.context.trace_id
            assert host.parent is not None and host.parent.span_id == server.context.span_id
            assert server.parent is None  # the request's first span
            assert server.resource.attributes["service.name"] == "devyard-server"
            assert host.resource.attributes["service.name"] == "devyard-hostd"
            for span in (server, host):
                attributes = dict(span.attributes or {})
                assert attributes["http.request.method"] == "GET"
                assert attributes["devyard.device.path"] == "/screenshot"  # never the query
                assert attributes["devyard.instance.id"] == instance_id
                assert attributes["http.response.status_code"] == 200
                assert status["token"] not in repr(attributes)
            # a refused request is on the server's span, and never reaches the host
            exporters["server"].clear()
            exporters["hostd"].clear()
            refused = await client.get(status["apiUrl"] + "/", headers={"Authorization": "x"})
            assert refused.status_code == 401
            refusal = await _ended(exporters["server"])
            assert dict(refusal.attributes or {})["http.response.status_code"] == 401
            assert exporters["hostd"].get_finished_spans() == ()
            exporters["server"].clear()

            # the server off: no traceparent in the stream's fields, so the host's span
            # starts a trace of its own
            tracing.disable(tracing.SERVER)
            exporters["hostd"].clear()
            await screenshot()
            assert (await _ended(exporters["hostd"])).parent is None
            assert exporters["server"].get_finished_spans() == ()

            # both off: nothing recorded, and nothing to add to a stream's fields
            tracing.disable(tracing.HOSTD)
            await screenshot()
            assert tracing.open_fields(tracing.SERVER) == {}
            assert len(exporters["hostd"].get_finished_spans()) == 1
        assert exporters["server"].get_finished_spans() == ()


@pytest.mark.parametrize(
    "traceparent", [None, "", "garbage", "00-" + "0" * 32 + "-" + "0" * 16 + "-01", 7]
)
def test_a_missing_or_malformed_traceparent_starts_a_new_trace(
    exporters: dict[str, InMemorySpanExporter], traceparent: object
) -> None:
    tracing.enable(tracing.HOSTD, exporters["hostd"], batch=False)
    request = {"kind": "api", "instance_id": "android_x", "method": "GET", "path": "/"}
    if traceparent is not None:
        request["traceparent"] = traceparent  # type: ignore[assignment]
    with tracing.serving_span(tracing.HOSTD, request):
        tracing.record_status(tracing.HOSTD, 204)
    span = _one(exporters["hostd"].get_finished_spans())
    assert span.parent is None
    assert dict(span.attributes or {})["http.response.status_code"] == 204


def test_an_unknown_exporter_is_a_clear_error() -> None:
    with pytest.raises(tracing.TracingError, match="unknown OpenTelemetry exporter"):
        tracing.enable_named("zipkin", tracing.SERVER)
    assert tracing.SERVER.tracer is None
    tracing.enable_named(None, tracing.SERVER)  # unset: stays off
    assert tracing.SERVER.tracer is None


@pytest.mark.parametrize("command", ["server", "hostd"])
def test_a_command_with_an_unknown_exporter_stops_at_start(tmp_path: Path, command: str) -> None:
    args = ["--data-dir", str(tmp_path)]
    if command == "hostd":
        args += ["--server", "http://127.0.0.1:9", "--token-file", os.devnull, "--region", "r"]
    done = subprocess.run(
        [sys.executable, "-m", "devyard", command, *args],
        env={**os.environ, tracing.EXPORTER_ENV: "zipkin"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert "unknown OpenTelemetry exporter 'zipkin'" in done.stderr
    assert "Traceback" not in done.stderr
