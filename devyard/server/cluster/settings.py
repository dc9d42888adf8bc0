"""``[cluster]``: how a server replica takes part in a cluster of replicas on PostgreSQL
(docs/scale-out.md). The replica's id is the top-level ``replica_id`` (docs/operations.md).

The cluster runs when ``enabled`` is true and the database is PostgreSQL; SQLite is the
single-process path and ignores this table.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

import attrs

__all__ = ["PARSERS", "ClusterConfig", "build"]


@attrs.frozen
class ClusterConfig:
    enabled: bool = False
    # where other replicas reach this replica's link endpoint ("" = nowhere: no forwarding to it)
    peer_url: str = ""
    # where hosts and connectors dial this replica directly for their second link ("" = they
    # hold one link; docs/scale-out.md, "Two links")
    advertise_url: str = ""
    heartbeat_s: float = 5.0  # lease renewals and the reaper's pass
    replica_ttl_s: float = 15.0  # a replica is gone this long after its last renewal
    refresh_s: float = 10.0  # the host cache rereads the tables at least this often
    order_timeout_s: float = 10.0  # a start order for a host held elsewhere waits this long


def _bool(value: object) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "1", "yes", "false", "0", "no"):
        return value.lower() in ("true", "1", "yes")
    raise ValueError(f"expected true or false, got {value!r}")


def _seconds(value: object) -> float:
    if isinstance(value, bool):
        raise ValueError("expected a number of seconds")
    try:
        seconds = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ValueError(f"expected a number of seconds, got {value!r}") from None
    if not 0 < seconds <= 3600:
        raise ValueError("expected seconds between 0 and 3600")
    return seconds


def _text(value: object) -> str:
    if not isinstance(value, str):
        raise ValueError(f"expected text, got {value!r}")
    return value


PARSERS: Final[Mapping[str, Callable[[object], Any]]] = {
    "enabled": _bool,
    "peer_url": _text,
    "advertise_url": _text,
    "heartbeat_s": _seconds,
    "replica_ttl_s": _seconds,
    "refresh_s": _seconds,
    "order_timeout_s": _seconds,
}


def build(values: Mapping[str, Any]) -> ClusterConfig:
    """The settings from parsed values keyed without the ``cluster.`` prefix."""
    config = ClusterConfig(**values)
    if config.replica_ttl_s <= config.heartbeat_s:
        raise ValueError("cluster.replica_ttl_s must be longer than cluster.heartbeat_s")
    return config
