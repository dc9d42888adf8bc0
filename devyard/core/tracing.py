"""Optional OpenTelemetry traces of device requests, server -> host (docs/operations.md).

Off by default: nothing of OpenTelemetry is imported until a command enables a side
(`enable`, from the CLI's ``DEVYARD_OTEL_EXPORTER``), and every hook below costs one attribute
check while its side is off. Each side has its own tracer provider, so ``devyard up`` (server
and host daemon in one process) still reports two services, ``devyard-server`` and
``devyard-hostd``.

The server's span for a device request travels to the host as a W3C ``traceparent`` field of
the ``api`` stream's open request (docs/protocol.md 6.1); the host continues it with a child
span. A missing or malformed ``traceparent`` starts a new trace, never an error.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter
    from opentelemetry.trace import Span, Tracer

__all__ = [
    "EXPORTERS",
    "EXPORTER_ENV",
    "HOSTD",
    "SERVER",
    "TRACEPARENT",
    "Side",
    "TracingError",
    "disable",
    "enable",
    "enable_named",
    "exporter_named",
    "open_fields",
    "record_status",
    "request_span",
    "serving_span",
]

#: The open-request field that carries the caller's span (W3C Trace Context).
TRACEPARENT: Final = "traceparent"
EXPORTERS: Final = ("console", "otlp")
#: The commands read the exporter's name from this environment variable (off when unset).
EXPORTER_ENV: Final = "DEVYARD_OTEL_EXPORTER"
_NO_FIELDS: Final[Mapping[str, str]] = {}


class TracingError(Exception):
    """Tracing was asked for and cannot be set up (an unknown exporter, a missing package)."""


class Side:
    """One service's tracer: ``None`` while its tracing is off (the default)."""

    __slots__ = ("_provider", "service", "tracer")

    def __init__(self, service: str) -> None:
        self.service = service
        self.tracer: Tracer | None = None
        self._provider: TracerProvider | None = None

    def __repr__(self) -> str:
        return f"Side({self.service!r}, {'on' if self.tracer else 'off'})"


SERVER: Final = Side("devyard-server")
HOSTD: Final = Side("devyard-hostd")


def exporter_named(name: str) -> SpanExporter:
    """``console`` (the SDK's, to stdout) or ``otlp`` (OTLP over HTTP, configured by the
    exporter's own ``OTEL_EXPORTER_OTLP_*`` variables); TracingError otherwise."""
    if name not in EXPORTERS:
        known = ", ".join(EXPORTERS)
        raise TracingError(f"unknown OpenTelemetry exporter {name!r} (one of: {known})")
    try:
        if name == "console":
            from opentelemetry.sdk.trace.export import ConsoleSpanExporter  # noqa: PLC0415

            return ConsoleSpanExporter()
        # an optional package of its own (not in the otel extra: it pulls in protobuf)
        otlp = importlib.import_module("opentelemetry.exporter.otlp.proto.http.trace_exporter")
    except ImportError as exc:
        package = "opentelemetry-exporter-otlp" if name == "otlp" else "devyard[otel]"
        raise TracingError(f"tracing with {name!r} needs {package} installed ({exc})") from None
    exporter: SpanExporter = otlp.OTLPSpanExporter()
    return exporter


def enable(side: Side, exporter: SpanExporter, *, batch: bool = True) -> None:
    """Trace *side* to *exporter* (spans are batched off the event loop unless not *batch*)."""
    from opentelemetry.sdk.resources import Resource  # noqa: PLC0415
    from opentelemetry.sdk.trace import TracerProvider  # noqa: PLC0415
    from opentelemetry.sdk.trace.export import (  # noqa: PLC0415
        BatchSpanProcessor,
        SimpleSpanProcessor,
    )

    disable(side)
    provider = TracerProvider(resource=Resource.create({"service.name": side.service}))
    processor = BatchSpanProcessor(exporter) if batch else SimpleSpanProcessor(exporter)
    provider.add_span_processor(processor)
    side._provider = provider
    side.tracer = provider.get_tracer("devyard")


def enable_named(exporter: str | None, *sides: Side) -> None:
    """Trace each of *sides* to an exporter named *exporter* (``None`` or empty: stay off);
    TracingError when that exporter cannot be had. Called by the commands, at start."""
    if exporter:
        for side in sides:
            enable(side, exporter_named(exporter))


def disable(side: Side) -> None:
    """Stop tracing *side*, exporting what is pending first."""
    provider, side._provider, side.tracer = side._provider, None, None
    if provider is not None:
        provider.shutdown()


def open_fields(side: Side) -> Mapping[str, str]:
    """The ``traceparent`` of the current span, to add to a stream's open request; nothing
    when *side* is off or no span is current."""
    if side.tracer is None:
        return _NO_FIELDS
    from opentelemetry.trace.propagation.tracecontext import (  # noqa: PLC0415
        TraceContextTextMapPropagator,
    )

    fields: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(fields)
    return {TRACEPARENT: fields[TRACEPARENT]} if TRACEPARENT in fields else _NO_FIELDS


@contextlib.contextmanager
def request_span(side: Side, name: str, attributes: Mapping[str, Any]) -> Iterator[Span | None]:
    """A current span of kind SERVER for a request *side* takes (None when off)."""
    if side.tracer is None:
        yield None
        return
    from opentelemetry.trace import SpanKind  # noqa: PLC0415

    with side.tracer.start_as_current_span(
        name, kind=SpanKind.SERVER, attributes=attributes
    ) as span:
        yield span


@contextlib.contextmanager
def serving_span(side: Side, request: Mapping[str, Any]) -> Iterator[None]:
    """Around serving an ``api`` stream: a span continuing the open request's ``traceparent``
    (a new trace without a valid one), with its method, path and instance id."""
    if side.tracer is None or request.get("kind") != "api":
        yield
        return
    from opentelemetry.trace import SpanKind  # noqa: PLC0415
    from opentelemetry.trace.propagation.tracecontext import (  # noqa: PLC0415
        TraceContextTextMapPropagator,
    )

    carrier = {TRACEPARENT: value} if isinstance(value := request.get(TRACEPARENT), str) else {}
    parent = TraceContextTextMapPropagator().extract(carrier)  # malformed: an empty context
    attributes = {
        "http.request.method": str(request.get("method", "")),
        "devyard.device.path": _path(request.get("path")),
        "devyard.instance.id": str(request.get("instance_id", "")),
    }
    with side.tracer.start_as_current_span(
        "device request", context=parent, kind=SpanKind.SERVER, attributes=attributes
    ):
        yield


def record_status(side: Side, status: int, span: Span | None = None) -> None:
    """The HTTP status of a request on its *span* (default: the current one)."""
    if side.tracer is None:
        return
    from opentelemetry.trace import StatusCode, get_current_span  # noqa: PLC0415

    span = span or get_current_span()
    span.set_attribute("http.response.status_code", status)
    if status >= 500:
        span.set_status(StatusCode.ERROR)


def _path(value: object) -> str:
    """A path without its query (the query is never recorded), bounded."""
    return str(value or "").partition("?")[0][:200]
