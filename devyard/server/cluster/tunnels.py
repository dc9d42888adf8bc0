"""`ClusterTunnels`: the tunnels service's and the instances service's view of connectors when
several replicas serve them (docs/scale-out.md).

- ``status``: a tunnel is online when its active connector is linked here, or to another live
  replica (the registry's ``connector`` rows, cached by `ClusterHosts`, kept current by the
  ``connector`` events), so a create naming a tunnel is not refused as offline on a replica
  that holds none of its connectors.
- Changes travel: a selector edit, a token rotation/revocation/expiry, a tunnel's deletion and
  an organization's end are applied to the local hub and published as a ``tunnel`` event;
  every other replica applies it to its own hub, so connectors linked anywhere hear of it. An
  event too large for a NOTIFY (many long selectors) goes without the selectors and the
  receivers read the tunnel from the store. Events lost on the way (a full subscriber buffer,
  a bus reconnect) are made good from the store (`resync`): each tunnel with a connector here
  is reread, and a deletion, rotation, revocation, expiry or selector edit it missed is
  applied, so a revoked token never keeps a connector linked to another replica.
- Streams into a tunnel (``open_tunnel_stream``, ``probe``) go to the local hub.
- With a database URL (*url*, *db*: `run_cluster`), the active connector of each tunnel is
  elected across replicas (`election.ConnectorElection`, set as the hub's ``election``), and
  quick tunnels' deletion is a shared deadline (`SqlQuickTunnels`; this class is the hub's
  ``quick_deadlines``): while a replica has a connector of a quick tunnel it keeps the
  tunnel's deadline ``quick_grace`` ahead (at attach and every `sweep_s`); a clean stop of
  its last one brings the deadline within `QUICK_SETTLE_S`; every replica's sweeper deletes
  the tunnels whose deadline passed (each taken by exactly one replica) and publishes their
  end. So the deletion survives the death of the replica where the last connector was lost.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any, Final

import attrs
import trio

from ..edge.connectors import ConnectorHub
from ..store.base import Tunnel
from ..store.database import Database
from ..store.errors import NotFound
from ..store.sql_quick_tunnels import DueQuickTunnel, SqlQuickTunnels
from ..tunnels import EndReason, TunnelStatus
from .bus import Bus, Event, PayloadTooLarge, Topic
from .election import ConnectorElection
from .hosts import ClusterHosts

log = logging.getLogger(__name__)

__all__ = ["QUICK_SETTLE_S", "ClusterTunnels"]

#: reads a tunnel by organization and name (the store's ``get_tunnel``)
TunnelReader = Callable[[str, str], Awaitable[Tunnel]]

#: after a clean stop of a quick tunnel's last connector on a replica, the tunnel is deleted
#: this much later unless a replica that still has one renews it (single server: at once)
QUICK_SETTLE_S: Final = 10.0
RESYNC_CHECK_S: Final = 5.0  # how soon lost events (a set resync flag) are noticed
_SWEEP_MAX_S: Final = 5.0


class ClusterTunnels:
    """`TunnelConnections` for cluster mode around the local `ConnectorHub`."""

    def __init__(
        self,
        hub: ConnectorHub,
        hosts: ClusterHosts,
        bus: Bus,
        read_tunnel: TunnelReader,
        *,
        url: str | None = None,
        db: Database | None = None,
    ) -> None:
        """With *url* (the lock connection) and *db* (the cluster's pool), the active
        connector is elected across replicas and quick tunnels' deletion is shared."""
        self._hub = hub
        self._hosts = hosts
        self._bus = bus
        self._read_tunnel = read_tunnel
        self.election = None if url is None else ConnectorElection(url, bus, hub)
        self._quick = None if db is None else SqlQuickTunnels(db)
        self.quick_settle_s = QUICK_SETTLE_S
        self.swept = 0  # quick tunnels this replica's sweeper deleted (tests, logs)

    @property
    def sweep_s(self) -> float:
        """How often quick tunnels' deadlines are renewed and swept: well inside the grace."""
        return min(_SWEEP_MAX_S, self._hub.quick_grace / 4)

    def status(self, org_id: str, name: str) -> TunnelStatus:
        local = self._hub.status(org_id, name)
        if local.online:
            return local
        remote = self._hosts.connectors.get((org_id, name))
        if remote is None or remote[0] == self._hosts.replica_id:
            return local
        return TunnelStatus(active=remote[1], standbys=local.standbys)

    async def on_tunnel_changed(self, tunnel: Tunnel) -> None:
        await self._hub.on_tunnel_changed(tunnel)
        await self._publish("changed", tunnel)

    async def on_tunnel_ended(self, tunnel: Tunnel, reason: EndReason) -> None:
        await self._hub.on_tunnel_ended(tunnel, reason)
        await self._publish("ended", tunnel, reason=str(reason))

    async def end_organization(self, org_id: str) -> int:
        ended = await self._hub.end_organization(org_id)
        await self._bus.publish(Topic.TUNNEL, change="org_ended", org_id=org_id)
        return ended

    async def open_tunnel_stream(
        self,
        org_id: str,
        tunnel_name: str,
        dest: str,
        instance_id: str,
        *,
        selector_version: int | None = None,
    ) -> trio.abc.Stream:
        return await self._hub.open_tunnel_stream(
            org_id, tunnel_name, dest, instance_id, selector_version=selector_version
        )

    async def probe(self, org_id: str, tunnel_name: str) -> bool:
        return await self._hub.probe(org_id, tunnel_name)

    async def _publish(self, change: str, tunnel: Tunnel, **fields: Any) -> None:
        record = _record(tunnel)
        try:
            await self._bus.publish(Topic.TUNNEL, change=change, tunnel=record, **fields)
        except PayloadTooLarge:  # the receivers read the selectors from the store
            record["selectors"] = None
            await self._bus.publish(Topic.TUNNEL, change=change, tunnel=record, **fields)

    # ---- quick tunnels' shared deadlines (the hub's `QuickDeadlines`) -------------------------

    async def attached(self, tunnel: Tunnel) -> None:
        await self._renew([tunnel])

    async def stopped(self, tunnel: Tunnel) -> None:
        quick = self._quick
        if quick is None:
            await trio.lowlevel.checkpoint()
            return
        try:
            await quick.shorten(tunnel.id, self.quick_settle_s)
        except Exception:  # the database may be away: the renewals' absence decides then
            log.exception("quick tunnel %s: bringing its deadline close failed", tunnel.name)

    async def _renew(self, tunnels: list[Tunnel]) -> None:
        quick = self._quick
        if quick is None or not tunnels:
            await trio.lowlevel.checkpoint()
            return
        due = [DueQuickTunnel(t.id, t.org_id, t.name) for t in tunnels]
        try:
            await quick.renew(due, self._hub.quick_grace)
        except Exception:  # the next pass tries again
            log.exception("cluster: renewing quick tunnels' deadlines failed")

    async def sweep(self) -> int:
        """Renew the deadlines of the quick tunnels with a connector here, then delete the
        quick tunnels whose deadline passed (those this replica took); how many it deleted."""
        quick = self._quick
        if quick is None:
            await trio.lowlevel.checkpoint()
            return 0
        await self._renew(self._hub.quick_tunnels())
        deleted = 0
        for due in await quick.take_due():
            try:
                tunnel = await self._read_tunnel(due.org_id, due.name)
            except NotFound:
                continue
            if tunnel.id != due.tunnel_id or not tunnel.ephemeral:
                continue
            log.info("quick tunnel %s: no connector in any replica, deleting it", due.name)
            if await self._hub.delete_quick(tunnel):
                deleted += 1
                await self._publish("ended", tunnel, reason=str(EndReason.DELETED))
        self.swept += deleted
        return deleted

    async def _sweeper(self) -> None:
        while True:
            try:
                await self.sweep()
            except Exception:  # the database may be away; the next pass tries again
                log.exception("cluster: sweeping quick tunnels failed")
            await trio.sleep(self.sweep_s)

    # ---- running -------------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Apply other replicas' tunnel changes to the local hub until cancelled; with a
        database, also run the election and the quick tunnels' sweeper (the hub's
        ``election`` and ``quick_deadlines`` are set here)."""
        async with trio.open_nursery() as nursery:
            if self.election is not None:
                await nursery.start(self.election.run)
                self._hub.election = self.election
            if self._quick is not None:
                self._hub.quick_deadlines = self
                nursery.start_soon(self._sweeper)
            try:
                await self._follow(task_status)
            finally:  # the election stays: without its session it elects nobody here
                self._hub.quick_deadlines = None

    async def _follow(self, task_status: trio.TaskStatus[None]) -> None:
        async with self._bus.subscribe([Topic.TUNNEL]) as subscription:
            task_status.started()
            while True:
                event = None
                with trio.move_on_after(RESYNC_CHECK_S):  # the flag can be set with no event
                    event = await subscription.receive.receive()
                if subscription.resync:  # events were dropped or missed: reread the tunnels
                    subscription.resync = False
                    try:
                        await self.resync()
                    except Exception:  # the store may be away: the next flag tries again
                        subscription.resync = True
                        log.exception("cluster: rereading tunnels after lost events failed")
                if event is None or event.sender == self._bus.replica_id:
                    continue
                try:
                    await self._apply(event)
                except Exception:  # one bad event (or a store hiccup) must not end the loop
                    log.exception("cluster: applying a tunnel change failed")

    async def resync(self) -> None:
        """What lost ``tunnel`` events would have said, from the store: each tunnel with a
        connector here that was deleted (or recreated), rotated, revoked or expired ends its
        connectors; one whose selectors changed sends them ``config``."""
        now = datetime.now(UTC)
        for known in self._hub.linked_tunnels():
            try:
                stored: Tunnel | None = await self._read_tunnel(known.org_id, known.name)
            except NotFound:
                stored = None
            if stored is None or stored.id != known.id:
                await self._hub.on_tunnel_ended(known, EndReason.DELETED)
            elif stored.token_lookup != known.token_lookup:
                await self._hub.on_tunnel_ended(known, EndReason.ROTATED)
            elif stored.token_expires_at <= now:
                revoked = stored.token_expires_at != known.token_expires_at
                reason = EndReason.REVOKED if revoked else EndReason.EXPIRED
                await self._hub.on_tunnel_ended(known, reason)
            elif stored.selector_version != known.selector_version:
                await self._hub.on_tunnel_changed(stored)

    async def _apply(self, event: Event) -> None:
        fields = event.fields
        change = fields.get("change")
        if change == "org_ended":
            await self._hub.end_organization(str(fields["org_id"]))
            return
        tunnel = await self._tunnel(fields["tunnel"], need_selectors=change == "changed")
        if tunnel is None:
            return
        if change == "changed":
            await self._hub.on_tunnel_changed(tunnel)
        elif change == "ended":
            await self._hub.on_tunnel_ended(tunnel, EndReason(str(fields["reason"])))

    async def _tunnel(self, record: dict[str, Any], *, need_selectors: bool) -> Tunnel | None:
        if record.get("selectors") is None:
            if need_selectors:
                try:
                    return await self._read_tunnel(str(record["org_id"]), str(record["name"]))
                except NotFound:
                    return None
            record = {**record, "selectors": []}
        return Tunnel(
            id=str(record["id"]),
            org_id=str(record["org_id"]),
            name=str(record["name"]),
            selectors=tuple(str(s) for s in record["selectors"]),
            selector_version=int(record["selector_version"]),
            ephemeral=bool(record["ephemeral"]),
            token_lookup=str(record["token_lookup"]),
            token_expires_at=datetime.fromisoformat(str(record["token_expires_at"])),
            token_issued_at=datetime.fromisoformat(str(record["token_issued_at"])),
            created_at=datetime.fromisoformat(str(record["created_at"])),
        )


def _record(tunnel: Tunnel) -> dict[str, Any]:
    return attrs.asdict(
        tunnel, value_serializer=lambda _i, _a, v: v.isoformat() if isinstance(v, datetime) else v
    )
