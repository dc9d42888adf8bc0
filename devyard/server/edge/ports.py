"""``targetHttpPortUrlPrefix``: HTTP and WebSocket to any TCP port on the device (docs/ports.md).

``{prefix}{port}/{path}`` with prefix ``/v1/instances/{id}/ports/``. The gateway admits the
caller first (the instance token, as ``Authorization: Bearer`` or ``?token=``; the stream and
view tokens do not open device ports) and hands the request here with its `InstanceAccess`.

Theory of operation. Each HTTP request, and each WebSocket, opens one ``http`` stream to the
instance's host (docs/protocol.md 6.1): the host connects it to the device port and then
copies raw bytes. The edge is the HTTP/1.1 client on that stream (h11; wsproto for a
WebSocket's upgrade and frames), so the host stays protocol-blind and the ASGI server in
front (Hypercorn) keeps the caller's connection alive, de-chunks, re-chunks, speaks HTTP/2.
Bodies move a piece at a time in both directions at once: what is in flight is bounded by
Hypercorn's bounded app queue, the mux stream's window and the sockets, never by a body's
size. One device connection serves one request and is closed after it (``Connection:
close``); the caller's own connection is what keeps alive.

Headers (RFC 9110 7.6.1): hop-by-hop fields, and those ``Connection`` names, are not
forwarded either way. The device sees ``Host: localhost:{port}`` (what an app's dev server
accepts), ``X-Forwarded-For`` (appended), ``X-Forwarded-Proto``/``-Host`` (kept when a proxy in
front set them) and ``X-Forwarded-Prefix`` (the public prefix with the port). The instance
token never reaches the device: an ``Authorization`` header or a ``token`` query parameter
carrying it is removed; any other one (the app's own credential) passes.

Open errors: a port nobody listens on is 502 ``port_closed``; a bad port number 400; an ended
instance 410 (the gateway); one stream more than ``max_streams`` per instance 429.

The other mode of the same prefix, raw TCP in a WebSocket multiplexed by 4-byte connection
ids (the commercial SDKs' tunnel: ``{prefix}{port}?mode=multiplexed`` or ``{prefix}?port=N``),
is ports_mux.py: one ``http`` stream per connection id, bytes copied, no HTTP at the edge.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, MutableMapping, Sequence
from typing import Any, Final
from urllib.parse import unquote_plus

import h11
import trio

from ...core import MuxStream, OpenError
from ..hosts import HostUnavailableError, InstanceAccess, InstanceDirectory
from .asgi import bearer_from, reject_websocket, send_http_error
from .asgi_stream import Receive, Send
from .links import Edge
from .ports_mux import BadMuxPort, mux_port, serve_multiplexed
from .ports_ws import relay_websocket

log = logging.getLogger(__name__)

__all__ = ["PORTS", "PortProxy"]

#: The gateway endpoint (``/v1/instances/{id}/ports/...``).
PORTS: Final = "ports"
_CHUNK: Final = 256 * 1024
_MAX_HEAD: Final = 64 * 1024  # the device's response head, at most
_HEAD_TIMEOUT_S: Final = 300.0  # a slow device handler (a long poll) may take this long
_TOUCH_EVERY_S: Final = 10.0
_HOP_BY_HOP: Final = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-connection",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
        b"proxy-authorization",
        b"proxy-authenticate",
    }
)
#: Request fields the edge sets itself (or, for ``expect``, the ASGI server already answered).
_REQUEST_OWN: Final = frozenset({b"host", b"expect", b"x-forwarded-prefix"})
_WS_OWN: Final = frozenset(
    {
        b"content-length",
        b"sec-websocket-key",
        b"sec-websocket-version",
        b"sec-websocket-protocol",
        b"sec-websocket-extensions",
        b"sec-websocket-accept",
    }
)
#: The ASGI server sends its own ``date``; the device's would be a second one.
_RESPONSE_OWN: Final = frozenset({b"date"})

Headers = list[tuple[bytes, bytes]]


class PortRefused(Exception):
    """This module's HTTP refusal (the HTTP boundary)."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.message = message


