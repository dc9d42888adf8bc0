"""The assets part of the store, on SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest
import trio

from devyard.server.store import Store, open_store
from devyard.server.store.errors import InvalidValue, NotFound


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
async def store(database_target: str, clock: Clock) -> AsyncIterator[Store]:
    async with open_store(database_target, clock=clock) as opened:
        yield opened


async def test_upsert_is_get_or_create_by_name_per_organization(store: Store) -> None:
    acme = await store.create_organization("acme")
    globex = await store.create_organization("globex")
    first = await store.upsert_asset(org_id=acme.id, name="app.apk")
    again = await store.upsert_asset(org_id=acme.id, name="app.apk")
    other = await store.upsert_asset(org_id=globex.id, name="app.apk")
    assert first == again
    assert first.id.startswith("asset_") and first.os is None and first.md5 is None
    assert other.id != first.id
    with pytest.raises(NotFound):
        await store.get_asset(first.id, org_id=globex.id)
    assert await store.get_asset(first.id) == first


async def test_upsert_updates_what_is_given_and_keeps_the_rest(store: Store, clock: Clock) -> None:
    org = await store.create_organization("acme")
    created = await store.upsert_asset(org_id=org.id, name="a", os="ios", ttl_s=60)
    assert created.expires_at == clock.now + timedelta(seconds=60)
    clock.now += timedelta(seconds=10)
    kept = await store.upsert_asset(org_id=org.id, name="a")
    assert (kept.os, kept.ttl_s, kept.expires_at) == ("ios", 60, created.expires_at)
    changed = await store.upsert_asset(org_id=org.id, name="a", os="android", ttl_s=30)
    assert (changed.os, changed.ttl_s) == ("android", 30)
    assert changed.expires_at == clock.now + timedelta(seconds=30)
    with pytest.raises(InvalidValue):
        await store.upsert_asset(org_id=org.id, name="b", os="windows")
    with pytest.raises(NotFound):
        await store.upsert_asset(org_id="org_missing", name="a")


async def test_concurrent_upserts_of_one_name_make_one_asset(store: Store) -> None:
    org = await store.create_organization("acme")
    ids: set[str] = set()

    async def upsert() -> None:
        ids.add((await store.upsert_asset(org_id=org.id, name="same")).id)

    async with trio.open_nursery() as nursery:
        for _ in range(8):
            nursery.start_soon(upsert)
    assert len(ids) == 1


async def test_list_filters_and_limits(store: Store) -> None:
    org = await store.create_organization("acme")
    other = await store.create_organization("globex")
    names = ["app_1.apk", "app%.apk", "apple.ipa", "base.apk", "app_2.apk"]
    for name in names:
        await store.upsert_asset(org_id=org.id, name=name)
    await store.upsert_asset(org_id=other.id, name="app_3.apk")

    async def listed(**kwargs: object) -> list[str]:
        return [a.name for a in await store.list_assets(org.id, **kwargs)]  # type: ignore[arg-type]

    assert await listed() == names
    assert await listed(limit=2) == names[:2]
    assert await listed(name_prefix="app_") == ["app_1.apk", "app_2.apk"]  # "_" is no wildcard
    assert await listed(name_prefix="app%") == ["app%.apk"]
    assert await listed(name_prefix="app") == ["app_1.apk", "app%.apk", "apple.ipa", "app_2.apk"]
    assert await listed(name="base.apk") == ["base.apk"]
    assert await listed(name="base.apk", name_prefix="app") == []
    assert await listed(name="nope") == []


async def test_set_blob_returns_the_previous_key_and_restarts_the_ttl(
    store: Store, clock: Clock
) -> None:
    org = await store.create_organization("acme")
    asset = await store.upsert_asset(org_id=org.id, name="a", ttl_s=100)
    clock.now += timedelta(seconds=50)
    one, previous = await store.set_asset_blob(asset.id, blob_key="k1", md5="aa", size=3)
    assert previous is None
    assert (one.blob_key, one.md5, one.size, one.uploaded_at) == ("k1", "aa", 3, clock.now)
    assert one.expires_at == clock.now + timedelta(seconds=100)
    two, previous = await store.set_asset_blob(asset.id, blob_key="k2", md5="bb", size=5)
    assert previous == "k1" and two.blob_key == "k2"
    await store.delete_asset(org.id, asset.id)
    with pytest.raises(NotFound):
        await store.set_asset_blob(asset.id, blob_key="k3", md5="cc", size=1)
    with pytest.raises(NotFound):
        await store.delete_asset(org.id, asset.id)


async def test_expired_assets_are_listed_once_past_their_expiry(store: Store, clock: Clock) -> None:
    org = await store.create_organization("acme")
    short = await store.upsert_asset(org_id=org.id, name="short", ttl_s=10)
    await store.upsert_asset(org_id=org.id, name="long", ttl_s=100)
    await store.upsert_asset(org_id=org.id, name="forever")
    assert await store.list_expired_assets() == []
    clock.now += timedelta(seconds=10)
    assert [a.id for a in await store.list_expired_assets()] == [short.id]
    clock.now += timedelta(seconds=1000)
    assert [a.name for a in await store.list_expired_assets()] == ["short", "long"]
    assert [a.name for a in await store.list_expired_assets(limit=1)] == ["short"]


async def test_deleting_the_organization_deletes_its_assets(store: Store) -> None:
    org = await store.create_organization("acme")
    asset = await store.upsert_asset(org_id=org.id, name="a")
    await store.delete_organization(org.id)
    with pytest.raises(NotFound):
        await store.get_asset(asset.id)
