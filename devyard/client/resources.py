"""Typed models of instances (every platform), tunnels, usage and build logs.

Structured by the client's one cattrs converter (``_convert``). Instances, tunnels and usage
keep the API's JSON they came from in ``raw`` (not compared, not in repr) so a field this
client does not model yet is still reachable, and ``output.to_json`` prints the API's shape.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from datetime import datetime
from typing import Any, Final, Generic, TypeVar

import attrs

from ._convert import Model, structure
from ._errors import ResponseError

__all__ = [
    "CreatedTunnel",
    "Instance",
    "InstancePage",
    "InstanceState",
    "InstanceStatus",
    "InstanceUsage",
    "InstanceUsagePage",
    "Page",
    "Platform",
    "Tunnel",
    "TunnelConnector",
    "UsageBucket",
    "UsageTotals",
]

T = TypeVar("T")


class Platform(enum.StrEnum):
    ANDROID = "android"
    IOS = "ios"
    XCODE = "xcode"
    GRADLE = "gradle"

    @classmethod
    def of_instance_id(cls, instance_id: str) -> Platform:
        """An instance id is ``<platform>_<region>_<ULID>``."""
        try:
            return cls(instance_id.partition("_")[0])
        except ValueError:
            raise ValueError(f"{instance_id!r} is not an instance id (<platform>_...)") from None


class InstanceState(enum.StrEnum):
    UNKNOWN = "unknown"
    CREATING = "creating"
    ASSIGNED = "assigned"
    READY = "ready"
    TERMINATED = "terminated"


def _state(value: object, _: type) -> InstanceState:
    """A state this client does not know yet (a newer server) is ``UNKNOWN``, not an error."""
    if not isinstance(value, str):
        raise TypeError(f"expected a state string, got {value!r}")
    try:
        return InstanceState(value)
    except ValueError:
        return InstanceState.UNKNOWN


@attrs.frozen
class InstanceStatus(Model):
    state: InstanceState
    api_url: str | None = None
    token: str | None = attrs.field(default=None, repr=False)
    signed_stream_url: str | None = attrs.field(default=None, repr=False)
    adb_web_socket_url: str | None = None
    endpoint_web_socket_url: str | None = None
    mcp_url: str | None = None
    error_message: str | None = None
    termination_reason: str | None = None


@attrs.frozen
class _InstanceMetadata(Model):
    id: str
    organization_id: str
    created_at: datetime
    terminated_at: datetime | None
    display_name: str | None
    labels: dict[str, str]


@attrs.frozen
class _InstanceJson(Model):
    metadata: _InstanceMetadata
    status: InstanceStatus
    spec: dict[str, Any] = attrs.field(factory=dict)


@attrs.frozen
class Instance(Model):
    """An instance of any platform (spec 2.1)."""

    id: str
    platform: Platform
    organization_id: str
    created_at: datetime
    terminated_at: datetime | None
    display_name: str | None
    labels: dict[str, str]
    status: InstanceStatus
    spec: dict[str, Any]
    raw: dict[str, Any] = attrs.field(eq=False, repr=False, factory=dict)

    @property
    def region(self) -> str | None:
        region = self.spec.get("region")
        if isinstance(region, str):
            return region
        parts = self.id.split("_")
        return parts[1] if len(parts) >= 3 else None


def _instance(data: object, _: type) -> Instance:
    """The API nests an instance's names under ``metadata``; the model is flat."""
    parsed = structure(data, _InstanceJson)
    meta = parsed.metadata
    try:
        platform = Platform.of_instance_id(meta.id)
    except ValueError as exc:
        raise ResponseError(str(exc)) from None
    return Instance(
        id=meta.id,
        platform=platform,
        organization_id=meta.organization_id,
        created_at=meta.created_at,
        terminated_at=meta.terminated_at,
        display_name=meta.display_name,
        labels=meta.labels,
        status=parsed.status,
        spec=parsed.spec,
        raw=dict(data) if isinstance(data, dict) else {},
    )


@attrs.frozen
class Page(Generic[T]):
    """One page of a list; ``next_cursor`` is what ``starting_after`` takes for the next."""

    items: list[T]
    has_more: bool
    next_cursor: str | None


@attrs.frozen
class InstancePage(Model):
    """``GET /v1/{platform}_instances`` as everyone but the TS SDK gets it."""

    items: list[Instance]
    has_more: bool = False


@attrs.frozen
class TunnelConnector(Model):
    id: str
    hostname: str
    version: str
    os: str
    connected_since: datetime


@attrs.frozen
class Tunnel(Model):
    """A tunnel and its connectors (docs/tunnels.md)."""

    id: str
    name: str
    organization_id: str
    selectors: list[str]
    selector_version: int
    ephemeral: bool
    created_at: datetime
    token_issued_at: datetime
    token_expires_at: datetime
    status: str
    active_connector: TunnelConnector | None = None
    standbys: list[TunnelConnector] = attrs.field(factory=list)
    raw: dict[str, Any] = attrs.field(eq=False, repr=False, factory=dict)


@attrs.frozen
class CreatedTunnel(Model):
    """A created (or rotated) tunnel with its connector token, shown only once (flat JSON)."""

    tunnel: Tunnel
    token: str = attrs.field(repr=False)


@attrs.frozen
class _Token(Model):
    token: str


def _created_tunnel(data: object, _: type) -> CreatedTunnel:
    return CreatedTunnel(structure(data, Tunnel), structure(data, _Token).token)


@attrs.frozen
class UsageBucket(Model):
    start: datetime
    instances: int
    billed_minutes: int


@attrs.frozen
class UsageTotals(Model):
    """``GET /v1/analytics``: totals of ended instances and per-bucket counts."""

    bucket: str
    instances: int
    billed_minutes: int
    buckets: list[UsageBucket]
    raw: dict[str, Any] = attrs.field(eq=False, repr=False, factory=dict)


@attrs.frozen
class InstanceUsage(Model):
    """One ended instance of ``GET /v1/analytics/instances``."""

    instance_tid: str
    platform: str
    region: str
    labels: dict[str, str]
    started_at: datetime
    ready_at: datetime | None
    stopped_at: datetime
    billed_minutes: int
    termination_reason: str | None


@attrs.frozen
class InstanceUsagePage(Model):
    items: list[InstanceUsage]
    has_more: bool = False


#: the shapes the converter cannot derive from a class (``_convert.converter``)
STRUCTURE_HOOKS: Final[tuple[tuple[type, Callable[[object, type], Any]], ...]] = (
    (InstanceState, _state),
    (Instance, _instance),
    (CreatedTunnel, _created_tunnel),
)
