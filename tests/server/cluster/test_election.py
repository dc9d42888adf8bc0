"""The active connector of a tunnel is elected across replicas (docs/scale-out.md): in-process
replicas on one PostgreSQL, each with its own pool, LISTEN connection, lock connection and
connector hub; connectors link to a hub over in-memory mux sessions and speak the connector
side of the control protocol."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import attrs
import pytest
import trio
import trio.testing

from devyard.core import ControlChannel, open_session
from devyard.core.link import PROTO
from devyard.server.cluster.election import ConnectorElection, lock_key
from devyard.server.cluster.registry import Holders
from devyard.server.cluster.tunnels import ClusterTunnels
from devyard.server.edge.connectors import ConnectorHub
from devyard.server.metrics import REGISTRY
from devyard.server.store.base import Tunnel
from devyard.server.store.sql_cluster import SqlCluster
from tests.polling import eventually, until
from tests.server.cluster.conftest import open_replica, serve_hub_side, tunnel

pytestmark = pytest.mark.postgres


@attrs.define
class Elected:
    replica_id: str
    cluster: SqlCluster
    hub: ConnectorHub
    tunnels: ClusterTunnels
    election: ConnectorElection
    stop: trio.CancelScope


@asynccontextmanager
async def open_elected(
    url: str, replica_id: str, *, poll_s: float = 0.25
) -> AsyncIterator[Elected]:
    """A replica whose hub's active connectors are elected (until the block ends or `stop`)."""
    async with open_replica(url, replica_id, election_poll_s=poll_s) as replica:
        tunnels, hub = replica.tunnels, replica.hub
        assert tunnels is not None and tunnels.election is not None and hub is not None
        yield Elected(
            replica_id, replica.cluster, hub, tunnels, tunnels.election, replica.stop_tunnels
        )


@attrs.define
class Conn:
    """The connector end of one link: its role and what the hub sent it."""

    name: str
    replace: bool = False
    role: str = ""
    received: list[dict[str, Any]] = attrs.field(factory=list)
    dials: int = 0
    unlink: trio.CancelScope = attrs.field(factory=trio.CancelScope)

    @property
    def active(self) -> bool:
        return self.role == "active" or any(m["type"] == "promote" for m in self.received)


async def _connector(
    hub: ConnectorHub, record: Tunnel, conn: Conn, *, task_status: trio.TaskStatus[None]
) -> None:
    """Link *conn* to *hub* until its ``unlink`` scope is cancelled; each stream the hub
    opens is answered ``ok`` (the dial of a real connector) and counted."""
    connector_side, hub_side = trio.testing.memory_stream_pair()
    with conn.unlink:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(serve_hub_side, hub, record, hub_side)
            async with open_session(connector_side, client=True) as session:
                control = ControlChannel(await session.open_stream())
                hello = {"type": "hello", "proto": PROTO, "id": conn.name, "replace": conn.replace}
                await control.send(hello)
                registered = await control.receive()
                conn.role = str(registered["role"])
                task_status.started()

                async def receive() -> None:
                    try:
                        while True:
                            conn.received.append(await control.receive())
                    except (trio.BrokenResourceError, trio.ClosedResourceError, trio.EndOfChannel):
                        pass

                async def accept() -> None:
                    async for stream in session:
                        conn.dials += 1
                        await ControlChannel(stream).send({"ok": True})

                nursery.start_soon(receive)
                nursery.start_soon(accept)
                await trio.sleep_forever()


def _actives(replicas: list[Elected], record: Tunnel) -> list[str]:
    """The replicas whose hub has an active connector for *record*."""
    return [r.replica_id for r in replicas if r.hub.status(record.org_id, record.name).online]


async def _holder(replica: Elected, tunnel_id: str) -> str | None:
    holder = await Holders(replica.cluster).holder("connector", tunnel_id)
    return None if holder is None else holder.replica_id


async def test_exactly_one_active_connector_across_replicas_under_concurrent_attach(
    cluster_url: str,
) -> None:
    corp = tunnel("corp")
    async with (
        open_elected(cluster_url, "r0") as r0,
        open_elected(cluster_url, "r1") as r1,
        open_elected(cluster_url, "r2") as r2,
        trio.open_nursery() as nursery,
    ):
        replicas = [r0, r1, r2]
        conns = [Conn(f"c{i}") for i in range(9)]
        with trio.fail_after(20):
            async with trio.open_nursery() as attach:  # all at once, three per replica
                for i, conn in enumerate(conns):
                    attach.start_soon(nursery.start, _connector, replicas[i % 3].hub, corp, conn)
        assert sum(c.role == "active" for c in conns) == 1, [c.role for c in conns]
        (winner,) = _actives(replicas, corp)
        await until(lambda: _holder_is(r0, corp.id, winner))
        # the losers' polls keep failing while the winner holds the lock: still one
        for replica in replicas:
            await _passes(replica)
        assert _actives(replicas, corp) == [winner]
        assert sum(c.active for c in conns) == 1
        nursery.cancel_scope.cancel()


def _locks(outcome: str) -> float:
    sample = REGISTRY.get_sample_value(
        "devyard_cluster_connector_locks_total", {"outcome": outcome}
    )
    return sample or 0.0


async def _holder_is(replica: Elected, tunnel_id: str, replica_id: str) -> bool:
    return await _holder(replica, tunnel_id) == replica_id


async def _passes(replica: Elected, count: int = 2) -> None:
    for _ in range(count):
        await replica.election.reconcile()


