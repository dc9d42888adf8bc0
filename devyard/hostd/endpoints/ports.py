"""The host side of ``targetHttpPortUrlPrefix``: an ``http`` stream to a device TCP port.

The edge speaks HTTP (or a WebSocket) on the stream; here it is bytes (docs/protocol.md 6.1,
docs/ports.md): connect to the device port within `_CONNECT_TIMEOUT_S`, answer the open
preamble, then copy both ways until either side ends. A port nobody listens on is refused
(``refused``, which the edge answers 502), a bad port number is ``bad-request``, a device
that cannot open ports now (an emulator whose adb server is gone) ``unavailable``.
"""

from __future__ import annotations

import logging
from typing import Any, Final

import trio

from ...core import MuxStream, accept_open, reject_open, splice
from ..drivers import DeviceDriver, DeviceError, PortClosedError

log = logging.getLogger(__name__)

__all__ = ["serve_port_stream"]

_CONNECT_TIMEOUT_S: Final = 10.0


async def serve_port_stream(
    stream: MuxStream, device: DeviceDriver, request: dict[str, Any]
) -> None:
    port = request.get("port")
    if not isinstance(port, int) or isinstance(port, bool) or not 0 < port < 65536:
        await reject_open(stream, "bad-request", f"bad device port {port!r}")
        return
    try:
        with trio.fail_after(_CONNECT_TIMEOUT_S):
            target = await device.open_port(port)
    except PortClosedError:
        await reject_open(stream, "refused", f"nothing listens on device port {port}")
        return
    except trio.TooSlowError:
        await reject_open(stream, "timeout", f"device port {port} did not accept in time")
        return
    except DeviceError as exc:
        log.info("device port %d: %s", port, exc)
        await reject_open(stream, "unavailable", f"device port {port}: {exc}")
        return
    async with target:
        await accept_open(stream)
        await splice(stream, target)
