"""Send a list of byte pieces without joining them: one `sendmsg` where the stream is plain TCP.

The session writer sends whole frames as header and payload pieces, and splice passes on a mux
stream's buffered pieces; joining them first would copy every byte once more in Python.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial
from typing import Final, TypeAlias

import trio

from .upgrade import PrefixedStream

__all__ = ["Pieces", "piece_sender"]

Pieces: TypeAlias = list[bytes | memoryview]
_IOV_MAX: Final = 1024  # buffers one sendmsg takes at most (Linux's UIO_MAXIOV)


def piece_sender(stream: trio.abc.SendStream) -> Callable[[Pieces], Awaitable[None]]:
    """An async function that sends all the pieces given to it to `stream`, in order.

    Over a plain TCP socket (trio.SocketStream, also under PrefixedStream): sendmsg, with
    errors as trio.BrokenResourceError like SocketStream.send_all. Anything else (TLS, a
    WebSocket): one send_all of the pieces joined. Whoever calls it must be the stream's only
    sender, as with send_all.
    """
    send_pieces = getattr(stream, "send_pieces", None)  # wsframe.FramedWebSocket: no join
    if send_pieces is not None:
        sender: Callable[[Pieces], Awaitable[None]] = send_pieces
        return sender
    inner: trio.abc.SendStream = stream
    while isinstance(inner, PrefixedStream):
        inner = inner.stream
    if isinstance(inner, trio.SocketStream):
        return partial(_sendmsg_all, inner.socket)
    return partial(_joined_send, stream)


async def _joined_send(stream: trio.abc.SendStream, pieces: Pieces) -> None:
    await stream.send_all(pieces[0] if len(pieces) == 1 else b"".join(pieces))


async def _sendmsg_all(sock: trio.socket.SocketType, pieces: Pieces) -> None:
    start = 0
    try:
        while start < len(pieces):
            sent = await sock.sendmsg(pieces[start : start + _IOV_MAX])
            while sent:
                n = len(pieces[start])
                if sent >= n:
                    sent -= n
                    start += 1
                else:
                    pieces[start] = memoryview(pieces[start])[sent:]
                    sent = 0
            while start < len(pieces) and not len(pieces[start]):
                start += 1
    except OSError as exc:
        raise trio.BrokenResourceError(f"socket send failed: {exc}") from exc
