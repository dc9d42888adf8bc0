"""`SqlAccess`: the browser-session, audit and single sign-on methods of
`accounts.AccountStore` in SQL (migrations 9 and 10); the records are in `accounts`."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any, Final

import attrs

from .accounts import AuditEntry, AuditQuery, BrowserSession, OidcConnection, SessionCredential
from .base import Role
from .database import Database, Row, Tx, as_datetime
from .errors import NotFound
from .ids import Kind, new_id, new_ulid
from .sql_accounts import _opt, _require
from .sql_sso import SqlSso

__all__ = ["SqlAccess"]

_SESSION: Final = (
    "SELECT s.id, s.org_id, s.user_id, s.api_key_id, s.lookup_id, s.created_at, s.expires_at,"
    " s.user_agent, s.revoked_at FROM browser_sessions s"
)
_OIDC: Final = (
    "SELECT org_id, issuer, client_id, allowed_domains, default_role, secret_sealed,"
    " created_at, updated_at FROM oidc_connections"
)


def _oidc(row: Row) -> OidcConnection:
    return OidcConnection(
        org_id=row["org_id"],
        issuer=row["issuer"],
        client_id=row["client_id"],
        allowed_domains=tuple(json.loads(row["allowed_domains"])),
        default_role=Role(row["default_role"]),
        created_at=as_datetime(row["created_at"]),
        updated_at=as_datetime(row["updated_at"]),
        secret_sealed=row["secret_sealed"],
    )


def _session(row: Row) -> BrowserSession:
    return BrowserSession(
        id=row["id"],
        org_id=row["org_id"],
        user_id=row["user_id"],
        api_key_id=row["api_key_id"],
        lookup_id=row["lookup_id"],
        created_at=as_datetime(row["created_at"]),
        expires_at=as_datetime(row["expires_at"]),
        user_agent=row["user_agent"],
        revoked_at=_opt(row["revoked_at"]),
    )


def _audit(row: Row) -> AuditEntry:
    return AuditEntry(
        id=row["id"],
        org_id=row["org_id"],
        kind=row["kind"],
        subject=row["subject"],
        detail=json.loads(row["detail"]),
        actor=row["actor"],
        address=row["address"],
        created_at=as_datetime(row["created_at"]),
    )


class SqlAccess(SqlSso):
    """Mixed into `SqlStore`; see `accounts.AccountStore` for the contract of each method."""

    _db: Database
    _now: Callable[[], datetime]

    # -- browser sessions ------------------------------------------------------------------
    async def create_session(
        self,
        *,
        org_id: str,
        api_key_id: str,
        lookup_id: str,
        secret_hash: str,
        csrf_hash: str,
        ttl_s: int,
        user_agent: str | None,
    ) -> BrowserSession:
        now = self._now()
        session_id = f"ses_{new_ulid()}"

        def create(tx: Tx) -> BrowserSession:
            key = tx.fetchone(
                "SELECT user_id FROM api_keys WHERE id = :id AND org_id = :org_id"
                " AND revoked_at IS NULL",
                {"id": api_key_id, "org_id": org_id},
            )
            if key is None:
                raise NotFound("API key", api_key_id)
            session = BrowserSession(
                id=session_id,
                org_id=org_id,
                user_id=key["user_id"],
                api_key_id=api_key_id,
                lookup_id=lookup_id,
                created_at=now,
                expires_at=now + timedelta(seconds=ttl_s),
                user_agent=user_agent,
            )
            tx.execute(
                "INSERT INTO browser_sessions (id, org_id, user_id, api_key_id, lookup_id,"
                " secret_hash, csrf_hash, created_at, expires_at, user_agent) VALUES (:id,"
                " :org_id, :user_id, :api_key_id, :lookup_id, :secret_hash, :csrf_hash,"
                " :created_at, :expires_at, :user_agent)",
                {
                    **attrs.asdict(session),
                    "secret_hash": secret_hash,
                    "csrf_hash": csrf_hash,
                },
            )
            return session

        return await self._db.write(create)

    async def get_session_by_lookup(self, lookup_id: str) -> SessionCredential:
        sql = (
            _SESSION.replace(" FROM", ", s.secret_hash, s.csrf_hash FROM", 1)
            + " JOIN api_keys k ON k.id = s.api_key_id WHERE s.lookup_id = :lookup_id"
            " AND s.revoked_at IS NULL AND s.expires_at > :now AND k.revoked_at IS NULL"
        )
        params: dict[str, object] = {"lookup_id": lookup_id, "now": self._now()}
        row = await self._db.read(lambda tx: tx.fetchone(sql, params))
        if row is None:
            raise NotFound("session", lookup_id)
        return SessionCredential(
            session=_session(row), secret_hash=row["secret_hash"], csrf_hash=row["csrf_hash"]
        )

    async def list_sessions(
        self, org_id: str, *, user_id: str | None = None
    ) -> list[BrowserSession]:
        sql = (
            _SESSION + " JOIN api_keys k ON k.id = s.api_key_id WHERE s.org_id = :org_id"
            " AND s.revoked_at IS NULL AND s.expires_at > :now AND k.revoked_at IS NULL"
        )
        if user_id is not None:
            sql += " AND s.user_id = :user_id"
        params: dict[str, object] = {"org_id": org_id, "user_id": user_id, "now": self._now()}
        found = await self._db.read(lambda tx: tx.fetchall(sql + " ORDER BY s.id", params))
        return [_session(row) for row in found]

    async def revoke_session(self, org_id: str, session_id: str) -> BrowserSession:
        params: dict[str, object] = {"id": session_id, "org_id": org_id, "now": self._now()}

        def revoke(tx: Tx) -> BrowserSession:
            tx.execute(
                "UPDATE browser_sessions SET revoked_at = :now"
                " WHERE id = :id AND org_id = :org_id AND revoked_at IS NULL",
                params,
            )
            row = tx.fetchone(_SESSION + " WHERE s.id = :id AND s.org_id = :org_id", params)
            if row is None:
                raise NotFound("session", session_id)
            return _session(row)

        return await self._db.write(revoke)

    # -- audit with actor and address ------------------------------------------------------
    async def record_audit(
        self,
        *,
        org_id: str,
        kind: str,
        subject: str | None,
        detail: Mapping[str, Any],
        actor: str | None,
        address: str | None,
    ) -> AuditEntry:
        entry = AuditEntry(
            id=new_id(Kind.AUDIT_EVENT),
            org_id=org_id,
            kind=kind,
            subject=subject,
            detail=dict(detail),
            actor=actor,
            address=address,
            created_at=self._now(),
        )
        params: dict[str, object] = {
            **attrs.asdict(entry),
            "detail": json.dumps(entry.detail, sort_keys=True),
        }
        await self._db.write(
            lambda tx: tx.execute(
                "INSERT INTO audit_events (id, org_id, kind, subject, detail, actor, address,"
                " created_at) VALUES (:id, :org_id, :kind, :subject, :detail, :actor,"
                " :address, :created_at)",
                params,
            )
        )
        return entry

    async def list_audit(self, org_id: str, query: AuditQuery) -> list[AuditEntry]:
        sql = (
            "SELECT id, org_id, kind, subject, detail, actor, address, created_at"
            " FROM audit_events WHERE org_id = :org_id"
        )
        params: dict[str, object] = {
            "org_id": org_id,
            "limit": max(1, min(query.limit, 500)),
            "since": query.since,
            "until": query.until,
            "actor": query.actor,
            "before": query.before,
        }
        if query.since is not None:
            sql += " AND created_at >= :since"
        if query.until is not None:
            sql += " AND created_at < :until"
        if query.actor is not None:
            sql += " AND actor = :actor"
        if query.before is not None:
            sql += " AND id < :before"
        sql += " ORDER BY id DESC LIMIT :limit"
        found = await self._db.read(lambda tx: tx.fetchall(sql, params))
        return [_audit(row) for row in found]

    # -- single sign-on --------------------------------------------------------------------
    async def get_oidc_connection(self, org_id: str) -> OidcConnection:
        row = await self._db.read(
            lambda tx: tx.fetchone(_OIDC + " WHERE org_id = :org_id", {"org_id": org_id})
        )
        if row is None:
            raise NotFound("OIDC connection", org_id)
        return _oidc(row)

    async def put_oidc_connection(
        self,
        org_id: str,
        *,
        issuer: str,
        client_id: str,
        allowed_domains: tuple[str, ...],
        default_role: Role,
        secret_sealed: str | None,
        keep_secret: bool,
    ) -> OidcConnection:
        now = self._now()

        def put(tx: Tx) -> OidcConnection:
            _require(tx, "organizations", org_id, "organization", lock=True)
            old = tx.fetchone(_OIDC + " WHERE org_id = :org_id", {"org_id": org_id})
            sealed = old["secret_sealed"] if (keep_secret and old is not None) else secret_sealed
            params: dict[str, object] = {
                "org_id": org_id,
                "issuer": issuer,
                "client_id": client_id,
                "allowed_domains": json.dumps(list(allowed_domains)),
                "default_role": default_role,
                "secret_sealed": sealed,
                "created_at": now if old is None else old["created_at"],
                "updated_at": now,
            }
            tx.execute("DELETE FROM oidc_connections WHERE org_id = :org_id", params)
            tx.execute(
                "INSERT INTO oidc_connections (org_id, issuer, client_id, allowed_domains,"
                " default_role, secret_sealed, created_at, updated_at) VALUES (:org_id,"
                " :issuer, :client_id, :allowed_domains, :default_role, :secret_sealed,"
                " :created_at, :updated_at)",
                params,
            )
            row = tx.fetchone(_OIDC + " WHERE org_id = :org_id", params)
            assert row is not None
            return _oidc(row)

        return await self._db.write(put)

    async def delete_oidc_connection(self, org_id: str) -> None:
        def delete(tx: Tx) -> None:
            if not tx.execute("DELETE FROM oidc_connections WHERE org_id = :id", {"id": org_id}):
                raise NotFound("OIDC connection", org_id)

        await self._db.write(delete)
