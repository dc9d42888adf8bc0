"""Service strings (the payload of OPEN) and the router that serves them on one connection.

`parse_service` is pure: it turns `shell,v2,raw:ls -l` into a ServiceRequest or raises
ServiceError. The grammar is adbd's: a name, for `shell` comma-separated options, a colon,
then the argument, shell-quoted by the client where it is a command line; `abb_exec:` joins
its arguments with NUL bytes instead.

Services we will not provide on a virtual device (root, remount, reboot, verity, tcpip, usb,
sideload, backup/restore, jdwp) are answered at once so the client never waits: the stream is
accepted, a one-line reason is written, and it is closed, which `adb root`/`adb remount`/`adb
reboot` print and return from. Anything else we do not know is refused with CLSE, which adb
reports as `error: closed`.
"""

from __future__ import annotations

import enum
import logging
from typing import Final

import attrs
from trio.lowlevel import checkpoint

from . import (  # noqa: F401  (they register their commands)
    activity_commands,
    android_commands,
    logcat,
    net_commands,
)
from ._errors import ServiceError
from .connection import AdbConnection
from .device import AdbDevice
from .forward import ReverseForwards, serve_socket
from .interpreter import Interpreter
from .shell_service import serve_abb_exec, serve_exec, serve_shell
from .stream import AdbStream
from .sync_service import serve_sync

__all__ = ["DeviceServices", "ServiceKind", "ServiceRequest", "parse_service"]

log = logging.getLogger(__name__)


class ServiceKind(enum.Enum):
    SHELL = "shell"
    EXEC = "exec"
    SYNC = "sync"
    ABB_EXEC = "abb_exec"
    SOCKET = "socket"  # tcp:, localabstract:
    REVERSE = "reverse"
    UNAVAILABLE = "unavailable"


@attrs.frozen
class ServiceRequest:
    kind: ServiceKind
    argument: str = ""
    options: tuple[str, ...] = ()


#: Services a production device has and a virtual one cannot honour: the reason we print.
_UNAVAILABLE: Final = {
    "root": "adbd cannot run as root on a devyard virtual device\n",
    "unroot": "adbd is already not running as root\n",
    "remount": "remount is not supported on a devyard virtual device\n",
    "reboot": "reboot is not supported on a devyard virtual device\n",
    "disable-verity": "verity is not supported on a devyard virtual device\n",
    "enable-verity": "verity is not supported on a devyard virtual device\n",
    "tcpip": "the virtual device is already reached over the network\n",
    "usb": "the virtual device has no USB\n",
}


def parse_service(service: str) -> ServiceRequest:
    name, colon, argument = service.partition(":")
    if not colon:
        raise ServiceError(f"malformed service {service!r}")
    head, *options = name.split(",")
    if head == "shell":
        return ServiceRequest(ServiceKind.SHELL, argument, tuple(options))
    if options:
        raise ServiceError(f"options on {head!r}")
    if head == "exec":
        return ServiceRequest(ServiceKind.EXEC, argument)
    if head == "sync":
        return ServiceRequest(ServiceKind.SYNC)
    if head == "abb_exec":
        args = tuple(argument.split("\0")) if argument else ()
        return ServiceRequest(ServiceKind.ABB_EXEC, options=args)
    if head in ("tcp", "localabstract"):
        return ServiceRequest(ServiceKind.SOCKET, service)
    if head == "reverse":
        return ServiceRequest(ServiceKind.REVERSE, argument)
    if head in _UNAVAILABLE:
        return ServiceRequest(ServiceKind.UNAVAILABLE, _UNAVAILABLE[head])
    raise ServiceError(f"unsupported service {head!r}")


class DeviceServices:
    """The services of one ADB connection to `device` (a ServiceRunner)."""

    def __init__(self, device: AdbDevice) -> None:
        self._device = device
        self._sh = Interpreter(device)
        self._reverse: ReverseForwards | None = None

    async def __call__(self, stream: AdbStream, conn: AdbConnection) -> None:
        try:
            request = parse_service(stream.service)
        except ServiceError as exc:
            log.info("refusing %r: %s", stream.service, exc)
            stream.refuse()
            await checkpoint()
            return
        kind = request.kind
        if kind is ServiceKind.SHELL:
            await serve_shell(stream, self._sh, request.argument, request.options)
        elif kind is ServiceKind.EXEC:
            await serve_exec(stream, self._sh, request.argument)
        elif kind is ServiceKind.ABB_EXEC:
            await serve_abb_exec(stream, self._sh, request.options)
        elif kind is ServiceKind.SYNC:
            await serve_sync(stream, self._device)
        elif kind is ServiceKind.SOCKET:
            await serve_socket(stream, self._device, request.argument)
        elif kind is ServiceKind.REVERSE:
            if self._reverse is None:
                self._reverse = ReverseForwards(conn, self._device)
            await self._reverse.serve(stream, request.argument)
        else:
            stream.accept()
            await stream.send_all(request.argument.encode())
