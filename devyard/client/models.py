"""The API's records as frozen, typed values, parsed from the JSON of ``openapi.yaml``.

Each ``from_json`` takes the decoded JSON of one schema and raises ``ResponseError`` when the
server's answer does not have that shape (a wrong server, a proxy's error page), so callers
never meet a ``KeyError`` from deep inside a parse.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, TypeVar

import attrs

from ._errors import ResponseError

__all__ = [
    "ApiKey",
    "Asset",
    "CreatedApiKey",
    "Member",
    "Organization",
    "OrganizationSettings",
    "Plan",
    "Region",
    "Role",
    "User",
    "WhoAmI",
    "parse_list",
]

T = TypeVar("T")


class Role(enum.StrEnum):
    ADMIN = "admin"
    MEMBER = "member"
    VIEWER = "viewer"


def _obj(data: object, what: str) -> Mapping[str, Any]:
    if not isinstance(data, Mapping):
        raise ResponseError(f"expected a {what} object, got {type(data).__name__}")
    return data


def _get(data: Mapping[str, Any], key: str, kind: type[T], what: str) -> T:
    value = data.get(key)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ResponseError(f"{what}.{key}: expected {kind.__name__}, got {value!r}")
    return value


def _time(data: Mapping[str, Any], key: str, what: str) -> datetime:
    text = _get(data, key, str, what)
    try:
        return datetime.fromisoformat(text)
    except ValueError as exc:
        raise ResponseError(f"{what}.{key}: not a timestamp: {text!r}") from exc


def _optional_time(data: Mapping[str, Any], key: str, what: str) -> datetime | None:
    return None if data.get(key) is None else _time(data, key, what)


def _role(data: Mapping[str, Any], what: str) -> Role:
    try:
        return Role(_get(data, "role", str, what))
    except ValueError as exc:
        raise ResponseError(f"{what}.role: unknown role {data.get('role')!r}") from exc


def parse_list(data: object, item: Callable[[object], T]) -> list[T]:
    if not isinstance(data, list):
        raise ResponseError(f"expected a JSON array, got {type(data).__name__}")
    return [item(x) for x in data]


@attrs.frozen
class User:
    id: str
    name: str
    email: str | None
    created_at: datetime

    @classmethod
    def from_json(cls, data: object) -> User:
        d = _obj(data, "User")
        email = d.get("email")
        if email is not None and not isinstance(email, str):
            raise ResponseError(f"User.email: expected string or null, got {email!r}")
        return cls(
            id=_get(d, "id", str, "User"),
            name=_get(d, "name", str, "User"),
            email=email,
            created_at=_time(d, "createdAt", "User"),
        )


@attrs.frozen
class OrganizationSettings:
    inactivity_timeout_seconds: int
    iphone_duo_enabled: bool

    @classmethod
    def from_json(cls, data: object) -> OrganizationSettings:
        d = _obj(data, "OrganizationSettings")
        return cls(
            inactivity_timeout_seconds=_get(d, "inactivityTimeoutSeconds", int, "settings"),
            iphone_duo_enabled=_get(d, "iphoneDuoEnabled", bool, "settings"),
        )


@attrs.frozen
class Organization:
    id: str
    name: str
    created_at: datetime
    settings: OrganizationSettings

    @classmethod
    def from_json(cls, data: object) -> Organization:
        d = _obj(data, "Organization")
        return cls(
            id=_get(d, "id", str, "Organization"),
            name=_get(d, "name", str, "Organization"),
            created_at=_time(d, "createdAt", "Organization"),
            settings=OrganizationSettings.from_json(d.get("settings")),
        )


@attrs.frozen
class Member:
    user: User
    role: Role

    @classmethod
    def from_json(cls, data: object) -> Member:
        d = _obj(data, "Member")
        return cls(user=User.from_json(d.get("user")), role=_role(d, "Member"))


@attrs.frozen
class ApiKey:
    id: str
    name: str
    user_id: str
    prefix: str
    read_only: bool
    created_at: datetime
    last_used_at: datetime | None
    revoked_at: datetime | None

    @classmethod
    def from_json(cls, data: object) -> ApiKey:
        d = _obj(data, "ApiKey")
        return cls(
            id=_get(d, "id", str, "ApiKey"),
            name=_get(d, "name", str, "ApiKey"),
            user_id=_get(d, "userId", str, "ApiKey"),
            prefix=_get(d, "prefix", str, "ApiKey"),
            read_only=_get(d, "readOnly", bool, "ApiKey"),
            created_at=_time(d, "createdAt", "ApiKey"),
            last_used_at=_optional_time(d, "lastUsedAt", "ApiKey"),
            revoked_at=_optional_time(d, "revokedAt", "ApiKey"),
        )


@attrs.frozen
class CreatedApiKey:
    """A new key with its secret, which the server shows only once."""

    api_key: ApiKey
    key: str = attrs.field(repr=False)

    @classmethod
    def from_json(cls, data: object) -> CreatedApiKey:
        d = _obj(data, "ApiKeyCreated")
        return cls(api_key=ApiKey.from_json(d), key=_get(d, "key", str, "ApiKeyCreated"))


@attrs.frozen
class WhoAmI:
    user: User
    organization: Organization
    role: Role
    api_key: ApiKey
    # which credential made the request: {kind: apiKey|scopedToken|session, id, ...}
    credential: dict[str, Any] = attrs.field(factory=dict)

    @classmethod
    def from_json(cls, data: object) -> WhoAmI:
        d = _obj(data, "WhoAmI")
        credential = d.get("credential")
        return cls(
            user=User.from_json(d.get("user")),
            organization=Organization.from_json(d.get("organization")),
            role=_role(d, "WhoAmI"),
            api_key=ApiKey.from_json(d.get("apiKey")),
            credential=dict(credential) if isinstance(credential, dict) else {},
        )


@attrs.frozen
class Region:
    name: str
    url: str

    @classmethod
    def from_json(cls, data: object) -> Region:
        d = _obj(data, "Region")
        return cls(name=_get(d, "name", str, "Region"), url=_get(d, "url", str, "Region"))


@attrs.frozen
class Plan:
    tid: str
    name: str
    description: str

    @classmethod
    def from_json(cls, data: object) -> Plan:
        d = _obj(data, "Plan")
        return cls(
            tid=_get(d, "tid", str, "Plan"),
            name=_get(d, "name", str, "Plan"),
            description=_get(d, "description", str, "Plan"),
        )


@attrs.frozen
class Asset:
    """An asset (spec 2.4); ``md5`` once bytes were uploaded, URLs when asked for."""

    id: str
    name: str
    os: str | None
    md5: str | None
    size: int | None
    signed_upload_url: str | None
    signed_download_url: str | None

    @classmethod
    def from_json(cls, data: object) -> Asset:
        d = _obj(data, "Asset")
        fields: dict[str, Any] = {}
        for key, attr, kind in (
            ("os", "os", str),
            ("md5", "md5", str),
            ("size", "size", int),
            ("signedUploadUrl", "signed_upload_url", str),
            ("signedDownloadUrl", "signed_download_url", str),
        ):
            fields[attr] = None if d.get(key) is None else _get(d, key, kind, "Asset")
        return cls(id=_get(d, "id", str, "Asset"), name=_get(d, "name", str, "Asset"), **fields)
