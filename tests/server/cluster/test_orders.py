"""Orders of any size reach a host linked to another replica: one that does not fit in a
NOTIFY (spec and initial assets past 8 KB) names only its instance, and the holder reads the
order its create stored in the same transaction (docs/scale-out.md)."""

from __future__ import annotations

import json

import pytest
import trio

from devyard.server.cluster.bus import MAX_PAYLOAD
from devyard.server.cluster.orders import POLL_S, OrderDesk
from devyard.server.hosts import HostUnavailableError
from devyard.server.instances import NewInstance
from devyard.server.metrics import REGISTRY
from devyard.server.store import Store, open_store
from devyard.server.store.base import InstanceState, Platform
from devyard.server.store.order_delivery import Delivery, SqlOrderDelivery, Where
from devyard.server.store.postgres import open_postgres_database
from tests.polling import eventually, until
from tests.server.cluster.conftest import FakeHost, link_host, open_replica

pytestmark = pytest.mark.postgres


async def test_an_order_larger_than_a_notify_reaches_a_host_on_another_replica(
    cluster_url: str,
) -> None:
    assets = tuple(
        {"name": f"app-{n}.apk", "url": f"https://assets.test/{n}/" + "x" * 400, "md5": "0" * 32}
        for n in range(40)
    )
    async with (
        open_store(cluster_url) as store,
        open_replica(cluster_url, "ra", store=store) as ra,
        open_replica(cluster_url, "rc", store=store) as rc,
        link_host(ra.edge, "host_big", capacity=1) as host,
    ):
        assert rc.service is not None
        org = await store.create_organization("acme")
        await eventually(lambda: [h.id for h in rc.hosts.hosts()] == ["host_big"])
        new = NewInstance(
            platform=Platform.ANDROID,
            labels={"big": "yes"},
            display_name=None,
            spec={},
            initial_assets=assets,
        )
        created = await rc.service.create(org, new, reuse=False)  # rc holds no host
        await eventually(lambda: any(m["type"] == "instance_start" for m in host.received))
        start = next(m for m in host.received if m["type"] == "instance_start")
        assert len(json.dumps(start["order"])) > MAX_PAYLOAD  # it could not travel inline
        assert start["order"]["instance_id"] == created.id
        assert start["order"]["organization_id"] == org.id
        assert list(start["order"]["initial_assets"]) == [dict(a) for a in assets]

        async def assigned() -> bool:
            instance = await store.get_instance(created.id)
            return instance.state is InstanceState.ASSIGNED and instance.host_id == "host_big"

        await until(assigned)  # the holder answered the order: rc wrote where it went


def _orders(outcome: str) -> float:
    return REGISTRY.get_sample_value("devyard_cluster_orders_total", {"outcome": outcome}) or 0.0


async def _desk_waits(rows: SqlOrderDelivery, instance_id: str) -> bool:
    """The row is pending under a desk's own attempt (16 hex digits), not a test's."""
    row = (await rows.where([instance_id]))[instance_id]
    attempt = row.attempt or ""
    return row.delivery is Delivery.PENDING and len(attempt) == 16 and "-" not in attempt


def _starts(host: FakeHost) -> int:
    return sum(1 for m in host.received if m["type"] == "instance_start")


async def _assigned(store: Store, instance_id: str) -> bool:
    """Its create's delivery finished (only then may a test readdress its order's row)."""
    return (await store.get_instance(instance_id)).state is InstanceState.ASSIGNED


def _new(label: str) -> NewInstance:
    return NewInstance(platform=Platform.ANDROID, labels={"t": label}, display_name=None, spec={})