class PortProxy:
    """The ``ports`` endpoint of the gateway (HTTP and WebSocket)."""

    def __init__(
        self,
        edge: Edge,
        directory: InstanceDirectory,
        open_streams: dict[str, int],
        max_streams: int,
        *,
        max_ws_message: int,
    ) -> None:
        """*open_streams* is the gateway's per-instance count of open streams (shared, so
        device ports and the other WebSockets count against one *max_streams*)."""
        self._edge = edge
        self._directory = directory
        self._open_streams = open_streams
        self._max_streams = max_streams
        self._max_ws_message = max_ws_message

    # ---- HTTP ------------------------------------------------------------------------------

    async def http(
        self,
        scope: MutableMapping[str, Any],
        receive: Receive,
        send: Send,
        access: InstanceAccess,
        credential: str,
    ) -> None:
        try:
            port, target = _target(scope, access, credential)
            self._check_room(access)
            stream = await self._open(access, port)
        except PortRefused as refused:
            await send_http_error(send, refused.status, refused.message, refused.reason)
            return
        headers = _request_headers(scope, access, port, credential, websocket=False)
        with self._counted(access.instance_id):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._keep_touching, access.instance_id)
                try:
                    await _exchange(
                        stream, scope, receive, send, port=port, target=target, headers=headers
                    )
                finally:
                    nursery.cancel_scope.cancel()
                    await trio.aclose_forcefully(stream)

    # ---- WebSocket -------------------------------------------------------------------------

    async def websocket(
        self,
        scope: MutableMapping[str, Any],
        receive: Receive,
        send: Send,
        access: InstanceAccess,
        credential: str,
    ) -> None:
        """After ``websocket.connect``: the upgrade to the device port, then the relay; or
        the multiplexed mode (ports_mux.py)."""
        try:
            mux = mux_port(scope, _path_port(scope, access)[0])
        except BadMuxPort as bad:
            await reject_websocket(scope, send, 400, bad.message, "bad_request")
            return
        if mux is not None:
            await self._multiplexed(receive, send, scope, access, mux)
            return
        try:
            port, target = _target(scope, access, credential)
            self._check_room(access)
            stream = await self._open(access, port)
        except PortRefused as refused:
            await reject_websocket(scope, send, refused.status, refused.message, refused.reason)
            return
        headers = _request_headers(scope, access, port, credential, websocket=True)
        with self._counted(access.instance_id):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._keep_touching, access.instance_id)
                try:
                    await relay_websocket(
                        stream,
                        scope,
                        receive,
                        send,
                        host=f"localhost:{port}",
                        target=target,
                        headers=headers,
                        max_message=self._max_ws_message,
                    )
                finally:
                    nursery.cancel_scope.cancel()
                    await trio.aclose_forcefully(stream)

    async def _multiplexed(
        self,
        receive: Receive,
        send: Send,
        scope: MutableMapping[str, Any],
        access: InstanceAccess,
        port: int,
    ) -> None:
        try:
            self._check_room(access)
        except PortRefused as refused:
            await reject_websocket(scope, send, refused.status, refused.message, refused.reason)
            return
        with self._counted(access.instance_id):
            await send({"type": "websocket.accept"})
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._keep_touching, access.instance_id)
                try:
                    await serve_multiplexed(receive, send, lambda: self._open(access, port))
                finally:
                    nursery.cancel_scope.cancel()

    # ---- shared ----------------------------------------------------------------------------

    def _check_room(self, access: InstanceAccess) -> None:
        if self._open_streams.get(access.instance_id, 0) >= self._max_streams:
            raise PortRefused(
                429,
                "too_many_streams",
                f"instance {access.instance_id} has {self._max_streams} open streams already",
            )

    @contextlib.contextmanager
    def _counted(self, instance_id: str) -> Iterator[None]:
        self._open_streams[instance_id] = self._open_streams.get(instance_id, 0) + 1
        try:
            yield
        finally:
            left = self._open_streams[instance_id] - 1
            if left:
                self._open_streams[instance_id] = left
            else:
                del self._open_streams[instance_id]

    async def _open(self, access: InstanceAccess, port: int) -> MuxStream:
        try:
            return await self._edge.open_instance_stream(
                access.host_id, "http", access.instance_id, port=port
            )
        except HostUnavailableError as exc:
            raise PortRefused(503, "host_unavailable", f"the instance's host: {exc}") from None
        except OpenError as exc:
            raise PortRefused(*_OPEN_REFUSALS.get(exc.code, _BAD_GATEWAY), exc.message) from None

    async def _keep_touching(self, instance_id: str) -> None:
        """A long request or an open WebSocket is activity (the inactivity timeout)."""
        while True:
            await trio.sleep(_TOUCH_EVERY_S)
            self._directory.touch(instance_id)


