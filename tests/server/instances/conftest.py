from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime

import pytest
import trio

from devyard.server.hosts import HostInfo, HostUnavailableError, InstanceOrder
from devyard.server.instances import InstanceService
from devyard.server.store import Store, open_store


class RecordingRegistry:
    """A `HostRegistry` that records orders; tests emit the host's events through the
    service's `InstanceEvents`, exactly as the edge does (hosts.py is the seam)."""

    def __init__(self, hosts: list[HostInfo] | None = None) -> None:
        self.host_list = hosts if hosts is not None else [make_host("h1", "local")]
        self.started: list[tuple[str, InstanceOrder]] = []
        self.stopped: list[tuple[str, str]] = []
        self.stopped_at: dict[str, float] = {}
        self.refusing: set[str] = set()
        self.got_order = trio.Event()

    def hosts(self) -> list[HostInfo]:
        return list(self.host_list)

    async def start_instance(self, host_id: str, order: InstanceOrder) -> None:
        if host_id in self.refusing:
            raise HostUnavailableError(host_id)
        await trio.lowlevel.checkpoint()
        self.started.append((host_id, order))
        self.got_order.set()

    async def stop_instance(self, host_id: str, instance_id: str) -> None:
        await trio.lowlevel.checkpoint()
        self.stopped.append((host_id, instance_id))
        self.stopped_at[instance_id] = trio.current_time()


def make_host(host_id: str, region: str, *, capacity: int = 4) -> HostInfo:
    return HostInfo(
        id=host_id,
        name=host_id,
        region=region,
        capacity=capacity,
        running=0,
        platforms=frozenset({"ios", "android", "xcode", "gradle"}),
        drivers=frozenset({"virtual"}),
        version="test",
        connected_at=datetime(2030, 1, 1, tzinfo=UTC),
    )


@asynccontextmanager
async def running(service: InstanceService) -> AsyncIterator[None]:
    """*service* with its `run` task: it hands the orders to the registry."""
    async with trio.open_nursery() as nursery:
        await nursery.start(service.run)
        yield
        nursery.cancel_scope.cancel()


@pytest.fixture
async def store(database_target: str) -> AsyncIterator[Store]:
    async with open_store(database_target) as opened:
        yield opened
