"""The per-instance endpoints: ``/v1/instances/{id}/...``, carried over the host link.

Every URL of an instance's ``status`` lands here (docs/endpoints.md). The gateway checks the
caller's token with the `InstanceDirectory` (the instances service) *before* anything else
happens — a WebSocket is refused with an HTTP error before the upgrade — opens a stream of
the matching kind to the instance's host (`Edge.open_instance_stream`, docs/protocol.md 6)
and carries the request over it:

    api/...    HTTP, instance token (bearer)   -> ``api`` stream: the device API
    watch      HTTP GET, token in the query   -> the viewer page (served here)
    endpoint   WebSocket, token or ?token=    -> ``device-stream``: the browser stream, relayed
    adb        WebSocket, instance token (bearer) -> ``adb``: ADB bytes, spliced
    api/ws, api/signaling  WebSocket, token or ?token= -> ``sdk``: the commercial SDKs'
                                                   device sockets, relayed (sdk_sockets.py)
    mcp        HTTP, API key or instance token   -> the MCP server (server.mcp, docs/mcp.md),
                                                   which checks its own credentials

A ``?token=`` query parameter is read only on ``watch`` and ``endpoint`` (spec 2.1: query
tokens belong to the stream URLs); ``api`` and ``adb`` take the bearer header only, so the
instance token never rides in a URL that proxies and logs keep.

``adb`` is also served on the raw link port (docs/adb.md, "The raw ADB path"): the same
checks, then the ADB bytes on the bare socket, without WebSocket masking and framing. The
WebSocket's 101 names that port in ``x-devyard-raw-link`` so `devyard adb forward` can use it.

A scoped token holding ``device:<id>:install`` (or ``device:*:install``) of the instance's
organization opens ``POST api/apps``, the install, and nothing else (403
``insufficient_scope``). The stream token opens only ``watch`` and ``endpoint``; a view token
(docs/security.md, "The stream-token model") opens the same two, and of its browser's
messages only those that ask for frames (`viewing.view_message_allowed`) reach the host: the
rest are answered with an error message and dropped. Traffic counts as activity: each HTTP
request, and every ``_TOUCH_EVERY_S`` while a WebSocket is open.
"""

from __future__ import annotations

import contextlib
import importlib.resources
import json
import logging
from collections.abc import Awaitable, Callable, Iterable, Iterator, MutableMapping
from typing import Any, Final
from urllib.parse import parse_qsl

import trio

from ...core import (
    MuxStream,
    OpenError,
    RelayChannel,
    RemoteProtocolError,
    UpgradeRequest,
    receive_message,
    splice,
    tracing,
)
from ...core.transports import WS_MAX_MESSAGE
from .. import metrics, viewing
from ..artifact_urls import is_artifact_path
from ..hosts import AccessDenied, HostUnavailableError, InstanceAccess, InstanceDirectory
from .asgi import (
    ACCESS_REFUSALS,
    bearer_from,
    error_body,
    error_headers,
    reject_websocket,
    send_http,
    send_http_error,
)
from .asgi_stream import ASGIWebSocketStream, Receive, Send
from .cdp import CDP_ENDPOINT, is_discovery, serve_discovery
from .links import Edge
from .ports import PORTS, PortProxy
from .ports import PortRefused as _Refused  # one HTTP refusal for the edge's routes
from .rawlinks import accept_either
from .sdk_sockets import REVERSE_TUNNEL, SDK_SOCKETS, refuse_reverse_tunnel
from .tracing import device_request

log = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_MAX_STREAMS",
    "INSTANCES_PREFIX",
    "RAW_LINK_HEADER",
    "RECHECK_VIEW_S",
    "InstanceGateway",
]

