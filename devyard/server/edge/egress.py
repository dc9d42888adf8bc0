"""A host's ``egress`` streams: a tunnel-attached instance's traffic into its tunnel.

The host daemon opens an ``egress`` stream (docs/protocol.md 6) for each connection its
instance's egress proxy sends into the tunnel, and one with ``probe: true`` to learn that the
tunnel attached. The edge checks that the instance is live, on that host and on a tunnel (the
instances service's `InstanceDirectory.route`), then probes the connector or opens a
``tunnel-dial`` stream through it (the connector hub) and splices the two. The connector and the
hub check the destination against the selectors the instance attached with.
"""

from __future__ import annotations

import logging
from typing import Any, Final

import trio

from ...core import accept_open, reject_open, splice
from ..hosts import InstanceAccessError, InstanceDirectory
from ..tunnels import TunnelConnections

log = logging.getLogger(__name__)

__all__ = ["serve_egress"]

_PROBE_TIMEOUT_S: Final = 10.0
_DIAL_TIMEOUT_S: Final = 30.0


def _code(exc: Exception) -> tuple[str, str]:
    code = getattr(exc, "code", None)
    return (str(code) if code else "unavailable"), str(exc)


async def serve_egress(
    stream: trio.abc.Stream,
    request: dict[str, Any],
    host_id: str,
    directory: InstanceDirectory,
    tunnels: TunnelConnections,
) -> None:
    """Answer one ``egress`` stream whose open request was read; closes the stream."""
    instance_id = str(request.get("instance_id", ""))
    try:
        route = await directory.route(host_id, instance_id)
    except InstanceAccessError as exc:
        code = "not-found" if exc.status in (404, 410) else "bad-request"
        await reject_open(stream, code, exc.message)
        return
    if request.get("probe"):
        with trio.move_on_after(_PROBE_TIMEOUT_S):
            if await tunnels.probe(route.organization_id, route.tunnel):
                await accept_open(stream)
                return
        await reject_open(
            stream, "unavailable", f"tunnel {route.tunnel!r} has no connector answering"
        )
        return
    dest = str(request.get("dest", ""))
    version = request.get("selector_version")
    try:
        with trio.fail_after(_DIAL_TIMEOUT_S):
            upstream = await tunnels.open_tunnel_stream(
                route.organization_id,
                route.tunnel,
                dest,
                instance_id,
                selector_version=version if isinstance(version, int) else None,
            )
    except trio.TooSlowError:
        await reject_open(stream, "timeout", f"{dest}: the tunnel did not answer in time")
        return
    except Exception as exc:  # the hub's TunnelUnavailable / TunnelDialError carry a code
        code, message = _code(exc)
        log.info("instance %s: egress to %s refused: %s", instance_id, dest, message)
        await reject_open(stream, code, message)
        return
    await accept_open(stream)
    await splice(stream, upstream)
