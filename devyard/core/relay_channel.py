"""`RelayChannel`: send and receive whole WebSocket-style messages over a trio stream."""

from __future__ import annotations

import trio

from .relay import RelayDecoder, encode_relay

__all__ = ["RelayChannel"]


class RelayChannel:
    """Text (`str`) and binary (`bytes`) messages over a byte stream (docs/protocol.md 6.3).

    Sends are serialized by a lock, so several tasks may send: one writer per stream.
    """

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        self._decoder = RelayDecoder()
        self._pending: list[str | bytes] = []
        self._send_lock = trio.StrictFIFOLock()

    async def send(self, message: str | bytes) -> None:
        async with self._send_lock:
            await self.stream.send_all(encode_relay(message))

    async def receive(self) -> str | bytes:
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
