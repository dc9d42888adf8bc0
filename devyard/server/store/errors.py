"""The store's error vocabulary. Backends translate driver errors into these once, at the
store boundary (`raise ... from`); nothing above the store sees sqlite3 or psycopg errors.

    StoreError
     ├── NotFound            no such row (in that organization)            -> 404
     ├── Conflict            a uniqueness rule or a state forbids the write -> 409
     ├── OrganizationDeleting  a create in an organization being deleted    -> 409
     ├── InvalidValue        a value the schema rejects (CHECK constraint)  -> 422
     ├── StoreUnavailable    the database cannot be reached or answered     -> 503, /readyz 500
     └── MigrationError      the schema cannot be brought to this version   (start-up fails)
"""

from __future__ import annotations

__all__ = [
    "Conflict",
    "InvalidValue",
    "MigrationError",
    "NotFound",
    "OrganizationDeleting",
    "StoreError",
    "StoreUnavailable",
]


class StoreError(Exception):
    """Base of every error the store raises on purpose."""


class NotFound(StoreError):
    """The named object does not exist, or not in the caller's organization."""

    def __init__(self, kind: str, key: str) -> None:
        super().__init__(f"{kind} {key!r} not found")
        self.kind = kind
        self.key = key


class Conflict(StoreError):
    """The write would break a uniqueness rule. ``field`` names the offending field when
    one does (the API puts it in its message)."""

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class LimitReached(StoreError):
    """A create that would run more instances of a platform at once than the organization's
    plan allows (``limit``); checked in the insert's own transaction."""

    def __init__(self, platform: str, limit: int) -> None:
        super().__init__(f"{limit} {platform} instances are running already")
        self.platform = platform
        self.limit = limit


class OrganizationDeleting(StoreError):
    """A create in an organization whose deletion is under way (it ends everything of it):
    not a `Conflict`, so no handler mistakes it for a taken name."""

    def __init__(self, org_id: str) -> None:
        super().__init__(
            f"organization {org_id!r} is being deleted: nothing new can be created in it"
        )
        self.org_id = org_id


class InvalidValue(StoreError):
    """A value the schema's CHECK constraints reject; the API validates first, so this is
    the last line of defence rather than the usual path."""


class StoreUnavailable(StoreError):
    """The database did not answer: unreachable, shut down, or out of connections."""


class MigrationError(StoreError):
    """The database's schema is newer than this code, or an applied migration was edited."""
