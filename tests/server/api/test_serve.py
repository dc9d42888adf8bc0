"""The API on a real Hypercorn listener: 127.0.0.1 port 0, inside the test's nursery."""

from __future__ import annotations

from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path

import attrs
import pytest
import trio

from devyard.client import AsyncClient, AuthenticationError
from devyard.server.api.app import api_state
from devyard.server.api.serve import BoundServer, serve_api
from devyard.server.config import ListenAddress, ServerConfig
from devyard.server.store import Store

from .conftest import Callers


@pytest.fixture
def config(tmp_path: Path) -> ServerConfig:
    return ServerConfig(data_dir=tmp_path, listen=ListenAddress("127.0.0.1", 0), shutdown_grace=5)


@attrs.frozen
class Running:
    bound: BoundServer
    shutdown: trio.Event


@pytest.fixture
async def running(
    nursery: trio.Nursery, store: Store, config: ServerConfig
) -> AsyncIterator[Running]:
    shutdown = trio.Event()
    bound = await nursery.start(
        partial(serve_api, api_state(store, config), shutdown_trigger=shutdown.wait)
    )
    yield Running(bound=bound, shutdown=shutdown)
    shutdown.set()


async def test_the_bound_port_is_reported_and_serves(running: Running, callers: Callers) -> None:
    assert running.bound.port > 0
    assert running.bound.base_url == f"http://127.0.0.1:{running.bound.port}"
    async with AsyncClient(running.bound.base_url, callers.admin.key) as client:
        me = await client.whoami()
    assert me.user.name == "alice"
    async with AsyncClient(running.bound.base_url, "dy_bogus") as client:
        with pytest.raises(AuthenticationError):
            await client.whoami()


async def test_graceful_shutdown_stops_listening(
    store: Store, config: ServerConfig, callers: Callers
) -> None:
    shutdown = trio.Event()
    async with trio.open_nursery() as nursery:
        bound: BoundServer = await nursery.start(
            partial(serve_api, api_state(store, config), shutdown_trigger=shutdown.wait)
        )
        async with AsyncClient(bound.base_url) as client:
            assert await client.livez() == "alive"
        shutdown.set()
    # serve_api returned by itself: nothing listens any more.
    with pytest.raises(OSError):
        await trio.open_tcp_stream("127.0.0.1", bound.port)


async def test_an_unread_body_closes_the_connection_not_hangs(running: Running) -> None:
    # The server answers 401 before the announced body arrives; it cannot frame a next request
    # on this connection, so it must close it. Quart-Trio's cancellation used to abort that
    # close and leave the connection open and dead (see ShieldedSend): this read hung.
    with trio.fail_after(10):
        stream = await trio.open_tcp_stream("127.0.0.1", running.bound.port)
        async with stream:
            await stream.send_all(
                b"PATCH /users/x HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
                b"Content-Length: 5\r\n\r\n"
            )
            received = b""
            while chunk := await stream.receive_some(65536):
                received += chunk
    assert received.startswith(b"HTTP/1.1 401")
    assert b'"unauthenticated"' in received
