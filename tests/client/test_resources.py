"""Tunnels and usage through the typed client under asyncio (in a thread of its own: the
server runs on this test's trio loop) and through the blocking Client. Instances need a host:
tests/e2e/test_cli_device.py pages them against `devyard up`."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest
import trio

from devyard.client import (
    AsyncClient,
    Client,
    NotFoundError,
    Tunnel,
)

from .conftest import Server


@pytest.fixture
def database_target(tmp_path: Path) -> str:
    """SQLite only: the client is under test here, not the store."""
    return str(tmp_path / "devyard.db")


async def test_the_same_client_runs_under_asyncio(server: Server) -> None:
    async def on_asyncio() -> tuple[list[str], Tunnel, str]:
        async with AsyncClient(server.url, server.admin_key) as client:
            created = await client.create_tunnel("office", ["db.internal:5432"])
            listed = [t.name for t in await client.list_tunnels()]
            updated = await client.update_tunnel("office", ["*.internal"])
            rotated = await client.rotate_tunnel_token("office")
            assert rotated.token != created.token and rotated.token not in repr(rotated)
            await client.delete_tunnel("office")
            with pytest.raises(NotFoundError):
                await client.get_tunnel("office")
            return listed, updated, asyncio.get_running_loop().__class__.__name__

    listed, updated, loop = await trio.to_thread.run_sync(asyncio.run, on_asyncio())
    assert listed == ["office"] and "EventLoop" in loop
    assert updated.selectors == ["*.internal"] and updated.selector_version == 2


async def test_the_blocking_client_covers_the_api(server: Server) -> None:
    def blocking() -> tuple[str, list[str], int, int]:
        with Client(server.url, server.admin_key) as client:
            me = client.whoami()
            created = client.create_tunnel("lab", ["adb.lab:5555"], token_expiry_months=1)
            names = [t.name for t in client.list_tunnels()]
            usage = client.usage(start="2020-01-01T00:00:00Z", bucket="hour")
            ended = list(client.iter_instance_usage(start="2020-01-01T00:00:00Z", page_size=1))
            assert created.tunnel.status == "offline" and created.token.startswith("dyt_")
            return me.user.name, names, usage.instances, len(ended)

    name, names, instances, ended = await trio.to_thread.run_sync(blocking)
    assert (name, names) == ("alice", ["lab"])
    assert instances == ended == 0


def test_a_closed_blocking_client_stops_its_thread() -> None:
    before = threading.active_count()
    client = Client("http://127.0.0.1:9", "dy_none")
    assert threading.active_count() == before + 1
    client.close()
    client.close()  # idempotent
    assert threading.active_count() == before
