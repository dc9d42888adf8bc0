"""`SqlSso`: the `sso.SsoStore` methods in SQL (migration 12); the records and the rules are
in `sso` and docs/accounts.md."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Final

import attrs

from . import rows
from .base import ApiKey, Feedback, Role, User
from .database import Database, Dialect, Row, Tx, as_datetime
from .errors import Conflict, NotFound
from .ids import Kind, new_id, new_ulid
from .org_guard import require_live_organization
from .sso import SSO_KEY_NAME, OidcLogin, SsoJoin, SupportAnswer

__all__ = ["SqlSso"]

_LOGIN: Final = (
    "SELECT id, org_id, return_to, created_at, expires_at, browser_hash, nonce_hash,"
    " verifier_sealed FROM oidc_logins"
)
_ANSWER: Final = (
    "SELECT id, feedback_id, message, answered_by, emailed, created_at FROM support_answers"
)
_KEY: Final = (
    "SELECT id, org_id, user_id, lookup_id, name, read_only, created_at, last_used_at,"
    " revoked_at FROM api_keys"
)
_PRUNE_AFTER: Final = timedelta(hours=1)


def _login(row: Row) -> OidcLogin:
    return OidcLogin(
        id=row["id"],
        org_id=row["org_id"],
        return_to=row["return_to"],
        created_at=as_datetime(row["created_at"]),
        expires_at=as_datetime(row["expires_at"]),
        browser_hash=row["browser_hash"],
        nonce_hash=row["nonce_hash"],
        verifier_sealed=row["verifier_sealed"],
    )


def _answer(row: Row) -> SupportAnswer:
    return SupportAnswer(
        id=row["id"],
        feedback_id=row["feedback_id"],
        message=row["message"],
        answered_by=row["answered_by"],
        emailed=bool(row["emailed"]),
        created_at=as_datetime(row["created_at"]),
    )


def _find_or_create_user(
    tx: Tx, email: str, names: tuple[str, ...], now: datetime
) -> tuple[User, bool]:
    row = tx.fetchone(
        "SELECT id, name, email, created_at FROM users WHERE lower(email) = :email",
        {"email": email.lower()},
    )
    if row is not None:
        return rows.user(row), False
    for name in names:
        if tx.fetchone("SELECT 1 AS x FROM users WHERE name = :name", {"name": name}) is None:
            user = User(id=new_id(Kind.USER), name=name, email=email.lower(), created_at=now)
            tx.execute(
                "INSERT INTO users (id, name, email, created_at)"
                " VALUES (:id, :name, :email, :created_at)",
                attrs.asdict(user),
            )
            return user, True
    raise Conflict("no free user name", field="name")


class SqlSso:
    """Mixed into `SqlStore` (through `SqlAccess`); see `sso.SsoStore` for the contracts."""

    _db: Database
    _now: Callable[[], datetime]

    # -- logins in flight ------------------------------------------------------------------
    async def create_oidc_login(
        self,
        *,
        org_id: str,
        state_hash: str,
        browser_hash: str,
        nonce_hash: str,
        verifier_sealed: str,
        return_to: str,
        ttl_s: int,
    ) -> OidcLogin:
        now = self._now()
        login = OidcLogin(
            id=f"oil_{new_ulid()}",
            org_id=org_id,
            return_to=return_to,
            created_at=now,
            expires_at=now + timedelta(seconds=ttl_s),
            browser_hash=browser_hash,
            nonce_hash=nonce_hash,
            verifier_sealed=verifier_sealed,
        )

        def create(tx: Tx) -> OidcLogin:
            require_live_organization(tx, org_id)
            tx.execute(
                "DELETE FROM oidc_logins WHERE expires_at < :old", {"old": now - _PRUNE_AFTER}
            )
            tx.execute(
                "INSERT INTO oidc_logins (id, org_id, state_hash, browser_hash, nonce_hash,"
                " verifier_sealed, return_to, created_at, expires_at) VALUES (:id, :org_id,"
                " :state_hash, :browser_hash, :nonce_hash, :verifier_sealed, :return_to,"
                " :created_at, :expires_at)",
                {**attrs.asdict(login), "state_hash": state_hash},
            )
            return login

        return await self._db.write(create)

    async def consume_oidc_login(self, state_hash: str) -> OidcLogin:
        params: dict[str, object] = {"hash": state_hash, "now": self._now()}

        def consume(tx: Tx) -> Row:
            changed = tx.execute(
                "UPDATE oidc_logins SET used_at = :now WHERE state_hash = :hash"
                " AND used_at IS NULL AND expires_at > :now",
                params,
            )
            row = tx.fetchone(_LOGIN + " WHERE state_hash = :hash", params)
            if changed != 1 or row is None:
                raise NotFound("sign-in", "(by state)")
            return row

        return _login(await self._db.write(consume))

    async def sso_join(
        self,
        org_id: str,
        *,
        email: str,
        user_names: tuple[str, ...],
        role: Role,
        key_lookup_id: str,
        key_secret_hash: str,
    ) -> SsoJoin:
        now = self._now()

        def join(tx: Tx) -> SsoJoin:
            require_live_organization(tx, org_id)
            user, created = _find_or_create_user(tx, email, user_names, now)
            params: dict[str, object] = {
                "org_id": org_id,
                "user_id": user.id,
                "role": role,
                "now": now,
                "name": SSO_KEY_NAME,
            }
            lock = " FOR UPDATE" if tx.dialect is Dialect.POSTGRESQL else ""
            member = tx.fetchone(
                "SELECT role FROM memberships WHERE org_id = :org_id AND user_id = :user_id"  # noqa: S608
                + lock,
                params,
            )
            if member is None:
                tx.execute(
                    "INSERT INTO memberships (org_id, user_id, role, created_at)"
                    " VALUES (:org_id, :user_id, :role, :now)",
                    params,
                )
            key_row = tx.fetchone(
                _KEY + " WHERE org_id = :org_id AND user_id = :user_id AND name = :name"
                " AND revoked_at IS NULL AND read_only = FALSE ORDER BY id LIMIT 1",
                params,
            )
            if key_row is None:
                key = ApiKey(
                    id=new_id(Kind.API_KEY),
                    org_id=org_id,
                    user_id=user.id,
                    lookup_id=key_lookup_id,
                    name=SSO_KEY_NAME,
                    read_only=False,
                    created_at=now,
                )
                tx.execute(
                    "INSERT INTO api_keys (id, org_id, user_id, lookup_id, name, read_only,"
                    " created_at, last_used_at, revoked_at, secret_hash) VALUES (:id,"
                    " :org_id, :user_id, :lookup_id, :name, :read_only, :created_at,"
                    " :last_used_at, :revoked_at, :secret_hash)",
                    {**attrs.asdict(key), "secret_hash": key_secret_hash},
                )
            else:
                key = rows.api_key(key_row)
            return SsoJoin(
                user=user,
                role=role if member is None else Role(member["role"]),
                api_key=key,
                user_created=created,
                joined=member is None,
            )

        return await self._db.write(join)

    # -- support answers -------------------------------------------------------------------
    async def get_feedback(self, feedback_id: str) -> Feedback:
        row = await self._db.read(
            lambda tx: tx.fetchone(
                "SELECT id, kind, message, email, org_id, user_id, created_at FROM feedback"
                " WHERE id = :id",
                {"id": feedback_id},
            )
        )
        if row is None:
            raise NotFound("support message", feedback_id)
        return rows.feedback(row)

    async def add_support_answer(
        self, feedback_id: str, *, message: str, answered_by: str, emailed: bool
    ) -> SupportAnswer:
        answer = SupportAnswer(
            id=f"ans_{new_ulid()}",
            feedback_id=feedback_id,
            message=message,
            answered_by=answered_by,
            emailed=emailed,
            created_at=self._now(),
        )

        def add(tx: Tx) -> None:
            if (
                tx.fetchone("SELECT 1 AS x FROM feedback WHERE id = :id", {"id": feedback_id})
                is None
            ):
                raise NotFound("support message", feedback_id)
            tx.execute(
                "INSERT INTO support_answers (id, feedback_id, message, answered_by, emailed,"
                " created_at) VALUES (:id, :feedback_id, :message, :answered_by, :emailed,"
                " :created_at)",
                attrs.asdict(answer),
            )

        await self._db.write(add)
        return answer

    async def list_support_answers(self) -> list[SupportAnswer]:
        found = await self._db.read(lambda tx: tx.fetchall(_ANSWER + " ORDER BY id"))
        return [_answer(row) for row in found]
