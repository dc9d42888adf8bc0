"""WebSocket messages carried over a byte stream (docs/protocol.md 6.3).

Pure: no trio, no I/O. The edge terminates a browser's WebSocket and carries its messages over
a mux stream to the host, which must keep text (JSON control) and binary (media) apart and keep
message boundaries. Each message is ``[u8 opcode: 1 text, 2 binary][u32 BE length][payload]``.
"""

from __future__ import annotations

import struct
from typing import Final

from ._errors import RemoteProtocolError

__all__ = ["MAX_RELAY_MESSAGE", "RelayDecoder", "encode_relay"]

MAX_RELAY_MESSAGE: Final = 4 * 1024 * 1024
_HEADER: Final = struct.Struct(">BI")
_TEXT: Final = 1
_BINARY: Final = 2


def encode_relay(message: str | bytes) -> bytes:
    """One message, framed: text for `str`, binary for `bytes`."""
    if isinstance(message, str):
        opcode, payload = _TEXT, message.encode()
    else:
        opcode, payload = _BINARY, bytes(message)
    if len(payload) > MAX_RELAY_MESSAGE:
        raise ValueError(f"message of {len(payload)} bytes exceeds {MAX_RELAY_MESSAGE}")
    return _HEADER.pack(opcode, len(payload)) + payload


class RelayDecoder:
    """Incremental decoder: feed bytes, get whole messages (`str` for text, `bytes` binary)."""

    __slots__ = ("_buf",)

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes | bytearray) -> list[str | bytes]:
        self._buf += data
        out: list[str | bytes] = []
        while len(self._buf) >= _HEADER.size:
            opcode, length = _HEADER.unpack_from(self._buf)
            if opcode not in (_TEXT, _BINARY):
                raise RemoteProtocolError(f"relay opcode {opcode} is neither text nor binary")
            if length > MAX_RELAY_MESSAGE:
                raise RemoteProtocolError(f"relay message of {length} bytes is too large")
            end = _HEADER.size + length
            if len(self._buf) < end:
                break
            payload = bytes(self._buf[_HEADER.size : end])
            del self._buf[:end]
            if opcode == _TEXT:
                try:
                    out.append(payload.decode())
                except UnicodeDecodeError as exc:
                    raise RemoteProtocolError(f"relay text is not UTF-8: {exc}") from None
            else:
                out.append(payload)
        return out

    def feed_eof(self) -> None:
        if self._buf:
            raise RemoteProtocolError("stream ended inside a relay message")
