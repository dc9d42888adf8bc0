"""Nothing an instance needs lives only in one replica's memory (docs/scale-out.md): three
in-process replicas on one PostgreSQL, each with a real `InstanceService`, and a host linked
to one of them. An instance created on a replica that stops ends on time through the others
(exactly once); a create whose replica died before its order went out is adopted; ``wait``
on one replica follows an instance created on another."""

from __future__ import annotations

from contextlib import AsyncExitStack
from datetime import timedelta

import psycopg
import pytest
import trio

from devyard.server.instances import NewInstance
from devyard.server.instances.service import ORDER_LOST_WITH_REPLICA
from devyard.server.instances.sweeper import UNFINISHED_S
from devyard.server.store import open_store
from devyard.server.store.base import (
    Instance,
    InstanceState,
    Platform,
    Store,
    TerminationReason,
)
from devyard.server.store.instance_runs import Owner, SqlInstanceRuns
from tests.polling import eventually, until
from tests.server.cluster.conftest import FakeHost, link_host, open_replica

pytestmark = pytest.mark.postgres

SWEEP_S = 0.2  # the sweepers' longest wait: orphans are found within it


def _new(**spec: object) -> NewInstance:
    return NewInstance(platform=Platform.ANDROID, labels={}, display_name=None, spec=dict(spec))


def _starts(host: FakeHost, instance_id: str) -> int:
    return sum(
        1
        for m in host.received
        if m["type"] == "instance_start" and m["order"]["instance_id"] == instance_id
    )


def _stops(host: FakeHost, instance_id: str) -> int:
    return sum(
        1 for m in host.received if m["type"] == "instance_stop" and m["instance_id"] == instance_id
    )


async def _ended(store: Store, instance_id: str) -> bool:
    return (await store.get_instance(instance_id)).state is InstanceState.TERMINATED


async def test_timeouts_of_a_stopped_replica_end_on_time_through_the_others_once(
    cluster_url: str,
) -> None:
    async with (
        open_store(cluster_url) as store,
        open_replica(cluster_url, "rb", store=store, sweep_s=SWEEP_S) as rb,
        open_replica(cluster_url, "rc", store=store, sweep_s=SWEEP_S),
        link_host(rb.edge, "host_t", capacity=4) as host,
    ):
        org = await store.create_organization("acme")
        async with open_replica(cluster_url, "ra", store=store, sweep_s=SWEEP_S) as ra:
            assert ra.service is not None
            await eventually(lambda: [h.id for h in ra.hosts.hosts()] == ["host_t"])
            hard = await ra.service.create(
                org, _new(hardTimeout="3s", inactivityTimeout="1h"), reuse=False
            )
            idle = await ra.service.create(org, _new(inactivityTimeout="3s"), reuse=False)
            for instance in (hard, idle):
                await eventually(lambda i=instance.id: _starts(host, i) == 1)  # type: ignore[misc]
                await host.control.send(
                    {"type": "instance_event", "instance_id": instance.id, "phase": "ready"}
                )
                with trio.fail_after(10):
                    await ra.service.wait_ready(instance.id)
        # ra is gone (it left the cluster): nothing of its memory is needed any more
        await until(lambda: _ended(store, hard.id), seconds=15)
        await until(lambda: _ended(store, idle.id), seconds=15)
        ended_hard = await store.get_instance(hard.id)
        ended_idle = await store.get_instance(idle.id)
        assert ended_hard.termination_reason is TerminationReason.HARD_TIMEOUT
        assert ended_idle.termination_reason is TerminationReason.INACTIVITY_TIMEOUT
        assert ended_hard.terminated_at is not None and ended_idle.terminated_at is not None
        # on time: not before its deadline, and within a sweep and a little after it
        lived = ended_hard.terminated_at - ended_hard.created_at
        assert timedelta(seconds=3) <= lived < timedelta(seconds=6), lived
        assert ended_idle.ready_at is not None
        idled = ended_idle.terminated_at - ended_idle.ready_at
        assert timedelta(seconds=3) <= idled < timedelta(seconds=6), idled
        # exactly one replica acted: one stop order each
        await eventually(lambda: _stops(host, hard.id) == 1 and _stops(host, idle.id) == 1)
        assert await rb.cluster.reservations("host_t") == 0