INSTANCES_PREFIX: Final = "/v1/instances/"
#: Response header of the ``adb`` WebSocket upgrade: the raw link port's URL, when it is open.
RAW_LINK_HEADER: Final = "x-devyard-raw-link"
DEFAULT_MAX_STREAMS: Final = 16
_TOUCH_EVERY_S: Final = 10.0
#: How often an open view-only stream checks that its view token still opens the instance.
RECHECK_VIEW_S: Final = 5.0
_GONE: Final = (RemoteProtocolError, trio.BrokenResourceError, OSError)
_CHUNK: Final = 256 * 1024
_FULL_TOKEN_ONLY: Final = frozenset({"api", "adb", CDP_ENDPOINT, PORTS})
#: The endpoints whose token may come as ``?token=`` (the stream URLs, spec 2.1; the CDP URL
#: for tools that take a bare URL, cdp.py; a device port, ports.py).
_QUERY_TOKEN: Final = frozenset({"watch", "endpoint", CDP_ENDPOINT, PORTS})
#: What a scoped token with ``device:<id>:install`` opens: ``POST api/apps`` (the install).
_INSTALL_PATH: Final = "apps"
_INSTALL_ONLY: Final = "a scoped token with device:<id>:install opens only POST {apiUrl}/apps"
_OUTGOING: Final = 4  # messages waiting for the browser (a slow browser slows the host)
_VIEW_ONLY_ERROR: Final = json.dumps(
    {"type": "error", "message": "this stream is view-only: only frame requests are accepted"}
)
_VIEWER_HEADERS: Final = [
    (b"content-type", b"text/html; charset=utf-8"),
    (b"cache-control", b"no-store"),
    (b"referrer-policy", b"no-referrer"),  # the page's URL carries the stream token
    (
        b"content-security-policy",
        b"default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
        b"img-src blob: data:; connect-src 'self' ws: wss:",
    ),
]


def _viewer_page() -> bytes:
    return importlib.resources.files(__package__).joinpath("viewer.html").read_bytes()


