"""Memberships, API keys and feedback on both backends."""

from __future__ import annotations

from datetime import timedelta

import attrs
import pytest

from devyard.server.store import (
    Affiliation,
    Conflict,
    FeedbackKind,
    Kind,
    Member,
    NotFound,
    Organization,
    Role,
    Store,
    User,
    is_id,
)
from devyard.server.store.tokens import new_api_key, verify_api_key

from .conftest import FakeClock

MISSING_ORG = "org_01J00000000000000000000000"
MISSING_USER = "usr_01J00000000000000000000000"


async def org_with_admin(store: Store, org: str = "acme") -> tuple[Organization, User]:
    organization = await store.create_organization(org)
    user = await store.create_user(f"{org}-admin")
    await store.add_membership(organization.id, user.id, Role.ADMIN)
    return organization, user


async def test_memberships_list_both_ways_with_roles(store: Store, clock: FakeClock) -> None:
    acme, alice = await org_with_admin(store)
    bob = await store.create_user("bob")
    other = await store.create_organization("other")
    joined = await store.add_membership(acme.id, bob.id, Role.VIEWER)
    assert (joined.role, joined.created_at) == (Role.VIEWER, clock.now)
    await store.add_membership(other.id, bob.id, Role.MEMBER)

    assert await store.list_members(acme.id) == [
        Member(user=alice, role=Role.ADMIN),
        Member(user=bob, role=Role.VIEWER),
    ]
    assert await store.list_affiliations(bob.id) == [
        Affiliation(organization=acme, role=Role.VIEWER),
        Affiliation(organization=other, role=Role.MEMBER),
    ]
    assert await store.get_membership(acme.id, bob.id) == joined
    assert await store.list_members(other.id) == [Member(user=bob, role=Role.MEMBER)]
    assert await store.list_affiliations((await store.create_user("loner")).id) == []


async def test_membership_errors(store: Store) -> None:
    acme, alice = await org_with_admin(store)
    with pytest.raises(Conflict):
        await store.add_membership(acme.id, alice.id, Role.VIEWER)
    with pytest.raises(NotFound) as info:
        await store.add_membership(MISSING_ORG, alice.id, Role.ADMIN)
    assert info.value.kind == "organization"
    with pytest.raises(NotFound) as info:
        await store.add_membership(acme.id, MISSING_USER, Role.ADMIN)
    assert info.value.kind == "user"
    with pytest.raises(NotFound):
        await store.list_members(MISSING_ORG)
    with pytest.raises(NotFound):
        await store.list_affiliations(MISSING_USER)
    bob = await store.create_user("bob")
    for call in (
        store.get_membership(acme.id, bob.id),
        store.set_membership_role(acme.id, bob.id, Role.ADMIN),
        store.remove_membership(acme.id, bob.id),
    ):
        with pytest.raises(NotFound) as info:
            await call
        assert info.value.kind == "membership"


async def test_set_role_and_remove_membership(store: Store) -> None:
    acme, alice = await org_with_admin(store)
    demoted = await store.set_membership_role(acme.id, alice.id, Role.MEMBER)
    assert demoted.role is Role.MEMBER
    assert (await store.get_membership(acme.id, alice.id)).role is Role.MEMBER
    await store.remove_membership(acme.id, alice.id)
    assert await store.list_members(acme.id) == []
    assert await store.get_user(alice.id) == alice  # the user stays


async def test_api_key_round_trip(store: Store, clock: FakeClock) -> None:
    acme, alice = await org_with_admin(store)
    secret = new_api_key()
    key = await store.create_api_key(
        org_id=acme.id,
        user_id=alice.id,
        name="ci",
        lookup_id=secret.lookup_id,
        secret_hash=secret.secret_hash,
        read_only=True,
    )
    assert is_id(Kind.API_KEY, key.id)
    assert (key.org_id, key.user_id, key.name, key.read_only) == (acme.id, alice.id, "ci", True)
    assert (key.created_at, key.last_used_at, key.revoked_at) == (clock.now, None, None)
    assert key.active
    credential = await store.get_api_key_by_lookup(secret.lookup_id)
    assert credential.api_key == key
    assert verify_api_key(secret.plaintext, credential.secret_hash)
    assert credential.secret_hash not in repr(credential)
    assert await store.get_api_key(acme.id, key.id) == key


async def create_key(store: Store, org: Organization, user: User, name: str = "k") -> str:
    secret = new_api_key()
    key = await store.create_api_key(
        org_id=org.id,
        user_id=user.id,
        name=name,
        lookup_id=secret.lookup_id,
        secret_hash=secret.secret_hash,
    )
    return key.id


async def test_api_key_needs_membership_and_unique_lookup(store: Store) -> None:
    acme, alice = await org_with_admin(store)
    outsider = await store.create_user("outsider")
    secret = new_api_key()
    with pytest.raises(NotFound) as info:
        await store.create_api_key(
            org_id=acme.id,
            user_id=outsider.id,
            name="k",
            lookup_id=secret.lookup_id,
            secret_hash=secret.secret_hash,
        )
    assert info.value.kind == "membership"
    await store.create_api_key(
        org_id=acme.id, user_id=alice.id, name="a", lookup_id="same", secret_hash="sha256:1"
    )
    with pytest.raises(Conflict):
        await store.create_api_key(
            org_id=acme.id, user_id=alice.id, name="b", lookup_id="same", secret_hash="sha256:2"
        )


