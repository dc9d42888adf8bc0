"""In-process replicas of one cluster on a real PostgreSQL: each has its own pool, its own
LISTEN connection, a real `Edge` and a `ClusterHosts`; hosts link to an edge over an
in-memory mux session (`link_host`), speaking the host side of the link protocol."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, cast

import attrs
import pytest
import trio
import trio.testing

from devyard import __version__
from devyard.core import ControlChannel, open_session
from devyard.core.link import PROTO
from devyard.server.cluster.bus import Bus, channel_name, open_bus
from devyard.server.cluster.hosts import ClusterHosts
from devyard.server.cluster.serve import wire_service
from devyard.server.cluster.settings import ClusterConfig
from devyard.server.cluster.tunnels import ClusterTunnels
from devyard.server.config import ListenAddress, ServerConfig
from devyard.server.edge import Edge
from devyard.server.edge.connectors import ConnectorHub, open_connector_hub
from devyard.server.edge.tokens import HostTokens
from devyard.server.hosts import EVENT_BUFFER, HostEvent, HostInfo, HostLost
from devyard.server.instances import InstanceService
from devyard.server.store import Store
from devyard.server.store.base import Tunnel
from devyard.server.store.errors import NotFound
from devyard.server.store.migrate import migrate
from devyard.server.store.order_delivery import SqlOrderDelivery
from devyard.server.store.postgres import open_postgres_database
from devyard.server.store.rows import utc_now
from devyard.server.store.sql_cluster import SqlCluster
from tests.polling import eventually

#: heartbeats and refreshes are driven by the tests (`heartbeat`, `reap`, `refresh`)
MANUAL: ClusterConfig = ClusterConfig(
    enabled=True, heartbeat_s=3600, replica_ttl_s=60, refresh_s=3600, order_timeout_s=10
)


@attrs.define
class Replica:
    replica_id: str
    cluster: SqlCluster
    bus: Bus
    edge: Edge
    hosts: ClusterHosts
    lost: list[str]
    changes: list[tuple[str, str]]
    changed: trio.Event = attrs.field(factory=trio.Event)
    service: InstanceService | None = None
    hub: ConnectorHub | None = None
    tunnels: ClusterTunnels | None = None
    stop_tunnels: trio.CancelScope = attrs.field(factory=trio.CancelScope)  # ends tunnels.run


@pytest.fixture
async def cluster_url(postgres_url: str) -> str:
    async with open_postgres_database(postgres_url, max_connections=1) as db:
        await migrate(db, clock=utc_now)
    return postgres_url


@asynccontextmanager
async def open_replica(
    url: str,
    replica_id: str,
    *,
    grace: float = 30.0,
    config: ClusterConfig = MANUAL,
    tmp_path: Path | None = None,
    store: Store | None = None,
    sweep_s: float = 5.0,
    read_tunnel: Callable[[str, str], Awaitable[Tunnel]] | None = None,
    election_poll_s: float | None = None,
) -> AsyncIterator[Replica]:
    """With *store*, a real `InstanceService` consumes the replica's host events (its
    sweeper passes at least every *sweep_s*); *read_tunnel*: how its `ClusterTunnels` reads a
    tunnel from the store (default: every tunnel is unknown); with *election_poll_s*, its
    hub's active connectors are elected across replicas (polling that often)."""
    async with (
        open_postgres_database(url, max_connections=4) as db,
        open_connector_hub(cast(Any, None)) as hub,
        trio.open_nursery() as nursery,
    ):
        cluster = SqlCluster(db)
        channel = channel_name(await cluster.current_schema())
        async with open_bus(url, channel, replica_id, cluster) as bus:
            send, receive = trio.open_memory_channel[HostEvent](EVENT_BUFFER)
            tokens = HostTokens((tmp_path or Path("/nonexistent")) / "host_tokens")
            edge = Edge(tokens, send, cast(Any, None), cast(Any, None), nursery, grace=grace)
            hosts = ClusterHosts(
                cluster,
                bus,
                edge,
                send,
                replica_id=replica_id,
                peer_url=f"https://{replica_id}.peers.test",
                config=config,
                grace=grace,
                orders=SqlOrderDelivery(db),
            )
            edge.leases = hosts
            hosts.hub = hub
            hub.on_active_changed = hosts.connectors_changed
            replica = Replica(replica_id, cluster, bus, edge, hosts, [], [], hub=hub)
            elect = election_poll_s is not None
            tunnels = ClusterTunnels(
                hub, hosts, bus, read_tunnel or _no_tunnels, url=url if elect else None
            )
            if tunnels.election is not None and election_poll_s is not None:
                tunnels.election.poll_s = election_poll_s
            replica.tunnels = tunnels
            await nursery.start(_run_until, tunnels, replica.stop_tunnels)
            if elect:
                await eventually(lambda: hub.election is not None)

            async def record(instance_id: str, state: str) -> None:
                await trio.lowlevel.checkpoint()
                replica.changes.append((instance_id, state))
                replica.changed.set()

            hosts.on_instance_changed = record

            async def consume() -> None:
                async for event in receive:
                    if isinstance(event, HostLost):
                        replica.lost.append(event.host_id)

            if store is None:
                nursery.start_soon(consume)
            else:
                replica.service = InstanceService(store, hosts, events=receive, sweep_s=sweep_s)
                wire_service(hosts, replica.service)
                await nursery.start(replica.service.run)
            await nursery.start(hosts.run)
            yield replica
            nursery.cancel_scope.cancel()


