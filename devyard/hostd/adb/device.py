"""What the device side of ADB needs from a device: `AdbDevice`.

It is the drivers' `AndroidDevice` (devyard.hostd.drivers.base) plus the verbs of the virtual
device that only ADB uses: listening on a device port or abstract socket (`adb reverse`), the
list of listening sockets (`cat /proc/net/unix`) and the host path of a device file (`pm
install` of a pushed APK hands the installer the file itself, not a copy). The virtual device
(`devyard.hostd.drivers.virtual.VirtualDevice`) satisfies it as it is; a real emulator never
needs it, because its own adbd speaks ADB and the bridge only carries bytes.
"""

from __future__ import annotations

from pathlib import Path
from typing import NoReturn, Protocol, runtime_checkable

import trio

from ..drivers._shared.ports import ListeningSocket, PortHandler
from ..drivers.base import AndroidDevice, LogLevel

__all__ = ["AdbDevice"]


@runtime_checkable
class AdbDevice(AndroidDevice, Protocol):
    def resolve_path(self, device_path: str) -> Path:
        """The host path of a device path (inside the instance's sandbox)."""
        ...

    def log(self, level: LogLevel, tag: str, message: str) -> None:
        """Append a line to the device log (`logcat`)."""

    def listening(self) -> list[ListeningSocket]:
        """Device sockets that accept connections now."""
        ...

    async def serve_port(
        self,
        port: int,
        handler: PortHandler,
        *,
        task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
    ) -> NoReturn:
        """Listen on device TCP `port` until cancelled; each connection runs `handler`."""
        ...

    async def serve_abstract(
        self,
        name: str,
        handler: PortHandler,
        *,
        task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
    ) -> NoReturn:
        """Listen on device abstract socket `name` until cancelled."""
        ...
