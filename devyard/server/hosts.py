"""The seam between the instances service (control plane) and the edge's host links.

The instances service decides *what* runs *where* (lifecycle, placement, timeouts); the edge
holds one multiplexed link per connected host daemon and carries orders and events over it.
Neither imports the other, and neither holds the other: the edge implements `HostRegistry`
(orders go down), and publishes what hosts report as `HostEvent`s on a bounded memory channel
that the instances service consumes (events go up). `serve_server` builds both top-down.

Order of events for one instance (docs/protocol.md section 7 carries them on the link):

    edge:    HostRegistered(host_id, instances)       -> reconcile what the host runs
    service: registry.start_instance(host_id, order)  -> the host has the order (assigned)
    host:    InstanceReported(host_id, InstanceEvent(id, READY, ...))
    ...
    service: registry.stop_instance(host_id, id)      -> the host tears it down
    host:    InstanceReported(host_id, InstanceEvent(id, TERMINATED, ...))
    edge:    HostLost(host_id)                        -> the link is gone (after its grace)
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, Final, Protocol

import attrs
import trio

__all__ = [
    "EVENT_BUFFER",
    "AccessDenied",
    "AccessReason",
    "Activity",
    "BuildLogSink",
    "HostEvent",
    "HostInfo",
    "HostLost",
    "HostRegistered",
    "HostRegistry",
    "HostUnavailableError",
    "InstanceAccess",
    "InstanceDirectory",
    "InstanceEvent",
    "InstanceOrder",
    "InstancePhase",
    "InstanceReported",
    "InstanceRoute",
    "TunnelRejected",
    "TunnelRejection",
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

    @classmethod
    def from_fields(cls, instance_id: str, fields: Mapping[str, Any]) -> InstanceOrder:
        """The order of *instance_id* from its stored (JSON) fields; KeyError, TypeError or
        ValueError when they are malformed."""
        return cls(
            instance_id=instance_id,
            organization_id=str(fields["organization_id"]),
            platform=str(fields["platform"]),
            model=fields.get("model"),
            os_version=fields.get("os_version"),
            spec=dict(fields["spec"]),
            initial_assets=tuple(dict(a) for a in fields.get("initial_assets") or ()),
            tunnel=fields.get("tunnel"),
        )


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


@attrs.frozen
class InstanceReported:
    """A host reported *event* about one of its instances."""

    host_id: str
    event: InstanceEvent


@attrs.frozen
class HostRegistered:
    """A host's link registered. ``instances``: the ids its hello says it runs now (None: an
    older host that does not say, so nothing is reconciled); ``at``: trio time the link was
    published to creates (orders handed over from then on may be missing from the list, and
    are not reconciled)."""

    host_id: str
    instances: frozenset[str] | None
    at: float


@attrs.frozen
class HostLost:
    """The host's link is gone and did not come back within the grace period."""

    host_id: str


#: What the edge publishes, in the order it happened, for the instances service to consume.
HostEvent = InstanceReported | HostRegistered | HostLost

#: The bound of the channel that carries `HostEvent`s (the edge waits when it is full).
EVENT_BUFFER: Final = 64


class Activity:
    """When client traffic last reached each instance (trio time): the edge's gateway writes
    it (`InstanceDirectory.touch`), the instances service reads it for inactivity timeouts.
    A plain value both are given; neither holds the other."""

    def __init__(self, clock: Callable[[], float] = trio.current_time) -> None:
        self._clock = clock
        self._last: dict[str, float] = {}

    def touch(self, instance_id: str) -> None:
        self._last[instance_id] = self._clock()

    def last(self, instance_id: str) -> float | None:
        return self._last.get(instance_id)

    def forget(self, instance_id: str) -> None:
        self._last.pop(instance_id, None)

    def items(self) -> list[tuple[str, float]]:
        """(instance id, last traffic) of every instance with traffic recorded."""
        return list(self._last.items())


@attrs.frozen
class InstanceAccess:
    """A caller's token admits it to a running instance (`InstanceDirectory.authorize`)."""

    instance_id: str
    host_id: str
    platform: str
    stream_only: bool  # the stream token: the browser stream and viewer page only
    # a view token (docs/security.md, "The stream-token model"): stream-only, and of the
    # browser's messages only those asking for frames reach the host
    view_only: bool = False
    # a scoped token with ``device:<id>:install``: the install operation only (POST api/apps)
    install_only: bool = False
    # a signed artifact URL: a GET of that one ``api/`` path only (server.artifact_urls)
    artifact_path: str | None = None


class AccessReason(enum.Enum):
    """Why an instance cannot be reached (each boundary maps these once: the edge's HTTP
    refusals in ``edge/asgi.py``, its preamble codes in ``edge/egress.py``)."""

    UNKNOWN = "unknown"  # no such instance
    GONE = "gone"  # it was terminated
    WRONG_TOKEN = "wrong-token"  # noqa: S105 - a reason, not a secret: the token opens another instance, or none
    NOT_READY = "not-ready"  # creating or assigned: not reachable yet
    NOT_ON_HOST = "not-on-host"  # a host asked about an instance placed elsewhere
    NOT_ON_TUNNEL = "not-on-tunnel"  # egress for an instance that names no tunnel


class AccessDenied(Exception):
    """A per-instance request is refused; *message* is for people and names no secret."""

    def __init__(self, reason: AccessReason, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


class TunnelRejection(enum.Enum):
    """Why the tunnel an instance names cannot be used (spec 4.1 rule 3); the API maps
    these once (``api/_errors.py``)."""

    UNSUPPORTED = "unsupported"  # the platform has no tunnels (xcode, gradle)
    INVALID_NAME = "invalid-name"  # not a tunnel name
    NOT_FOUND = "not-found"  # no such tunnel in the organization
    SELECTORS = "selectors"  # Android and an exact selector port below 1024
    OFFLINE = "offline"  # no connector holds it now (retryable)


class TunnelRejected(Exception):
    def __init__(self, reason: TunnelRejection, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


class InstanceDirectory(Protocol):
    """What the edge's gateway and egress ask about instances: store reads and token rules
    (`devyard.server.instances.StoreInstanceDirectory`)."""

    async def authorize(self, instance_id: str, token: str) -> InstanceAccess:
        """Raises AccessDenied (UNKNOWN, GONE, WRONG_TOKEN, NOT_READY)."""
        ...

    async def authorize_signed(
        self, instance_id: str, rest: str, query: dict[str, str]
    ) -> InstanceAccess:
        """A signed artifact URL (`server.artifact_urls`) admits a GET of *rest* alone;
        raises AccessDenied as `authorize` does."""
        ...

    def touch(self, instance_id: str) -> None:
        """Client traffic reached the instance (its inactivity timer starts again)."""
        ...

    async def route(self, host_id: str, instance_id: str) -> InstanceRoute:
        """Where an instance's egress goes. Raises AccessDenied (UNKNOWN, NOT_ON_HOST, GONE,
        NOT_ON_TUNNEL)."""
        ...


@attrs.frozen
class InstanceRoute:
    """A live tunnel-attached instance, as its host's egress needs it."""

    instance_id: str
    organization_id: str
    tunnel: str


class BuildLogSink(Protocol):
    """Where the edge hands a ``build_log`` stream a host opens when an exec of a build
    instance ends (docs/builds.md): its open request ``{instance_id, record}`` is checked, then
    the log's bytes follow until EOF and the sink answers one ``{"ok": true}`` message
    (`devyard.server.builds.BuildLogs`)."""

    async def serve_build_log(
        self, host_id: str, request: dict[str, Any], stream: trio.abc.HalfCloseableStream
    ) -> None: ...
