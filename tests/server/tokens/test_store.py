"""Scoped tokens in the store (both backends): hashed at rest, and unknown to authentication
once revoked, expired, or minted by a key that was revoked since."""

from __future__ import annotations

from pathlib import Path

import pytest

from devyard.server.store import NotFound, Role, Store, tokens
from devyard.server.store.base import ApiKey

from .conftest import SetClock


async def _key(store: Store) -> ApiKey:
    org = await store.create_organization("acme")
    user = await store.create_user("ann")
    await store.add_membership(org.id, user.id, Role.MEMBER)
    secret = tokens.new_api_key()
    return await store.create_api_key(
        org_id=org.id, user_id=user.id, name="k", lookup_id=secret.lookup_id,
        secret_hash=secret.secret_hash,
    )  # fmt: skip


async def _mint(store: Store, key: ApiKey, ttl: int = 60) -> tokens.NewSecret:
    secret = tokens.new_scoped_token()
    await store.create_scoped_token(
        org_id=key.org_id, api_key_id=key.id, scopes=("device:*:install",), ttl_seconds=ttl,
        lookup_id=secret.lookup_id, secret_hash=secret.secret_hash,
    )  # fmt: skip
    return secret


async def test_stored_hashed_and_found_by_lookup(store: Store, database_target: str) -> None:
    key = await _key(store)
    secret = await _mint(store, key)
    found = await store.get_scoped_token_by_lookup(secret.lookup_id)
    assert found.secret_hash == tokens.hash_secret(secret.plaintext) != secret.plaintext
    assert tokens.verify_secret(secret.plaintext, found.secret_hash)
    assert found.token.user_id == key.user_id and found.token.scopes == ("device:*:install",)
    assert tokens.parse_scoped_token(secret.plaintext) == secret.lookup_id
    assert tokens.parse_api_key(secret.plaintext) is None
    if not database_target.startswith("postgres"):
        # The plaintext is nowhere in the database files; its lookup id (not secret) is.
        data = b"".join(p.read_bytes() for p in Path(database_target).parent.glob("*.db*"))
        assert secret.lookup_id.encode() in data
        assert secret.plaintext.encode() not in data


async def test_revoked_expired_or_orphaned_tokens_are_unknown(
    store: Store, store_clock: SetClock
) -> None:
    key = await _key(store)
    revoked, expiring, orphaned = [await _mint(store, key) for _ in range(3)]
    token = (await store.get_scoped_token_by_lookup(revoked.lookup_id)).token
    first = await store.revoke_scoped_token(key.org_id, token.id)
    assert first.revoked_at is not None
    assert await store.revoke_scoped_token(key.org_id, token.id) == first  # idempotent
    with pytest.raises(NotFound):
        await store.get_scoped_token_by_lookup(revoked.lookup_id)
    assert (await store.get_scoped_token_by_lookup(expiring.lookup_id)).token
    store_clock.advance(60)
    with pytest.raises(NotFound):
        await store.get_scoped_token_by_lookup(expiring.lookup_id)
    store_clock.advance(-60)
    await store.revoke_api_key(key.org_id, key.id)
    with pytest.raises(NotFound):
        await store.get_scoped_token_by_lookup(orphaned.lookup_id)
    with pytest.raises(NotFound):
        await _mint(store, key)  # a revoked key mints nothing
    with pytest.raises(NotFound):
        await store.revoke_scoped_token("org_other", token.id)
