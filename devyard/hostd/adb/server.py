"""Serving ADB: `serve_adb` over any trio stream, `serve_adb_tcp` on a loopback port.

`serve_adb` is what the ADB-over-WebSocket bridge will call with a multiplexed stream; over
TCP each accepted connection is one `serve_adb`. The CNXN banner names the device from its
system properties, which is what `adb devices -l` shows (product:, model:, device:).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import NoReturn

import trio

from ._errors import ProtocolError
from .config import DEFAULT_CONFIG, AdbConfig
from .connection import AdbConnection
from .device import AdbDevice
from .services import DeviceServices

__all__ = ["banner", "serve_adb", "serve_adb_tcp"]

log = logging.getLogger(__name__)


def banner(properties: Mapping[str, str], config: AdbConfig = DEFAULT_CONFIG) -> bytes:
    """`device::ro.product.name=...;ro.product.model=...;ro.product.device=...;features=...`"""
    parts = [
        f"{key}={properties.get(key, '')}"
        for key in ("ro.product.name", "ro.product.model", "ro.product.device")
    ]
    parts.append("features=" + ",".join(config.features))
    return ("device::" + ";".join(parts)).encode()


async def serve_adb(
    stream: trio.abc.Stream, device: AdbDevice, config: AdbConfig = DEFAULT_CONFIG
) -> None:
    """Be the device end of one ADB transport until the host goes away.

    Returns when the host disconnects; raises RemoteProtocolError if it breaks the protocol.
    Closes `stream` in every case."""
    conn = AdbConnection(
        stream, banner(device.properties(), config), DeviceServices(device), config
    )
    await conn.run()


async def serve_adb_tcp(
    device: AdbDevice,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    config: AdbConfig = DEFAULT_CONFIG,
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> NoReturn:
    """Listen for `adb connect HOST:PORT`; `task_status` gets the bound port."""
    listeners = await trio.open_tcp_listeners(port, host=host, backlog=16)
    bound = int(listeners[0].socket.getsockname()[1])

    async def handle(stream: trio.SocketStream) -> None:
        try:
            await serve_adb(stream, device, config)
        except ProtocolError as exc:
            log.warning("ADB connection on port %d dropped: %s", bound, exc)

    task_status.started(bound)
    await trio.serve_listeners(handle, listeners)
    raise AssertionError("serve_listeners returned")  # pragma: no cover
