"""Rows as records: the decoding shared by every SQL method. Values arrive as the drivers
give them (SQLite: 0/1 for booleans, ISO text for timestamps; PostgreSQL: bool, datetime)."""

from __future__ import annotations

from datetime import UTC, datetime

from .base import (
    ApiKey,
    Feedback,
    FeedbackKind,
    Membership,
    Organization,
    OrganizationSettings,
    Role,
    User,
)
from .database import Row, as_datetime

__all__ = ["api_key", "feedback", "membership", "organization", "user", "utc_now"]


def utc_now() -> datetime:
    return datetime.now(UTC)


def _opt_datetime(value: object) -> datetime | None:
    return None if value is None else as_datetime(value)


def organization(row: Row) -> Organization:
    return Organization(
        id=row["id"],
        name=row["name"],
        created_at=as_datetime(row["created_at"]),
        settings=OrganizationSettings(
            inactivity_timeout_s=int(row["inactivity_timeout_s"]),
            iphone_duo_enabled=bool(row["iphone_duo_enabled"]),
        ),
        deleting=row["deleting_at"] is not None,
    )


def user(row: Row) -> User:
    return User(
        id=row["id"],
        name=row["name"],
        email=row["email"],
        created_at=as_datetime(row["created_at"]),
    )


def membership(row: Row) -> Membership:
    return Membership(
        org_id=row["org_id"],
        user_id=row["user_id"],
        role=Role(row["role"]),
        created_at=as_datetime(row["created_at"]),
    )


def api_key(row: Row) -> ApiKey:
    return ApiKey(
        id=row["id"],
        org_id=row["org_id"],
        user_id=row["user_id"],
        lookup_id=row["lookup_id"],
        name=row["name"],
        read_only=bool(row["read_only"]),
        created_at=as_datetime(row["created_at"]),
        last_used_at=_opt_datetime(row["last_used_at"]),
        revoked_at=_opt_datetime(row["revoked_at"]),
    )


def feedback(row: Row) -> Feedback:
    return Feedback(
        id=row["id"],
        kind=FeedbackKind(row["kind"]),
        message=row["message"],
        email=row["email"],
        org_id=row["org_id"],
        user_id=row["user_id"],
        created_at=as_datetime(row["created_at"]),
    )
