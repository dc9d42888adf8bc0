"""Several replicas on one PostgreSQL: reservations, host leases, the registry, events and
orders between replicas (docs/scale-out.md)."""

from __future__ import annotations

import contextlib
import random
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import attrs
import psycopg
import pytest
import trio

from devyard.server.cluster.bus import Topic
from devyard.server.cluster.hosts import HOLD_S
from devyard.server.cluster.registry import Holder, HolderLookup, Holders
from devyard.server.hosts import HostUnavailableError, InstanceOrder
from devyard.server.metrics import REGISTRY
from devyard.server.store.base import Tunnel
from devyard.server.store.cluster import HOLD_PREFIX
from devyard.server.store.errors import NotFound
from devyard.server.tunnels import EndReason
from tests.polling import eventually, until
from tests.server.cluster.conftest import (
    Replica,
    host_info,
    link_connector,
    link_host,
    open_replica,
    tunnel,
)

pytestmark = pytest.mark.postgres


def _order(instance_id: str) -> InstanceOrder:
    return InstanceOrder(
        instance_id=instance_id,
        organization_id="org_1",
        platform="android",
        model=None,
        os_version=None,
        spec={"labels": {"a": "b"}},
        initial_assets=({"kind": "app", "name": "x.apk", "url": "https://a.test/x"},),
    )


async def _used(replica: Replica, host_id: str) -> int:
    await replica.hosts.refresh()
    (info,) = [h for h in replica.hosts.hosts() if h.id == host_id]
    return info.running


async def test_concurrent_reservations_on_three_replicas_never_exceed_capacity(
    cluster_url: str,
) -> None:
    capacities = {"host_a": 3, "host_b": 5, "host_c": 7, "host_d": 10}
    async with (
        open_replica(cluster_url, "r0") as r0,
        open_replica(cluster_url, "r1") as r1,
        open_replica(cluster_url, "r2") as r2,
    ):
        replicas = [r0, r1, r2]
        for i, (host_id, capacity) in enumerate(sorted(capacities.items())):
            await replicas[i % 3].hosts.host_linked(host_info(host_id, capacity))
        rng = random.Random(23)
        won: dict[str, str | None] = {}

        async def create(i: int) -> None:
            candidates = sorted(capacities)
            rng.shuffle(candidates)
            won[f"i{i}"] = await replicas[i % 3].hosts.reserve(f"i{i}", candidates)

        async with trio.open_nursery() as nursery:
            for i in range(200):
                nursery.start_soon(create, i)
        per_host = Counter(h for h in won.values() if h is not None)
        assert per_host == capacities, "every slot is booked once, none twice"
        assert sum(1 for h in won.values() if h is None) == 200 - sum(capacities.values())
        for host_id, capacity in capacities.items():
            assert await _used(r1, host_id) == capacity
            assert await r1.cluster.reservations(host_id) == capacity

        # a release gives exactly one slot back, once (idempotent)
        key = next(k for k, h in sorted(won.items()) if h == "host_b")
        await r2.hosts.release(key)
        await r0.hosts.release(key)
        assert await _used(r0, "host_b") == 4
        assert await r0.hosts.reserve("again", ["host_a", "host_b"]) == "host_b"
        assert await r1.hosts.reserve("too-many", sorted(capacities)) is None


async def test_an_unrenewed_host_lease_is_reaped_by_exactly_one_replica(
    cluster_url: str,
) -> None:
    async with (
        open_replica(cluster_url, "r0", grace=0.5) as r0,
        open_replica(cluster_url, "r1", grace=0.5) as r1,
        open_replica(cluster_url, "r2", grace=0.5) as r2,
    ):
        replicas = [r0, r1, r2]
        await r0.hosts.host_linked(host_info("host_x", 2))
        assert await r0.hosts.reserve("inst_1", ["host_x"]) == "host_x"
        assert await r2.hosts.reap() == [], "a live lease is not reaped"
        await r0.hosts.host_unlinked("host_x")  # the link drops: nobody renews it now
        assert await Holders(r1.cluster).holder("host", "host_x") is None
        await until(lambda: _expired(r1, "host_x"))

        results: dict[str, list[str]] = {}

        async def reap(replica: Replica) -> None:
            results[replica.replica_id] = await replica.hosts.reap()

        for _ in range(3):  # three rounds of concurrent reapers: one winner in all
            async with trio.open_nursery() as nursery:
                for replica in replicas:
                    nursery.start_soon(reap, replica)
        expiries = _sample_labels("devyard_cluster_lease_expiries_total", kind="host")
        winners = [r for r in replicas if r.lost]
        assert len(winners) == 1 and winners[0].lost == ["host_x"], "HostLost once"
        await eventually(lambda: sum(len(r.lost) for r in replicas) == 1)
        assert await r1.cluster.reservations("host_x") == 0, "its reservations went with it"
        assert expiries >= 1


