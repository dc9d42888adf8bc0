"""`SqlStore`: the `Store` protocol in SQL, once, over either backend's `Database`.

Each method builds its ids and timestamps in the trio thread, then runs one small sync
function in one transaction (`Database.read` / `Database.write`). Existence is checked
inside the same transaction as the write that depends on it, so a caller gets a precise
`NotFound` ("user ...") instead of a bare foreign-key failure; the schema's constraints stay
as the backstop for races. Updates are read-modify-write of the whole row under a row lock
(``FOR UPDATE`` on PostgreSQL; SQLite writes are serialized anyway), so two concurrent
partial updates never lose each other's fields. Later tables (instances, tunnels, assets,
tokens, usage) add methods here, or a sibling module of the same shape.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Final, TypeVar

import attrs

from . import rows
from .assets import SqlAssets
from .audit import SqlAudit
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
    Unset,
    User,
)
from .billing import SqlBilling
from .build_cache import SqlBuildCache
from .build_logs import SqlBuildLogs
from .database import Database, Dialect, Row, Tx
from .errors import NotFound
from .ids import Kind, new_id
from .instance_runs import SqlInstanceRuns
from .instances import SqlInstances
from .org_guard import require_live_organization
from .rows import utc_now
from .scoped_tokens import SqlScopedTokens
from .sql_access import SqlAccess
from .sql_accounts import SqlAccounts
from .tunnels import SqlTunnels
from .usage import SqlUsage

__all__ = ["SqlStore", "utc_now"]

T = TypeVar("T")

_ORG: Final = (
    "SELECT o.id, o.name, o.created_at, o.inactivity_timeout_s, o.iphone_duo_enabled,"
    " o.deleting_at FROM organizations o"
)
_USER: Final = "SELECT u.id, u.name, u.email, u.created_at FROM users u"
_MEMBERSHIP: Final = "SELECT org_id, user_id, role, created_at FROM memberships"
_KEY: Final = (
    "SELECT id, org_id, user_id, lookup_id, name, read_only, created_at, last_used_at,"
    " revoked_at FROM api_keys"
)
_FEEDBACK: Final = "SELECT id, kind, message, email, org_id, user_id, created_at FROM feedback"


def _one(tx: Tx, sql: str, params: dict[str, object], kind: str, key: str) -> Row:
    row = tx.fetchone(sql, params)
    if row is None:
        raise NotFound(kind, key)
    return row


def _for_update(tx: Tx) -> str:
    return " FOR UPDATE" if tx.dialect is Dialect.POSTGRESQL else ""


def _get_org(tx: Tx, org_id: str, *, lock: bool = False) -> Organization:
    sql = _ORG + " WHERE o.id = :id" + (_for_update(tx) if lock else "")
    return rows.organization(_one(tx, sql, {"id": org_id}, "organization", org_id))


def _get_user(tx: Tx, user_id: str, *, lock: bool = False) -> User:
    sql = _USER + " WHERE u.id = :id" + (_for_update(tx) if lock else "")
    return rows.user(_one(tx, sql, {"id": user_id}, "user", user_id))


def _get_membership(tx: Tx, org_id: str, user_id: str) -> Membership:
    sql = _MEMBERSHIP + " WHERE org_id = :org_id AND user_id = :user_id"
    params: dict[str, object] = {"org_id": org_id, "user_id": user_id}
    return rows.membership(_one(tx, sql, params, "membership", f"{org_id}/{user_id}"))


def _get_key(tx: Tx, org_id: str, key_id: str) -> ApiKey:
    sql = _KEY + " WHERE id = :id AND org_id = :org_id"
    return rows.api_key(_one(tx, sql, {"id": key_id, "org_id": org_id}, "API key", key_id))


class SqlStore(
    SqlAccounts,
    SqlAccess,
    SqlInstances,
    SqlTunnels,
    SqlAssets,
    SqlScopedTokens,
    SqlUsage,
    SqlAudit,
    SqlBuildLogs,
    SqlBuildCache,
    SqlBilling,
    SqlInstanceRuns,
):
    """The `base.Store` over a `Database`; obtain one with `open_store`."""

    def __init__(self, db: Database, *, clock: Callable[[], datetime] = utc_now) -> None:
        self._db = db
        self._clock = clock

    def __repr__(self) -> str:
        return f"<SqlStore {self._db.dialect}>"

    def _now(self) -> datetime:
        return self._clock().astimezone(UTC)

    # -- health and lifetime --------------------------------------------------------------
    async def ping(self) -> None:
        await self._db.read(lambda tx: tx.fetchone("SELECT 1 AS ok"))

    async def aclose(self) -> None:
        await self._db.aclose()

    # -- organizations ---------------------------------------------------------------------
    async def create_organization(
        self, name: str, *, settings: OrganizationSettings = DEFAULT_SETTINGS
    ) -> Organization:
        org = Organization(
            id=new_id(Kind.ORGANIZATION), name=name, created_at=self._now(), settings=settings
        )
        await self._db.write(lambda tx: _insert_org(tx, org))
        return org

    async def get_organization(self, org_id: str) -> Organization:
        return await self._db.read(lambda tx: _get_org(tx, org_id))

    async def get_organization_by_name(self, name: str) -> Organization:
        sql = _ORG + " WHERE o.name = :name"
        return await self._db.read(
            lambda tx: rows.organization(_one(tx, sql, {"name": name}, "organization", name))
        )

    async def list_organizations(self) -> list[Organization]:
        found = await self._db.read(lambda tx: tx.fetchall(_ORG + " ORDER BY o.id"))
        return [rows.organization(row) for row in found]

    async def update_organization(
        self,
        org_id: str,
        *,
        name: str | None = None,
        settings: OrganizationSettings | None = None,
    ) -> Organization:
        def update(tx: Tx) -> Organization:
            old = _get_org(tx, org_id, lock=True)
            new = attrs.evolve(
                old,
                name=old.name if name is None else name,
                settings=old.settings if settings is None else settings,
            )
            if new != old:
                tx.execute(
                    "UPDATE organizations SET name = :name,"
                    " inactivity_timeout_s = :inactivity_timeout_s,"
                    " iphone_duo_enabled = :iphone_duo_enabled WHERE id = :id",
                    _org_params(new),
                )
            return new

        return await self._db.write(update)

    async def delete_organization(self, org_id: str) -> Organization:
        def delete(tx: Tx) -> Organization:
            org = _get_org(tx, org_id, lock=True)
            tx.execute("DELETE FROM organizations WHERE id = :id", {"id": org_id})
            return org

        return await self._db.write(delete)

    async def mark_organization_deleting(self, org_id: str) -> Organization:
        def mark(tx: Tx) -> Organization:
            org = _get_org(tx, org_id, lock=True)
            if org.deleting:
                return org
            tx.execute(
                "UPDATE organizations SET deleting_at = :now WHERE id = :id",
                {"id": org_id, "now": self._now()},
            )
            return attrs.evolve(org, deleting=True)

        return await self._db.write(mark)

    # -- users -----------------------------------------------------------------------------
    async def create_user(self, name: str, *, email: str | None = None) -> User:
        user = User(id=new_id(Kind.USER), name=name, email=email, created_at=self._now())
        await self._db.write(
            lambda tx: tx.execute(
                "INSERT INTO users (id, name, email, created_at)"
                " VALUES (:id, :name, :email, :created_at)",
                attrs.asdict(user),
            )
        )
        return user

    async def get_user(self, user_id: str) -> User:
        return await self._db.read(lambda tx: _get_user(tx, user_id))

    async def get_user_by_name(self, name: str) -> User:
        sql = _USER + " WHERE u.name = :name"
        return await self._db.read(
            lambda tx: rows.user(_one(tx, sql, {"name": name}, "user", name))
        )

    async def update_user(
        self, user_id: str, *, name: str | None = None, email: str | Unset | None = UNSET
    ) -> User:
        def update(tx: Tx) -> User:
            old = _get_user(tx, user_id, lock=True)
            new = attrs.evolve(
                old,
                name=old.name if name is None else name,
                email=old.email if email is UNSET else email,
            )
            if new != old:
                tx.execute(
                    "UPDATE users SET name = :name, email = :email WHERE id = :id",
                    {"id": new.id, "name": new.name, "email": new.email},
                )
            return new

        return await self._db.write(update)

    # -- memberships -----------------------------------------------------------------------
    async def add_membership(self, org_id: str, user_id: str, role: Role) -> Membership:
        membership = Membership(org_id=org_id, user_id=user_id, role=role, created_at=self._now())

        def add(tx: Tx) -> None:
            _get_org(tx, org_id)
            _get_user(tx, user_id)
            tx.execute(
                "INSERT INTO memberships (org_id, user_id, role, created_at)"
                " VALUES (:org_id, :user_id, :role, :created_at)",
                attrs.asdict(membership),
            )

        await self._db.write(add)
        return membership

    async def get_membership(self, org_id: str, user_id: str) -> Membership:
        return await self._db.read(lambda tx: _get_membership(tx, org_id, user_id))

    async def set_membership_role(self, org_id: str, user_id: str, role: Role) -> Membership:
        def update(tx: Tx) -> Membership:
            tx.execute(
                "UPDATE memberships SET role = :role WHERE org_id = :org_id AND user_id = :user_id",
                {"org_id": org_id, "user_id": user_id, "role": role},
            )
            return _get_membership(tx, org_id, user_id)

        return await self._db.write(update)

    async def remove_membership(self, org_id: str, user_id: str) -> None:
        params: dict[str, object] = {"org_id": org_id, "user_id": user_id, "now": self._now()}

        def remove(tx: Tx) -> None:
            _get_membership(tx, org_id, user_id)
            tx.execute(
                "DELETE FROM memberships WHERE org_id = :org_id AND user_id = :user_id", params
            )
            tx.execute(
                "UPDATE api_keys SET revoked_at = :now"
                " WHERE org_id = :org_id AND user_id = :user_id AND revoked_at IS NULL",
                params,
            )

        await self._db.write(remove)

    async def list_members(self, org_id: str) -> list[Member]:
        def read(tx: Tx) -> list[Member]:
            _get_org(tx, org_id)
            found = tx.fetchall(
                "SELECT u.id, u.name, u.email, u.created_at, m.role FROM memberships m"
                " JOIN users u ON u.id = m.user_id WHERE m.org_id = :org_id"
                " ORDER BY m.created_at, u.id",
                {"org_id": org_id},
            )
            return [Member(user=rows.user(row), role=Role(row["role"])) for row in found]

        return await self._db.read(read)

    async def list_affiliations(self, user_id: str) -> list[Affiliation]:
        def read(tx: Tx) -> list[Affiliation]:
            _get_user(tx, user_id)
            found = tx.fetchall(
                _ORG.replace("SELECT", "SELECT m.role,", 1)
                + " JOIN memberships m ON m.org_id = o.id WHERE m.user_id = :user_id"
                " ORDER BY m.created_at, o.id",
                {"user_id": user_id},
            )
            return [
                Affiliation(organization=rows.organization(row), role=Role(row["role"]))
                for row in found
            ]

        return await self._db.read(read)

    # -- API keys --------------------------------------------------------------------------
    async def create_api_key(
        self,
        *,
        org_id: str,
        user_id: str,
        name: str,
        lookup_id: str,
        secret_hash: str,
        read_only: bool = False,
    ) -> ApiKey:
        key = ApiKey(
            id=new_id(Kind.API_KEY),
            org_id=org_id,
            user_id=user_id,
            lookup_id=lookup_id,
            name=name,
            read_only=read_only,
            created_at=self._now(),
        )

        def create(tx: Tx) -> None:
            require_live_organization(tx, org_id)
            _get_membership(tx, org_id, user_id)
            tx.execute(
                "INSERT INTO api_keys (id, org_id, user_id, lookup_id, name, read_only,"
                " created_at, last_used_at, revoked_at, secret_hash) VALUES (:id, :org_id,"
                " :user_id, :lookup_id, :name, :read_only, :created_at, :last_used_at,"
                " :revoked_at, :secret_hash)",
                {**attrs.asdict(key), "secret_hash": secret_hash},
            )

        await self._db.write(create)
        return key

    async def get_api_key(self, org_id: str, key_id: str) -> ApiKey:
        return await self._db.read(lambda tx: _get_key(tx, org_id, key_id))

    async def get_api_key_by_lookup(self, lookup_id: str) -> ApiKeyCredential:
        sql = _KEY.replace(" FROM", ", secret_hash FROM", 1) + (
            " WHERE lookup_id = :lookup_id AND revoked_at IS NULL"
        )
        row = await self._db.read(
            lambda tx: _one(tx, sql, {"lookup_id": lookup_id}, "API key", lookup_id)
        )
        return ApiKeyCredential(api_key=rows.api_key(row), secret_hash=row["secret_hash"])

    async def get_api_key_context(
        self, *, lookup_id: str | None = None, org_id: str = "", key_id: str = ""
    ) -> KeyContext:
        # one transaction, one worker-thread hop: the four reads of an authenticated request
        def read(tx: Tx) -> KeyContext:
            if lookup_id is not None:
                sql = _KEY.replace(" FROM", ", secret_hash FROM", 1) + (
                    " WHERE lookup_id = :lookup_id AND revoked_at IS NULL"
                )
                row = _one(tx, sql, {"lookup_id": lookup_id}, "API key", lookup_id)
                credential = ApiKeyCredential(rows.api_key(row), row["secret_hash"])
            else:
                credential = ApiKeyCredential(_get_key(tx, org_id, key_id), "")
            key = credential.api_key
            membership = _get_membership(tx, key.org_id, key.user_id)
            return KeyContext(
                credential, membership.role, _get_user(tx, key.user_id), _get_org(tx, key.org_id)
            )

        return await self._db.read(read)

    async def list_api_keys(
        self, org_id: str, *, user_id: str | None = None, include_revoked: bool = False
    ) -> list[ApiKey]:
        sql = _KEY + " WHERE org_id = :org_id"
        if user_id is not None:
            sql += " AND user_id = :user_id"
        if not include_revoked:
            sql += " AND revoked_at IS NULL"
        params: dict[str, object] = {"org_id": org_id, "user_id": user_id}
        found = await self._db.read(lambda tx: tx.fetchall(sql + " ORDER BY id", params))
        return [rows.api_key(row) for row in found]

    async def revoke_api_key(self, org_id: str, key_id: str) -> ApiKey:
        now = self._now()

        def revoke(tx: Tx) -> ApiKey:
            tx.execute(
                "UPDATE api_keys SET revoked_at = :now"
                " WHERE id = :id AND org_id = :org_id AND revoked_at IS NULL",
                {"id": key_id, "org_id": org_id, "now": now},
            )
            return _get_key(tx, org_id, key_id)

        return await self._db.write(revoke)

    async def touch_api_key(self, key_id: str, *, at: datetime | None = None) -> None:
        params: dict[str, object] = {"id": key_id, "at": self._now() if at is None else at}
        await self._db.write(
            lambda tx: tx.execute(
                "UPDATE api_keys SET last_used_at = :at"
                " WHERE id = :id AND (last_used_at IS NULL OR last_used_at < :at)",
                params,
            )
        )

    # -- feedback and support messages -----------------------------------------------------
    async def add_feedback(
        self,
        message: str,
        *,
        email: str | None = None,
        kind: FeedbackKind = FeedbackKind.FEEDBACK,
        org_id: str | None = None,
        user_id: str | None = None,
    ) -> Feedback:
        feedback = Feedback(
            id=new_id(Kind.FEEDBACK),
            kind=kind,
            message=message,
            email=email,
            org_id=org_id,
            user_id=user_id,
            created_at=self._now(),
        )

        def add(tx: Tx) -> None:
            if org_id is not None:
                _get_org(tx, org_id)
            if user_id is not None:
                _get_user(tx, user_id)
            tx.execute(
                "INSERT INTO feedback (id, kind, message, email, org_id, user_id, created_at)"
                " VALUES (:id, :kind, :message, :email, :org_id, :user_id, :created_at)",
                attrs.asdict(feedback),
            )

        await self._db.write(add)
        return feedback

    async def list_feedback(self, *, org_id: str | None = None) -> list[Feedback]:
        where = "" if org_id is None else " WHERE org_id = :org_id"
        found = await self._db.read(
            lambda tx: tx.fetchall(_FEEDBACK + where + " ORDER BY id", {"org_id": org_id})
        )
        return [rows.feedback(row) for row in found]


def _org_params(org: Organization) -> dict[str, object]:
    return {
        "id": org.id,
        "name": org.name,
        "created_at": org.created_at,
        "inactivity_timeout_s": org.settings.inactivity_timeout_s,
        "iphone_duo_enabled": org.settings.iphone_duo_enabled,
    }


def _insert_org(tx: Tx, org: Organization) -> None:
    tx.execute(
        "INSERT INTO organizations"
        " (id, name, created_at, inactivity_timeout_s, iphone_duo_enabled)"
        " VALUES (:id, :name, :created_at, :inactivity_timeout_s, :iphone_duo_enabled)",
        _org_params(org),
    )
