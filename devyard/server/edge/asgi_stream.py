"""An ASGI WebSocket connection as a `trio.abc.Stream`, so a mux session runs over it.

Binary messages only (docs/protocol.md 8.2): each `send_all` is one message, `receive_some`
hands out message bytes and keeps the rest of a large message for the next call. Buffering is
bounded by the ASGI server: this adapter asks `receive()` for one message at a time, and the
server's per-connection queue in front of it is bounded (Hypercorn: ``max_app_queue_size``
messages of at most ``websocket_max_message_size`` bytes). No framework import is needed.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, Final

import trio

__all__ = ["ASGIWebSocketStream", "Receive", "Send"]

Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]

#: Largest message sent (whole frames up to this size), as `WebSocketStream.max_send`.
MAX_SEND: Final = 256 * 1024


class ASGIWebSocketStream(trio.abc.Stream):
    """An accepted ASGI websocket as a byte stream of binary messages."""

    max_send: Final = MAX_SEND

    def __init__(self, receive: Receive, send: Send) -> None:
        self._receive = receive
        self._send = send
        self._pending = memoryview(b"")
        self._eof = False
        self._closed = False

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        if self._closed:
            raise trio.ClosedResourceError("websocket closed")
        if self._eof:
            raise trio.BrokenResourceError("websocket disconnected")
        try:
            await self._send({"type": "websocket.send", "bytes": bytes(data)})
        except OSError as exc:  # the ASGI server reports a gone client this way
            raise trio.BrokenResourceError("websocket send failed") from exc

    async def wait_send_all_might_not_block(self) -> None:
        await trio.lowlevel.checkpoint()

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        if max_bytes is not None and max_bytes < 1:
            raise ValueError("max_bytes must be >= 1")
        if self._closed:
            raise trio.ClosedResourceError("websocket closed")
        if not self._pending:
            if self._eof:
                await trio.lowlevel.checkpoint()
                return b""
            message = await self._receive()
            kind = message.get("type")
            if kind == "websocket.disconnect":
                self._eof = True
                return b""
            if kind != "websocket.receive":
                raise trio.BrokenResourceError(f"unexpected ASGI message {kind!r}")
            data = message.get("bytes")
            if data is None:
                self._eof = True
                raise trio.BrokenResourceError("text message on a binary websocket transport")
            if max_bytes is None or len(data) <= max_bytes:
                return bytes(data)
            self._pending = memoryview(bytes(data))
        else:
            await trio.lowlevel.checkpoint()
        size = len(self._pending) if max_bytes is None else max_bytes
        chunk = bytes(self._pending[:size])
        self._pending = self._pending[size:]
        return chunk

    async def aclose(self) -> None:
        if self._closed:
            await trio.lowlevel.checkpoint()
            return
        self._closed = True
        if self._eof:
            await trio.lowlevel.checkpoint()
            return
        self._eof = True
        with trio.move_on_after(2.0, shield=True):
            with contextlib.suppress(OSError):
                await self._send({"type": "websocket.close", "code": 1000})
