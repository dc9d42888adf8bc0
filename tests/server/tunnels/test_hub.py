"""The edge's connector hub over an in-memory ASGI websocket, on trio's MockClock: the
10-minute quick-tunnel grace and the daily expiry warnings run in virtual time."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, MutableMapping
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import attrs
import trio
import trio.testing

from devyard.core import ControlChannel, MessageStream, Session, open_session
from devyard.server.edge.connectors import DEFAULT_QUICK_GRACE, ConnectorHub
from devyard.server.store.base import Tunnel
from devyard.server.tunnels import TokenInvalid

START = datetime(2030, 1, 1, tzinfo=UTC)


def _tunnel(*, ephemeral: bool, expires_in: timedelta = timedelta(days=365)) -> Tunnel:
    return Tunnel(
        id="tun_1",
        org_id="org_1",
        name="quick-1",
        selectors=("127.0.0.1:9",),
        selector_version=1,
        ephemeral=ephemeral,
        token_lookup="x",
        token_expires_at=START + expires_in,
        token_issued_at=START,
        created_at=START,
    )


@attrs.define
class Directory:
    """The `TunnelDirectory` seam: one tunnel, and the deletions the hub asks for."""

    tunnel: Tunnel
    deleted_at: list[float] = attrs.field(factory=list)
    deleted: trio.Event = attrs.field(factory=trio.Event)

    async def authenticate(self, token: str) -> Tunnel:
        await trio.lowlevel.checkpoint()
        if token != "good":
            raise TokenInvalid(token)
        return self.tunnel

    async def delete_ephemeral(self, tunnel: Tunnel) -> bool:
        await trio.lowlevel.checkpoint()
        self.deleted_at.append(trio.current_time())
        self.deleted.set()
        return True


class _ClientSide(MessageStream):
    def __init__(
        self, to_server: trio.MemorySendChannel[Any], inbox: trio.MemoryReceiveChannel[Any]
    ) -> None:
        super().__init__()
        self._to_server = to_server
        self._inbox = inbox

    async def _send_message(self, data: bytes) -> None:
        await self._to_server.send({"type": "websocket.receive", "bytes": data})

    async def _receive_message(self) -> bytes | None:
        try:
            message: bytes | None = await self._inbox.receive()
        except trio.EndOfChannel:
            return None
        return message

    async def aclose(self) -> None:
        self._closed = True
        await self._to_server.aclose()


@asynccontextmanager
async def connect(hub: ConnectorHub, nursery: trio.Nursery) -> AsyncIterator[Session]:
    """A connector session to *hub* through an in-memory ASGI websocket."""
    to_server, server_in = trio.open_memory_channel[Any](16)
    to_client, client_in = trio.open_memory_channel[Any](16)
    await to_server.send({"type": "websocket.connect"})

    async def receive() -> MutableMapping[str, Any]:
        try:
            message: MutableMapping[str, Any] = await server_in.receive()
        except trio.EndOfChannel:
            return {"type": "websocket.disconnect"}
        return message

    async def send(message: MutableMapping[str, Any]) -> None:
        if message["type"] == "websocket.send":
            await to_client.send(message["bytes"])
        elif message["type"] == "websocket.close":
            await to_client.aclose()

    scope = {"type": "websocket", "headers": [(b"authorization", b"Bearer good")]}
    nursery.start_soon(hub, scope, receive, send)
    async with open_session(_ClientSide(to_server, client_in), client=True) as session:
        yield session


async def _hello(session: Session) -> tuple[ControlChannel, dict[str, Any]]:
    control = ControlChannel(await session.open_stream())
    await control.send({"type": "hello", "proto": 1, "id": "c1", "hostname": "h", "replace": False})
    return control, await control.receive()


async def test_a_crashed_quick_tunnel_is_deleted_after_ten_minutes(
    autojump_clock: trio.testing.MockClock,
) -> None:
    directory = Directory(_tunnel(ephemeral=True))
    async with trio.open_nursery() as nursery:
        hub = ConnectorHub(directory, nursery, now=lambda: START)
        assert hub.quick_grace == DEFAULT_QUICK_GRACE == 600.0
        async with connect(hub, nursery) as session:
            _, registered = await _hello(session)
            assert registered["role"] == "active" and registered["ephemeral"] is True
            assert hub.status("org_1", "quick-1").online
            lost_at = trio.current_time()
            # The transport just goes (no shutdown, no GO_AWAY): a crash.
        await directory.deleted.wait()
        assert abs(directory.deleted_at[0] - lost_at - 600.0) < 2.0
        assert not hub.status("org_1", "quick-1").online
        nursery.cancel_scope.cancel()


async def test_expiry_warnings_come_daily_from_14_days_before(
    autojump_clock: trio.testing.MockClock,
) -> None:
    started = trio.current_time()
    directory = Directory(_tunnel(ephemeral=False, expires_in=timedelta(days=1, hours=12)))

    def now() -> datetime:  # wall time follows the mock clock
        return START + timedelta(seconds=trio.current_time() - started)

    async with trio.open_nursery() as nursery:
        hub = ConnectorHub(directory, nursery, now=now)
        async with connect(hub, nursery) as session:
            control, _ = await _hello(session)
            warnings: list[float] = []
            with trio.move_on_after(3 * 86400):
                while True:
                    message = await control.receive()
                    if message["type"] == "token_expiry_warning":
                        warnings.append(trio.current_time() - started)
                    elif message["type"] == "error":
                        assert message["code"] == "token-expired" and message["permanent"]
                        break
            assert [round(w / 3600) for w in warnings] == [0, 24]
            assert round((trio.current_time() - started) / 3600) == 36
        nursery.cancel_scope.cancel()


async def test_connectors_beyond_the_cap_are_refused_before_the_upgrade(
    autojump_clock: trio.testing.MockClock,
) -> None:
    directory = Directory(_tunnel(ephemeral=False))
    async with trio.open_nursery() as nursery:
        hub = ConnectorHub(directory, nursery, max_connectors=2, now=lambda: START)
        async with connect(hub, nursery) as first, connect(hub, nursery) as second:
            assert (await _hello(first))[1]["role"] == "active"
            assert (await _hello(second))[1]["role"] == "standby"
            sent: list[MutableMapping[str, Any]] = []

            async def receive() -> MutableMapping[str, Any]:
                await trio.lowlevel.checkpoint()
                return {"type": "websocket.connect"}

            async def send(message: MutableMapping[str, Any]) -> None:
                await trio.lowlevel.checkpoint()
                sent.append(message)

            scope = {
                "type": "websocket",
                "path": "/v1/connector_connections",
                "headers": [(b"authorization", b"Bearer good")],
                "extensions": {"websocket.http.response": {}},
            }
            await hub(scope, receive, send)
            assert [m["type"] for m in sent] == [
                "websocket.http.response.start",
                "websocket.http.response.body",
            ]
            assert sent[0]["status"] == 429
            body = json.loads(sent[1]["body"])
            assert body["reason"] == "too-many-connectors" and "2 connectors" in body["message"]
            assert len(hub.status("org_1", "quick-1").standbys) == 1
        nursery.cancel_scope.cancel()
