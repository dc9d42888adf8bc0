"""Socket streams in both directions: `tcp:` / `localabstract:` (adb forward) and `reverse:`.

`tcp:<port>` and `localabstract:<name>` connect to the device socket (the device's
`open_port` / `open_abstract`) before answering the OPEN, so a closed port is a refused stream
and `adb forward` reports it at once instead of accepting and dropping.

`reverse:forward:[norebind:]LOCAL;REMOTE` makes the device listen on LOCAL (`tcp:<port>` or
`localabstract:<name>`): every connection to it opens a stream toward the host (OPEN REMOTE),
which the adb server connects to REMOTE on the host side. Reverse forwards belong to one ADB
connection: their listeners are tasks of the connection's nursery and end with it, as they do
on a device when the host disconnects. Answers follow adbd: `OKAY`, or `FAIL` + 4 hex digits of
length + message; `list-forward` answers the length-prefixed list alone.

ADB has no half-close, so `splice` ends both directions when either side ends.
"""

from __future__ import annotations

from functools import partial
from typing import Final

import attrs
import trio

from ..drivers._errors import DeviceError
from .connection import AdbConnection
from .device import AdbDevice
from .stream import AdbStream

__all__ = ["ReverseForwards", "parse_socket_spec", "serve_socket", "splice"]

_SPLICE_CHUNK: Final = 256 * 1024


def parse_socket_spec(spec: str) -> tuple[str, int | str]:
    """`tcp:PORT` -> ("tcp", PORT); `localabstract:NAME` -> ("localabstract", NAME)."""
    kind, _, address = spec.partition(":")
    if kind == "tcp":
        host, _, port = address.rpartition(":")
        if host not in ("", "localhost", "127.0.0.1") or not port.isdigit():
            raise ValueError(f"bad socket spec {spec!r}")
        number = int(port)
        if not 0 < number < 65536:
            raise ValueError(f"bad port in {spec!r}")
        return kind, number
    if kind == "localabstract" and address:
        return kind, address
    raise ValueError(f"unsupported socket spec {spec!r}")


async def splice(adb: AdbStream, other: trio.abc.Stream) -> None:
    """Copy both ways until either side ends or breaks; then close both."""

    async def pump(
        source: trio.abc.ReceiveStream, sink: trio.abc.SendStream, scope: trio.CancelScope
    ) -> None:
        try:
            while data := await source.receive_some(_SPLICE_CHUNK):
                await sink.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        scope.cancel()

    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(pump, adb, other, nursery.cancel_scope)
            nursery.start_soon(pump, other, adb, nursery.cancel_scope)
    finally:
        adb.close_nowait()
        await trio.aclose_forcefully(other)


async def _connect(device: AdbDevice, kind: str, address: int | str) -> trio.abc.Stream:
    if kind == "tcp":
        assert isinstance(address, int)
        return await device.open_port(address)
    return await device.open_abstract(str(address))


async def serve_socket(stream: AdbStream, device: AdbDevice, spec: str) -> None:
    try:
        kind, address = parse_socket_spec(spec)
        target = await _connect(device, kind, address)
    except (ValueError, DeviceError, OSError):
        stream.refuse()
        return
    stream.accept()
    await splice(stream, target)


@attrs.define
class _Reverse:
    local: str
    remote: str
    scope: trio.CancelScope = attrs.field(factory=trio.CancelScope)


def _fail(message: str) -> bytes:
    data = message.encode()
    return b"FAIL" + f"{len(data):04x}".encode() + data


class ReverseForwards:
    """The reverse forwards of one ADB connection."""

    def __init__(self, conn: AdbConnection, device: AdbDevice) -> None:
        self._conn = conn
        self._device = device
        self._entries: dict[str, _Reverse] = {}

    async def serve(self, stream: AdbStream, request: str) -> None:
        stream.accept()
        await stream.send_all(await self._answer(request))

    async def _answer(self, request: str) -> bytes:
        if request == "list-forward":
            listing = "".join(f"(reverse) {e.local} {e.remote}\n" for e in self._entries.values())
            return f"{len(listing.encode()):04x}".encode() + listing.encode()
        if request == "killforward-all":
            for entry in self._entries.values():
                entry.scope.cancel()
            self._entries.clear()
            return b"OKAY"
        if request.startswith("killforward:"):
            local = request.removeprefix("killforward:")
            killed = self._entries.pop(local, None)
            if killed is None:
                return _fail(f"listener '{local}' not found")
            killed.scope.cancel()
            return b"OKAY"
        if request.startswith("forward:"):
            rest = request.removeprefix("forward:")
            norebind = rest.startswith("norebind:")
            local, semicolon, remote = rest.removeprefix("norebind:").partition(";")
            if not semicolon or not remote:
                return _fail(f"bad forward: {request}")
            return await self._forward(local, remote, norebind=norebind)
        return _fail(f"unknown reverse request {request!r}")

    async def _forward(self, local: str, remote: str, *, norebind: bool) -> bytes:
        try:
            kind, address = parse_socket_spec(local)
        except ValueError as exc:
            return _fail(str(exc))
        existing = self._entries.get(local)
        if existing is not None:
            if norebind:
                return _fail("cannot rebind existing socket")
            existing.remote = remote  # later connections go to the new place
            return b"OKAY"
        entry = _Reverse(local, remote)
        try:
            await self._conn.start(self._listen, entry, kind, address)
        except (DeviceError, OSError) as exc:
            return _fail(f"cannot bind listener: {exc}")
        self._entries[local] = entry
        return b"OKAY"

    async def _listen(
        self,
        entry: _Reverse,
        kind: str,
        address: int | str,
        *,
        task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        handler = partial(self._on_connection, entry)
        with entry.scope:
            if kind == "tcp":
                assert isinstance(address, int)
                await self._device.serve_port(address, handler, task_status=task_status)
            else:
                await self._device.serve_abstract(str(address), handler, task_status=task_status)

    async def _on_connection(self, entry: _Reverse, sock: trio.SocketStream) -> None:
        try:
            adb = await self._conn.open_stream(entry.remote)
        except trio.BrokenResourceError:
            await trio.aclose_forcefully(sock)  # the host refused: the device app sees a reset
            return
        await splice(adb, sock)
