"""The seam between the instances service (control plane) and the edge's host links.

The instances service decides *what* runs *where* (lifecycle, placement, timeouts); the edge
holds one multiplexed link per connected host daemon and carries orders and events over it.
Neither imports the other: the edge implements `HostRegistry`, the instances service
implements `InstanceEvents`, and `serve_server` wires one to the other.

Order of events for one instance (docs/protocol.md section 7 carries them on the link):

    service: registry.start_instance(host_id, order)  -> the host has the order (assigned)
    host:    events.on_instance_event(host_id, InstanceEvent(id, READY, ...))
    ...
    service: registry.stop_instance(host_id, id)      -> the host tears it down
    host:    events.on_instance_event(host_id, InstanceEvent(id, TERMINATED, ...))
    edge:    events.on_host_lost(host_id)             -> the link is gone (after its grace)
"""

from __future__ import annotations

import enum
from datetime import datetime
from typing import Any, Protocol

import attrs

__all__ = [
    "HostInfo",
    "HostRegistry",
    "HostUnavailableError",
    "InstanceAccess",
    "InstanceAccessError",
    "InstanceDirectory",
    "InstanceEvent",
    "InstanceEvents",
    "InstanceOrder",
    "InstancePhase",
    "InstanceRoute",
]


class HostUnavailableError(Exception):
    """The host is not connected (any more), or refused the order; pick another one."""


class InstancePhase(enum.Enum):
    """What a host reports about one of its instances."""

    READY = "ready"  # booted: every per-instance endpoint works
    TERMINATED = "terminated"  # gone on the host (asked to, or failed: see error_message)


@attrs.frozen
class HostInfo:
    """A connected host daemon, as the edge knows it."""

    id: str
    name: str  # the host's hostname, for people
    region: str
    capacity: int  # instances it may run at once
    running: int  # instances it runs now
    platforms: frozenset[str]  # "ios", "android", "xcode", "gradle"
    drivers: frozenset[str]  # "virtual", "android-emulator", "ios-simulator", ...
    version: str
    connected_at: datetime

    @property
    def free(self) -> int:
        return max(0, self.capacity - self.running)


@attrs.frozen
class InstanceOrder:
    """Everything a host needs to start one instance."""

    instance_id: str
    organization_id: str
    platform: str  # "ios" | "android" | "xcode" | "gradle"
    model: str | None
    os_version: str | None
    spec: dict[str, Any]  # the instance's spec as the API stored it (JSON values only)
    # installed before the host reports ready: {kind, name, url, md5, launchMode, forceBundleId}
    initial_assets: tuple[dict[str, Any], ...] = ()
    # the tunnel the instance attaches to before it is ready: {name, selectors, selector_version}
    tunnel: dict[str, Any] | None = None


@attrs.frozen
class InstanceEvent:
    instance_id: str
    phase: InstancePhase
    error_message: str | None = None


class HostRegistry(Protocol):
    """Implemented by the edge."""

    def hosts(self) -> list[HostInfo]:
        """Hosts connected now, in no particular order."""
        ...

    async def start_instance(self, host_id: str, order: InstanceOrder) -> None:
        """Hand the order to the host; returns once the host has it. Raises HostUnavailableError."""
        ...

    async def stop_instance(self, host_id: str, instance_id: str) -> None:
        """Ask the host to tear the instance down; a host that is gone is not an error."""
        ...


class InstanceEvents(Protocol):
    """Implemented by the instances service; the edge calls it."""

    async def on_instance_event(self, host_id: str, event: InstanceEvent) -> None: ...

    async def on_host_lost(self, host_id: str) -> None:
        """The host's link is gone and did not come back within the grace period."""
        ...


@attrs.frozen
class InstanceAccess:
    """A caller's token admits it to a running instance (`InstanceDirectory.authorize`)."""

    instance_id: str
    host_id: str
    platform: str
    stream_only: bool  # the stream token: the browser stream and viewer page only


class InstanceAccessError(Exception):
    """Why a per-instance request is refused: an HTTP status, a reason code and a message."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.message = message


class InstanceDirectory(Protocol):
    """Implemented by the instances service; the edge's per-instance gateway calls it."""

    async def authorize(self, instance_id: str, token: str) -> InstanceAccess:
        """Raises InstanceAccessError: 404 unknown, 410 terminated, 401 wrong token, 409 not
        ready yet."""
        ...

    def touch(self, instance_id: str) -> None:
        """Client traffic reached the instance (its inactivity timer starts again)."""
        ...

    async def route(self, host_id: str, instance_id: str) -> InstanceRoute:
        """Where an instance's egress goes. Raises InstanceAccessError (404 unknown or not on
        this host, 410 terminated, 400 not on a tunnel)."""
        ...


@attrs.frozen
class InstanceRoute:
    """A live tunnel-attached instance, as its host's egress needs it."""

    instance_id: str
    organization_id: str
    tunnel: str