class InstanceGateway:
    """Raw ASGI app for the ``/v1/instances/`` prefix (HTTP and WebSocket)."""

    def __init__(
        self,
        edge: Edge,
        directory: InstanceDirectory,
        *,
        raw_link: str | None = None,
        max_streams: int = DEFAULT_MAX_STREAMS,
        mcp: Callable[[MutableMapping[str, Any], Receive, Send], Awaitable[None]] | None = None,
    ) -> None:
        """*raw_link*: ``tcp://HOST:PORT`` (or ``tls://``) of the raw link port that the adb
        WebSocket names to clients, when there is one clients can reach. *max_streams*: open
        WebSockets (and raw adb connections) one instance may have; one more is refused
        (429, ``too_many_streams``). *mcp*: the raw ASGI app of ``mcpUrl`` (server.mcp), which
        authenticates its own requests (the organization API key, spec 5)."""
        self.edge = edge
        self._mcp = mcp
        self.directory = directory
        self._viewer = _viewer_page()
        self._raw_link = raw_link
        self._max_streams = max_streams
        self._open_streams: dict[str, int] = {}
        self._ports = PortProxy(
            edge, directory, self._open_streams, max_streams, max_ws_message=WS_MAX_MESSAGE
        )

    def __repr__(self) -> str:
        return f"InstanceGateway({self.edge!r})"

    async def __call__(self, scope: MutableMapping[str, Any], receive: Receive, send: Send) -> None:
        if self._mcp is not None and scope["type"] == "http" and _is_mcp(str(scope["path"])):
            await self._mcp(scope, receive, send)
            return
        if scope["type"] == "websocket":
            await self._websocket(scope, receive, send)
        elif scope["type"] == "http":
            with device_request(scope, send, INSTANCES_PREFIX) as traced_send:  # off: send
                await self._http(scope, receive, traced_send)

    async def _admit(
        self,
        full_path: str,
        headers: Iterable[tuple[bytes, bytes]],
        query_string: bytes,
        *,
        websocket: bool = False,
    ) -> tuple[InstanceAccess, str, str, str]:
        """(access, endpoint, rest of the path, the token) or _Refused."""
        path = full_path[len(INSTANCES_PREFIX) :]
        instance_id, _, tail = path.partition("/")
        endpoint, _, rest = tail.partition("/")
        if not instance_id or not endpoint:
            raise _Refused(404, "not_found", f"no such endpoint {full_path}")
        # the SDKs' device sockets put the token in the query (docs/sdk-device.md)
        in_query = endpoint in _QUERY_TOKEN or (websocket and endpoint == "api")
        token = bearer_from(headers, query_string if in_query else None)
        if endpoint == PORTS:  # ?token= first: then Authorization is the device app's own
            token = bearer_from((), query_string) or token
        signed = token is None and not websocket and endpoint == "api" and is_artifact_path(rest)
        if token is None and not (signed and b"signature=" in query_string):
            where = "Authorization: Bearer, or ?token=" if in_query else "Authorization: Bearer"
            raise _Refused(401, "unauthorized", f"an instance token is required ({where})")
        try:
            if token is None:  # a signed artifact URL (artifact_urls.py)
                query = dict(parse_qsl(query_string.decode("latin-1")))
                access = await self.directory.authorize_signed(instance_id, rest, query)
            else:
                access = await self.directory.authorize(instance_id, token)
        except AccessDenied as exc:
            status, reason = ACCESS_REFUSALS[exc.reason]
            raise _Refused(status, reason, exc.message) from None
        if access.stream_only and endpoint in _FULL_TOKEN_ONLY:
            raise _Refused(403, "forbidden", f"the stream token does not open {endpoint}")
        if access.install_only and (endpoint, rest) != ("api", _INSTALL_PATH):
            raise _Refused(403, "insufficient_scope", _INSTALL_ONLY)
        self.directory.touch(access.instance_id)
        return access, endpoint, rest, token or ""

    async def _open(self, access: InstanceAccess, kind: str, **fields: Any) -> MuxStream:
        try:
            return await self.edge.open_instance_stream(
                access.host_id, kind, access.instance_id, **fields
            )
        except HostUnavailableError as exc:
            raise _Refused(503, "host_unavailable", f"the instance's host: {exc}") from None
        except OpenError as exc:
            status = 410 if exc.code == "not-found" else 400 if exc.code == "bad-request" else 502
            raise _Refused(status, exc.code.replace("-", "_"), exc.message) from None

    # ---- HTTP -----------------------------------------------------------------------------

    async def _http(self, scope: MutableMapping[str, Any], receive: Receive, send: Send) -> None:
        try:
            access, endpoint, rest, token = await self._admit(
                str(scope["path"]), scope.get("headers", []), bytes(scope.get("query_string", b""))
            )
            if access.artifact_path is not None and scope["method"] not in ("GET", "HEAD"):
                raise _Refused(405, "method_not_allowed", "a signed artifact URL takes GET")
            if endpoint == CDP_ENDPOINT and is_discovery(rest):
                in_query = bearer_from(scope.get("headers", [])) is None
                await serve_discovery(
                    scope, send, lambda path: self._open(access, "cdp", path=path), rest,
                    query_token=token if in_query else None,
                )  # fmt: skip
                return
            if endpoint == PORTS:  # targetHttpPortUrlPrefix (ports.py)
                await self._ports.http(scope, receive, send, access, token)
                return
            if endpoint == "watch":
                if scope["method"] not in ("GET", "HEAD"):
                    raise _Refused(405, "method_not_allowed", "the viewer page takes GET")
                await send_http(send, 200, self._viewer, _VIEWER_HEADERS)
                return
            if endpoint != "api":
                raise _Refused(404, "not_found", f"no such endpoint {scope['path']}")
            if access.install_only and scope["method"] != "POST":
                raise _Refused(403, "insufficient_scope", _INSTALL_ONLY)
            stream = await self._open(
                access,
                "api",
                method=scope["method"],
                path="/" + rest,
                query=bytes(scope.get("query_string", b"")).decode("latin-1"),
                content_type=_header(scope, b"content-type"),
                headers={  # what a build instance's /sync and event stream read
                    name: value
                    for name in ("content-encoding", "last-event-id")
                    if (value := _header(scope, name.encode()))
                },
                **tracing.open_fields(tracing.SERVER),  # traceparent, when tracing
            )
        except _Refused as refused:
            await send_http_error(send, refused.status, refused.message, refused.reason)
            return
        await _proxy_api(stream, receive, send)

    # ---- WebSocket ------------------------------------------------------------------------

    async def _websocket(
        self, scope: MutableMapping[str, Any], receive: Receive, send: Send
    ) -> None:
        first = await receive()
        if first.get("type") != "websocket.connect":
            return
        try:
            access, endpoint, rest, token = await self._admit(
                str(scope["path"]),
                scope.get("headers", []),
                bytes(scope.get("query_string", b"")),
                websocket=True,
            )
            if endpoint == PORTS:  # targetHttpPortUrlPrefix (ports.py)
                await self._ports.websocket(scope, receive, send, access, token)
                return
            if (endpoint, rest) == ("api", REVERSE_TUNNEL):
                await refuse_reverse_tunnel(send)
                return
            self._check_room(access)
            if endpoint == "api" and rest in SDK_SOCKETS:  # the SDKs' device sockets
                stream = await self._open(access, "sdk", path=rest)
            elif endpoint == "endpoint":
                stream = await self._open(access, "device-stream")
            elif endpoint == CDP_ENDPOINT:  # cdp.py
                stream = await self._open(access, "cdp", path=rest)
            elif endpoint == "adb":
                stream = await self._open_adb(access)
            else:
                raise _Refused(404, "not_found", f"no WebSocket endpoint {scope['path']}")
        except _Refused as refused:
            await reject_websocket(scope, send, refused.status, refused.message, refused.reason)
            return
        headers = []
        if endpoint == "adb" and self._raw_link is not None:  # tell the forwarder
            headers.append((RAW_LINK_HEADER.encode(), self._raw_link.encode()))
        revoked = trio.Event()
        with self._counted(access.instance_id):
            await send({"type": "websocket.accept", "headers": headers})
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._keep_touching, access.instance_id)
                if access.view_only:
                    nursery.start_soon(
                        self._recheck, access.instance_id, token, revoked, nursery.cancel_scope
                    )
                try:
                    if endpoint in ("endpoint", CDP_ENDPOINT, "api"):
                        await _relay(stream, receive, send, view_only=access.view_only)
                    else:
                        await splice(ASGIWebSocketStream(receive, send), stream)
                finally:
                    nursery.cancel_scope.cancel()
            if revoked.is_set():
                with trio.move_on_after(2.0, shield=True), contextlib.suppress(*_GONE):
                    await send({"type": "websocket.close", "code": 1008})

    def _check_room(self, access: InstanceAccess) -> None:
        if self._open_streams.get(access.instance_id, 0) >= self._max_streams:
            raise _Refused(
                429,
                "too_many_streams",
                f"instance {access.instance_id} has {self._max_streams} open streams already",
            )

    @contextlib.contextmanager
    def _counted(self, instance_id: str) -> Iterator[None]:
        self._open_streams[instance_id] = self._open_streams.get(instance_id, 0) + 1
        metrics.INSTANCE_STREAMS.inc()
        try:
            yield
        finally:
            metrics.INSTANCE_STREAMS.dec()
            left = self._open_streams[instance_id] - 1
            if left:
                self._open_streams[instance_id] = left
            else:
                del self._open_streams[instance_id]

    async def _open_adb(self, access: InstanceAccess) -> MuxStream:
        if access.platform != "android":
            raise _Refused(400, "bad_request", "ADB is for Android instances")
        return await self._open(access, "adb")

    # ---- the raw link port: adb only ----------------------------------------------------

    async def serve_upgrade(self, upgrade: UpgradeRequest) -> None:
        """``adb`` on the raw link port: the same checks, then ADB bytes on the bare socket."""
        query = upgrade.target.partition("?")[2].encode("latin-1")
        try:
            access, endpoint, _, _ = await self._admit(upgrade.path, upgrade.headers, query)
            if endpoint != "adb":
                raise _Refused(
                    404, "not_found", f"the raw link port serves only adb, not {endpoint}"
                )
            self._check_room(access)
            stream = await self._open_adb(access)
        except _Refused as refused:
            body = error_body(refused.message, refused.reason)
            headers = error_headers(refused.status, body)
            headers = [(k, v) for k, v in headers if k != b"content-length"]
            await upgrade.reject(refused.status, body, headers)
            return
        with self._counted(access.instance_id):
            try:
                client = await accept_either(upgrade)
            except BaseException:
                await trio.aclose_forcefully(stream)
                raise
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._keep_touching, access.instance_id)
                try:
                    await splice(client, stream)
                finally:
                    nursery.cancel_scope.cancel()

    async def _recheck(
        self, instance_id: str, token: str, revoked: trio.Event, stream: trio.CancelScope
    ) -> None:
        """A view-only stream lasts only while its view token opens the instance: when the API
        key or scoped token it was made for is revoked, the stream ends within
        `RECHECK_VIEW_S`. (Ending the instance ends every stream through its host.)"""
        while True:
            await trio.sleep(RECHECK_VIEW_S)
            try:
                await self.directory.authorize(instance_id, token)
            except AccessDenied:
                revoked.set()
                stream.cancel()
                return

    async def _keep_touching(self, instance_id: str) -> None:
        while True:
            await trio.sleep(_TOUCH_EVERY_S)
            self.directory.touch(instance_id)


