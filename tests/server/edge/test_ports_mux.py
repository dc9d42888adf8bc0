"""The multiplexed TCP mode of the port prefix (edge/ports_mux.py) in process: the caller's
WebSocket as ASGI messages, each connection id opened to a real echo server on loopback (what
the host's ``http`` stream would reach). The SDK's own tunnel drives the whole path through
``devyard up`` in tests/e2e/test_sdk_device.py."""

from __future__ import annotations

import struct
from collections.abc import AsyncIterator, MutableMapping
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import pytest
import trio

from devyard.server.edge.ports_mux import MAX_CONNECTIONS, BadMuxPort, mux_port, serve_multiplexed


async def _echo(stream: trio.SocketStream) -> None:
    async with stream:
        while data := await stream.receive_some(65536):
            await stream.send_all(data)


def _frame(conn_id: int, payload: bytes = b"") -> bytes:
    return struct.pack(">I", conn_id) + payload


class Caller:
    """The caller's side of the accepted WebSocket."""

    def __init__(self) -> None:
        self.to_edge, self._incoming = trio.open_memory_channel[MutableMapping[str, Any]](64)
        self._sent, self.from_edge = trio.open_memory_channel[bytes](256)

    async def receive(self) -> MutableMapping[str, Any]:
        return await self._incoming.receive()

    async def send(self, message: MutableMapping[str, Any]) -> None:
        assert message["type"] == "websocket.send"
        await self._sent.send(bytes(message["bytes"]))

    async def put(self, data: bytes | str) -> None:
        key = "bytes" if isinstance(data, bytes) else "text"
        await self.to_edge.send({"type": "websocket.receive", key: data})

    async def echoed(self, conn_id: int, payload: bytes) -> None:
        await self.put(_frame(conn_id, payload))
        assert await self.from_edge.receive() == _frame(conn_id, payload)


@asynccontextmanager
async def tunnel(port: int) -> AsyncIterator[Caller]:
    caller = Caller()

    async def open_stream() -> trio.abc.Stream:
        return await trio.open_tcp_stream("127.0.0.1", port)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(serve_multiplexed, caller.receive, caller.send, open_stream)
        yield caller
        await caller.to_edge.send({"type": "websocket.disconnect", "code": 1000})


async def test_connections_up_to_the_cap_each_closed_alone(nursery: trio.Nursery) -> None:
    listeners = await nursery.start(partial(trio.serve_tcp, _echo, 0, host="127.0.0.1"))
    with trio.fail_after(30):
        async with tunnel(listeners[0].socket.getsockname()[1]) as caller:
            await caller.put(b"\x00\x01")  # no id: dropped
            await caller.put("text")  # not a frame: dropped
            await caller.put(_frame(77))  # a close for an id that is not open: dropped
            ids = range(1, MAX_CONNECTIONS + 1)
            for conn_id in ids:  # all open at once (the echo holds them)
                await caller.put(_frame(conn_id, f"ping {conn_id}".encode()))
            echoes = {await caller.from_edge.receive() for _ in ids}
            assert echoes == {_frame(i, f"ping {i}".encode()) for i in ids}
            await caller.put(_frame(999, b"one too many"))
            assert await caller.from_edge.receive() == _frame(999)  # closed, the rest stay
            await caller.put(_frame(1))  # the caller closes id 1: its close comes back
            assert await caller.from_edge.receive() == _frame(1)
            await caller.put(_frame(1, b"late bytes"))  # in flight when 1 closed: dropped
            await caller.echoed(2, b"2 goes on")
            await caller.echoed(1000, b"room again")  # the place 1 left


async def test_a_closed_port_closes_the_id_and_the_others_go_on(nursery: trio.Nursery) -> None:
    listeners = await nursery.start(partial(trio.serve_tcp, _echo, 0, host="127.0.0.1"))
    echo_port = listeners[0].socket.getsockname()[1]
    opened: list[int] = []
    caller = Caller()

    async def open_stream() -> trio.abc.Stream:
        opened.append(1)
        if len(opened) == 1:  # the first id: the host refuses the open (nothing listens)
            raise ConnectionRefusedError("nothing listens")
        return await trio.open_tcp_stream("127.0.0.1", echo_port)

    with trio.fail_after(30):
        async with trio.open_nursery() as inner:
            inner.start_soon(serve_multiplexed, caller.receive, caller.send, open_stream)
            await caller.put(_frame(5, b"refused"))
            assert await caller.from_edge.receive() == _frame(5)
            await caller.echoed(6, b"fine")
            await caller.to_edge.send({"type": "websocket.disconnect", "code": 1000})


@pytest.mark.parametrize(
    ("path", "query", "port"),
    [
        (b"8100", b"mode=multiplexed", 8100),
        (b"", b"port=8100", 8100),
        (b"8100", b"port=8100", 8100),
        (b"8100", b"", None),  # the HTTP/WebSocket proxy (ports.py)
        (b"8100", b"mode=other", None),
    ],
)
def test_the_mode_and_the_port(path: bytes, query: bytes, port: int | None) -> None:
    assert mux_port({"query_string": query}, path) == port


@pytest.mark.parametrize(
    ("path", "query"),
    [(b"8100", b"port=8101"), (b"", b"port=0"), (b"", b"port=x"), (b"", b"mode=multiplexed")],
)
def test_a_bad_or_doubly_named_port_is_refused(path: bytes, query: bytes) -> None:
    with pytest.raises(BadMuxPort):
        mux_port({"query_string": query}, path)
