"""Persistent state of the control plane: one `Store` interface, SQLite and PostgreSQL.

    async with open_store(path_or_url) as store:
        org = await store.create_organization("acme")

See `base` for the interface and its conventions, `tokens` for API key secrets, and
docs/store.md for the decisions behind the schema and the migration runner.
"""

from .base import (
    DEFAULT_SETTINGS,
    UNSET,
    Affiliation,
    ApiKey,
    ApiKeyCredential,
    Feedback,
    FeedbackKind,
    KeyContext,
    Member,
    Membership,
    Organization,
    OrganizationSettings,
    Role,
    Store,
    Unset,
    User,
)
from .errors import (
    Conflict,
    InvalidValue,
    MigrationError,
    NotFound,
    StoreError,
    StoreUnavailable,
)
from .factory import open_store
from .ids import Kind, is_id, new_id

__all__ = [
    "DEFAULT_SETTINGS",
    "UNSET",
    "Affiliation",
    "ApiKey",
    "ApiKeyCredential",
    "Conflict",
    "Feedback",
    "FeedbackKind",
    "InvalidValue",
    "KeyContext",
    "Kind",
    "Member",
    "Membership",
    "MigrationError",
    "NotFound",
    "Organization",
    "OrganizationSettings",
    "Role",
    "Store",
    "StoreError",
    "StoreUnavailable",
    "Unset",
    "User",
    "is_id",
    "new_id",
    "open_store",
]
