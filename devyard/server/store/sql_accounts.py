"""`SqlAccounts`: the `accounts.AccountStore` methods in SQL (migration 9); the records and
the rules are in `accounts` and docs/accounts.md."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Final

import attrs

from .accounts import Invitation, OrganizationDomain
from .base import Membership, Organization, Role, User
from .database import Database, Dialect, Row, Tx, as_datetime
from .errors import Conflict, NotFound
from .ids import Kind, new_id, new_ulid

__all__ = ["SqlAccounts"]

_INVITATION: Final = (
    "SELECT id, org_id, email, role, invited_by, created_at, expires_at, accepted_at,"
    " accepted_by, revoked_at FROM invitations"
)
_DOMAIN: Final = (
    "SELECT org_id, domain, txt_token, created_at, verified_at FROM organization_domains"
)


def _opt(value: object) -> datetime | None:
    return None if value is None else as_datetime(value)


def _invitation(row: Row) -> Invitation:
    return Invitation(
        id=row["id"],
        org_id=row["org_id"],
        email=row["email"],
        role=Role(row["role"]),
        invited_by=row["invited_by"],
        created_at=as_datetime(row["created_at"]),
        expires_at=as_datetime(row["expires_at"]),
        accepted_at=_opt(row["accepted_at"]),
        accepted_by=row["accepted_by"],
        revoked_at=_opt(row["revoked_at"]),
    )


def _domain(row: Row) -> OrganizationDomain:
    return OrganizationDomain(
        org_id=row["org_id"],
        domain=row["domain"],
        txt_token=row["txt_token"],
        created_at=as_datetime(row["created_at"]),
        verified_at=_opt(row["verified_at"]),
    )


def _require(tx: Tx, table: str, key: str, kind: str, *, lock: bool = False) -> None:
    """NotFound unless *table* (a literal of this module) has the row; *lock*: row-locked
    (PostgreSQL), which serializes the writers of one organization's list."""
    tail = " FOR UPDATE" if lock and tx.dialect is Dialect.POSTGRESQL else ""
    sql = f"SELECT 1 AS x FROM {table} WHERE id = :id{tail}"  # noqa: S608
    if tx.fetchone(sql, {"id": key}) is None:
        raise NotFound(kind, key)


def _open_clause(tx: Tx) -> str:
    lock = " FOR UPDATE" if tx.dialect is Dialect.POSTGRESQL else ""
    return " AND accepted_at IS NULL AND revoked_at IS NULL AND expires_at > :now" + lock


def _open_invitation(tx: Tx, params: dict[str, object]) -> Row:
    """The open invitation ``:id`` of ``:org_id``, row-locked; NotFound otherwise."""
    row = tx.fetchone(
        _INVITATION + " WHERE id = :id AND org_id = :org_id" + _open_clause(tx), params
    )
    if row is None:
        raise NotFound("invitation", str(params["id"]))
    return row


def _join(tx: Tx, invitation: Row, user_id: str, now: datetime) -> Membership:
    """Closes *invitation* as accepted by *user_id* and adds the membership."""
    params: dict[str, object] = {
        "id": invitation["id"],
        "org_id": invitation["org_id"],
        "user_id": user_id,
        "now": now,
        "role": Role(invitation["role"]),
    }
    member = tx.fetchone(
        "SELECT 1 AS x FROM memberships WHERE org_id = :org_id AND user_id = :user_id", params
    )
    if member is not None:
        raise Conflict("the user is already a member")
    tx.execute(
        "UPDATE invitations SET accepted_at = :now, accepted_by = :user_id WHERE id = :id",
        params,
    )
    tx.execute(
        "INSERT INTO memberships (org_id, user_id, role, created_at)"
        " VALUES (:org_id, :user_id, :role, :now)",
        params,
    )
    return Membership(
        org_id=str(params["org_id"]), user_id=user_id, role=Role(invitation["role"]), created_at=now
    )


