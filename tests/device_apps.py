"""Servers that stand for apps listening on a device port: a real HTTP server (Hypercorn with a
small ASGI app) and a real WebSocket echo server (trio-websocket), both on 127.0.0.1.

A test puts them "on the device" with ``device.map_port`` (an in-process virtual device) or
``adb reverse tcp:PORT tcp:THEIRS`` (a device behind `devyard up`).

HTTP routes:
    GET  /hello            "hello from the device" (Content-Length)
    *    /echo-request     JSON: method, path, query, headers the app received
    POST /count            reads the body as it comes; JSON {"size", "sha256"}
    GET  /bytes?n=N        N pseudo-random bytes, chunked (no Content-Length), from a generator
    GET  /stream?n=N       N lines, chunked, one per body message
The app counts the bytes it has sent and received (`DeviceHttp.sent`, `.received`) so a test
can see how far ahead of a reader the sender got.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from functools import partial
from typing import Any
from urllib.parse import parse_qs

import attrs
import trio
from hypercorn.config import Config
from hypercorn.trio import serve
from trio_websocket import ConnectionClosed, WebSocketRequest, serve_websocket

__all__ = ["CHUNK", "DeviceHttp", "pattern", "serve_device_http", "serve_device_ws"]

CHUNK = 256 * 1024


def pattern(total: int, chunk: int = CHUNK) -> Iterator[bytes]:
    """*total* deterministic bytes in pieces of *chunk* (the same on both ends of a test)."""
    block = hashlib.sha256(b"devyard").digest() * (chunk // 32 + 1)
    sent = 0
    counter = 0
    while sent < total:
        size = min(chunk, total - sent)
        counter += 1
        yield counter.to_bytes(4, "big") + block[: size - 4] if size > 4 else block[:size]
        sent += size


@attrs.define
class DeviceHttp:
    port: int = 0
    sent: int = 0
    received: int = 0
    requests: int = 0

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (message := await receive())["type"] != "lifespan.shutdown":
                await send({"type": message["type"] + ".complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        if scope["type"] != "http":
            return
        self.requests += 1
        path = scope["path"]
        query = parse_qs(scope["query_string"].decode())
        if path == "/hello":
            await _whole(send, 200, b"hello from the device", b"text/plain")
        elif path.startswith("/echo-request"):
            seen = {
                "method": scope["method"],
                "path": path,
                "rawPath": scope.get("raw_path", b"").decode("latin-1"),
                "query": scope["query_string"].decode("latin-1"),
                "headers": [
                    [k.decode("latin-1"), v.decode("latin-1")] for k, v in scope["headers"]
                ],
            }
            body = b""
            while True:
                message = await receive()
                body += message.get("body", b"")
                if not message.get("more_body"):
                    break
            seen["body"] = body.decode("latin-1")
            await _whole(send, 200, json.dumps(seen).encode(), b"application/json")
        elif path == "/count":
            digest, size = hashlib.sha256(), 0
            while True:
                message = await receive()
                if message["type"] != "http.request":
                    return
                data = message.get("body", b"")
                digest.update(data)
                size += len(data)
                self.received += len(data)
                if not message.get("more_body"):
                    break
            answer = json.dumps({"size": size, "sha256": digest.hexdigest()}).encode()
            await _whole(send, 200, answer, b"application/json")
        elif path in ("/bytes", "/stream"):
            n = int(query.get("n", ["0"])[0])
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-type", b"application/octet-stream")]})  # fmt: skip
            pieces = pattern(n) if path == "/bytes" else (b"line %d\n" % i for i in range(n))
            for piece in pieces:
                await send({"type": "http.response.body", "body": piece, "more_body": True})
                self.sent += len(piece)
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        else:
            await _whole(send, 404, b"no such page on the device", b"text/plain")


async def _whole(send: Any, status: int, body: bytes, content_type: bytes) -> None:
    headers = [(b"content-type", content_type), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def serve_device_http(
    app: DeviceHttp, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED
) -> None:
    """Hypercorn on 127.0.0.1 (a free port) serving *app* until cancelled."""
    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.accesslog = None
    config.errorlog = None
    async with trio.open_nursery() as nursery:
        binds: list[str] = await nursery.start(partial(serve, app, config, mode="asgi"))  # type: ignore[arg-type]
        app.port = int(binds[0].rsplit(":", 1)[1])
        task_status.started(app.port)


async def _echo(request: WebSocketRequest) -> None:
    wanted = request.proposed_subprotocols
    ws = await request.accept(subprotocol=wanted[0] if wanted else None)
    try:
        while True:
            message = await ws.get_message()
            if message == "close-me":
                await ws.aclose(4001, "asked to")
                return
            await ws.send_message(message)
    except ConnectionClosed:
        pass


async def serve_device_ws(*, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
    """A WebSocket echo server on 127.0.0.1 (a free port) until cancelled. It echoes every
    message, accepts the first subprotocol offered, and closes with 4001 on "close-me"."""
    async with trio.open_nursery() as nursery:
        server = await nursery.start(
            partial(serve_websocket, _echo, "127.0.0.1", 0, ssl_context=None,
                    max_message_size=8 * 1024 * 1024)
        )  # fmt: skip
        task_status.started(server.port)