async def test_keys_are_confined_to_their_organization(store: Store) -> None:
    acme, alice = await org_with_admin(store)
    other, _ = await org_with_admin(store, "other")
    key_id = await create_key(store, acme, alice)
    with pytest.raises(NotFound):
        await store.get_api_key(other.id, key_id)
    with pytest.raises(NotFound):
        await store.revoke_api_key(other.id, key_id)
    assert await store.list_api_keys(other.id) == []
    assert (await store.get_api_key(acme.id, key_id)).active


async def test_list_and_revoke_keys(store: Store, clock: FakeClock) -> None:
    acme, alice = await org_with_admin(store)
    bob = await store.create_user("bob")
    await store.add_membership(acme.id, bob.id, Role.MEMBER)
    k1 = await create_key(store, acme, alice, "one")
    k2 = await create_key(store, acme, bob, "two")
    k3 = await create_key(store, acme, alice, "three")
    assert [k.id for k in await store.list_api_keys(acme.id)] == [k1, k2, k3]
    assert [k.id for k in await store.list_api_keys(acme.id, user_id=alice.id)] == [k1, k3]

    revoked = await store.revoke_api_key(acme.id, k1)
    assert revoked.revoked_at == clock.now
    assert not revoked.active
    assert await store.revoke_api_key(acme.id, k1) == revoked  # idempotent, time kept
    assert [k.id for k in await store.list_api_keys(acme.id)] == [k2, k3]
    listed = await store.list_api_keys(acme.id, include_revoked=True)
    assert [k.id for k in listed] == [k1, k2, k3]
    assert listed[0] == revoked
    with pytest.raises(NotFound):
        await store.get_api_key_by_lookup(revoked.lookup_id)  # revoked keys do not authenticate
    with pytest.raises(NotFound):
        await store.get_api_key_by_lookup("unknownlooku")


async def test_removing_a_member_revokes_their_keys_in_that_org_only(store: Store) -> None:
    acme, alice = await org_with_admin(store)
    other = await store.create_organization("other")
    await store.add_membership(other.id, alice.id, Role.MEMBER)
    in_acme = await create_key(store, acme, alice)
    in_other = await create_key(store, other, alice)
    await store.remove_membership(acme.id, alice.id)
    assert not (await store.get_api_key(acme.id, in_acme)).active
    assert (await store.get_api_key(other.id, in_other)).active


async def test_touch_records_last_use_and_never_goes_back(store: Store, clock: FakeClock) -> None:
    acme, alice = await org_with_admin(store)
    key_id = await create_key(store, acme, alice)
    await store.touch_api_key(key_id)
    first = clock.now
    assert (await store.get_api_key(acme.id, key_id)).last_used_at == first
    later = first + timedelta(minutes=5)
    await store.touch_api_key(key_id, at=later)
    await store.touch_api_key(key_id, at=first + timedelta(minutes=1))  # late, older report
    assert (await store.get_api_key(acme.id, key_id)).last_used_at == later
    await store.touch_api_key("key_01J00000000000000000000000")  # unknown: nothing to do


async def test_deleting_an_organization_cascades(store: Store) -> None:
    acme, alice = await org_with_admin(store)
    secret = new_api_key()
    await store.create_api_key(
        org_id=acme.id,
        user_id=alice.id,
        name="k",
        lookup_id=secret.lookup_id,
        secret_hash=secret.secret_hash,
    )
    note = await store.add_feedback("help", kind=FeedbackKind.SUPPORT, org_id=acme.id)
    await store.delete_organization(acme.id)
    assert await store.list_affiliations(alice.id) == []
    with pytest.raises(NotFound):
        await store.get_api_key_by_lookup(secret.lookup_id)
    assert await store.list_feedback() == [attrs.evolve(note, org_id=None)]


async def test_feedback_and_support_messages(store: Store, clock: FakeClock) -> None:
    acme, alice = await org_with_admin(store)
    anonymous = await store.add_feedback("love it")
    assert is_id(Kind.FEEDBACK, anonymous.id)
    assert (anonymous.kind, anonymous.email, anonymous.org_id) == (
        FeedbackKind.FEEDBACK,
        None,
        None,
    )
    assert anonymous.created_at == clock.now
    signed = await store.add_feedback("bug", email="x@example.com")
    support = await store.add_feedback(
        "please help", kind=FeedbackKind.SUPPORT, org_id=acme.id, user_id=alice.id
    )
    assert await store.list_feedback() == [anonymous, signed, support]
    assert await store.list_feedback(org_id=acme.id) == [support]
    with pytest.raises(NotFound):
        await store.add_feedback("x", org_id=MISSING_ORG)
    with pytest.raises(NotFound):
        await store.add_feedback("x", user_id=MISSING_USER)