async def _expired(replica: Replica, host_id: str) -> bool:
    def read(tx: object) -> bool:
        row = tx.fetchone(  # type: ignore[attr-defined]
            "SELECT expires_at < now() AS gone FROM host_leases WHERE host_id = :h", {"h": host_id}
        )
        return bool(row and row["gone"])

    return await replica.cluster._db.read(read)


async def test_a_host_relinking_on_another_replica_before_expiry_loses_nothing(
    cluster_url: str, tmp_path: Path
) -> None:
    async with (
        open_replica(cluster_url, "r0", grace=0.5) as r0,
        open_replica(cluster_url, "r1", grace=30) as r1,
    ):
        async with link_host(r0.edge, "host_m", capacity=3):
            await until(lambda: _holder_is(r1, "host_m", "r0"))
            assert await r1.hosts.reserve("inst_1", ["host_m"]) == "host_m"
            assert await r0.hosts.reserve("inst_2", ["host_m"]) == "host_m"
            (lease,) = await r1.cluster.host_leases()
        # the link to r0 dropped; the host dials r1 before its lease runs out
        async with link_host(r1.edge, "host_m", capacity=3):
            await until(lambda: _holder_is(r0, "host_m", "r1"))
            # past the expiry r0's lease had: nothing to reap, nothing lost
            await until(lambda: _db_time_passed(r0, lease.expires_at))
            assert await r0.hosts.reap() == [] and await r1.hosts.reap() == []
            assert r0.lost == [] and r1.lost == []
            assert await _used(r0, "host_m") == 2, "the reservations survived the move"
            holder = await Holders(r0.cluster).holder("host", "host_m")
            assert holder == Holder("r1", "https://r1.peers.test")


async def _db_time_passed(replica: Replica, when: datetime) -> bool:
    def read(tx: object) -> bool:
        row = tx.fetchone("SELECT now() > :when AS past", {"when": when})  # type: ignore[attr-defined]
        return bool(row and row["past"])

    return await replica.cluster._db.read(read)


async def _holder_is(replica: Replica, host_id: str, replica_id: str) -> bool:
    lookup: HolderLookup = Holders(replica.cluster)
    holder = await lookup.holder("host", host_id)
    return holder is not None and holder.replica_id == replica_id


async def test_events_reach_the_other_replicas(cluster_url: str) -> None:
    async with (
        open_replica(cluster_url, "r0") as r0,
        open_replica(cluster_url, "r1") as r1,
        open_replica(cluster_url, "r2") as r2,
    ):
        await r0.hosts.instance_changed("inst_9", "ready")
        await eventually(lambda: r1.changes == [("inst_9", "ready")] == r2.changes)
        assert r0.changes == [], "a replica does not handle its own change again"
        # a host attached on r2 shows in r0's and r1's host lists (the NOTIFY refreshes them)
        await r2.hosts.host_linked(host_info("host_n", 6))
        await eventually(lambda: [h.id for h in r0.hosts.hosts()] == ["host_n"])
        await eventually(lambda: [h.id for h in r1.hosts.hosts()] == ["host_n"])
        async with r1.bus.subscribe([Topic.TUNNEL]) as subscription:
            await r0.bus.publish(Topic.TUNNEL, org_id="org_1", name="t", change="rotated")
            with trio.fail_after(10):
                event = await subscription.receive.receive()
            assert (event.sender, event.fields["change"]) == ("r0", "rotated")


