"""What a link's ``registered`` and ``replicas`` messages say of the replica set, for hosts'
and connectors' second links (issue 23, "two links", docs/scale-out.md). The set itself is
the cluster's (``cluster.replicas.ReplicaSet``); the edge sees it through `ReplicaSetView`.
"""

from __future__ import annotations

from typing import Any, Protocol

import trio

from ...core import ControlChannel

__all__ = ["ReplicaSetView", "send_replica_updates"]


class ReplicaSetView(Protocol):
    """The replicas hosts and connectors hold their second link to (``cluster.replicas.
    ReplicaSet``, docs/scale-out.md "Two links"): ``registered`` carries `message`, and a
    ``replicas`` message follows each change (`send_replica_updates`)."""

    version: int

    def message(self) -> dict[str, Any]:
        """``{"replica": id, "replicas": [{"id", "url"}]}``, or empty (nothing advertised)."""
        ...

    async def wait_changed(self, seen: int) -> int: ...


async def send_replica_updates(replicas: ReplicaSetView | None, control: ControlChannel) -> None:
    """Send ``{"type": "replicas", ...}`` on *control* at every change of the set (the newest
    only: a slow link never queues), until cancelled; a broken stream ends nothing here (the
    link's own tasks notice it)."""
    seen = 0 if replicas is None else replicas.version
    while replicas is not None and replicas.message():
        seen = await replicas.wait_changed(seen)
        try:
            await control.send({"type": "replicas", **replicas.message()})
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            break
    await trio.sleep_forever()
