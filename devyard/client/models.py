"""The API's records as frozen, typed values, parsed from the JSON of ``openapi.yaml``.

``X.from_json(data)`` structures the decoded JSON of one schema with the client's one cattrs
converter (``_convert``): camelCase names, strict JSON types, timestamps; a server answer of
another shape (a wrong server, a proxy's error page) is a ``ResponseError``, never a
``KeyError`` from deep inside a parse.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from datetime import datetime
from typing import Any, Final, TypeVar

import attrs

from ._convert import Model, structure, structure_list

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


def parse_list(data: object, item: type[T]) -> list[T]:
    """A JSON array of one model: ``parse_list(data, Region)``."""
    return structure_list(data, item)


@attrs.frozen
class User(Model):
    id: str
    name: str
    email: str | None
    created_at: datetime


@attrs.frozen
class OrganizationSettings(Model):
    inactivity_timeout_seconds: int
    iphone_duo_enabled: bool


@attrs.frozen
class Organization(Model):
    id: str
    name: str
    created_at: datetime
    settings: OrganizationSettings


@attrs.frozen
class Member(Model):
    user: User
    role: Role


@attrs.frozen
class ApiKey(Model):
    id: str
    name: str
    user_id: str
    prefix: str
    read_only: bool
    created_at: datetime
    last_used_at: datetime | None
    revoked_at: datetime | None


@attrs.frozen
class CreatedApiKey(Model):
    """A new key with its secret, which the server shows only once (one flat JSON object)."""

    api_key: ApiKey
    key: str = attrs.field(repr=False)


def _created_api_key(data: object, _: type) -> CreatedApiKey:
    return CreatedApiKey(api_key=structure(data, ApiKey), key=structure(data, _Key).key)


@attrs.frozen
class _Key(Model):
    key: str


#: the shapes the converter cannot derive from a class (``_convert.converter``)
STRUCTURE_HOOKS: Final[tuple[tuple[type, Callable[[object, type], Any]], ...]] = (
    (CreatedApiKey, _created_api_key),
)


@attrs.frozen
class WhoAmI(Model):
    user: User
    organization: Organization
    role: Role
    api_key: ApiKey
    # which credential made the request: {kind: apiKey|scopedToken|session, id, ...}
    credential: dict[str, Any] = attrs.field(factory=dict)


@attrs.frozen
class Region(Model):
    name: str
    url: str


@attrs.frozen
class Plan(Model):
    tid: str
    name: str
    description: str


@attrs.frozen
class Asset(Model):
    """An asset (spec 2.4); ``md5`` once bytes were uploaded, URLs when asked for."""

    id: str
    name: str
    os: str | None
    md5: str | None
    size: int | None
    signed_upload_url: str | None
    signed_download_url: str | None
