"""Device sockets of the virtual device: a table from device ports to loopback TCP ports.

What it models: on a real Android device an app listens on a TCP port or an abstract unix
socket, and adb's ``tcp:<port>`` / ``localabstract:<name>`` services connect to it from the
host. The virtual device has no network namespace, so each device socket is a listener on
127.0.0.1 with a kernel-chosen port, recorded here under its device address.

Why loopback TCP rather than in-process memory streams: the kernel gives real backpressure
and real half-close for free (a `trio.SocketStream` *is* a HalfCloseableStream; trio's memory
stream pairs buffer without bound), and the things that listen "on the device" are often real
processes already bound to a loopback port, such as the per-instance headless Chromium of
``sandbox.playwrightAndroid`` (``--remote-debugging-port``): `map_abstract` points
``chrome_devtools_remote`` at it with no copy loop of ours in between.

Invariants: one entry per device address; an entry exists only while its listener (or the
process it maps to) is meant to accept; connecting to an unknown address raises
`PortClosedError` at once, as a refused connection would.
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable
from typing import Final, NoReturn

import attrs
import trio

from .._errors import InvalidInputError, PortClosedError

__all__ = ["ListeningSocket", "PortHandler", "PortTable", "SocketKind"]

PortHandler = Callable[[trio.SocketStream], Awaitable[object]]

LOOPBACK: Final = "127.0.0.1"
MAX_ABSTRACT_NAME: Final = 107  # sun_path is 108 bytes including the leading NUL


class SocketKind(enum.StrEnum):
    TCP = "tcp"
    ABSTRACT = "localabstract"


@attrs.frozen
class ListeningSocket:
    """A device socket that accepts connections: ``address`` is the port number or the name."""

    kind: SocketKind
    address: int | str
    host_port: int


def _key(kind: SocketKind, address: int | str) -> tuple[SocketKind, int | str]:
    if kind is SocketKind.TCP:
        if not isinstance(address, int) or not 0 < address < 65536:
            raise InvalidInputError(f"device TCP port out of range: {address!r}")
    elif not isinstance(address, str) or not 0 < len(address) <= MAX_ABSTRACT_NAME:
        raise InvalidInputError(f"bad abstract socket name: {address!r}")
    return kind, address


class PortTable:
    """The device sockets of one virtual device."""

    def __init__(self) -> None:
        self._entries: dict[tuple[SocketKind, int | str], int] = {}
        self._closed = False

    def close(self) -> None:
        """Forget every entry; later connects are refused and later maps fail."""
        self._closed = True
        self._entries.clear()

    def map(self, kind: SocketKind, address: int | str, host_port: int) -> None:
        """Route connections to the device socket to ``127.0.0.1:host_port``."""
        key = _key(kind, address)
        if self._closed:
            raise trio.ClosedResourceError("the device is closed")
        if not 0 < host_port < 65536:
            raise InvalidInputError(f"host port out of range: {host_port!r}")
        if key in self._entries:
            raise InvalidInputError(f"device {kind} socket {address!r} is already in use")
        self._entries[key] = host_port

    def unmap(self, kind: SocketKind, address: int | str) -> None:
        """Stop routing the device socket; unknown addresses are ignored."""
        self._entries.pop(_key(kind, address), None)

    def listening(self) -> list[ListeningSocket]:
        return [
            ListeningSocket(kind, address, host_port)
            for (kind, address), host_port in sorted(
                self._entries.items(), key=lambda item: (item[0][0], str(item[0][1]))
            )
        ]

    async def connect(self, kind: SocketKind, address: int | str) -> trio.SocketStream:
        key = _key(kind, address)
        host_port = self._entries.get(key)
        if host_port is None:
            await trio.lowlevel.checkpoint()
            raise PortClosedError(f"nothing listens on device {kind} socket {address!r}")
        try:
            return await trio.open_tcp_stream(LOOPBACK, host_port)
        except OSError as exc:
            raise PortClosedError(
                f"device {kind} socket {address!r} refused the connection: {exc}"
            ) from exc

    async def serve(
        self,
        kind: SocketKind,
        address: int | str,
        handler: PortHandler,
        *,
        task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
    ) -> NoReturn:
        """Listen on the device socket until cancelled; ``task_status`` gets the host port.

        Each connection runs ``handler`` in a task of this call's nursery, so cancelling the
        server ends its connections too (structured: nothing outlives the ``serve`` call).
        """
        key = _key(kind, address)
        listeners = await trio.open_tcp_listeners(0, host=LOOPBACK, backlog=16)
        try:
            host_port = int(listeners[0].socket.getsockname()[1])
            self.map(kind, address, host_port)
            try:
                async with trio.open_nursery() as nursery:
                    task_status.started(host_port)
                    await trio.serve_listeners(handler, listeners, handler_nursery=nursery)
            finally:
                if self._entries.get(key) == host_port:
                    del self._entries[key]
        finally:
            for listener in listeners:
                await trio.aclose_forcefully(listener)
        raise AssertionError("serve_listeners returned")  # pragma: no cover
