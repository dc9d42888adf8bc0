"""`InstanceService` over a real store (both backends) and a recording registry."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import trio
import trio.testing

from devyard.server.hosts import InstanceEvent, InstanceOrder, InstancePhase
from devyard.server.instances import (
    EmptyRegistry,
    InstanceService,
    InvalidDuration,
    NewInstance,
    NoCapacity,
)
from devyard.server.store import Store
from devyard.server.store.base import (
    Instance,
    InstanceState,
    Organization,
    Platform,
    TerminationReason,
)

from .conftest import RecordingRegistry, make_host


def _new(**spec: object) -> NewInstance:
    return NewInstance(
        platform=Platform.ANDROID, labels={"pr": "7"}, display_name=None, spec=dict(spec)
    )


async def test_no_hosts_is_no_capacity_and_leaves_nothing(store: Store) -> None:
    org = await store.create_organization("acme")
    service = InstanceService(store, EmptyRegistry())
    with pytest.raises(NoCapacity, match="no host"):
        await service.create(org, _new(), reuse=False)
    assert await store.list_instances(org.id, Platform.ANDROID) == []


async def test_refusing_hosts_terminate_the_row(store: Store) -> None:
    org = await store.create_organization("acme")
    registry = RecordingRegistry()
    registry.refusing.add("h1")
    service = InstanceService(store, registry)
    async with trio.open_nursery() as nursery:
        await nursery.start(service.run)
        created = await service.create(org, _new(), reuse=False)
        assert created.state is InstanceState.CREATING
        row = await _until_ended(store, created.id)
        nursery.cancel_scope.cancel()
    assert row.termination_reason is TerminationReason.ERROR
    assert row.error_message == "no host accepted the instance"


async def _until_ended(store: Store, instance_id: str) -> Instance:
    with trio.fail_after(10):
        while (row := await store.get_instance(instance_id)).live:  # noqa: ASYNC110
            await trio.sleep(0.01)
    return row


async def _until_assigned(store: Store, instance_id: str) -> Instance:
    with trio.fail_after(10):
        while (row := await store.get_instance(instance_id)).state is InstanceState.CREATING:  # noqa: ASYNC110
            await trio.sleep(0.01)
    return row


class SilentRegistry(RecordingRegistry):
    """A host that takes the link but never takes an order."""

    async def start_instance(self, host_id: str, order: InstanceOrder) -> None:
        self.started.append((host_id, order))
        self.got_order.set()
        await trio.sleep_forever()


async def test_create_answers_at_once_while_the_host_is_silent(store: Store) -> None:
    org = await store.create_organization("acme")
    registry = SilentRegistry()
    service = InstanceService(store, registry)
    async with trio.open_nursery() as nursery:
        await nursery.start(service.run)
        with trio.fail_after(5):
            created = await service.create(org, _new(), reuse=False)
            await registry.got_order.wait()  # the order is on its way, and stays there
        assert created.state is InstanceState.CREATING and created.host_id is None
        assert (await store.get_instance(created.id)).state is InstanceState.CREATING
        gone = await service.delete(org.id, created.id)  # a delete does not wait for it
        assert gone.termination_reason is TerminationReason.USER_REQUESTED
        nursery.cancel_scope.cancel()


async def test_lifecycle_reuse_and_delete(store: Store) -> None:
    org = await store.create_organization("acme")
    registry = RecordingRegistry()
    service = InstanceService(store, registry)
    async with trio.open_nursery() as nursery:
        await nursery.start(service.run)
        await _lifecycle_reuse_and_delete(store, org, registry, service)
        nursery.cancel_scope.cancel()


async def _lifecycle_reuse_and_delete(
    store: Store, org: Organization, registry: RecordingRegistry, service: InstanceService
) -> None:
    created = await service.create(org, _new(hardTimeout="90s"), reuse=False)
    assert created.state is InstanceState.CREATING
    assigned = await _until_assigned(store, created.id)
    assert assigned.host_id == "h1"
    assert created.spec["hardTimeout"] == "1m30s"
    assert created.spec["inactivityTimeout"] == "10m"  # the organization's default
    ((host_id, order),) = registry.started
    assert (host_id, order.instance_id, order.platform) == ("h1", created.id, "android")
    again = await service.create(org, _new(), reuse=True)
    assert again.id == created.id
    async with trio.open_nursery() as nursery:
        nursery.start_soon(service.wait_ready, created.id)
        await service.on_instance_event("h1", InstanceEvent(created.id, InstancePhase.READY))
    assert (await store.get_instance(created.id)).state is InstanceState.READY
    gone = await service.delete(org.id, created.id)
    assert gone.termination_reason is TerminationReason.USER_REQUESTED
    assert registry.stopped == [("h1", created.id)]
    assert (await service.delete(org.id, created.id)).id == created.id  # idempotent
    fresh = await service.create(org, _new(), reuse=True)
    assert fresh.id != created.id


async def test_host_events_and_host_lost(store: Store) -> None:
    org = await store.create_organization("acme")
    registry = RecordingRegistry([make_host("h1", "local"), make_host("h2", "local", capacity=1)])
    service = InstanceService(store, registry)
    async with trio.open_nursery() as nursery:
        await nursery.start(service.run)
        a = await service.create(org, _new(), reuse=False)
        b = await service.create(org, _new(), reuse=False)
        a, b = await _until_assigned(store, a.id), await _until_assigned(store, b.id)
        nursery.cancel_scope.cancel()
    await service.on_instance_event(
        a.host_id or "", InstanceEvent(a.id, InstancePhase.TERMINATED, "emulator crashed")
    )
    ended = await store.get_instance(a.id)
    assert ended.termination_reason is TerminationReason.ERROR
    assert ended.error_message == "emulator crashed"
    await service.on_host_lost(b.host_id or "")
    lost = await store.get_instance(b.id)
    assert lost.state is InstanceState.TERMINATED
    assert lost.termination_reason is TerminationReason.HOST_LOST


async def test_bad_duration_names_field(store: Store) -> None:
    org = await store.create_organization("acme")
    service = InstanceService(store, RecordingRegistry())
    with pytest.raises(InvalidDuration, match=r"spec\.hardTimeout"):
        await service.create(org, _new(hardTimeout="soon"), reuse=False)


async def _until(done: Callable[[], bool]) -> None:
    """Spin on checkpoints until ``done()``: the store works in threads, which a mock clock
    knows nothing of, so the test moves time itself and waits for effects like this."""
    for _ in range(200_000):
        if done():
            return
        await trio.lowlevel.checkpoint()
    raise AssertionError("never happened")


async def test_timeouts(store: Store, mock_clock: trio.testing.MockClock) -> None:
    org = await store.create_organization("acme")
    registry = RecordingRegistry()
    service = InstanceService(store, registry)
    async with trio.open_nursery() as nursery:
        await nursery.start(service.run)
        hard = await service.create(org, _new(hardTimeout="2m", inactivityTimeout="0"), reuse=False)
        idle = await service.create(org, _new(inactivityTimeout="30s"), reuse=False)
        for instance in (idle, hard):
            await service.on_instance_event("h1", InstanceEvent(instance.id, InstancePhase.READY))
        for _ in range(5):  # activity keeps it alive well past its 30 s
            mock_clock.jump(20)
            service.touch(idle.id)
            await trio.testing.wait_all_tasks_blocked()
        assert registry.stopped == []
        mock_clock.jump(20)  # 120 s: the hard timeout
        service.touch(idle.id)
        await _until(lambda: hard.id in registry.stopped_at)
        mock_clock.jump(29)
        await trio.testing.wait_all_tasks_blocked()
        assert idle.id not in registry.stopped_at
        mock_clock.jump(2)
        await _until(lambda: idle.id in registry.stopped_at)
        nursery.cancel_scope.cancel()
    ended = await store.get_instance(idle.id)
    assert ended.termination_reason is TerminationReason.INACTIVITY_TIMEOUT
    ended = await store.get_instance(hard.id)
    assert ended.termination_reason is TerminationReason.HARD_TIMEOUT