async def test_a_killed_lock_connection_demotes_at_once_and_a_standby_elsewhere_takes_over(
    cluster_url: str,
) -> None:
    corp = tunnel("corp")
    async with (
        open_elected(cluster_url, "r0") as r0,
        open_elected(cluster_url, "r1") as r1,
        trio.open_nursery() as nursery,
    ):
        first, second = Conn("first"), Conn("second")
        await nursery.start(_connector, r0.hub, corp, first)
        await nursery.start(_connector, r1.hub, corp, second)
        assert (first.role, second.role) == ("active", "standby")
        assert r1.hub.waiting_tunnels() == {corp.id}
        pid = r0.election.backend_pid
        assert pid is not None
        lost_before = _locks("lost")
        killed_at = trio.current_time()
        await r1.cluster._db.write(
            lambda tx: tx.fetchone("SELECT pg_terminate_backend(:pid) AS ok", {"pid": pid})
        )
        with trio.fail_after(10):
            await eventually(lambda: second.active)
        took = trio.current_time() - killed_at
        print(f"\nlock connection killed: a standby elsewhere active in {took * 1000:.0f} ms")
        assert not r0.hub.status(corp.org_id, corp.name).online, "demoted when the lock went"
        assert _locks("lost") == lost_before + 1
        assert _actives([r0, r1], corp) == ["r1"]
        await until(lambda: _holder_is(r0, corp.id, "r1"))
        assert await r1.hub.probe(corp.org_id, corp.name), "the promoted connector answers"
        # r0 reconnects its lock session and stays a standby while r1 holds the lock
        await eventually(lambda: r0.election.connected.is_set())  # noqa: PLW0108 - replaced
        await _passes(r0)
        assert r0.hub.waiting_tunnels() == {corp.id}
        assert _actives([r0, r1], corp) == ["r1"]
        nursery.cancel_scope.cancel()


async def test_a_clean_detach_hands_over_by_notify_not_by_the_poll(cluster_url: str) -> None:
    corp = tunnel("corp")
    async with (
        open_elected(cluster_url, "r0", poll_s=60) as r0,
        open_elected(cluster_url, "r1", poll_s=60) as r1,
        trio.open_nursery() as nursery,
    ):
        first, second = Conn("first"), Conn("second")
        await nursery.start(_connector, r0.hub, corp, first)
        await nursery.start(_connector, r1.hub, corp, second)
        assert (first.role, second.role) == ("active", "standby")
        left_at = trio.current_time()
        first.unlink.cancel()  # r0 has no standby: it releases the lock and says so
        with trio.fail_after(10):  # far below the 60 s poll: the release event woke r1
            await eventually(lambda: second.active)
        took = trio.current_time() - left_at
        print(f"\nclean detach: handed over by NOTIFY in {took * 1000:.0f} ms")
        assert _actives([r0, r1], corp) == ["r1"]
        assert r0.election.held == set() and r1.election.held == {corp.id}
        # a connector back on r0 is a standby there now
        again = Conn("again")
        await nursery.start(_connector, r0.hub, corp, again)
        assert again.role == "standby"
        nursery.cancel_scope.cancel()


async def test_a_local_standby_is_promoted_without_giving_the_lock_up(cluster_url: str) -> None:
    corp = tunnel("corp")
    async with (
        open_elected(cluster_url, "r0") as r0,
        open_elected(cluster_url, "r1") as r1,
        trio.open_nursery() as nursery,
    ):
        first, local, remote = Conn("first"), Conn("local"), Conn("remote")
        await nursery.start(_connector, r0.hub, corp, first)
        await nursery.start(_connector, r0.hub, corp, local)
        await nursery.start(_connector, r1.hub, corp, remote)
        assert [c.role for c in (first, local, remote)] == ["active", "standby", "standby"]
        first.unlink.cancel()
        await eventually(lambda: local.active)
        await _passes(r1)
        assert r0.election.held == {corp.id} and not remote.active
        assert _actives([r0, r1], corp) == ["r0"]
        nursery.cancel_scope.cancel()


async def test_a_stopped_replica_hands_over_and_keys_differ_per_deployment(
    cluster_url: str,
) -> None:
    corp = tunnel("corp")
    assert lock_key("devyard_cluster_a", corp.id) != lock_key("devyard_cluster_b", corp.id)
    async with (
        open_elected(cluster_url, "r0") as r0,
        open_elected(cluster_url, "r1") as r1,
        trio.open_nursery() as nursery,
    ):
        first, second = Conn("first"), Conn("second")
        await nursery.start(_connector, r0.hub, corp, first)
        await nursery.start(_connector, r1.hub, corp, second)
        r0.stop.cancel()  # the election ends with its session: the lock goes with it
        with trio.fail_after(10):
            await eventually(lambda: second.active)
        assert not r0.hub.status(corp.org_id, corp.name).online
        nursery.cancel_scope.cancel()


async def test_replace_on_another_replica_takes_the_lock_over(cluster_url: str) -> None:
    corp = tunnel("corp")
    async with (
        open_elected(cluster_url, "r0") as r0,
        open_elected(cluster_url, "r1") as r1,
        trio.open_nursery() as nursery,
    ):
        old, local, new = Conn("old"), Conn("local"), Conn("new", replace=True)
        await nursery.start(_connector, r0.hub, corp, old)
        await nursery.start(_connector, r0.hub, corp, local)
        await nursery.start(_connector, r1.hub, corp, new)
        assert [c.role for c in (old, local, new)] == ["active", "standby", "standby"]
        with trio.fail_after(10):
            await eventually(lambda: new.active)
        errors = [m for m in old.received if m["type"] == "error"]
        assert [(m["code"], m["permanent"]) for m in errors] == [("replaced", True)]
        assert not local.active, "the lock went to the replacer's replica, not a local standby"
        assert _actives([r0, r1], corp) == ["r1"]
        await until(lambda: _holder_is(r0, corp.id, "r1"))
        nursery.cancel_scope.cancel()
