"""What hosts report reaches `InstanceService` one way, on the edge's bounded channel; a store
error while handling one event is contained (the next one is handled, the service runs on)."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from devyard.server.hosts import (
    EVENT_BUFFER,
    HostEvent,
    HostLost,
    InstanceEvent,
    InstancePhase,
    InstanceReported,
)
from devyard.server.instances import InstanceService, NewInstance
from devyard.server.store import Store
from devyard.server.store import errors as store_errors
from devyard.server.store.base import Instance, InstanceState, Platform

from .conftest import RecordingRegistry


class FailingListStore:
    """The real store, except that listing live instances fails (a database outage in the
    middle of a host-lost), as long as ``failing`` is set."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self.failing = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def list_live_instances(self, *, host_id: str | None = None) -> list[Instance]:
        if self.failing:
            await trio.lowlevel.checkpoint()
            raise store_errors.StoreUnavailable("the database went away")
        return await self._store.list_live_instances(host_id=host_id)


def _new() -> NewInstance:
    return NewInstance(platform=Platform.ANDROID, labels={}, display_name=None, spec={})


async def test_a_store_error_in_a_host_event_is_contained(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    org = await store.create_organization("acme")
    failing = FailingListStore(store)
    send, receive = trio.open_memory_channel[HostEvent](EVENT_BUFFER)
    service = InstanceService(failing, RecordingRegistry(), events=receive)
    async with trio.open_nursery() as nursery:
        await nursery.start(service.run)
        created = await service.create(org, _new(), reuse=False)
        failing.failing = True
        await send.send(HostLost("h1"))  # the host-lost grace ran out: the store fails
        await send.send(InstanceReported("h1", InstanceEvent(created.id, InstancePhase.READY)))

        await _until_state(store, created.id, InstanceState.READY)  # the next one was handled
        assert "could not handle HostLost" in caplog.text
        failing.failing = False
        await send.send(HostLost("h1"))  # and the service still runs
        await _until_state(store, created.id, InstanceState.TERMINATED)
        nursery.cancel_scope.cancel()


async def _until_state(store: Store, instance_id: str, state: InstanceState) -> None:
    with trio.fail_after(10):
        while (await store.get_instance(instance_id)).state is not state:  # noqa: ASYNC110
            await trio.sleep(0.01)