async def test_an_order_whose_event_is_lost_is_found_in_its_row(cluster_url: str) -> None:
    async with (
        open_store(cluster_url) as store,
        open_replica(cluster_url, "ra", store=store) as ra,
        open_replica(cluster_url, "rc", store=store) as rc,
        link_host(ra.edge, "host_lost", capacity=2) as host,
    ):
        assert rc.service is not None
        org = await store.create_organization("lost")
        await eventually(lambda: [h.id for h in rc.hosts.hosts()] == ["host_lost"])
        created = await rc.service.create(org, _new("lost"), reuse=False)
        await until(lambda: _assigned(store, created.id))
        order = await rc.service.stored_order(created.id)
        assert order is not None
        sent = _orders("sent")
        # the same order again (a host takes a repeated one as a no-op), its wake-up sent to
        # a replica nobody runs, as if the NOTIFY were dropped: ra finds the row by polling
        with trio.fail_after(3 * POLL_S + 5):
            await rc.hosts.orders.order("r-nobody", "host_lost", order)
        await eventually(lambda: _starts(host) == 2)
        assert _orders("sent") == sent + 1


async def test_a_withdrawn_order_is_never_sent_and_a_taken_one_is_never_withdrawn(
    cluster_url: str,
) -> None:
    async with (
        open_store(cluster_url) as store,
        open_postgres_database(cluster_url, max_connections=2) as db,
        open_replica(cluster_url, "ra", store=store) as ra,
        open_replica(cluster_url, "rc", store=store) as rc,
        link_host(ra.edge, "host_w", capacity=4) as host,
    ):
        assert rc.service is not None
        rows = SqlOrderDelivery(db)
        org = await store.create_organization("withdraw")
        await eventually(lambda: [h.id for h in rc.hosts.hosts()] == ["host_w"])
        created = await rc.service.create(org, _new("w"), reuse=False)
        await until(lambda: _assigned(store, created.id))
        iid = created.id
        # a creator that gives up first: the holder's claim loses, nothing is sent
        assert await rows.address(iid, "host_nowhere", "a1", "rc")
        assert await rows.withdraw(iid, "a1")
        assert await rows.claim(iid, "a1") is None
        withdrawn_row = Where("a1", "host_nowhere", Delivery.WITHDRAWN, None)
        assert await rows.where([iid]) == {iid: withdrawn_row}
        # a holder that takes it first: the withdrawal loses, the answer stands
        assert await rows.address(iid, "host_nowhere", "a2", "rc")
        body = await rows.claim(iid, "a2")
        assert body is not None and body["organization_id"] == org.id
        assert not await rows.withdraw(iid, "a2")
        assert await rows.claim(iid, "a2") is None  # taken once
        await rows.settle(iid, "a2", "the link broke")
        assert await rows.where([iid, "android_unknown"]) == {
            iid: Where("a2", "host_nowhere", Delivery.FAILED, "the link broke")
        }  # a1 was replaced by a2; an unknown instance has no row
        # end to end: an order for a host linked nowhere is withdrawn after the timeout
        desk = OrderDesk(rows, rc.bus, rc.edge, replica_id="rc", timeout=0.5, poll_s=0.2)
        order = await rc.service.stored_order(iid)
        assert order is not None
        withdrawn = _orders("withdrawn")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(desk.watch)
            with pytest.raises(HostUnavailableError, match="did not take the order within"):
                await desk.order("ra", "host_nowhere", order)
            nursery.cancel_scope.cancel()
        assert await rows.work(["host_nowhere"], 10) == ([], [])  # withdrawn: nobody sends it
        assert _orders("withdrawn") == withdrawn + 1
        # another attempt while one waits (an adopter's, a registration's asking again): for
        # the same host it carries the order on; for another host the waiting one failed
        patient = OrderDesk(rows, rc.bus, rc.edge, replica_id="rc", timeout=30, poll_s=0.2)
        for other_host, outcome in (("host_nowhere", None), ("host_else", "readdressed")):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(patient.watch)

                async def readdress(to: str = other_host) -> None:
                    await until(lambda: _desk_waits(rows, iid))
                    assert await rows.address(iid, to, f"other-{to}", "rx")

                nursery.start_soon(readdress)
                with trio.fail_after(10):
                    if outcome is None:
                        await patient.order("ra", "host_nowhere", order)
                    else:
                        with pytest.raises(HostUnavailableError, match=outcome):
                            await patient.order("ra", "host_nowhere", order)
                nursery.cancel_scope.cancel()
        assert _starts(host) == 1  # nothing reached the host linked to ra
