"""Sessions over real sockets on 127.0.0.1: TCP, TLS and WebSocket (docs/protocol.md 8)."""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from functools import partial

import pytest
import trio
import trio_websocket
import trustme

from devyard.core import MuxStream, Session, WebSocketStream, open_session, open_transport
from devyard.core.codec import FrameDecoder
from devyard.core.frames import Flag
from devyard.core.transports import WS_MAX_MESSAGE, WS_MAX_SEND, WS_RECEIVE_BUFFER
from devyard.core.wsframe import FramedWebSocket

Serve = Callable[[Session], Awaitable[None]]


async def _echo_all(session: Session) -> None:
    async with trio.open_nursery() as nursery:
        async for stream in session:
            nursery.start_soon(_echo, stream)


async def _echo(stream: MuxStream) -> None:
    while data := await stream.receive_some():
        await stream.send_all(data)
    await stream.send_eof()
    await stream.aclose()


async def _exchange(session: Session, payload: bytes) -> bytes:
    stream = await session.open_stream()
    got = bytearray()
    async with trio.open_nursery() as nursery:

        async def send() -> None:
            await stream.send_all(payload)
            await stream.send_eof()

        nursery.start_soon(send)
        while data := await stream.receive_some():
            got += data
    await stream.aclose()
    return bytes(got)


async def _serve_stream(stream: trio.abc.Stream) -> None:
    async with open_session(stream, client=False) as session:
        await _echo_all(session)


@asynccontextmanager
async def _tcp_server(ssl_context: ssl.SSLContext | None = None) -> AsyncIterator[int]:
    async with trio.open_nursery() as nursery:
        if ssl_context is None:
            listeners = await nursery.start(
                partial(trio.serve_tcp, _serve_stream, 0, host="127.0.0.1")
            )
        else:
            listeners = await nursery.start(
                partial(trio.serve_ssl_over_tcp, _serve_stream, 0, ssl_context, host="127.0.0.1")
            )
        listener = listeners[0]
        tcp = listener if ssl_context is None else listener.transport_listener
        yield tcp.socket.getsockname()[1]
        nursery.cancel_scope.cancel()


@asynccontextmanager
async def _ws_server() -> AsyncIterator[int]:
    async def handler(request: trio_websocket.WebSocketRequest) -> None:
        assert request.headers  # the upgrade carried our header (checked below)
        connection = await request.accept()
        await _serve_stream(WebSocketStream(connection))

    async with trio.open_nursery() as nursery:
        server = await nursery.start(
            partial(
                trio_websocket.serve_websocket,
                handler,
                "127.0.0.1",
                0,
                ssl_context=None,
                max_message_size=WS_MAX_MESSAGE,
                receive_buffer_size=WS_RECEIVE_BUFFER,
            )
        )
        yield server.port
        nursery.cancel_scope.cancel()


PAYLOADS = [b"x", b"hello" * 1000, bytes(range(256)) * 12_000]  # the last is 3 MiB


async def _check_echo(url: str, ssl_context: ssl.SSLContext | None = None) -> None:
    with trio.fail_after(30):
        async with (
            open_transport(url, ssl_context=ssl_context, extra_headers=[(b"x-test", b"1")]) as t,
            open_session(t, client=True) as session,
        ):
            results: dict[int, bytes] = {}
            async with trio.open_nursery() as nursery:
                for i, payload in enumerate(PAYLOADS * 2):

                    async def one(i: int = i, payload: bytes = payload) -> None:
                        results[i] = await _exchange(session, payload)

                    nursery.start_soon(one)
            assert [results[i] for i in range(len(results))] == PAYLOADS * 2
            assert await session.ping() >= 0


async def test_session_over_tcp() -> None:
    async with _tcp_server() as port:
        await _check_echo(f"tcp://127.0.0.1:{port}")


async def test_session_over_tls() -> None:
    ca = trustme.CA()
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server_context)
    client_context = ssl.create_default_context()
    ca.configure_trust(client_context)
    async with _tcp_server(server_context) as port:
        await _check_echo(f"tls://127.0.0.1:{port}", client_context)


async def test_session_over_websocket() -> None:
    async with _ws_server() as port:
        await _check_echo(f"ws://127.0.0.1:{port}/v1/link")


async def test_websocket_messages_carry_whole_frames() -> None:
    """Each binary message the session writes holds whole frames (a proxy may rely on it),
    and no more than the transport's max_send bytes of them (our own framing: 1 MiB)."""
    seen: list[int] = []
    sizes: list[int] = []
    fin_seen = trio.Event()

    async def handler(request: trio_websocket.WebSocketRequest) -> None:
        connection = await request.accept()
        while True:
            try:
                message = await connection.get_message()
            except trio_websocket.ConnectionClosed:
                return
            assert isinstance(message, bytes)
            sizes.append(len(message))
            decoder = FrameDecoder(4 * 1024 * 1024)
            frames = decoder.feed(message)
            seen.append(decoder.buffered)  # 0 when the message ends on a frame boundary
            if any(frame.flags & Flag.FIN for frame in frames):
                fin_seen.set()

    async with trio.open_nursery() as nursery:
        server = await nursery.start(
            partial(
                trio_websocket.serve_websocket,
                handler,
                "127.0.0.1",
                0,
                ssl_context=None,
                max_message_size=WS_MAX_MESSAGE,
            )
        )
        async with (
            open_transport(f"ws://127.0.0.1:{server.port}/") as t,
            open_session(t, client=True) as session,
        ):
            # 8 streams' whole windows, 4 frames each, queued at once: more than one message
            streams = [await session.open_stream() for _ in range(8)]
            for stream in streams:
                await stream.send_all(b"y" * 256 * 1024)
            await streams[-1].send_eof()
            with trio.fail_after(20):
                await fin_seen.wait()
        nursery.cancel_scope.cancel()
    assert seen and all(left == 0 for left in seen)
    assert max(sizes) <= FramedWebSocket.max_send < 8 * 256 * 1024
    assert WS_MAX_SEND <= FramedWebSocket.max_send <= WS_MAX_MESSAGE


@pytest.mark.parametrize("url", ["udp://127.0.0.1:1", "tcp://127.0.0.1", "ws://:80/"])
async def test_bad_transport_urls_are_rejected(url: str) -> None:
    with pytest.raises(ValueError, match=r"transport URL|scheme|no host"):
        async with open_transport(url):
            pass
