"""The connector hub's state (`ConnectorHub` in `connectors`): one `Connector` per linked
connector, one `TunnelEntry` per tunnel with connectors here (its active connector, its
standbys oldest first, and the selector versions seen), and the bounded sends on a
connector's control stream (`send_within`, `send_quietly`)."""

from __future__ import annotations

import logging
from typing import Any, Final

import attrs
import trio

from ...core import ControlChannel, Session
from ...core.selectors import SelectorHistory, parse_selectors
from ..store.base import Tunnel
from ..tunnels import ConnectorInfo

log = logging.getLogger(__name__)

__all__ = ["SEND_BOUND", "Connector", "TunnelEntry", "send_quietly", "send_within"]

SEND_BOUND: Final = 5.0  # seconds a connector gets to take a config or promote message


@attrs.define(eq=False)
class Connector:
    info: ConnectorInfo
    session: Session
    control: ControlChannel
    kicked: trio.Event = attrs.field(factory=trio.Event)
    kick_code: int | None = None
    clean_stop: bool = False
    replacing: bool = False  # replicas: a --replace waiting for another replica's hand-over

    def __repr__(self) -> str:
        return f"<connector {self.info.id} {self.info.hostname}>"


@attrs.define(eq=False)
class TunnelEntry:
    tunnel: Tunnel
    active: Connector | None = None
    standbys: list[Connector] = attrs.field(factory=list)
    cleanup: trio.CancelScope | None = None
    handing_over_until: float = 0.0  # replicas: the lock goes to another replica's replacer
    # Selector versions seen while the tunnel was held here: an instance attached with an
    # older version keeps it (spec 4.6 rule 3).
    selectors: SelectorHistory = attrs.field(factory=SelectorHistory)

    def __attrs_post_init__(self) -> None:
        self.learn(self.tunnel)

    def learn(self, tunnel: Tunnel) -> None:
        self.tunnel = tunnel
        self.selectors.learn(tunnel.selector_version, parse_selectors(tunnel.selectors))

    def connectors(self) -> list[Connector]:
        return ([self.active] if self.active is not None else []) + list(self.standbys)


async def send_within(connector: Connector, message: dict[str, Any]) -> None:
    """`send_quietly`, bounded: a connector that does not read its control stream (a full
    window) cannot hold up the tunnels service or the hub."""
    with trio.move_on_after(SEND_BOUND) as bounded:
        await send_quietly(connector, message)
    if bounded.cancelled_caught:
        log.warning("%r: %s not taken within %.0f s", connector, message.get("type"), SEND_BOUND)


async def send_quietly(connector: Connector, message: dict[str, Any]) -> None:
    try:
        await connector.control.send(message)
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        log.info("%r: link broke while sending %s", connector, message.get("type"))
