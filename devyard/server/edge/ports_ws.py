"""A caller's WebSocket relayed to a WebSocket server on a device port (docs/ports.md).

The edge is the caller's WebSocket server (through ASGI) and the device's WebSocket client
(wsproto, over the ``http`` stream). First the upgrade goes to the device: the caller's
subprotocols and end-to-end headers with it; the device's choice of subprotocol comes back in
the caller's 101. A device that refuses the upgrade has its status and (at most
`_MAX_REFUSAL_BODY` of) body passed to the caller as the HTTP answer. Then messages flow both
ways, whole (ASGI carries whole messages), each at most *max_message* bytes (the same limit
as the ASGI server's; a larger one from the device closes with 1009). Pings are answered
at each end by the end's own server; close codes pass through; a device that just drops the
connection closes the caller's WebSocket with 1011.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import MutableMapping, Sequence
from typing import Any, Final

import trio
from wsproto import WSConnection
from wsproto.connection import ConnectionState, ConnectionType
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Event,
    Message,
    Ping,
    RejectConnection,
    RejectData,
    Request,
    TextMessage,
)
from wsproto.utilities import LocalProtocolError, RemoteProtocolError

from ...core import MuxStream
from .asgi import error_headers, reject_websocket
from .asgi_stream import Receive, Send

log = logging.getLogger(__name__)

__all__ = ["relay_websocket"]

_CHUNK: Final = 256 * 1024
_UPGRADE_TIMEOUT_S: Final = 30.0
_MAX_REFUSAL_BODY: Final = 64 * 1024
_CLOSE_TIMEOUT_S: Final = 2.0
_GONE: Final = (trio.BrokenResourceError, trio.ClosedResourceError, OSError)
_BAD: Final = (RemoteProtocolError, LocalProtocolError)
_GOING_AWAY: Final = 1011  # the device went away without a close frame (1001 the other way)


class _DeviceClosed(Exception):
    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


class _Device:
    """The device side: a wsproto client over the stream, one event at a time."""

    def __init__(self, stream: MuxStream) -> None:
        self.stream = stream
        self.ws = WSConnection(ConnectionType.CLIENT)
        self._events: list[Event] = []

    async def send(self, event: Event) -> None:
        await self.stream.send_all(self.ws.send(event))

    async def next_event(self) -> Event:
        while not self._events:
            data = await self.stream.receive_some(_CHUNK)
            self.ws.receive_data(data or None)
            self._events.extend(self.ws.events())
            if not data and not self._events:
                raise _DeviceClosed(_GOING_AWAY, "the device closed the connection")
        return self._events.pop(0)


async def relay_websocket(
    stream: MuxStream,
    scope: MutableMapping[str, Any],
    receive: Receive,
    send: Send,
    *,
    host: str,
    target: bytes,
    headers: Sequence[tuple[bytes, bytes]],
    max_message: int,
) -> None:
    """The upgrade to the device, then both directions until either side closes."""
    device = _Device(stream)
    request = Request(
        host=host,
        target=target.decode("latin-1"),
        subprotocols=list(scope.get("subprotocols", [])),
        extra_headers=list(headers),
    )
    try:
        with trio.fail_after(_UPGRADE_TIMEOUT_S):
            await device.send(request)
            answer = await device.next_event()
            if isinstance(answer, RejectConnection):
                await _pass_refusal(device, answer, scope, send)
                return
            if not isinstance(answer, AcceptConnection):
                raise RemoteProtocolError(f"unexpected {type(answer).__name__}")
    except trio.TooSlowError:
        await reject_websocket(
            scope, send, 504, "the device port did not answer the upgrade in time", "port_timeout"
        )
        return
    except (*_GONE, *_BAD, _DeviceClosed) as exc:
        message = f"the device port gave no valid WebSocket answer: {exc}"
        await reject_websocket(scope, send, 502, message, "bad_gateway")
        return
    accept: dict[str, Any] = {"type": "websocket.accept", "headers": _accept_headers(answer)}
    if answer.subprotocol is not None:
        accept["subprotocol"] = answer.subprotocol
    await send(accept)
    await _relay(device, receive, send, max_message)


async def _pass_refusal(
    device: _Device, refusal: RejectConnection, scope: MutableMapping[str, Any], send: Send
) -> None:
    body = b""
    if refusal.has_body:
        while len(body) < _MAX_REFUSAL_BODY:
            event = await device.next_event()
            if isinstance(event, RejectData):
                body += event.data
                if event.body_finished:
                    break
    body = body[:_MAX_REFUSAL_BODY]
    if "websocket.http.response" not in scope.get("extensions", {}):
        await send({"type": "websocket.close", "code": 1008})
        return
    kept = [
        (bytes(n).lower(), bytes(v))
        for n, v in refusal.headers
        if bytes(n).lower() in (b"content-type", b"www-authenticate", b"location", b"retry-after")
    ]
    content_type = [(n, v) for n, v in kept if n == b"content-type"]
    headers = [(n, v) for n, v in error_headers(refusal.status_code, body) if n != b"content-type"]
    headers += content_type or [(b"content-type", b"application/octet-stream")]
    headers += [(n, v) for n, v in kept if n not in {b"content-type", b"www-authenticate"}]
    await send(
        {"type": "websocket.http.response.start", "status": refusal.status_code,
         "headers": headers}
    )  # fmt: skip
    await send({"type": "websocket.http.response.body", "body": body})


def _accept_headers(answer: AcceptConnection) -> list[tuple[bytes, bytes]]:
    """The device's 101 fields worth passing on (cookies the server sets)."""
    return [(bytes(n).lower(), bytes(v)) for n, v in answer.extra_headers
            if bytes(n).lower() == b"set-cookie"]  # fmt: skip