async def test_a_create_whose_replica_died_is_adopted(cluster_url: str) -> None:
    """What a replica that died mid-create leaves: the row in creating with its timers and
    order, and a slot reserved on a host (the order not sent). Another replica hands the
    stored order on, and the host's ready completes it; one without a slot fails clearly."""
    async with (
        open_store(cluster_url) as store,
        open_replica(cluster_url, "rb", store=store, sweep_s=3600) as rb,
        link_host(rb.edge, "host_o", capacity=4) as host,
    ):
        assert isinstance(store, SqlInstanceRuns) and rb.service is not None
        org = await store.create_organization("acme")
        await eventually(lambda: [h.id for h in rb.hosts.hosts()] == ["host_o"])
        order: dict[str, object] = {
            "organization_id": org.id,
            "platform": "android",
            "model": None,
            "os_version": None,
            "spec": {"hardTimeout": "0", "inactivityTimeout": "10m"},
            "initial_assets": [],
            "tunnel": None,
        }
        orphans: list[Instance] = []
        for _ in range(2):
            orphans.append(
                await store.create_instance(
                    org_id=org.id,
                    platform=Platform.ANDROID,
                    region="local",
                    labels={},
                    spec={"hardTimeout": "0", "inactivityTimeout": "10m"},
                    display_name=None,
                    token=f"dyi_orphan{len(orphans)}",
                    stream_token=f"dys_orphan{len(orphans)}",
                    with_rows=store.rows_for_create(
                        owner=Owner("replica-dead", "run-1"),
                        inactivity_s=600,
                        hard_at=None,
                        order=order,
                    ),
                )
            )
        adopted, failed = orphans
        assert await rb.hosts.reserve(adopted.id, ["host_o"]) == "host_o"

        async with open_replica(cluster_url, "rc", store=store, sweep_s=SWEEP_S):
            await eventually(lambda: _starts(host, adopted.id) == 1)
            await host.control.send(
                {"type": "instance_event", "instance_id": adopted.id, "phase": "ready"}
            )
            await until(lambda: _ended(store, failed.id))
            with trio.fail_after(10):
                await rb.service.wait_ready(adopted.id)
        done = await store.get_instance(adopted.id)
        assert done.state is InstanceState.READY and done.host_id == "host_o"
        gone = await store.get_instance(failed.id)
        assert gone.termination_reason is TerminationReason.ERROR
        assert gone.error_message == ORDER_LOST_WITH_REPLICA
        assert _starts(host, failed.id) == 0


async def test_wait_on_one_replica_follows_a_create_on_another(cluster_url: str) -> None:
    async with AsyncExitStack() as stack:
        store = await stack.enter_async_context(open_store(cluster_url))
        ra = await stack.enter_async_context(open_replica(cluster_url, "ra", store=store))
        rb = await stack.enter_async_context(open_replica(cluster_url, "rb", store=store))
        host = await stack.enter_async_context(link_host(ra.edge, "host_w", capacity=2))
        assert ra.service is not None and rb.service is not None
        org = await store.create_organization("acme")
        await eventually(lambda: [h.id for h in ra.hosts.hosts()] == ["host_w"])
        created = await ra.service.create(org, _new(), reuse=False)
        await eventually(lambda: _starts(host, created.id) == 1)
        waited = trio.Event()

        async def wait_on_b() -> None:
            assert rb.service is not None
            await rb.service.wait_ready(created.id)
            waited.set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(wait_on_b)
            await trio.testing.wait_all_tasks_blocked()
            assert not waited.is_set(), "the instance is not ready yet"
            await host.control.send(
                {"type": "instance_event", "instance_id": created.id, "phase": "ready"}
            )
            with trio.fail_after(10):
                await waited.wait()
        assert (await store.get_instance(created.id)).state is InstanceState.READY


async def test_an_end_whose_replica_died_half_way_is_finished_by_a_sweep(cluster_url: str) -> None:
    """What a replica that died in the middle of an end (a delete) leaves: the row ended, but
    its timers and order, its slot on the host and the device itself (no stop went out). A
    sweep finishes the end once it is older than `UNFINISHED_S`: the stop, the slot, the
    rows (the kill -9 step of tests/e2e/test_replicas_cluster.py found such a device still
    running for an instance ended long before)."""
    async with (
        open_store(cluster_url) as store,
        open_replica(cluster_url, "rb", store=store, sweep_s=SWEEP_S) as rb,
        link_host(rb.edge, "host_e", capacity=4) as host,
    ):
        assert isinstance(store, SqlInstanceRuns) and rb.service is not None
        org = await store.create_organization("acme")
        await eventually(lambda: [h.id for h in rb.hosts.hosts()] == ["host_e"])
        created = await rb.service.create(org, _new(), reuse=False)
        await eventually(lambda: _starts(host, created.id) == 1)
        await host.control.send(
            {"type": "instance_event", "instance_id": created.id, "phase": "ready"}
        )
        with trio.fail_after(10):
            await rb.service.wait_ready(created.id)
        # the end's first step, as the replica that died made it, a while ago
        await store.transition_instance(
            created.id,
            InstanceState.TERMINATED,
            expected=frozenset({InstanceState.READY}),
            termination_reason=TerminationReason.USER_REQUESTED,
        )
        past = timedelta(seconds=UNFINISHED_S + 1)
        await trio.to_thread.run_sync(_backdate_end, cluster_url, created.id, past)
        await eventually(lambda: _stops(host, created.id) == 1)

        async def finished() -> bool:
            return await store.stored_order(created.id) is None

        await until(finished)
        assert await rb.cluster.reservations("host_e") == 0
        ended = await store.get_instance(created.id)
        assert ended.termination_reason is TerminationReason.USER_REQUESTED


def _backdate_end(url: str, instance_id: str, by: timedelta) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "UPDATE instances SET terminated_at = terminated_at - %s WHERE id = %s",
            (by, instance_id),
        )
