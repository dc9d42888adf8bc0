"""devyard's own WebSocket framing (devyard.core.wsframe) against trio-websocket as the peer,
both ways round, on 127.0.0.1 (docs/protocol.md 8)."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from functools import partial

import pytest
import trio
import trio_websocket

from devyard.core import WebSocketStream, open_session, open_transport
from devyard.core.transports import WS_MAX_MESSAGE, WS_RECEIVE_BUFFER
from devyard.core.upgrade import UpgradeRejected, accept_upgrade
from devyard.core.wsframe import (
    FramedWebSocket,
    WebSocketHandshakeError,
    accept_websocket,
    is_websocket_upgrade,
)


@asynccontextmanager
async def _trio_ws_server(
    handler: Callable[[trio_websocket.WebSocketRequest], Awaitable[None]],
) -> AsyncIterator[int]:
    async with trio.open_nursery() as nursery:
        server = await nursery.start(
            partial(
                trio_websocket.serve_websocket,
                handler,
                "127.0.0.1",
                0,
                None,
                max_message_size=WS_MAX_MESSAGE,
                receive_buffer_size=WS_RECEIVE_BUFFER,
            )
        )
        yield server.port
        nursery.cancel_scope.cancel()


@asynccontextmanager
async def _raw_server(script: Callable[[FramedWebSocket], Awaitable[None]]) -> AsyncIterator[int]:
    """A server doing the handshake with accept_websocket, then running *script* on it."""

    async def serve(stream: trio.SocketStream) -> None:
        request = await accept_upgrade(stream)
        assert request is not None and is_websocket_upgrade(request)
        await script(await accept_websocket(request))

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, serve, 0, host="127.0.0.1"))
        yield listeners[0].socket.getsockname()[1]
        nursery.cancel_scope.cancel()


async def test_our_client_reads_fragments_answers_pings_and_sees_a_clean_close() -> None:
    pongs: list[bytes] = []

    async def script(ws: FramedWebSocket) -> None:
        # "abc" in a binary frame without FIN, a PING between, "def" in a continuation (FIN)
        await ws.stream.send_all(b"\x02\x03abc" + b"\x89\x02hi" + b"\x80\x03def")
        head = await ws.stream.receive_some(6)  # the PONG: masked, 2 bytes: 2 + 4 + 2
        while len(head) < 8:
            head += await ws.stream.receive_some(8 - len(head))
        assert head[:2] == b"\x8a\x82"
        key = head[2:6]
        pongs.append(bytes(b ^ key[i % 4] for i, b in enumerate(head[6:8])))
        await ws.stream.send_all(b"\x88\x02\x03\xe8")  # CLOSE 1000

    async with _raw_server(script) as port, open_transport(f"ws://127.0.0.1:{port}/x") as ws:
        assert isinstance(ws, FramedWebSocket)
        got = b""
        while data := await ws.receive_some():
            got += data
        assert got == b"abcdef"
        assert pongs == [b"hi"]


async def test_a_close_with_an_error_code_breaks_the_stream() -> None:
    async def handler(request: trio_websocket.WebSocketRequest) -> None:
        ws = await request.accept()
        await ws.aclose(1011, "server fell over")

    async with _trio_ws_server(handler) as port, open_transport(f"ws://127.0.0.1:{port}/") as ws:
        with pytest.raises(trio.BrokenResourceError, match="1011 server fell over"):
            await ws.receive_some()


async def test_a_text_message_is_a_protocol_error() -> None:
    async def handler(request: trio_websocket.WebSocketRequest) -> None:
        ws = await request.accept()
        await ws.send_message("text")
        with trio.move_on_after(5):
            await ws.get_message()  # until our close arrives

    async with _trio_ws_server(handler) as port, open_transport(f"ws://127.0.0.1:{port}/") as ws:
        with pytest.raises(trio.BrokenResourceError, match="text message"):
            await ws.receive_some()


async def test_a_refused_upgrade_and_a_non_websocket_server() -> None:
    async def handler(request: trio_websocket.WebSocketRequest) -> None:
        await request.reject(403, body=b'{"reason": "nope"}')

    async with _trio_ws_server(handler) as port:
        with pytest.raises(UpgradeRejected) as refused:
            async with open_transport(f"ws://127.0.0.1:{port}/"):
                pass
        assert refused.value.status_code == 403
        assert b"nope" in refused.value.body

    async def not_http(stream: trio.SocketStream) -> None:
        await stream.send_all(b"SSH-2.0-nothing like HTTP\r\n\r\n")
        await stream.aclose()

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, not_http, 0, host="127.0.0.1"))
        port = listeners[0].socket.getsockname()[1]
        with pytest.raises(WebSocketHandshakeError):
            async with open_transport(f"ws://127.0.0.1:{port}/"):
                pass
        nursery.cancel_scope.cancel()


async def test_a_session_between_trio_websocket_and_our_server_side() -> None:
    # trio-websocket (the reference client) masks; our server side unmasks what it receives,
    # in whatever pieces the reads cut it into, and answers with unmasked frames.
    rng = random.Random(4)
    payloads = [rng.randbytes(rng.choice([1, 100, 70_000, 600_000])) for _ in range(6)]

    async def serve(stream: trio.SocketStream) -> None:
        request = await accept_upgrade(stream)
        assert request is not None and is_websocket_upgrade(request)
        transport = await accept_websocket(request)
        async with open_session(transport, client=False) as session:
            async for mux in session:
                async with mux:
                    while data := await mux.receive_some():
                        await mux.send_all(data)

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, serve, 0, host="127.0.0.1"))
        port = listeners[0].socket.getsockname()[1]
        async with (
            trio_websocket.open_websocket_url(
                f"ws://127.0.0.1:{port}/mux",
                max_message_size=WS_MAX_MESSAGE,
                receive_buffer_size=WS_RECEIVE_BUFFER,
            ) as connection,
            open_session(WebSocketStream(connection), client=True) as session,
        ):
            for payload in payloads:
                mux = await session.open_stream()
                async with mux:
                    await mux.send_all(payload)
                    await mux.send_eof()
                    echoed = b""
                    while data := await mux.receive_some():
                        echoed += data
                assert echoed == payload
        nursery.cancel_scope.cancel()