async def _run_until(
    tunnels: ClusterTunnels, stop: trio.CancelScope, *, task_status: trio.TaskStatus[None]
) -> None:
    with stop:
        await tunnels.run(task_status=task_status)


def server_config(url: str, data_dir: Path) -> ServerConfig:
    """A clustered server on *url* with fast heartbeats, on a free port."""
    return ServerConfig(
        data_dir=data_dir,
        listen=ListenAddress("127.0.0.1", 0),
        database_url=url,
        cluster=ClusterConfig(enabled=True, heartbeat_s=0.5, replica_ttl_s=5, refresh_s=1),
    )


async def _no_tunnels(org_id: str, name: str) -> Tunnel:
    await trio.lowlevel.checkpoint()
    raise NotFound("tunnel", name)


def host_info(
    host_id: str, capacity: int, *, platforms: tuple[str, ...] = ("android",)
) -> HostInfo:
    return HostInfo(
        id=host_id,
        name=f"{host_id}.test",
        region="local",
        capacity=capacity,
        running=0,
        platforms=frozenset(platforms),
        drivers=frozenset({"virtual"}),
        version=__version__,
        connected_at=datetime.now(UTC),
    )


@attrs.define
class FakeHost:
    """The host end of a link: what the edge sends it arrives in `received`."""

    control: ControlChannel
    received: list[dict[str, Any]] = attrs.field(factory=list)
    unlink: trio.CancelScope = attrs.field(factory=trio.CancelScope)


def hello(capacity: int) -> dict[str, Any]:
    return {
        "type": "hello",
        "proto": PROTO,
        "role": "host",
        "version": __version__,
        "hostname": "fake",
        "region": "local",
        "capacity": capacity,
        "platforms": ["android"],
        "drivers": ["virtual"],
        "instances": [],
    }


async def _serve_edge_side(
    edge: Edge, host_id: str, transport: trio.abc.Stream, ended: trio.Event
) -> None:
    try:
        async with open_session(transport, client=False) as session:
            control = ControlChannel(await session.accept_stream())
            first = await control.receive()
            await edge.serve(host_id, session, control, first)
    except (trio.BrokenResourceError, trio.ClosedResourceError, trio.EndOfChannel):
        pass
    finally:
        ended.set()


@asynccontextmanager
async def link_host(edge: Edge, host_id: str, capacity: int = 4) -> AsyncIterator[FakeHost]:
    """A host linked to *edge* for the duration of the block (then its link drops)."""
    host_side, edge_side = trio.testing.memory_stream_pair()
    ended = trio.Event()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_serve_edge_side, edge, host_id, edge_side, ended)
        async with open_session(host_side, client=True) as session:
            control = ControlChannel(await session.open_stream())
            await control.send(hello(capacity))
            with trio.fail_after(10):
                assert (await control.receive())["type"] == "registered"
            host = FakeHost(control)

            async def receive() -> None:
                try:
                    while True:
                        host.received.append(await control.receive())
                except (trio.BrokenResourceError, trio.ClosedResourceError, trio.EndOfChannel):
                    pass

            nursery.start_soon(receive)
            yield host
            nursery.cancel_scope.cancel()


def tunnel(name: str = "corp", *, selectors: tuple[str, ...] = ("*.corp.test:443",)) -> Tunnel:
    now = datetime.now(UTC)
    return Tunnel(
        id=f"tun_{name}",
        org_id="org_1",
        name=name,
        selectors=selectors,
        selector_version=1,
        ephemeral=False,
        token_lookup=f"lookup_{name}",
        token_expires_at=now + timedelta(days=30),
        token_issued_at=now,
        created_at=now,
    )


async def serve_hub_side(hub: ConnectorHub, record: Tunnel, transport: trio.abc.Stream) -> None:
    """The hub's end of one connector's link over *transport*, until it ends."""
    try:
        async with open_session(transport, client=False) as session:
            control = ControlChannel(await session.accept_stream())
            first = await control.receive()
            await hub.serve(record, session, control, first)
    except (trio.BrokenResourceError, trio.ClosedResourceError, trio.EndOfChannel):
        pass


@asynccontextmanager
async def link_connector(hub: ConnectorHub, record: Tunnel) -> AsyncIterator[FakeHost]:
    """A connector of *record* linked to *hub* for the duration of the block."""
    connector_side, hub_side = trio.testing.memory_stream_pair()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(serve_hub_side, hub, record, hub_side)
        async with open_session(connector_side, client=True) as session:
            control = ControlChannel(await session.open_stream())
            await control.send(
                {"type": "hello", "proto": PROTO, "id": "conn_1", "hostname": "c", "os": "linux"}
            )
            with trio.fail_after(10):
                registered = await control.receive()
            assert registered["type"] == "registered" and registered["role"] == "active"
            connector = FakeHost(control)

            async def receive() -> None:
                try:
                    while True:
                        connector.received.append(await control.receive())
                except (trio.BrokenResourceError, trio.ClosedResourceError, trio.EndOfChannel):
                    pass

            nursery.start_soon(receive)
            yield connector
            nursery.cancel_scope.cancel()
