"""The edge's side of device-request tracing (core.tracing): a span per ``api/...`` request."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, MutableMapping
from typing import Any, Final

from ...core import tracing
from .asgi_stream import Send

__all__ = ["device_request"]

_API: Final = "api"


@contextlib.contextmanager
def device_request(scope: MutableMapping[str, Any], send: Send, prefix: str) -> Iterator[Send]:
    """Around an HTTP request of the gateway: *send*, or, when the server traces and the path
    is an instance's ``api/...``, a *send* that records the response status on the request's
    span. Its attributes: method, the device path (never the query) and the instance id."""
    if tracing.SERVER.tracer is None:
        yield send
        return
    instance_id, _, tail = str(scope["path"])[len(prefix) :].partition("/")
    endpoint, _, rest = tail.partition("/")
    if endpoint != _API:
        yield send
        return
    attributes = {
        "http.request.method": str(scope.get("method", "")),
        "http.route": prefix + "{id}/api/{path}",
        "devyard.device.path": "/" + rest[:200],
        "devyard.instance.id": instance_id[:100],
    }
    with tracing.request_span(tracing.SERVER, "device request", attributes) as span:

        async def traced_send(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.start":
                tracing.record_status(tracing.SERVER, int(message["status"]), span)
            await send(message)

        yield traced_send
