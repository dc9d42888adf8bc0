"""The tunnel an instance names, checked before anything is created (spec 4.1 rule 3)."""

from __future__ import annotations

from typing import Any, Protocol

from ...core.selectors import android_compatible, parse_selectors
from ..hosts import TunnelRejected, TunnelRejection
from ..store import errors as store_errors
from ..store.base import Platform, Store

__all__ = ["TunnelStatusSource", "tunnel_for"]


class TunnelStatusSource(Protocol):
    """Whether a tunnel is held by a connector now (the edge's connector hub)."""

    def status(self, org_id: str, name: str) -> Any: ...


async def tunnel_for(
    store: Store,
    tunnels: TunnelStatusSource | None,
    org_id: str,
    platform: Platform,
    name: object,
) -> dict[str, Any] | None:
    """The tunnel an instance names, checked before anything is created (spec 4.1 rule 3):
    it exists, on Android every exact selector port is >= 1024, and a connector holds it
    (the one retryable failure comes last)."""
    if name is None:
        return None
    if platform not in (Platform.IOS, Platform.ANDROID):
        message = "spec.tunnel is for iOS and Android instances"
        raise TunnelRejected(TunnelRejection.UNSUPPORTED, message)
    if not isinstance(name, str) or not name:
        raise TunnelRejected(TunnelRejection.INVALID_NAME, "spec.tunnel must be a tunnel name")
    try:
        tunnel = await store.get_tunnel(org_id, name)
    except store_errors.NotFound:
        raise TunnelRejected(
            TunnelRejection.NOT_FOUND, f"tunnel {name!r} does not exist in this organization"
        ) from None
    if platform is Platform.ANDROID and not android_compatible(parse_selectors(tunnel.selectors)):
        raise TunnelRejected(
            TunnelRejection.SELECTORS,
            f"tunnel {name!r} has an exact selector port below 1024, which Android "
            "instances cannot use: every exact selector port must be 1024 or higher",
        )
    if tunnels is None or not tunnels.status(org_id, name).online:
        raise TunnelRejected(
            TunnelRejection.OFFLINE,
            f"tunnel {name!r} is offline: no connector holds it (a connector that started "
            "seconds ago can still show offline; retry)",
        )
    return {
        "name": tunnel.name,
        "selectors": list(tunnel.selectors),
        "selector_version": tunnel.selector_version,
    }
