"""Issue 14 finding 4, the race: a create that read the organization before its deletion was
marked can no longer slip in after the deletion's sweep. The store checks ``deleting`` inside
the create's own transaction (row lock on PostgreSQL, serialized writes on SQLite)."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

import pytest
import trio

from devyard.server.store import Store
from devyard.server.store.base import Organization, Platform
from devyard.server.store.errors import OrganizationDeleting
from devyard.server.store.tokens import new_api_key, new_scoped_token

from .test_memberships_keys import org_with_admin

CREATORS = 6
ATTEMPTS_AFTER_MARK = 5  # without the check in the transaction they would all succeed


async def _instance(store: Store, org: Organization, n: int) -> str:
    made = await store.create_instance(
        org_id=org.id,
        platform=Platform.ANDROID,
        region="local",
        labels={"n": str(n)},
        spec={},
        display_name=None,
        token=f"tok-{n}",
        stream_token=f"stream-{n}",
    )
    return made.id


async def test_every_create_is_refused_once_the_organization_is_deleting(store: Store) -> None:
    acme, alice = await org_with_admin(store)
    key = new_api_key()
    made = await store.create_api_key(
        org_id=acme.id,
        user_id=alice.id,
        name="k",
        lookup_id=key.lookup_id,
        secret_hash=key.secret_hash,
    )
    other, _ = await org_with_admin(store, "other")
    await store.mark_organization_deleting(acme.id)

    with pytest.raises(OrganizationDeleting):
        await _instance(store, acme, 1)
    with pytest.raises(OrganizationDeleting):
        await store.create_tunnel(
            org_id=acme.id,
            name="intranet",
            selectors=("intranet.example:8080",),
            ephemeral=False,
            token_lookup="lookup",
            token_hash="hash",
            token_expires_at=datetime(2031, 1, 1, tzinfo=UTC),
        )
    with pytest.raises(OrganizationDeleting):
        await store.upsert_asset(org_id=acme.id, name="app.apk")
    again = new_api_key()
    with pytest.raises(OrganizationDeleting):
        await store.create_api_key(
            org_id=acme.id,
            user_id=alice.id,
            name="k2",
            lookup_id=again.lookup_id,
            secret_hash=again.secret_hash,
        )
    scoped = new_scoped_token()
    with pytest.raises(OrganizationDeleting):
        await store.create_scoped_token(
            org_id=acme.id,
            api_key_id=made.id,
            scopes=("asset:*:read",),
            ttl_seconds=int(timedelta(hours=1).total_seconds()),
            lookup_id=scoped.lookup_id,
            secret_hash=scoped.secret_hash,
        )
    # another organization is untouched
    assert await _instance(store, other, 2)
    assert (await store.upsert_asset(org_id=other.id, name="app.apk")).org_id == other.id


async def test_creates_racing_the_mark_are_all_seen_by_the_sweep_after_it(store: Store) -> None:
    """Creators insert instances as fast as they can while the deletion marks the org and
    then lists what is live (its sweep): every create that succeeded is in that list."""
    acme, _ = await org_with_admin(store)
    created: list[str] = []
    refused = 0
    marked = trio.Event()
    enough = trio.Event()

    async def creator(first: int) -> None:
        nonlocal refused
        after_mark = 0
        for n in itertools.count(first):
            if marked.is_set():
                after_mark += 1
                if after_mark > ATTEMPTS_AFTER_MARK:
                    return  # never refused: the guard is missing
            try:
                created.append(await _instance(store, acme, n))
            except OrganizationDeleting:
                refused += 1
                return
            if len(created) >= CREATORS:
                enough.set()

    async def deletion() -> list[str]:
        await enough.wait()
        await store.mark_organization_deleting(acme.id)
        marked.set()
        return [i.id for i in await store.list_live_instances() if i.org_id == acme.id]

    swept: list[str] = []

    async def run_deletion() -> None:
        swept.extend(await deletion())

    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            for c in range(CREATORS):
                nursery.start_soon(creator, c * 1000)
            nursery.start_soon(run_deletion)
    assert marked.is_set()
    assert refused == CREATORS, "every creator was refused once the mark committed"
    assert set(created) <= set(swept), "a create committed after the sweep's read"
