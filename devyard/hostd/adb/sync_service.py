"""The `sync:` service: `adb push`, `adb pull`, `adb ls` and the stats they make first.

Theory of operation
-------------------
Requests arrive as a byte stream cut into ADB packets anywhere; SyncDecoder reassembles them
and `_Requests.next()` hands them out one at a time. Each request is answered before the next
is read, as adbd does, so a pipelining client (adb sends SEND, its DATA and DONE in one write)
simply waits in our buffer.

SEND streams into the device's `push` as it arrives: DATA payloads are joined into chunks of
about 1 MiB and handed to `push` as an async iterator, so a push never sits in memory whole.
If the device fails mid-file we still read up to the client's DONE before answering FAIL: the
client is writing them already and reads our answer only after. RECV reads the file with the
device's `pull` and sends it as 64 KiB DATA messages, batched into large writes.

Device paths are what the client sent; the device confines them to the instance's sandbox.
"""

from __future__ import annotations

import stat
from collections import deque
from collections.abc import AsyncIterator
from typing import Final

from ..drivers._errors import DeviceError, DeviceFileError
from ..drivers.base import FileEntry, FileKind
from ._errors import RemoteProtocolError
from .device import AdbDevice
from .stream import AdbStream
from .sync_protocol import (
    SYNC_DATA_MAX,
    StatResult,
    SyncDecoder,
    SyncMessage,
    encode_data,
    encode_dent_v1,
    encode_dent_v2,
    encode_done,
    encode_fail,
    encode_list_done,
    encode_okay,
    encode_stat_v1,
    encode_stat_v2,
)

__all__ = ["serve_sync"]

_PUSH_CHUNK: Final = 1024 * 1024
_SEND_BATCH: Final = 1024 * 1024
_EIO: Final = 5


class _Requests:
    def __init__(self, stream: AdbStream) -> None:
        self._stream = stream
        self._decoder = SyncDecoder()
        self._pending: deque[SyncMessage] = deque()

    async def next(self) -> SyncMessage | None:
        """The next message, or None when the host closed the stream."""
        while not self._pending:
            data = await self._stream.receive_some()
            if not data:
                return None
            self._pending.extend(self._decoder.feed(data))
        return self._pending.popleft()


def _stat_result(entry: FileEntry) -> StatResult:
    return StatResult(mode=entry.mode, size=entry.size, mtime=entry.mtime)


async def _stat(device: AdbDevice, path: str) -> StatResult:
    try:
        return _stat_result(await device.stat(path))
    except DeviceFileError as exc:
        return StatResult(error=exc.errno or _EIO)


async def serve_sync(stream: AdbStream, device: AdbDevice) -> None:
    stream.accept()
    requests = _Requests(stream)
    while (request := await requests.next()) is not None:
        ident = request.id
        path = request.payload.decode("utf-8", "surrogateescape")
        if ident == b"STAT":
            await stream.send_all(encode_stat_v1(await _stat(device, path)))
        elif ident in (b"STA2", b"LST2"):
            await stream.send_all(encode_stat_v2(ident, await _stat(device, path)))
        elif ident in (b"LIST", b"LIS2"):
            await stream.send_all(await _list(device, path, v2=ident == b"LIS2"))
        elif ident == b"SEND":
            await stream.send_all(await _receive_file(device, path, requests))
        elif ident == b"RECV":
            await _send_file(stream, device, path)
        elif ident == b"QUIT":
            return
        else:
            raise RemoteProtocolError(f"sync {ident.decode()} outside a transfer")


async def _list(device: AdbDevice, path: str, *, v2: bool) -> bytes:
    try:
        entries = await device.ls(path)
    except DeviceFileError:
        entries = []  # adbd answers a failed opendir with an empty listing
    parts = []
    for entry in entries:
        name = entry.name.encode("utf-8", "surrogateescape")
        st = _stat_result(entry)
        parts.append(encode_dent_v2(name, st) if v2 else encode_dent_v1(name, st))
    parts.append(encode_list_done(v2))
    return b"".join(parts)


async def _receive_file(device: AdbDevice, spec: str, requests: _Requests) -> bytes:
    """Handle SEND: returns the OKAY or FAIL to answer once the client's DONE was read."""
    path, comma, mode_text = spec.rpartition(",")
    if not comma:
        path, mode_text = spec, "33188"
    mode = int(mode_text) if mode_text.isdigit() else 0o100644
    done = False

    async def chunks() -> AsyncIterator[bytes]:
        nonlocal done
        buffer = bytearray()
        while True:
            message = await requests.next()
            if message is None:
                raise RemoteProtocolError("sync stream closed inside SEND")
            if message.id == b"DATA":
                buffer += message.payload
                if len(buffer) >= _PUSH_CHUNK:
                    yield bytes(buffer)
                    buffer.clear()
            elif message.id == b"DONE":
                done = True
                if buffer:
                    yield bytes(buffer)
                return
            else:
                raise RemoteProtocolError(f"sync {message.id.decode()} inside SEND")

    failure = ""
    if stat.S_ISLNK(mode):
        failure = "symlinks cannot be pushed to this device"
    else:
        try:
            await device.push(path, chunks(), mode=stat.S_IMODE(mode))
        except DeviceFileError as exc:
            failure = f"{path}: {exc.strerror}"
        except DeviceError as exc:
            failure = f"{path}: {exc}"
    while not done:  # drain what the client already sent
        message = await requests.next()
        if message is None:
            raise RemoteProtocolError("sync stream closed inside SEND")
        done = message.id == b"DONE"
    return encode_fail(failure) if failure else encode_okay()


async def _send_file(stream: AdbStream, device: AdbDevice, path: str) -> None:
    try:
        entry = await device.stat(path)
        if entry.kind is FileKind.DIRECTORY:
            raise DeviceFileError(path, 21)  # EISDIR
        data = await device.pull(path)
    except DeviceFileError as exc:
        await stream.send_all(encode_fail(f"{path}: {exc.strerror}"))
        return
    view = memoryview(data)
    batch: list[bytes] = []
    size = 0
    for offset in range(0, len(view), SYNC_DATA_MAX):
        message = encode_data(view[offset : offset + SYNC_DATA_MAX])
        batch.append(message)
        size += len(message)
        if size >= _SEND_BATCH:
            await stream.send_all(b"".join(batch))
            batch, size = [], 0
    batch.append(encode_done())
    await stream.send_all(b"".join(batch))