#: The host's open-reply codes (docs/protocol.md 6.2) as (status, reason).
_OPEN_REFUSALS: Final = {
    "refused": (502, "port_closed"),
    "timeout": (504, "port_timeout"),
    "not-found": (410, "gone"),
    "bad-request": (400, "bad_request"),
}
_BAD_GATEWAY: Final = (502, "bad_gateway")


# ---- the request line and headers ------------------------------------------------------------


def _target(
    scope: MutableMapping[str, Any], access: InstanceAccess, credential: str
) -> tuple[int, bytes]:
    """(device port, request target on the device) from the raw path, or `PortRefused` 400."""
    digits, path = _path_port(scope, access)
    if not digits:
        raise PortRefused(
            400, "bad_request", "name a device port: {targetHttpPortUrlPrefix}{port}/{path}"
        )
    port = int(digits) if digits.isdigit() and len(digits) <= 5 else 0
    if not 0 < port < 65536:
        shown = digits[:16].decode("latin-1")
        raise PortRefused(400, "bad_request", f"bad device port {shown!r}: 1 to 65535")
    query = _without_credential(bytes(scope.get("query_string", b"")), credential)
    return port, b"/" + path + (b"?" + query if query else b"")


def _path_port(scope: MutableMapping[str, Any], access: InstanceAccess) -> tuple[bytes, bytes]:
    """What follows the prefix in the raw path: (the port's digits, the rest)."""
    raw = bytes(scope.get("raw_path") or str(scope["path"]).encode("utf-8"))
    head = f"/v1/instances/{access.instance_id}/{PORTS}".encode()
    tail = raw[len(head) :] if raw.startswith(head) else b""
    digits, _, path = tail.removeprefix(b"/").partition(b"/")
    return digits.partition(b"?")[0], path


def _without_credential(query: bytes, credential: str) -> bytes:
    """The query without a ``token`` parameter that carries the instance token."""
    kept = []
    for part in query.split(b"&") if query else []:
        name, _, value = part.partition(b"=")
        text = unquote_plus(value.decode("latin-1"))
        if unquote_plus(name.decode("latin-1")) == "token" and text == credential:
            continue
        kept.append(part)
    return b"&".join(kept)


def _connection_names(headers: Sequence[tuple[bytes, bytes]]) -> set[bytes]:
    names: set[bytes] = set()
    for name, value in headers:
        if name.lower() == b"connection":
            names.update(n.strip().lower() for n in value.split(b",") if n.strip())
    return names


def _end_to_end(headers: Sequence[tuple[bytes, bytes]], own: frozenset[bytes]) -> Headers:
    drop = _HOP_BY_HOP | own | _connection_names(headers)
    return [(name.lower(), value) for name, value in headers if name.lower() not in drop]


def _request_headers(
    scope: MutableMapping[str, Any],
    access: InstanceAccess,
    port: int,
    credential: str,
    *,
    websocket: bool,
) -> Headers:
    """What the device gets besides the request line, ``Host`` and the body's framing."""
    incoming = [(bytes(k), bytes(v)) for k, v in scope.get("headers", [])]
    own = _REQUEST_OWN | (_WS_OWN if websocket else frozenset())
    headers = [
        (name, value)
        for name, value in _end_to_end(incoming, own)
        if not (name == b"authorization" and bearer_from([(name, value)]) == credential)
    ]
    names = {name for name, _ in headers}
    client = scope.get("client")
    if client:
        forwarded = [v for n, v in headers if n == b"x-forwarded-for"]
        headers = [(n, v) for n, v in headers if n != b"x-forwarded-for"]
        headers.append((b"x-forwarded-for", b", ".join([*forwarded, str(client[0]).encode()])))
    if b"x-forwarded-proto" not in names:
        secure = scope.get("scheme") in ("https", "wss")
        headers.append((b"x-forwarded-proto", b"https" if secure else b"http"))
    host = next((v for n, v in incoming if n.lower() == b"host"), None)
    if b"x-forwarded-host" not in names and host:
        headers.append((b"x-forwarded-host", host))
    prefix = f"/v1/instances/{access.instance_id}/{PORTS}/{port}"
    headers.append((b"x-forwarded-prefix", prefix.encode()))
    return headers


def _response_headers(headers: Sequence[tuple[bytes, bytes]]) -> Headers:
    return _end_to_end(headers, _RESPONSE_OWN)


# ---- one HTTP exchange -----------------------------------------------------------------------


