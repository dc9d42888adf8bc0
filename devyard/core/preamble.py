"""The open preamble and the control channel over any trio stream (docs/protocol.md 6-7).

Reads are exact (`receive_some(max_bytes=remaining)`), so nothing after a preamble is ever
consumed by it: the raw bytes that follow stay in the stream for whoever reads next.
"""

from __future__ import annotations

from typing import Any

import trio

from ._errors import OpenError, RemoteProtocolError
from .messages import (
    LENGTH_SIZE,
    decode_length,
    decode_message_body,
    encode_message,
    error_reply,
    ok_reply,
)

__all__ = [
    "accept_open",
    "read_open",
    "receive_message",
    "reject_open",
    "request_open",
    "send_message",
]


async def _receive_exactly(stream: trio.abc.ReceiveStream, n: int) -> bytes:
    chunks = bytearray()
    while len(chunks) < n:
        chunk = await stream.receive_some(n - len(chunks))
        if not chunk:
            raise RemoteProtocolError(f"stream ended after {len(chunks)} of {n} bytes")
        chunks += chunk
    return bytes(chunks)


async def send_message(stream: trio.abc.SendStream, message: dict[str, Any]) -> None:
    await stream.send_all(encode_message(message))


async def receive_message(stream: trio.abc.ReceiveStream) -> dict[str, Any]:
    """Read exactly one message, and nothing after it."""
    length = decode_length(await _receive_exactly(stream, LENGTH_SIZE))
    return decode_message_body(await _receive_exactly(stream, length))


async def request_open(stream: trio.abc.Stream, kind: str, **fields: Any) -> dict[str, Any]:
    """Opener's side: say what the stream is for; return the ok reply or raise OpenError."""
    await send_message(stream, {"kind": kind, **fields})
    reply = await receive_message(stream)
    if reply.get("ok") is True:
        return reply
    retry = reply.get("retry_after_s")
    raise OpenError(
        str(reply.get("code", "error")),
        str(reply.get("message", "")),
        retry_after_s=float(retry) if isinstance(retry, int | float) else None,
    )


async def read_open(stream: trio.abc.Stream) -> dict[str, Any]:
    """Acceptor's side: the opener's request (answer it with accept_open or reject_open)."""
    request = await receive_message(stream)
    if not isinstance(request.get("kind"), str):
        raise RemoteProtocolError("open preamble without a 'kind'")
    return request


async def accept_open(stream: trio.abc.Stream, **fields: Any) -> None:
    await send_message(stream, ok_reply(**fields))


async def reject_open(
    stream: trio.abc.Stream, code: str, message: str = "", *, retry_after_s: float | None = None
) -> None:
    await send_message(stream, error_reply(code, message, retry_after_s=retry_after_s))
