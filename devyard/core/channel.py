"""Streams that carry only whole messages: the control stream and relayed WebSocket messages.

`ControlChannel` carries the length-prefixed JSON messages of docs/protocol.md 7 (a link's
control stream); `RelayChannel` carries WebSocket-style text and binary messages (6.3, the
browser stream between the edge and the host). Both are one `MessageChannel` over a codec:
sends are serialized by a lock (several tasks may send; one writer per stream), and a clean
end of the stream is `trio.EndOfChannel`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, Protocol, TypeVar

import trio

from .messages import MessageDecoder, encode_message
from .relay import RelayDecoder, encode_relay

__all__ = ["ControlChannel", "MessageChannel", "RelayChannel"]

T = TypeVar("T")


class _Decoder(Protocol[T]):
    def feed(self, data: bytes | bytearray) -> list[T]: ...

    def feed_eof(self) -> None: ...


class MessageChannel(Generic[T]):
    """Messages of type T over a byte stream, framed by *encode* and *decoder*."""

    def __init__(
        self, stream: trio.abc.Stream, decoder: _Decoder[T], encode: Callable[[T], bytes]
    ) -> None:
        self.stream = stream
        self._decoder = decoder
        self._encode = encode
        self._pending: list[T] = []
        self._send_lock = trio.StrictFIFOLock()

    async def send(self, message: T) -> None:
        async with self._send_lock:
            await self.stream.send_all(self._encode(message))

    async def receive(self) -> T:
        """The next message; EndOfChannel when the stream ends cleanly."""
        while not self._pending:
            data = await self.stream.receive_some()
            if not data:
                self._decoder.feed_eof()
                raise trio.EndOfChannel
            self._pending.extend(self._decoder.feed(data))
        return self._pending.pop(0)

    async def aclose(self) -> None:
        await self.stream.aclose()


class ControlChannel(MessageChannel[dict[str, Any]]):
    """JSON object messages (docs/protocol.md 7)."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        super().__init__(stream, MessageDecoder(), encode_message)


class RelayChannel(MessageChannel[str | bytes]):
    """Text (`str`) and binary (`bytes`) messages (docs/protocol.md 6.3)."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        super().__init__(stream, RelayDecoder(), encode_relay)