async def _exchange(
    stream: MuxStream,
    scope: MutableMapping[str, Any],
    receive: Receive,
    send: Send,
    *,
    port: int,
    target: bytes,
    headers: Headers,
) -> None:
    """The request to the device while its response comes back (either may come first)."""
    conn = h11.Connection(h11.CLIENT, max_incomplete_event_size=_MAX_HEAD)
    first = await receive()
    if first["type"] == "http.disconnect":
        return
    declared = any(name == b"content-length" for name, _ in headers)
    has_body = bool(first.get("body")) or bool(first.get("more_body"))
    framing: Headers = []
    if has_body and not declared:
        framing = [(b"transfer-encoding", b"chunked")]
    elif not has_body and declared:
        headers = [(n, v) for n, v in headers if n != b"content-length"]
        framing = [(b"content-length", b"0")]
    request = h11.Request(
        method=str(scope["method"]).encode("latin-1"),
        target=target,
        headers=[(b"host", f"localhost:{port}".encode()), *headers, *framing,
                 (b"connection", b"close")],
    )  # fmt: skip
    async with trio.open_nursery() as nursery:
        try:
            await stream.send_all(conn.send(request))
            nursery.start_soon(_pump_request, stream, conn, receive, first, nursery.cancel_scope)
            with trio.fail_after(_HEAD_TIMEOUT_S):
                response = await _next_response(stream, conn)
        except trio.TooSlowError:
            message = f"device port {port} sent no response head in time"
            await send_http_error(send, 504, message, "port_timeout")
        except _BROKEN as exc:
            message = f"device port {port} gave no valid HTTP answer: {exc}"
            await send_http_error(send, 502, message, "bad_gateway")
        else:
            await _respond(stream, conn, send, response, port)
        nursery.cancel_scope.cancel()


async def _respond(
    stream: MuxStream, conn: h11.Connection, send: Send, response: h11.Response, port: int
) -> None:
    with trio.CancelScope(shield=True):
        await send(
            {
                "type": "http.response.start",
                "status": response.status_code,
                "headers": _response_headers(list(response.headers)),
            }
        )
    try:
        while not isinstance(event := await _next_event(stream, conn), h11.EndOfMessage):
            if isinstance(event, h11.Data):
                await send(
                    {"type": "http.response.body", "body": bytes(event.data), "more_body": True}
                )
    except _BROKEN as exc:
        # Without the final body message the ASGI server closes the caller's connection: a
        # cut-off body is never mistaken for a whole one.
        log.info("device port %d: the response broke off: %s", port, exc)
        return
    with trio.CancelScope(shield=True):
        await send({"type": "http.response.body", "body": b"", "more_body": False})


class _DeviceHungUp(Exception):
    """The device closed the connection before its response was complete."""


_BROKEN: Final = (h11.ProtocolError, _DeviceHungUp, trio.BrokenResourceError, OSError)


async def _next_event(stream: MuxStream, conn: h11.Connection) -> h11.Event:
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            conn.receive_data(await stream.receive_some(_CHUNK))
            continue
        if isinstance(event, h11.ConnectionClosed):
            raise _DeviceHungUp("the device closed the connection")
        if event is h11.PAUSED:  # pragma: no cover - we never start a second cycle
            raise _DeviceHungUp("unexpected pause")
        assert isinstance(event, h11.Event)
        return event


async def _next_response(stream: MuxStream, conn: h11.Connection) -> h11.Response:
    while True:
        event = await _next_event(stream, conn)
        if isinstance(event, h11.Response):
            return event
        # an InformationalResponse (100 Continue, 103 Early Hints): the ASGI server has its own


async def _pump_request(
    stream: MuxStream,
    conn: h11.Connection,
    receive: Receive,
    message: MutableMapping[str, Any],
    cancel: trio.CancelScope,
) -> None:
    """The request body to the device, then wait for the caller to go away (which ends the
    exchange: nobody reads the rest of the response)."""
    try:
        while message["type"] == "http.request":
            body = message.get("body", b"")
            if body and conn.our_state is h11.SEND_BODY:
                await stream.send_all(conn.send(h11.Data(data=body)))
            if not message.get("more_body", False):
                if conn.our_state is h11.SEND_BODY:
                    await stream.send_all(conn.send(h11.EndOfMessage()))
                break
            message = await receive()
    except _BROKEN as exc:  # the device stopped reading: its answer (or its absence) tells
        log.debug("device stopped taking the request body: %s", exc)
        while message["type"] == "http.request" and message.get("more_body", False):
            message = await receive()  # drain: the caller may still be sending
    while message["type"] != "http.disconnect":
        message = await receive()
    cancel.cancel()
