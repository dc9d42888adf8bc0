"""`MessageStream`: binary messages presented as a byte stream, the base of every WebSocket
transport (trio-websocket's, our own framing in wsframe.py, the edge's ASGI one)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import trio

__all__ = ["WS_MAX_SEND", "MessageStream"]

#: Largest message a session sends over a WebSocketStream (whole frames up to this size). A
#: peer with the default read_size then takes each message whole, where a larger one is copied
#: out in read_size slices, and wsproto, which copies a message three times to frame it and
#: once more to parse it, works on buffers a quarter the size of a 1 MiB batch: over loopback,
#: 4 streams at once moved ~20% more with this limit (TCP, without those copies, does better
#: with the 1 MiB batches of max_write_batch).
WS_MAX_SEND: Final = 256 * 1024


class MessageStream(trio.abc.Stream):
    """Binary messages presented as a byte stream: the base of every WebSocket transport.

    Each `send_all` is one message (`_send_message`); `receive_some` hands out message bytes,
    keeping the rest of a large message for the next call. Subclasses supply the two message
    hooks (`_receive_message` returns None at a clean end) and `aclose`.
    """

    #: The session writer sends at most this much per send_all, that is per message.
    max_send: int = WS_MAX_SEND
    #: The headers of the peer's handshake response (client side; empty where unknown).
    handshake_headers: Sequence[tuple[bytes, bytes]] = ()

    def __init__(self) -> None:
        self._pending = memoryview(b"")
        self._eof = False
        self._closed = False

    async def _send_message(self, data: bytes) -> None:
        raise NotImplementedError

    async def _receive_message(self) -> bytes | None:
        raise NotImplementedError

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        if self._closed:
            raise trio.ClosedResourceError("websocket closed")
        await self._send_message(bytes(data))

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
            message = await self._receive_message()
            if message is None:
                self._eof = True
                return b""
            if max_bytes is None or len(message) <= max_bytes:
                return message
            self._pending = memoryview(message)
        else:
            await trio.lowlevel.checkpoint()
        size = len(self._pending) if max_bytes is None else max_bytes
        chunk = bytes(self._pending[:size])
        self._pending = self._pending[size:]
        return chunk