async def _relay(device: _Device, receive: Receive, send: Send, max_message: int) -> None:
    close: list[tuple[int, str]] = []  # what the caller gets, decided by whoever ends first
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_from_caller, device, receive, nursery.cancel_scope)
            nursery.start_soon(_from_device, device, send, max_message, close, nursery.cancel_scope)
    except* (*_GONE, *_BAD) as group:
        log.info("device WebSocket relay ended: %r", group.exceptions[0])
    if close:
        code, reason = close[0]
        with trio.move_on_after(_CLOSE_TIMEOUT_S, shield=True), contextlib.suppress(*_GONE):
            await send({"type": "websocket.close", "code": _wire_code(code), "reason": reason})


async def _from_caller(device: _Device, receive: Receive, cancel: trio.CancelScope) -> None:
    code = 1000
    while True:
        message = await receive()
        if message["type"] != "websocket.receive":
            code = int(message.get("code", 1000) or 1000)
            break
        text = message.get("text")
        if text is not None:
            await device.send(TextMessage(data=text))
        else:
            await device.send(BytesMessage(data=bytes(message.get("bytes") or b"")))
    with contextlib.suppress(*_GONE, *_BAD), trio.move_on_after(_CLOSE_TIMEOUT_S):
        if device.ws.state is ConnectionState.OPEN:
            await device.send(CloseConnection(code=_wire_code(code, dropped=1001)))
    cancel.cancel()


async def _from_device(
    device: _Device,
    send: Send,
    max_message: int,
    close: list[tuple[int, str]],
    cancel: trio.CancelScope,
) -> None:
    parts: list[bytes | str] = []
    size = 0
    try:
        while True:
            event = await device.next_event()
            if isinstance(event, Ping):
                await device.send(event.response())
            elif isinstance(event, CloseConnection):
                if device.ws.state is ConnectionState.REMOTE_CLOSING:
                    await device.send(event.response())
                close.append((event.code, event.reason or ""))
                break
            elif isinstance(event, Message):
                size += len(event.data)
                if size > max_message:
                    close.append((1009, f"a device message over {max_message} bytes"))
                    break
                parts.append(event.data)
                if event.message_finished:
                    await _to_caller(send, parts)
                    parts, size = [], 0
    except _DeviceClosed as closed:
        close.append((closed.code, closed.reason))
    except (*_GONE, *_BAD) as exc:
        close.append((_GOING_AWAY, f"the device connection broke: {exc}"[:120]))
    cancel.cancel()


def _wire_code(code: int, dropped: int = _GOING_AWAY) -> int:
    """A code that may go on the wire (1005/1006/1015 are reserved for reporting): a peer
    that dropped the connection (1006) becomes *dropped*, the others a normal close."""
    if code == 1006:
        return dropped
    return 1000 if code in (1005, 1015) else code


async def _to_caller(send: Send, parts: list[bytes | str]) -> None:
    if parts and isinstance(parts[0], str):
        await send({"type": "websocket.send", "text": "".join(str(p) for p in parts)})
    else:
        await send(
            {"type": "websocket.send", "bytes": b"".join(p for p in parts if isinstance(p, bytes))}
        )
