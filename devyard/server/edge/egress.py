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
from .. import metrics
from ..hosts import AccessDenied, AccessReason, InstanceDirectory
from ..tunnels import TunnelConnections
from .connectors import TunnelDialError, TunnelUnavailable

log = logging.getLogger(__name__)

__all__ = ["serve_egress"]

_PROBE_TIMEOUT_S: Final = 10.0
_DIAL_TIMEOUT_S: Final = 30.0

#: The preamble code (docs/protocol.md 6) a host's egress gets for each `AccessReason`.
_ACCESS_CODES: Final[dict[AccessReason, str]] = {
    AccessReason.UNKNOWN: "not-found",
    AccessReason.GONE: "not-found",
    AccessReason.NOT_ON_HOST: "not-found",
    AccessReason.NOT_ON_TUNNEL: "bad-request",
    AccessReason.WRONG_TOKEN: "bad-request",
    AccessReason.NOT_READY: "bad-request",
}


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
    except AccessDenied as exc:
        await reject_open(stream, _ACCESS_CODES[exc.reason], exc.message)
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
    except TunnelUnavailable as exc:
        log.info("instance %s: egress to %s: %s", instance_id, dest, exc)
        await reject_open(stream, "unavailable", str(exc))
        return
    except TunnelDialError as exc:
        log.info("instance %s: egress to %s refused: %s", instance_id, dest, exc)
        await reject_open(stream, exc.code, str(exc))
        return
    await accept_open(stream)
    metrics.count_tunnel_splice(await splice(stream, upstream))