async def test_stops_for_a_host_held_elsewhere_arrive_at_its_holder(cluster_url: str) -> None:
    # starts go through their stored row (tests/server/cluster/test_orders.py)
    async with (
        open_replica(cluster_url, "r0") as r0,
        open_replica(cluster_url, "r1") as r1,
        link_host(r1.edge, "host_h", capacity=2) as host,
    ):
        await until(lambda: _holder_is(r0, "host_h", "r1"))
        await r0.hosts.stop_instance("host_h", "android_1")
        await eventually(lambda: len(host.received) == 1)
        assert host.received == [{"type": "instance_stop", "instance_id": "android_1"}]
        # a stop whose wake-up is lost (sent to a replica nobody runs): r1 finds its row
        await r0.hosts.orders.stop("r-nobody", "host_h", "android_3")
        await eventually(lambda: len(host.received) == 2)
        assert host.received[1] == {"type": "instance_stop", "instance_id": "android_3"}
        with pytest.raises(HostUnavailableError):
            await r0.hosts.start_instance("host_nowhere", _order("android_2"))
        # a stop for a host linked nowhere waits for it, and goes once when it links
        await r0.hosts.stop_instance("host_later", "android_4")
        async with link_host(r1.edge, "host_later") as later:
            await eventually(lambda: len(later.received) == 1)
            assert later.received == [{"type": "instance_stop", "instance_id": "android_4"}]
        assert len(host.received) == 2


async def test_an_expired_replica_loses_what_it_held(cluster_url: str) -> None:
    async with (
        open_replica(cluster_url, "r0") as r0,
        open_replica(cluster_url, "r9") as r9,
        link_host(r9.edge, "host_z", capacity=1),
    ):
        await until(lambda: _holder_is(r0, "host_z", "r9"))
        await r9.cluster.register_replica("r9", "https://r9.peers.test", 0.01)  # stops beating
        await until(lambda: _holder_is_none(r0, "host_z"), seconds=5)
        await r0.hosts.heartbeat()  # r0's reaper deletes r9's row and releases its links
        assert [r.replica_id for r in await r0.cluster.replicas()] == ["r0"]
        assert r0.lost == [], "its host keeps the rest of its grace"
        await r9.hosts.heartbeat()  # r9 is back: it registers again and takes its host back
        assert [r.replica_id for r in await r0.cluster.replicas()] == ["r0", "r9"]
        assert await _holder_is(r0, "host_z", "r9")


async def _holder_is_none(replica: Replica, host_id: str) -> bool:
    return await Holders(replica.cluster).holder("host", host_id) is None


async def test_a_tunnel_held_on_one_replica_is_online_and_changed_from_another(
    cluster_url: str,
) -> None:
    corp = tunnel("corp")
    async with (
        open_replica(cluster_url, "r0") as r0,
        open_replica(cluster_url, "r1") as r1,
    ):
        assert r0.tunnels is not None and r1.tunnels is not None and r1.hub is not None
        assert not r0.tunnels.status("org_1", "corp").online
        async with link_connector(r1.hub, corp) as connector:
            await until(lambda: _connector_holder_is(r0, corp.id, "r1"))
            tunnels = r0.tunnels
            await eventually(lambda: tunnels.status("org_1", "corp").online)
            active = tunnels.status("org_1", "corp").active
            assert active is not None and active.id == "conn_1"
            # a selector edit made through r0 reaches the connector linked to r1
            edited = attrs.evolve(corp, selectors=("*.corp.test:8443",), selector_version=2)
            await tunnels.on_tunnel_changed(edited)
            await eventually(lambda: any(m["type"] == "config" for m in connector.received))
            config = next(m for m in connector.received if m["type"] == "config")
            assert "*.corp.test:8443" in str(config["selectors"])
            # a rotation through r0 ends it there too
            await tunnels.on_tunnel_ended(corp, EndReason.ROTATED)
            await eventually(lambda: any(m["type"] == "error" for m in connector.received))
            error = next(m for m in connector.received if m["type"] == "error")
            assert (error["code"], error["permanent"]) == ("token-rotated", True)
        await eventually(lambda: not tunnels.status("org_1", "corp").online)
        assert await Holders(r0.cluster).holder("connector", corp.id) is None


async def _connector_holder_is(replica: Replica, tunnel_id: str, replica_id: str) -> bool:
    holder = await Holders(replica.cluster).holder("connector", tunnel_id)
    return holder is not None and holder.replica_id == replica_id


async def test_the_bus_reconnects_after_its_connection_is_killed(cluster_url: str) -> None:
    async with (
        open_replica(cluster_url, "r0") as r0,
        open_replica(cluster_url, "r1") as r1,
        r1.bus.subscribe([Topic.TUNNEL]) as subscription,
    ):
        killed = r1.bus.backend_pid
        assert killed is not None
        await r0.cluster.notify([])  # the pool is up
        await r0.cluster._db.write(
            lambda tx: tx.fetchone("SELECT pg_terminate_backend(:pid) AS ok", {"pid": killed})
        )
        await eventually(lambda: r1.bus.backend_pid not in (None, killed))
        assert subscription.resync, "what was sent while away is lost: resynchronize"
        before = _sample("devyard_cluster_notify_reconnects_total")
        await r0.bus.publish(Topic.TUNNEL, change="after")
        with trio.fail_after(10):
            event = await subscription.receive.receive()
        assert event.fields["change"] == "after"
        assert before >= 1


