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
  receivers read the tunnel from the store.
- Streams into a tunnel (``open_tunnel_stream``, ``probe``) go to the local hub.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

import attrs
import trio

from ..edge.connectors import ConnectorHub
from ..store.base import Tunnel
from ..store.errors import NotFound
from ..tunnels import EndReason, TunnelStatus
from .bus import Bus, Event, PayloadTooLarge, Topic
from .hosts import ClusterHosts

log = logging.getLogger(__name__)

__all__ = ["ClusterTunnels"]

#: reads a tunnel by organization and name (the store's ``get_tunnel``)
TunnelReader = Callable[[str, str], Awaitable[Tunnel]]


class ClusterTunnels:
    """`TunnelConnections` for cluster mode around the local `ConnectorHub`."""

    def __init__(
        self, hub: ConnectorHub, hosts: ClusterHosts, bus: Bus, read_tunnel: TunnelReader
    ) -> None:
        self._hub = hub
        self._hosts = hosts
        self._bus = bus
        self._read_tunnel = read_tunnel

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

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Apply other replicas' tunnel changes to the local hub until cancelled."""
        async with self._bus.subscribe([Topic.TUNNEL]) as subscription:
            task_status.started()
            async for event in subscription:
                if event.sender == self._bus.replica_id:
                    continue
                try:
                    await self._apply(event)
                except Exception:  # one bad event (or a store hiccup) must not end the loop
                    log.exception("cluster: applying a tunnel change failed")

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
