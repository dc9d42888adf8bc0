"""`ClusterHosts`: the `HostRegistry` of a replica in a cluster, around its local `Edge`.

Theory of operation (docs/scale-out.md).

- **Host liveness is a lease row.** When a host links here the edge calls `host_linked`: this
  replica takes the host's lease (or takes it over from the replica the host left) and its
  registry row, with the capacity its hello announced. The heartbeat renews the leases of the
  hosts linked here. When a link drops nothing in memory decides: the edge calls
  `host_unlinked`, which only releases the registry row; the lease stops being renewed. Every
  replica's reaper deletes the leases that ran out (``DELETE ... WHERE expires_at < now()
  RETURNING``): exactly one wins each host, and only the winner publishes `HostLost` to its
  own instances service, which ends the host's instances. A host that links to any replica
  before then loses nothing: that replica takes the lease over.
- **Scheduling is a transaction.** `hosts` answers from a cache of the lease rows (capacity
  and ``used`` from the store, not from this replica's memory), refreshed on every ``host``
  event and at least every ``refresh_s``. The cache may be stale; the reservation is not:
  `reserve` takes a slot with a conditional UPDATE, so concurrent creates on several replicas
  never double-book a host, and `release` gives it back when the instance ends.
- **Orders travel to the holder.** `start_instance` / `stop_instance` for a host linked here
  go on the local link. For a host linked to another replica a start goes through its stored
  row (`orders.OrderDesk`: addressed, claimed by a replica linked to the host, sent, or
  withdrawn after ``order_timeout_s``; events only wake), and so does a stop (a row that a
  replica linked to the host takes and sends).
- **Instance changes fan out.** The instances service reports each state change
  (`instance_changed`); other replicas hand it to their service (`on_instance_changed`), so
  a ``wait`` on the replica that created an instance sees the READY its host reported to
  another replica.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from datetime import UTC, datetime
from typing import Any, Final

import attrs
import trio

from ..edge.connectors import ConnectorHub
from ..edge.links import Edge
from ..hosts import HostEvent, HostInfo, HostLost, HostUnavailableError, InstanceOrder
from ..store.cluster import HostLease
from ..store.errors import StoreError
from ..store.order_delivery import SqlOrderDelivery
from ..store.sql_cluster import SqlCluster
from ..store.sql_replicas import SqlReplicaSet
from ..tunnels import ConnectorInfo
from . import metrics
from .bus import Bus, Event, Topic
from .orders import OrderDesk, OrderUnsettled
from .replicas import ReplicaSet
from .settings import ClusterConfig

log = logging.getLogger(__name__)

__all__ = ["ClusterHosts"]

#: How old a create's hold (store.cluster.HOLD_PREFIX) may get before the heartbeat frees it:
#: a create holds its slot only from its reservation to its instance's insert (two
#: transactions), so an older hold is that of a replica that died in between
HOLD_S: Final = 20.0
_ORDERS_REMEMBERED: Final = 4096  # when orders from other replicas went out (reconciliation)


class ClusterHosts:
    """`HostRegistry` for cluster mode; the edge's `LinkLeases`; the instances service's
    shared reservations. Run `run` in the server's nursery before links are served."""

    def __init__(
        self,
        cluster: SqlCluster,
        bus: Bus,
        edge: Edge,
        events: trio.MemorySendChannel[HostEvent],
        *,
        replica_id: str,
        peer_url: str,
        config: ClusterConfig,
        grace: float,
        replica_store: SqlReplicaSet | None = None,
        leases: SqlCluster | None = None,
        draining: Callable[[], bool] = lambda: False,
        orders: SqlOrderDelivery,
    ) -> None:
        """*events*: where this replica's `HostLost`s go (the instances service's channel);
        *grace*: a host lease's lifetime after its last renewal; *replica_store*: the
        replica set and the leases of hosts with two links (docs/scale-out.md "Two links";
        without it a host's second link is taken for a stale one and dropped); *leases*: the
        heartbeat's own connection (renewals and the reaper), so that a burst of reservations
        on *cluster*'s pool never starves them; *draining*: whether this replica drains (then
        a link it told to move is kept until the host closes it: make-before-break); *orders*:
        the start orders' rows, through which orders for hosts on other replicas go."""
        self._cluster = cluster
        self._leases = leases or cluster
        self._draining = draining
        self._bus = bus
        self._edge = edge
        self._events = events
        self.replica_id = replica_id
        self.peer_url = peer_url
        self._config = config
        self.grace = grace
        self._cache: dict[str, HostLease] = {}
        self._dirty = trio.Event()
        self._ordered_at: dict[str, float] = {}  # instance id -> when its order went out here
        self._connectors_changed = trio.Event()
        self._claimed_tunnels: dict[str, str] = {}  # tunnel id -> its active connector's id
        # tunnels whose active connector is on some replica: (org id, name) -> (replica, info)
        self.connectors: dict[tuple[str, str], tuple[str, ConnectorInfo]] = {}
        self.hub: ConnectorHub | None = None  # whose active connectors are registered
        # the instances service's handler of other replicas' instance changes (serve.py)
        self.on_instance_changed: Callable[[str, str], Awaitable[None]] | None = None
        self._replica_store = replica_store
        self.replicas: ReplicaSet | None = None
        if replica_store is not None:
            self.replicas = ReplicaSet(replica_store, replica_id, config.advertise_url)
        self.orders = OrderDesk(
            orders,
            bus,
            edge,
            replica_id=replica_id,
            timeout=config.order_timeout_s,
            on_sent=self._sent_for_another,
        )

    def __repr__(self) -> str:
        return f"ClusterHosts({self.replica_id}, hosts={sorted(self._cache)})"

    # ---- HostRegistry ---------------------------------------------------------------------

    def hosts(self) -> list[HostInfo]:
        return [_info(lease) for lease in self._cache.values()]

    def _linked_here(self, host_id: str) -> bool:
        return any(h.id == host_id for h in self._edge.hosts())

    async def _holder_of(self, host_id: str) -> str | None:
        holder = await self._cluster.holder("host", host_id)
        return None if holder is None else holder.replica_id

    async def start_instance(self, host_id: str, order: InstanceOrder) -> None:
        if self._linked_here(host_id):
            await self._edge.start_instance(host_id, order)
            return
        try:
            holder = await self._holder_of(host_id)
        except StoreError as exc:
            raise HostUnavailableError(f"host {host_id}: no registry ({exc})") from exc
        if holder is None or holder == self.replica_id:
            raise HostUnavailableError(f"host {host_id} is not linked to any replica")
        try:
            await self.orders.order(holder, host_id, order)
        except OrderUnsettled:  # the order may still arrive: take it back
            with trio.move_on_after(self._config.order_timeout_s, shield=True):
                await self.stop_instance(host_id, order.instance_id)
            raise

    async def stop_instance(self, host_id: str, instance_id: str) -> None:
        if self._linked_here(host_id):
            await self._edge.stop_instance(host_id, instance_id)
            return
        try:
            holder = await self._holder_of(host_id)
            await self.orders.stop(holder, host_id, instance_id)
        except StoreError:  # as with a broken link: the host reconciles when it links again
            log.warning("host %s: could not send the stop of %s", host_id, instance_id)

    # ---- the edge's LinkLeases -------------------------------------------------------------

    async def host_linked(self, info: HostInfo) -> None:
        """The host's link registered here: take its lease and registry row; a host that
        holds two links and whose lease another live replica holds only renews it there (the
        holder does not flap between its two replicas)."""
        if await self._co_renewed([info.id]):
            await self.refresh()
            return
        lease = _lease(info, self.replica_id)
        previous = await self._cluster.claim_host(
            self.replica_id,
            lease,
            self.grace,
            [self._bus.notice(Topic.HOST, host_id=info.id, change="attached")],
        )
        if previous is not None:
            metrics.LEASE_TAKEOVERS.inc()
            log.info("host %s: lease taken over from replica %s", info.id, previous)
        await self.refresh()

    async def _co_renewed(self, host_ids: Iterable[str]) -> list[str]:
        """Of *host_ids* (linked here), those with two links whose lease another live
        replica holds: renewed without taking it."""
        several = [h for h in host_ids if self._edge.links_held(h) > 1]
        if self._replica_store is None or not several:
            await trio.lowlevel.checkpoint()
            return []
        return await self._replica_store.co_renew_hosts(self.replica_id, several, self.grace)

    async def _reclaim(self, host_id: str) -> None:
        """Another replica let *host_id* go: if it is linked here too (two links), take its
        lease now rather than at the next heartbeat."""
        linked = {h.id: h for h in self._edge.hosts()}
        if host_id in linked and self._edge.links_held(host_id) > 1:
            await _contained(lambda: self.host_linked(linked[host_id]), f"reclaiming {host_id}")
        else:
            await trio.lowlevel.checkpoint()

    async def host_unlinked(self, host_id: str) -> None:
        """The host's link ended here: release its registry row; the lease runs out unless
        the host links again (here or elsewhere) within the grace."""
        self._cache.pop(host_id, None)
        notice = self._bus.notice(Topic.HOST, host_id=host_id, change="detached")
        await _contained(
            lambda: self._cluster.release_link("host", host_id, self.replica_id, [notice]),
            f"releasing host {host_id}",
        )

    async def expect(self, host_ids: Iterable[str]) -> None:
        """Hosts the store has live instances on get a lease nobody holds (if none): lost
        after the grace unless they link."""
        await self._cluster.expect_hosts(host_ids, self.grace)

    # ---- shared reservations (the instances service's `SharedRegistry`) ---------------------

    async def reserve(self, key: str, host_ids: Sequence[str]) -> str | None:
        host_id = await self._cluster.reserve(
            key, host_ids, [self._bus.notice(Topic.HOST, change="used")]
        )
        metrics.RESERVATIONS.labels("reserved" if host_id else "full").inc()
        if host_id is not None and host_id in self._cache:  # until the refresh says so
            lease = self._cache[host_id]
            self._cache[host_id] = attrs.evolve(lease, used=lease.used + 1)
        return host_id

    async def rebind(self, old_key: str, new_key: str) -> bool:
        return await self._cluster.rebind(old_key, new_key)

    async def release(self, key: str) -> None:
        host_id = await self._cluster.release(key, [self._bus.notice(Topic.HOST, change="used")])
        if host_id is not None:
            metrics.RESERVATIONS.labels("released").inc()
            lease = self._cache.get(host_id)
            if lease is not None:
                self._cache[host_id] = attrs.evolve(lease, used=max(0, lease.used - 1))

    async def reserved_on(self, key: str) -> str | None:
        return await self._cluster.reserved_on(key)

    def ordered_at(self, instance_id: str) -> float | None:
        return self._ordered_at.get(instance_id)

    def _sent_for_another(self, instance_id: str) -> None:
        """An order another replica made went out on a link here: a registration of its host
        handled after this must not end the instance (`ordered_at`)."""
        self._ordered_at[instance_id] = trio.current_time()
        while len(self._ordered_at) > _ORDERS_REMEMBERED:
            del self._ordered_at[next(iter(self._ordered_at))]

    async def instance_changed(self, instance_id: str, state: str) -> None:
        await self._bus.publish(Topic.INSTANCE, instance_id=instance_id, state=state)

    # ---- the connector hub's active connectors -----------------------------------------------

    def connectors_changed(self) -> None:
        """The hub's set of active connectors changed: the reconciler claims and releases."""
        self._connectors_changed.set()

    async def _reconcile_connectors(self) -> None:
        hub = self.hub
        if hub is None:
            await trio.lowlevel.checkpoint()
            return
        active = hub.active_tunnels()
        for tunnel_id, (tunnel, connector) in sorted(active.items()):
            if self._claimed_tunnels.get(tunnel_id) == connector.id:
                continue
            info = connector_info_json(tunnel.org_id, tunnel.name, connector)
            notice = self._bus.notice(Topic.CONNECTOR, key=tunnel_id, change="attached")
            await self._cluster.claim_link(
                "connector", tunnel_id, self.replica_id, [notice], info=info
            )
            self._claimed_tunnels[tunnel_id] = connector.id
        for tunnel_id in sorted(set(self._claimed_tunnels) - set(active)):
            await self._cluster.release_link(
                "connector",
                tunnel_id,
                self.replica_id,
                [self._bus.notice(Topic.CONNECTOR, key=tunnel_id, change="detached")],
            )
            del self._claimed_tunnels[tunnel_id]

    async def _connectors_loop(self) -> None:
        while True:
            with trio.move_on_after(self._config.heartbeat_s):
                await self._connectors_changed.wait()
            self._connectors_changed = trio.Event()
            await _contained(self._reconcile_connectors, "registering connectors")

    # ---- running -------------------------------------------------------------------------------

    async def refresh(self) -> None:
        """Reread the lease rows into the cache `hosts` answers from."""
        leases = await self._cluster.host_leases()
        self._cache = {lease.host_id: lease for lease in leases}
        connectors = {}
        for _, replica, info in await self._cluster.links("connector"):
            try:
                connectors[(str(info["org_id"]), str(info["name"]))] = (replica, _connector(info))
            except (KeyError, TypeError, ValueError):
                continue  # a row without its tunnel's identity: not shown
        self.connectors = connectors

    async def heartbeat(self) -> None:
        """One pass: renew this replica's lease and its hosts' leases, then reap what ran
        out anywhere (each expired host goes to exactly one replica's reaper)."""
        if await self._leases.renew_replica(self.replica_id, self._config.replica_ttl_s):
            metrics.LEASE_RENEWALS.labels("replica").inc()
        else:  # another replica expired us (we were away too long): register again
            log.warning("replica %s: lease had expired; registering again", self.replica_id)
            await self._leases.register_replica(
                self.replica_id, self.peer_url, self._config.replica_ttl_s
            )
            self._claimed_tunnels.clear()
            self._connectors_changed.set()
        linked = {h.id: h for h in self._edge.hosts()}
        held = set(await self._leases.renew_hosts(self.replica_id, sorted(linked), self.grace))
        held |= set(await self._co_renewed(sorted(set(linked) - held)))
        metrics.LEASE_RENEWALS.labels("host").inc(len(held))
        for host_id in sorted(set(linked) - held):
            holder = await self._holder_of(host_id)
            several = self._edge.links_held(host_id) > 1
            if holder is not None and holder != self.replica_id and self._draining():
                continue  # told to move: the host closes this link once its streams end
            if holder is not None and holder != self.replica_id and not several:
                log.info("host %s: linked again on replica %s; dropping this link", host_id, holder)
                self._edge.drop(host_id)
            else:  # our lease ran out (the database was away) while the link lived: take it
                await self.host_linked(linked[host_id])
        dead = await self._leases.expire_replicas()
        metrics.LEASE_EXPIRIES.labels("replica").inc(len(dead))
        for replica in dead:
            log.warning("replica %s: lease expired; its links are released", replica)
        await self.reap()
        freed = await self._leases.expire_holds(
            HOLD_S, [self._bus.notice(Topic.HOST, change="used")]
        )
        if freed:
            metrics.RESERVATIONS.labels("released").inc(freed)
            log.warning(
                "freed %d slots held by creates that never finished (a replica died)", freed
            )
        if self.replicas is not None:
            await self.replicas.refresh()

    async def reap(self) -> list[str]:
        """Expire the host leases that ran out; publish `HostLost` for those this replica won."""
        lost = await self._leases.expire_hosts([self._bus.notice(Topic.HOST, change="expired")])
        for host_id in lost:
            metrics.LEASE_EXPIRIES.labels("host").inc()
            self._cache.pop(host_id, None)
            log.warning("host %s: lease expired, its instances are lost", host_id)
            try:
                await self._events.send(HostLost(host_id))
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                log.warning("host %s lost, but nobody consumes host events any more", host_id)
        return lost

    async def run(
        self,
        *,
        expected: Iterable[str] = (),
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Register this replica, then heartbeat, reap, refresh and serve orders until
        cancelled; on the way out the replica leaves the cluster (its hosts keep the rest
        of their grace to link elsewhere)."""
        await self._cluster.register_replica(
            self.replica_id, self.peer_url, self._config.replica_ttl_s
        )
        self._edge.replica_set = self.replicas
        if self.hub is not None:
            self.hub.replica_set = self.replicas
        try:
            if self.replicas is not None:
                await self.replicas.refresh()
            await self.expect(expected)
            await self.refresh()
            async with (
                self._bus.subscribe(
                    [Topic.HOST, Topic.CONNECTOR, Topic.ORDER, Topic.ORDER_DONE, Topic.INSTANCE]
                ) as subscription,
                trio.open_nursery() as nursery,
            ):
                nursery.start_soon(self._consume, subscription, nursery)
                nursery.start_soon(self._refresher)
                nursery.start_soon(self._heartbeats)
                nursery.start_soon(self._connectors_loop)
                nursery.start_soon(self.orders.serve)
                nursery.start_soon(self.orders.watch)
                task_status.started()
                await trio.sleep_forever()
        finally:
            with trio.move_on_after(5, shield=True):
                await _contained(lambda: self._cluster.leave(self.replica_id), "leaving")

    async def _heartbeats(self) -> None:
        while True:
            await trio.sleep(self._config.heartbeat_s)
            await _contained(self.heartbeat, "the heartbeat")

    async def _refresher(self) -> None:
        while True:
            with trio.move_on_after(self._config.refresh_s):
                await self._dirty.wait()
            self._dirty = trio.Event()
            await _contained(self.refresh, "refreshing hosts")

    async def _consume(self, subscription: Any, nursery: trio.Nursery) -> None:
        event: Event
        async for event in subscription:
            if subscription.resync:  # events were lost: what they said is in the tables
                subscription.resync = False
                self._dirty.set()
                self.orders.arrived()
                self.orders.answered()
            fields = event.fields
            if event.topic in (Topic.HOST, Topic.CONNECTOR):
                if event.sender != self.replica_id or event.topic == Topic.CONNECTOR:
                    self._dirty.set()
                if (
                    event.topic == Topic.HOST
                    and event.sender != self.replica_id
                    and fields.get("change") == "detached"
                ):
                    nursery.start_soon(self._reclaim, str(fields.get("host_id")))
            elif event.topic == Topic.ORDER and fields.get("to") == self.replica_id:
                self.orders.arrived()  # a start or a stop: its row says which
            elif event.topic == Topic.ORDER_DONE and fields.get("to") == self.replica_id:
                self.orders.answered()
            elif event.topic == Topic.INSTANCE and event.sender != self.replica_id:
                await self._instance_changed(fields)

    async def _instance_changed(self, fields: dict[str, Any]) -> None:
        handler = self.on_instance_changed
        if handler is None:
            await trio.lowlevel.checkpoint()
            return
        try:
            await handler(str(fields["instance_id"]), str(fields["state"]))
        except Exception:  # one bad event must not end the consumer
            log.exception("cluster: handling an instance change failed")


async def _contained(fn: Callable[[], Awaitable[Any]], what: str) -> None:
    """Run *fn*; a store or bus failure is logged (the next pass tries again)."""
    try:
        await fn()
    except Exception:  # the database may be away; the loop must survive it
        log.exception("cluster: %s failed", what)


def connector_info_json(org_id: str, name: str, connector: ConnectorInfo) -> str:
    return json.dumps(
        {
            "org_id": org_id,
            "name": name,
            "id": connector.id,
            "hostname": connector.hostname,
            "version": connector.version,
            "os": connector.os,
            "connected_since": connector.connected_since.isoformat(),
        }
    )


def _connector(info: dict[str, Any]) -> ConnectorInfo:
    return ConnectorInfo(
        id=str(info["id"]),
        hostname=str(info["hostname"]),
        version=str(info["version"]),
        os=str(info["os"]),
        connected_since=datetime.fromisoformat(str(info["connected_since"])),
    )


def _lease(info: HostInfo, holder: str) -> HostLease:
    now = datetime.now(UTC)
    return HostLease(
        host_id=info.id,
        holder=holder,
        name=info.name,
        region=info.region,
        platforms=info.platforms,
        drivers=info.drivers,
        version=info.version,
        capacity=info.capacity,
        used=0,
        linked_at=info.connected_at,
        expires_at=now,
    )


def _info(lease: HostLease) -> HostInfo:
    return HostInfo(
        id=lease.host_id,
        name=lease.name,
        region=lease.region,
        capacity=lease.capacity,
        running=lease.used,
        platforms=lease.platforms,
        drivers=lease.drivers,
        version=lease.version,
        connected_at=lease.linked_at,
    )
