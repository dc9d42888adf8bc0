"""What the connector hub shares with its callers and the cluster: its errors, what it asks
of the store (`TunnelDirectory`), and the replicas' hooks (`Election`, `QuickDeadlines`;
docs/scale-out.md). `connectors` re-exports them."""

from __future__ import annotations

from typing import Protocol

from ..store.base import Tunnel

__all__ = ["Election", "QuickDeadlines", "TunnelDialError", "TunnelDirectory", "TunnelUnavailable"]


class TunnelUnavailable(Exception):
    """No such tunnel is held by a connector here (missing, or offline)."""


class TunnelDialError(Exception):
    """The connector (or the edge's own selector check) refused a dial; ``code`` is the
    preamble's error code (refused, timeout, nxdomain, forbidden, limit, ...)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}" if message else code)
        self.code = code


class Election(Protocol):
    """The cluster-wide election of each tunnel's active connector (cluster/election.py)."""

    async def acquire(self, tunnel_id: str) -> bool:
        """Whether this replica holds the tunnel's lock (already, or won now)."""

    def changed(self) -> None:
        """The hub's active or waiting connectors changed (release or compete soon)."""

    async def replace(self, tunnel_id: str) -> None:
        """A ``--replace`` connector here, the active one elsewhere: ask for a hand-over."""


class QuickDeadlines(Protocol):
    """Quick tunnels' deletion deadlines shared by replicas (cluster/tunnels.py)."""

    async def attached(self, tunnel: Tunnel) -> None:
        """A connector of the quick *tunnel* linked here: no deletion while it stays."""

    async def stopped(self, tunnel: Tunnel) -> None:
        """The last connector here stopped cleanly: delete soon unless another replica has
        one."""


class TunnelDirectory(Protocol):
    """What the hub asks of the store (`devyard.server.tunnels.StoreTunnelDirectory`)."""

    async def authenticate(self, token: str) -> Tunnel: ...

    async def delete_ephemeral(self, tunnel: Tunnel) -> bool: ...