async def test_tunnel_changes_lost_in_a_bus_reconnect_are_read_from_the_store(
    cluster_url: str,
) -> None:
    """Events sent while a replica's LISTEN connection was away are lost: the replica then
    rereads each tunnel that has a connector linked to it and does what the events said."""
    now = datetime.now(UTC)
    gone, rotated, revoked, edited, same = (
        tunnel(n) for n in ("gone", "rotated", "revoked", "edited", "same")
    )
    stored = {
        "rotated": attrs.evolve(rotated, token_lookup="lookup_new"),
        "revoked": attrs.evolve(revoked, token_expires_at=now - timedelta(seconds=1)),
        "edited": attrs.evolve(edited, selectors=("*.edited.test:22",), selector_version=2),
        "same": same,
    }

    async def read(org_id: str, name: str) -> Tunnel:
        await trio.lowlevel.checkpoint()
        if name not in stored:
            raise NotFound("tunnel", name)
        return stored[name]

    async with (
        open_replica(cluster_url, "r0") as r0,
        open_replica(cluster_url, "r1", read_tunnel=read) as r1,
        contextlib.AsyncExitStack() as stack,
    ):
        assert r1.hub is not None
        linked = {
            t.name: await stack.enter_async_context(link_connector(r1.hub, t))
            for t in (gone, rotated, revoked, edited, same)
        }
        killed = r1.bus.backend_pid
        assert killed is not None
        await r0.cluster._db.write(
            lambda tx: tx.fetchone("SELECT pg_terminate_backend(:pid) AS ok", {"pid": killed})
        )

        def first_error(name: str) -> str | None:
            errors = [m["code"] for m in linked[name].received if m["type"] == "error"]
            return errors[0] if errors else None

        await eventually(lambda: first_error("gone") == "tunnel-deleted", seconds=15)
        await eventually(lambda: first_error("rotated") == "token-rotated")
        await eventually(lambda: first_error("revoked") == "token-revoked")
        await eventually(lambda: any(m["type"] == "config" for m in linked["edited"].received))
        config = next(m for m in linked["edited"].received if m["type"] == "config")
        assert "*.edited.test:22" in str(config["selectors"])
        assert linked["same"].received == []  # nothing changed: nothing said


def _sample(name: str) -> float:
    return REGISTRY.get_sample_value(name) or 0.0


def _sample_labels(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


async def test_a_create_hold_left_by_a_dead_replica_is_freed_by_a_heartbeat(
    cluster_url: str,
) -> None:
    """A create holds its slot under a hold key until its instance is written; a replica
    killed in between leaves the hold (the kill -9 step of tests/e2e/test_replicas_cluster.py
    found one). A heartbeat frees the holds older than `HOLD_S`, and nothing else."""
    async with open_replica(cluster_url, "r0") as r0, open_replica(cluster_url, "r1") as r1:
        await r0.hosts.host_linked(host_info("host_h", 3))
        for key in (f"{HOLD_PREFIX}dead", f"{HOLD_PREFIX}young", "inst_old"):
            assert await r0.hosts.reserve(key, ["host_h"]) == "host_h"
        old = [f"{HOLD_PREFIX}dead", "inst_old"]  # an instance's slot lives as long as it does
        await trio.to_thread.run_sync(_backdate_reservations, cluster_url, old, HOLD_S + 1)
        await r1.hosts.heartbeat()
        assert await _used(r1, "host_h") == 2
        assert await r1.cluster.reserved_on(f"{HOLD_PREFIX}dead") is None
        assert await r1.cluster.reserved_on(f"{HOLD_PREFIX}young") == "host_h"
        assert await r1.cluster.reserved_on("inst_old") == "host_h"


def _backdate_reservations(url: str, keys: list[str], seconds: float) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "UPDATE capacity_reservations SET created_at = created_at - %s"
            " WHERE holder_key = ANY(%s)",
            (timedelta(seconds=seconds), keys),
        )
