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
from typing import Any

import trio

from ...core.transports import MessageStream

__all__ = ["ASGIWebSocketStream", "Receive", "Send"]

Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


class ASGIWebSocketStream(MessageStream):
    """An accepted ASGI websocket as a byte stream of binary messages."""

    def __init__(self, receive: Receive, send: Send) -> None:
        super().__init__()
        self._receive = receive
        self._send = send

    async def _send_message(self, data: bytes) -> None:
        if self._eof:
            raise trio.BrokenResourceError("websocket disconnected")
        try:
            await self._send({"type": "websocket.send", "bytes": data})
        except OSError as exc:  # the ASGI server reports a gone client this way
            raise trio.BrokenResourceError("websocket send failed") from exc

    async def _receive_message(self) -> bytes | None:
        message = await self._receive()
        kind = message.get("type")
        if kind == "websocket.disconnect":
            return None
        if kind != "websocket.receive":
            raise trio.BrokenResourceError(f"unexpected ASGI message {kind!r}")
        data = message.get("bytes")
        if data is None:
            self._eof = True
            raise trio.BrokenResourceError("text message on a binary websocket transport")
        return bytes(data)

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