def _is_mcp(path: str) -> bool:
    parts = path[len(INSTANCES_PREFIX) :].strip("/").split("/")
    return len(parts) == 2 and parts[1] == "mcp" and bool(parts[0])


def _header(scope: MutableMapping[str, Any], name: bytes) -> str:
    for key, value in scope.get("headers", []):
        if bytes(key).lower() == name:
            return bytes(value).decode("latin-1")
    return ""


async def _proxy_api(stream: MuxStream, receive: Receive, send: Send) -> None:
    """The request body to the host while its response comes back (either may come first)."""

    async def pump_body(cancel: trio.CancelScope) -> None:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                cancel.cancel()  # the client is gone: so is the request
                return
            body = message.get("body", b"")
            if body:
                await stream.send_all(body)
            if not message.get("more_body", False):
                await stream.send_eof()
                break
        while (await receive())["type"] != "http.disconnect":
            pass  # a streamed answer (events) ends when its client leaves
        cancel.cancel()

    started = False
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(pump_body, nursery.cancel_scope)
            head = await receive_message(stream)
            status, content_type = int(head["status"]), str(head["content_type"])
            with trio.CancelScope(shield=True):
                await send(
                    {
                        "type": "http.response.start",
                        "status": status,
                        "headers": [
                            (b"content-type", content_type.encode("latin-1")),
                            (b"cache-control", b"no-store"),
                        ],
                    }
                )
            started = True
            while data := await stream.receive_some(_CHUNK):
                await send({"type": "http.response.body", "body": data, "more_body": True})
            with trio.CancelScope(shield=True):
                await send({"type": "http.response.body", "body": b"", "more_body": False})
            nursery.cancel_scope.cancel()
    except* (RemoteProtocolError, KeyError, ValueError, trio.BrokenResourceError) as broke:
        # the nursery wraps what its body raises: a stream that ends (a link dropped, a host
        # gone) before the head is a 502 with its APIError body, never a bare 500
        log.warning("device API response broke off: %s", broke.exceptions[0])
        if not started:
            with trio.CancelScope(shield=True), contextlib.suppress(*_GONE):
                await send_http_error(
                    send, 502, "the device ended the request before answering", "bad_gateway"
                )
    finally:
        await trio.aclose_forcefully(stream)


