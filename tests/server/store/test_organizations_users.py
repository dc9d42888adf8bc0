"""Organizations and users on both backends (the ``store`` fixture is parametrized)."""

from __future__ import annotations

import attrs
import pytest

from devyard.server.store import (
    UNSET,
    Conflict,
    InvalidValue,
    Kind,
    NotFound,
    OrganizationSettings,
    Store,
    is_id,
)

from .conftest import FakeClock


async def test_create_and_get_organization(store: Store, clock: FakeClock) -> None:
    org = await store.create_organization("acme")
    assert is_id(Kind.ORGANIZATION, org.id)
    assert org.name == "acme"
    assert org.created_at == clock.now  # microseconds survive the round trip
    assert org.settings == OrganizationSettings(inactivity_timeout_s=600, iphone_duo_enabled=False)
    assert await store.get_organization(org.id) == org
    assert await store.get_organization_by_name("acme") == org


async def test_create_with_settings(store: Store) -> None:
    settings = OrganizationSettings(inactivity_timeout_s=60, iphone_duo_enabled=True)
    org = await store.create_organization("acme", settings=settings)
    assert (await store.get_organization(org.id)).settings == settings


async def test_organization_names_are_unique(store: Store) -> None:
    await store.create_organization("acme")
    with pytest.raises(Conflict) as info:
        await store.create_organization("acme")
    assert info.value.field == "name"
    assert "already exists" in str(info.value)


async def test_missing_organization_is_not_found(store: Store) -> None:
    with pytest.raises(NotFound) as info:
        await store.get_organization("org_01J00000000000000000000000")
    assert info.value.kind == "organization"
    with pytest.raises(NotFound):
        await store.get_organization_by_name("nope")
    with pytest.raises(NotFound):
        await store.update_organization("org_01J00000000000000000000000", name="x")
    with pytest.raises(NotFound):
        await store.delete_organization("org_01J00000000000000000000000")


async def test_list_organizations_oldest_first(store: Store) -> None:
    assert await store.list_organizations() == []
    created = [await store.create_organization(name) for name in ("c", "a", "b")]
    assert await store.list_organizations() == created


async def test_update_organization(store: Store) -> None:
    org = await store.create_organization("acme")
    renamed = await store.update_organization(org.id, name="acme-2")
    assert renamed == attrs.evolve(org, name="acme-2")
    settings = attrs.evolve(org.settings, iphone_duo_enabled=True)
    updated = await store.update_organization(org.id, settings=settings)
    assert updated == attrs.evolve(org, name="acme-2", settings=settings)
    assert await store.update_organization(org.id) == updated  # nothing given: unchanged
    assert await store.get_organization(org.id) == updated


async def test_rename_to_a_taken_name_conflicts(store: Store) -> None:
    await store.create_organization("a")
    b = await store.create_organization("b")
    with pytest.raises(Conflict):
        await store.update_organization(b.id, name="a")
    assert (await store.get_organization(b.id)).name == "b"


async def test_schema_rejects_a_nonpositive_timeout(store: Store) -> None:
    org = await store.create_organization("acme")
    with pytest.raises(InvalidValue):
        await store.update_organization(
            org.id, settings=OrganizationSettings(inactivity_timeout_s=0)
        )
    with pytest.raises(InvalidValue):
        await store.create_organization("b", settings=OrganizationSettings(inactivity_timeout_s=-1))
    assert [o.name for o in await store.list_organizations()] == ["acme"]


async def test_delete_organization_returns_it_and_its_name_is_free(store: Store) -> None:
    org = await store.create_organization("acme")
    assert await store.delete_organization(org.id) == org
    with pytest.raises(NotFound):
        await store.get_organization(org.id)
    again = await store.create_organization("acme")
    assert again.id != org.id


async def test_create_and_get_user(store: Store, clock: FakeClock) -> None:
    user = await store.create_user("alice", email="alice@example.com")
    assert is_id(Kind.USER, user.id)
    assert (user.name, user.email, user.created_at) == ("alice", "alice@example.com", clock.now)
    assert await store.get_user(user.id) == user
    assert await store.get_user_by_name("alice") == user
    without_email = await store.create_user("bob")
    assert without_email.email is None
    assert await store.get_user(without_email.id) == without_email


async def test_user_names_and_emails_are_unique_but_many_may_lack_email(store: Store) -> None:
    await store.create_user("alice", email="a@example.com")
    with pytest.raises(Conflict) as info:
        await store.create_user("alice")
    assert info.value.field == "name"
    with pytest.raises(Conflict) as info:
        await store.create_user("alice2", email="a@example.com")
    assert info.value.field == "email"
    await store.create_user("x")
    await store.create_user("y")  # NULL emails do not collide


async def test_update_user(store: Store) -> None:
    user = await store.create_user("alice", email="a@example.com")
    renamed = await store.update_user(user.id, name="alicia")
    assert renamed == attrs.evolve(user, name="alicia")
    assert (await store.update_user(user.id, email="new@example.com")).email == "new@example.com"
    assert (await store.update_user(user.id, email=UNSET)).email == "new@example.com"
    cleared = await store.update_user(user.id, email=None)
    assert cleared.email is None
    assert await store.get_user_by_name("alicia") == cleared
    with pytest.raises(NotFound):
        await store.get_user_by_name("alice")


async def test_update_user_conflicts_and_not_found(store: Store) -> None:
    await store.create_user("alice", email="a@example.com")
    bob = await store.create_user("bob")
    with pytest.raises(Conflict):
        await store.update_user(bob.id, email="a@example.com")
    with pytest.raises(Conflict):
        await store.update_user(bob.id, name="alice")
    assert await store.get_user(bob.id) == bob
    with pytest.raises(NotFound) as info:
        await store.get_user("usr_01J00000000000000000000000")
    assert info.value.kind == "user"
    with pytest.raises(NotFound):
        await store.update_user("usr_01J00000000000000000000000", name="z")
