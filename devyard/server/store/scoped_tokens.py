"""Scoped tokens in SQL: the `Store` methods of ``scoped_tokens`` (migration 4).

A scoped token is stored like an API key (`tokens.py`): a non-secret lookup id that the row
is found by and the SHA-256 of the whole token; the plaintext exists only in the create
response. The token belongs to the key that minted it: it acts for that key's user in that
key's organization, and the authentication lookup joins the key so that revoking the key (or
removing its user, which revokes the user's keys) ends every token it minted. Expiry is a
comparison with the store's clock inside the same query, so an expired token is as unknown
as a revoked one.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Final

from .base import ScopedToken, ScopedTokenCredential
from .database import Database, Row, Tx, as_datetime
from .errors import NotFound
from .ids import Kind, new_id
from .org_guard import require_live_organization

__all__ = ["SqlScopedTokens"]

_COLUMNS: Final = (
    "t.id, t.org_id, t.api_key_id, t.user_id, t.lookup_id, t.scopes, t.created_at,"
    " t.expires_at, t.revoked_at"
)
_SELECT: Final = f"SELECT {_COLUMNS} FROM scoped_tokens t"  # noqa: S608


def _token(row: Row) -> ScopedToken:
    revoked = row["revoked_at"]
    return ScopedToken(
        id=row["id"],
        org_id=row["org_id"],
        api_key_id=row["api_key_id"],
        user_id=row["user_id"],
        lookup_id=row["lookup_id"],
        scopes=tuple(json.loads(row["scopes"])),
        created_at=as_datetime(row["created_at"]),
        expires_at=as_datetime(row["expires_at"]),
        revoked_at=None if revoked is None else as_datetime(revoked),
    )


def _get(tx: Tx, org_id: str, token_id: str) -> ScopedToken:
    row = tx.fetchone(
        _SELECT + " WHERE t.id = :id AND t.org_id = :org_id", {"id": token_id, "org_id": org_id}
    )
    if row is None:
        raise NotFound("scoped token", token_id)
    return _token(row)


class SqlScopedTokens:
    """Mixed into `SqlStore`; see `base.Store` for the contract of each method."""

    _db: Database
    _now: Callable[[], datetime]

    async def create_scoped_token(
        self,
        *,
        org_id: str,
        api_key_id: str,
        scopes: tuple[str, ...],
        ttl_seconds: int,
        lookup_id: str,
        secret_hash: str,
    ) -> ScopedToken:
        now = self._now()

        def create(tx: Tx) -> ScopedToken:
            require_live_organization(tx, org_id)
            key = tx.fetchone(
                "SELECT user_id FROM api_keys"
                " WHERE id = :id AND org_id = :org_id AND revoked_at IS NULL",
                {"id": api_key_id, "org_id": org_id},
            )
            if key is None:
                raise NotFound("API key", api_key_id)
            token = ScopedToken(
                id=new_id(Kind.SCOPED_TOKEN),
                org_id=org_id,
                api_key_id=api_key_id,
                user_id=key["user_id"],
                lookup_id=lookup_id,
                scopes=tuple(scopes),
                created_at=now,
                expires_at=now + timedelta(seconds=ttl_seconds),
            )
            tx.execute(
                "INSERT INTO scoped_tokens (id, org_id, api_key_id, user_id, lookup_id,"
                " secret_hash, scopes, created_at, expires_at, revoked_at) VALUES (:id, :org_id,"
                " :api_key_id, :user_id, :lookup_id, :secret_hash, :scopes, :created_at,"
                " :expires_at, NULL)",
                {
                    "id": token.id,
                    "org_id": org_id,
                    "api_key_id": api_key_id,
                    "user_id": token.user_id,
                    "lookup_id": lookup_id,
                    "secret_hash": secret_hash,
                    "scopes": json.dumps(list(token.scopes)),
                    "created_at": token.created_at,
                    "expires_at": token.expires_at,
                },
            )
            return token

        return await self._db.write(create)

    async def get_scoped_token(self, org_id: str, token_id: str) -> ScopedToken:
        return await self._db.read(lambda tx: _get(tx, org_id, token_id))

    async def get_scoped_token_by_lookup(self, lookup_id: str) -> ScopedTokenCredential:
        sql = (
            _SELECT.replace(" FROM", ", t.secret_hash FROM", 1)
            + " JOIN api_keys k ON k.id = t.api_key_id AND k.revoked_at IS NULL"
            " WHERE t.lookup_id = :lookup_id AND t.revoked_at IS NULL AND t.expires_at > :now"
        )
        params: dict[str, object] = {"lookup_id": lookup_id, "now": self._now()}
        row = await self._db.read(lambda tx: tx.fetchone(sql, params))
        if row is None:
            raise NotFound("scoped token", lookup_id)
        return ScopedTokenCredential(token=_token(row), secret_hash=row["secret_hash"])

    async def revoke_scoped_token(self, org_id: str, token_id: str) -> ScopedToken:
        now = self._now()

        def revoke(tx: Tx) -> ScopedToken:
            tx.execute(
                "UPDATE scoped_tokens SET revoked_at = :now"
                " WHERE id = :id AND org_id = :org_id AND revoked_at IS NULL",
                {"id": token_id, "org_id": org_id, "now": now},
            )
            return _get(tx, org_id, token_id)

        return await self._db.write(revoke)
