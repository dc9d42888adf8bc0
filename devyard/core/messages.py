"""Length-prefixed JSON messages: the open preamble and the control stream (protocol.md 6-7).

Pure: no trio, no I/O. A message on the wire is a u32 big-endian length followed by that many
bytes of UTF-8 JSON holding one object. The open preamble is one such message from the opener
(`{"kind": ..., ...}`) answered by one from the acceptor (`{"ok": true}` or
`{"ok": false, "code": ..., "message": ..., "retry_after_s"?: ...}`); after that raw bytes
flow. The control stream (the first stream of a link) carries a sequence of them, each with a
`type`.
"""

from __future__ import annotations

import json
import struct
from typing import Any, Final

from ._errors import RemoteProtocolError

__all__ = [
    "MAX_MESSAGE_SIZE",
    "MessageDecoder",
    "decode_message_body",
    "encode_message",
    "error_reply",
    "ok_reply",
]

MAX_MESSAGE_SIZE: Final = 64 * 1024
_LENGTH: Final = struct.Struct(">I")
LENGTH_SIZE: Final = _LENGTH.size


def encode_message(message: dict[str, Any]) -> bytes:
    body = json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode()
    if len(body) > MAX_MESSAGE_SIZE:
        raise ValueError(f"message of {len(body)} bytes exceeds {MAX_MESSAGE_SIZE}")
    return _LENGTH.pack(len(body)) + body


def decode_length(prefix: bytes) -> int:
    (length,) = _LENGTH.unpack(prefix)
    if length > MAX_MESSAGE_SIZE:
        raise RemoteProtocolError(f"message of {length} bytes exceeds {MAX_MESSAGE_SIZE}")
    return int(length)


def decode_message_body(body: bytes) -> dict[str, Any]:
    try:
        message = json.loads(body)
    except (UnicodeDecodeError, ValueError) as exc:
        raise RemoteProtocolError(f"message is not JSON: {exc}") from None
    if not isinstance(message, dict):
        raise RemoteProtocolError("message is not a JSON object")
    return message


def ok_reply(**fields: Any) -> dict[str, Any]:
    return {"ok": True, **fields}


def error_reply(
    code: str, message: str = "", *, retry_after_s: float | None = None
) -> dict[str, Any]:
    reply: dict[str, Any] = {"ok": False, "code": code, "message": message}
    if retry_after_s is not None:
        reply["retry_after_s"] = retry_after_s
    return reply


class MessageDecoder:
    """Incremental decoder for a stream that carries only messages (the control stream)."""

    __slots__ = ("_buf",)

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes | bytearray) -> list[dict[str, Any]]:
        self._buf += data
        messages = []
        while len(self._buf) >= LENGTH_SIZE:
            length = decode_length(bytes(self._buf[:LENGTH_SIZE]))
            end = LENGTH_SIZE + length
            if len(self._buf) < end:
                break
            messages.append(decode_message_body(bytes(self._buf[LENGTH_SIZE:end])))
            del self._buf[:end]
        return messages

    def feed_eof(self) -> None:
        if self._buf:
            raise RemoteProtocolError("stream ended inside a message")