async def _relay(stream: MuxStream, receive: Receive, send: Send, *, view_only: bool) -> None:
    """Browser WebSocket messages <-> relay messages on the host stream, until either ends.

    *view_only*: a browser message that `viewing.view_message_allowed` refuses never reaches
    the host; the browser gets an error message instead. One task (this one) sends to the
    browser, from a bounded channel that the host's messages and the refusals share.
    """
    channel = RelayChannel(stream)
    outgoing, to_browser = trio.open_memory_channel[str | bytes](_OUTGOING)

    browser_side = trio.CancelScope()

    async def upstream(cancel: trio.CancelScope, out: trio.MemorySendChannel[str | bytes]) -> None:
        with browser_side:
            async with out:
                while True:
                    message = await receive()
                    if message["type"] != "websocket.receive":
                        break
                    text, data = message.get("text"), message.get("bytes")
                    payload = text if text is not None else bytes(data or b"")
                    if view_only and not viewing.view_message_allowed(payload):
                        await out.send(_VIEW_ONLY_ERROR)
                    else:
                        await channel.send(payload)
            cancel.cancel()  # the browser left: nothing more to send it

    async def downstream(out: trio.MemorySendChannel[str | bytes]) -> None:
        async with out:
            while True:
                try:
                    message = await channel.receive()
                except trio.EndOfChannel:
                    break
                await out.send(message)
        browser_side.cancel()  # the host ended the stream: send what is queued, then close

    try:
        async with trio.open_nursery() as nursery, outgoing, to_browser:
            nursery.start_soon(upstream, nursery.cancel_scope, outgoing.clone())
            nursery.start_soon(downstream, outgoing.clone())
            await outgoing.aclose()
            async for message in to_browser:
                await _to_browser(send, message)
        with trio.move_on_after(2.0, shield=True):
            await send({"type": "websocket.close", "code": 1000})
    except* (RemoteProtocolError, trio.BrokenResourceError, OSError) as ended:
        # a reset host stream (StreamResetError) or a gone browser, from either task: the
        # nursery groups them, so a plain except let them out as a logged traceback
        log.info("browser stream ended: %s", ended.exceptions[0])
    finally:
        await trio.aclose_forcefully(stream)


async def _to_browser(send: Send, message: str | bytes) -> None:
    if isinstance(message, str):
        await send({"type": "websocket.send", "text": message})
    else:
        await send({"type": "websocket.send", "bytes": message})
