"""Typed models of instances (every platform), tunnels, usage and build logs.

Each keeps the API's JSON it came from in ``raw`` (not compared, not in repr) so a field this
client does not model yet is still reachable, and ``output.to_json`` prints the API's shape.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Generic, TypeVar

import attrs

from ._errors import ResponseError
from .models import _get, _obj, _optional_time, _time

__all__ = [
    "CreatedTunnel",
    "Instance",
    "InstanceState",
    "InstanceStatus",
    "InstanceUsage",
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


def _opt_str(data: Mapping[str, Any], key: str, what: str) -> str | None:
    return None if data.get(key) is None else _get(data, key, str, what)


def _labels(data: Mapping[str, Any], what: str) -> dict[str, str]:
    labels = data.get("labels") or {}
    if not isinstance(labels, Mapping) or not all(isinstance(v, str) for v in labels.values()):
        raise ResponseError(f"{what}.labels: expected an object of strings")
    return dict(labels)


@attrs.frozen
class InstanceStatus:
    state: InstanceState
    api_url: str | None = None
    token: str | None = attrs.field(default=None, repr=False)
    signed_stream_url: str | None = attrs.field(default=None, repr=False)
    adb_web_socket_url: str | None = None
    endpoint_web_socket_url: str | None = None
    mcp_url: str | None = None
    error_message: str | None = None
    termination_reason: str | None = None

    @classmethod
    def from_json(cls, data: object) -> InstanceStatus:
        d = _obj(data, "InstanceStatus")
        state = _get(d, "state", str, "InstanceStatus")
        try:
            parsed = InstanceState(state)
        except ValueError:
            parsed = InstanceState.UNKNOWN
        names = {
            "api_url": "apiUrl",
            "token": "token",
            "signed_stream_url": "signedStreamUrl",
            "adb_web_socket_url": "adbWebSocketUrl",
            "endpoint_web_socket_url": "endpointWebSocketUrl",
            "mcp_url": "mcpUrl",
            "error_message": "errorMessage",
            "termination_reason": "terminationReason",
        }
        return cls(parsed, **{a: _opt_str(d, k, "InstanceStatus") for a, k in names.items()})


@attrs.frozen
class Instance:
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
    raw: dict[str, Any] = attrs.field(eq=False, repr=False)

    @property
    def region(self) -> str | None:
        region = self.spec.get("region")
        if isinstance(region, str):
            return region
        parts = self.id.split("_")
        return parts[1] if len(parts) >= 3 else None

    @classmethod
    def from_json(cls, data: object) -> Instance:
        d = _obj(data, "Instance")
        meta = _obj(d.get("metadata"), "Instance.metadata")
        instance_id = _get(meta, "id", str, "Instance.metadata")
        try:
            platform = Platform.of_instance_id(instance_id)
        except ValueError as exc:
            raise ResponseError(str(exc)) from None
        spec = d.get("spec") or {}
        return cls(
            id=instance_id,
            platform=platform,
            organization_id=_get(meta, "organizationId", str, "Instance.metadata"),
            created_at=_time(meta, "createdAt", "Instance.metadata"),
            terminated_at=_optional_time(meta, "terminatedAt", "Instance.metadata"),
            display_name=_opt_str(meta, "displayName", "Instance.metadata"),
            labels=_labels(meta, "Instance.metadata"),
            status=InstanceStatus.from_json(d.get("status")),
            spec=dict(spec) if isinstance(spec, Mapping) else {},
            raw=dict(d),
        )


@attrs.frozen
class Page(Generic[T]):
    """One page of a list; ``next_cursor`` is what ``starting_after`` takes for the next."""

    items: list[T]
    has_more: bool
    next_cursor: str | None


@attrs.frozen
class TunnelConnector:
    id: str
    hostname: str
    version: str
    os: str
    connected_since: datetime

    @classmethod
    def from_json(cls, data: object) -> TunnelConnector:
        d = _obj(data, "TunnelConnector")
        w = "TunnelConnector"
        return cls(
            id=_get(d, "id", str, w),
            hostname=_get(d, "hostname", str, w),
            version=_get(d, "version", str, w),
            os=_get(d, "os", str, w),
            connected_since=_time(d, "connectedSince", w),
        )


@attrs.frozen
class Tunnel:
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
    active_connector: TunnelConnector | None
    standbys: list[TunnelConnector]
    raw: dict[str, Any] = attrs.field(eq=False, repr=False)

    @classmethod
    def from_json(cls, data: object) -> Tunnel:
        d = _obj(data, "Tunnel")
        w = "Tunnel"
        active = d.get("activeConnector")
        return cls(
            id=_get(d, "id", str, w),
            name=_get(d, "name", str, w),
            organization_id=_get(d, "organizationId", str, w),
            selectors=[str(s) for s in _get(d, "selectors", list, w)],
            selector_version=_get(d, "selectorVersion", int, w),
            ephemeral=_get(d, "ephemeral", bool, w),
            created_at=_time(d, "createdAt", w),
            token_issued_at=_time(d, "tokenIssuedAt", w),
            token_expires_at=_time(d, "tokenExpiresAt", w),
            status=_get(d, "status", str, w),
            active_connector=None if active is None else TunnelConnector.from_json(active),
            standbys=[TunnelConnector.from_json(s) for s in d.get("standbys") or []],
            raw=dict(d),
        )


@attrs.frozen
class CreatedTunnel:
    """A created (or rotated) tunnel with its connector token, shown only once."""

    tunnel: Tunnel
    token: str = attrs.field(repr=False)

    @classmethod
    def from_json(cls, data: object) -> CreatedTunnel:
        d = _obj(data, "TunnelWithToken")
        return cls(Tunnel.from_json(d), _get(d, "token", str, "TunnelWithToken"))


@attrs.frozen
class UsageBucket:
    start: datetime
    instances: int
    billed_minutes: int

    @classmethod
    def from_json(cls, data: object) -> UsageBucket:
        d = _obj(data, "UsageBucket")
        return cls(
            start=_time(d, "start", "UsageBucket"),
            instances=_get(d, "instances", int, "UsageBucket"),
            billed_minutes=_get(d, "billedMinutes", int, "UsageBucket"),
        )


@attrs.frozen
class UsageTotals:
    """``GET /v1/analytics``: totals of ended instances and per-bucket counts."""

    bucket: str
    instances: int
    billed_minutes: int
    buckets: list[UsageBucket]
    raw: dict[str, Any] = attrs.field(eq=False, repr=False)

    @classmethod
    def from_json(cls, data: object) -> UsageTotals:
        d = _obj(data, "UsageTotals")
        return cls(
            bucket=_get(d, "bucket", str, "UsageTotals"),
            instances=_get(d, "instances", int, "UsageTotals"),
            billed_minutes=_get(d, "billedMinutes", int, "UsageTotals"),
            buckets=[UsageBucket.from_json(b) for b in _get(d, "buckets", list, "UsageTotals")],
            raw=dict(d),
        )


@attrs.frozen
class InstanceUsage:
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

    @classmethod
    def from_json(cls, data: object) -> InstanceUsage:
        d = _obj(data, "InstanceUsage")
        w = "InstanceUsage"
        return cls(
            instance_tid=_get(d, "instanceTid", str, w),
            platform=_get(d, "platform", str, w),
            region=_get(d, "region", str, w),
            labels=_labels(d, w),
            started_at=_time(d, "startedAt", w),
            ready_at=_optional_time(d, "readyAt", w),
            stopped_at=_time(d, "stoppedAt", w),
            billed_minutes=_get(d, "billedMinutes", int, w),
            termination_reason=_opt_str(d, "terminationReason", w),
        )