class SqlAccounts:
    """Mixed into `SqlStore`; see `AccountStore` for the contract of each method."""

    _db: Database
    _now: Callable[[], datetime]

    # -- organizations and operators -------------------------------------------------------
    async def create_organization_for(self, name: str, admin_user_id: str) -> Organization:
        org = Organization(id=new_id(Kind.ORGANIZATION), name=name, created_at=self._now())

        def create(tx: Tx) -> None:
            _require(tx, "users", admin_user_id, "user")
            tx.execute(
                "INSERT INTO organizations (id, name, created_at) VALUES (:id, :name, :at)",
                {"id": org.id, "name": name, "at": org.created_at},
            )
            tx.execute(
                "INSERT INTO memberships (org_id, user_id, role, created_at)"
                " VALUES (:org_id, :user_id, :role, :at)",
                {
                    "org_id": org.id,
                    "user_id": admin_user_id,
                    "role": Role.ADMIN,
                    "at": org.created_at,
                },
            )

        await self._db.write(create)
        return org

    async def is_operator(self, user_id: str) -> bool:
        row = await self._db.read(
            lambda tx: tx.fetchone(
                "SELECT 1 AS x FROM operators WHERE user_id = :id", {"id": user_id}
            )
        )
        return row is not None

    async def set_operator(self, user_id: str, operator: bool) -> None:
        now = self._now()

        def update(tx: Tx) -> None:
            _require(tx, "users", user_id, "user")
            tx.execute("DELETE FROM operators WHERE user_id = :id", {"id": user_id})
            if operator:
                tx.execute(
                    "INSERT INTO operators (user_id, created_at) VALUES (:id, :at)",
                    {"id": user_id, "at": now},
                )

        await self._db.write(update)

    async def list_operator_emails(self) -> list[str]:
        found = await self._db.read(
            lambda tx: tx.fetchall(
                "SELECT u.email FROM operators o JOIN users u ON u.id = o.user_id"
                " WHERE u.email IS NOT NULL ORDER BY o.created_at, u.id"
            )
        )
        return [str(row["email"]) for row in found]

    # -- invitations -----------------------------------------------------------------------
    async def create_invitation(
        self,
        *,
        org_id: str,
        email: str,
        role: Role,
        token_hash: str,
        invited_by: str,
        ttl_s: int,
    ) -> Invitation:
        now = self._now()
        invitation = Invitation(
            id=f"inv_{new_ulid()}",
            org_id=org_id,
            email=email.lower(),
            role=role,
            invited_by=invited_by,
            created_at=now,
            expires_at=now + timedelta(seconds=ttl_s),
        )

        def create(tx: Tx) -> None:
            _require(tx, "organizations", org_id, "organization")
            tx.execute(
                "UPDATE invitations SET revoked_at = :now WHERE org_id = :org_id"
                " AND email = :email AND accepted_at IS NULL AND revoked_at IS NULL",
                {"now": now, "org_id": org_id, "email": invitation.email},
            )
            tx.execute(
                "INSERT INTO invitations (id, org_id, email, role, token_hash, invited_by,"
                " created_at, expires_at) VALUES (:id, :org_id, :email, :role, :token_hash,"
                " :invited_by, :created_at, :expires_at)",
                {
                    "id": invitation.id,
                    "org_id": org_id,
                    "email": invitation.email,
                    "role": role,
                    "token_hash": token_hash,
                    "invited_by": invited_by,
                    "created_at": now,
                    "expires_at": invitation.expires_at,
                },
            )

        await self._db.write(create)
        return invitation

    async def list_open_invitations(self, org_id: str) -> list[Invitation]:
        params: dict[str, object] = {"org_id": org_id, "now": self._now()}

        def read(tx: Tx) -> list[Row]:
            _require(tx, "organizations", org_id, "organization")
            return tx.fetchall(
                _INVITATION + " WHERE org_id = :org_id AND accepted_at IS NULL"
                " AND revoked_at IS NULL AND expires_at > :now ORDER BY id",
                params,
            )

        return [_invitation(row) for row in await self._db.read(read)]

    async def revoke_invitation(self, org_id: str, invitation_id: str) -> Invitation:
        now = self._now()
        params: dict[str, object] = {"id": invitation_id, "org_id": org_id, "now": now}

        def revoke(tx: Tx) -> Invitation:
            row = tx.fetchone(
                _INVITATION + " WHERE id = :id AND org_id = :org_id" + _open_clause(tx), params
            )
            if row is None:
                raise NotFound("invitation", invitation_id)
            tx.execute("UPDATE invitations SET revoked_at = :now WHERE id = :id", params)
            return attrs.evolve(_invitation(row), revoked_at=now)

        return await self._db.write(revoke)

    async def get_invitation_by_token(self, org_id: str, token_hash: str) -> Invitation:
        params: dict[str, object] = {"org_id": org_id, "hash": token_hash, "now": self._now()}
        sql = (
            _INVITATION + " WHERE org_id = :org_id AND token_hash = :hash"
            " AND accepted_at IS NULL AND revoked_at IS NULL AND expires_at > :now"
        )
        row = await self._db.read(lambda tx: tx.fetchone(sql, params))
        if row is None:
            raise NotFound("invitation", "(by token)")
        return _invitation(row)

    async def accept_invitation(self, org_id: str, invitation_id: str, user_id: str) -> Membership:
        now = self._now()
        params: dict[str, object] = {
            "id": invitation_id,
            "org_id": org_id,
            "now": now,
            "user_id": user_id,
        }

        def accept(tx: Tx) -> Membership:
            row = _open_invitation(tx, params)
            _require(tx, "users", user_id, "user")
            return _join(tx, row, user_id, now)

        return await self._db.write(accept)

    async def accept_invitation_as_new_user(
        self, org_id: str, invitation_id: str, user_name: str
    ) -> tuple[User, Membership]:
        now = self._now()
        user_id = new_id(Kind.USER)
        params: dict[str, object] = {"id": invitation_id, "org_id": org_id, "now": now}

        def accept(tx: Tx) -> tuple[User, Membership]:
            row = _open_invitation(tx, params)
            user = User(id=user_id, name=user_name, email=row["email"], created_at=now)
            tx.execute(
                "INSERT INTO users (id, name, email, created_at)"
                " VALUES (:id, :name, :email, :created_at)",
                attrs.asdict(user),
            )
            return user, _join(tx, row, user_id, now)

        return await self._db.write(accept)

    # -- domains ---------------------------------------------------------------------------
    async def list_domains(self, org_id: str) -> list[OrganizationDomain]:
        def read(tx: Tx) -> list[Row]:
            _require(tx, "organizations", org_id, "organization")
            return tx.fetchall(
                _DOMAIN + " WHERE org_id = :org_id ORDER BY domain", {"org_id": org_id}
            )

        return [_domain(row) for row in await self._db.read(read)]

    async def replace_domains(
        self, org_id: str, domains: Mapping[str, str]
    ) -> list[OrganizationDomain]:
        now = self._now()

        def replace(tx: Tx) -> list[Row]:
            _require(tx, "organizations", org_id, "organization", lock=True)
            existing = {
                str(row["domain"])
                for row in tx.fetchall(_DOMAIN + " WHERE org_id = :org_id", {"org_id": org_id})
            }
            for gone in sorted(existing - set(domains)):
                tx.execute(
                    "DELETE FROM organization_domains WHERE org_id = :org_id AND domain = :d",
                    {"org_id": org_id, "d": gone},
                )
            for domain in sorted(set(domains) - existing):
                tx.execute(
                    "INSERT INTO organization_domains (org_id, domain, txt_token, created_at)"
                    " VALUES (:org_id, :d, :token, :now)",
                    {"org_id": org_id, "d": domain, "token": domains[domain], "now": now},
                )
            return tx.fetchall(
                _DOMAIN + " WHERE org_id = :org_id ORDER BY domain", {"org_id": org_id}
            )

        return [_domain(row) for row in await self._db.write(replace)]

    async def mark_domain_verified(self, org_id: str, domain: str) -> OrganizationDomain:
        params: dict[str, object] = {"org_id": org_id, "d": domain, "now": self._now()}

        def mark(tx: Tx) -> Row:
            tx.execute(
                "UPDATE organization_domains SET verified_at = :now WHERE org_id = :org_id"
                " AND domain = :d AND verified_at IS NULL",
                params,
            )
            row = tx.fetchone(_DOMAIN + " WHERE org_id = :org_id AND domain = :d", params)
            if row is None:
                raise NotFound("domain", domain)
            return row

        return _domain(await self._db.write(mark))
