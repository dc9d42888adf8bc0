"""The account tables on both backends: invitations expire by the store's clock, are
single-use under concurrent accepts, and keep only a hash; domains keep their state."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import pytest
import trio

from devyard.server.bootstrap import first_start
from devyard.server.store import Role, Store, open_store, tokens
from devyard.server.store import errors as store_errors
from devyard.server.store.sso import SsoJoin
from tests.server.store.conftest import FakeClock


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
async def clocked(database_target: str, clock: FakeClock) -> AsyncIterator[Store]:
    async with open_store(database_target, clock=clock) as opened:
        yield opened


async def _setup(store: Store) -> tuple[str, str]:
    org = await store.create_organization("acme")
    admin = await store.create_user("alice", email="alice@example.com")
    await store.add_membership(org.id, admin.id, Role.ADMIN)
    return org.id, admin.id


async def test_an_invitation_expires(clocked: Store, clock: FakeClock) -> None:
    org_id, admin_id = await _setup(clocked)
    token_hash = tokens.hash_secret("dyinv_x")
    invitation = await clocked.create_invitation(
        org_id=org_id,
        email="Bob@Example.com",
        role=Role.MEMBER,
        token_hash=token_hash,
        invited_by=admin_id,
        ttl_s=3600,
    )
    assert invitation.email == "bob@example.com"
    assert (await clocked.get_invitation_by_token(org_id, token_hash)).id == invitation.id
    assert [i.id for i in await clocked.list_open_invitations(org_id)] == [invitation.id]
    clock.now += timedelta(hours=1)
    assert await clocked.list_open_invitations(org_id) == []
    with pytest.raises(store_errors.NotFound):
        await clocked.get_invitation_by_token(org_id, token_hash)
    with pytest.raises(store_errors.NotFound):
        await clocked.accept_invitation_as_new_user(org_id, invitation.id, "bob")
    with pytest.raises(store_errors.NotFound):
        await clocked.revoke_invitation(org_id, invitation.id)


async def test_concurrent_accepts_let_one_person_in(clocked: Store) -> None:
    org_id, admin_id = await _setup(clocked)
    invitation = await clocked.create_invitation(
        org_id=org_id,
        email="team@example.com",
        role=Role.VIEWER,
        token_hash=tokens.hash_secret("dyinv_y"),
        invited_by=admin_id,
        ttl_s=3600,
    )
    users = [await clocked.create_user(f"u{i}", email=f"u{i}@example.com") for i in range(4)]
    outcomes: list[str] = []

    async def accept(user_id: str) -> None:
        try:
            await clocked.accept_invitation(org_id, invitation.id, user_id)
        except store_errors.NotFound:
            outcomes.append("refused")
        else:
            outcomes.append("joined")

    async with trio.open_nursery() as nursery:
        for user in users:
            nursery.start_soon(accept, user.id)
    assert sorted(outcomes) == ["joined", "refused", "refused", "refused"]
    members = await clocked.list_members(org_id)
    assert len(members) == 2


async def test_operators_and_organization_creation(clocked: Store) -> None:
    user = await clocked.create_user("op", email="op@example.com")
    assert not await clocked.is_operator(user.id)
    await clocked.set_operator(user.id, True)
    await clocked.set_operator(user.id, True)
    assert await clocked.is_operator(user.id)
    assert await clocked.list_operator_emails() == ["op@example.com"]
    org = await clocked.create_organization_for("new", user.id)
    assert (await clocked.get_membership(org.id, user.id)).role is Role.ADMIN
    with pytest.raises(store_errors.Conflict):
        await clocked.create_organization_for("new", user.id)
    with pytest.raises(store_errors.NotFound):
        await clocked.create_organization_for("other", "usr_missing")
    assert [o.name for o in await clocked.list_organizations()] == ["new"]
    await clocked.set_operator(user.id, False)
    assert not await clocked.is_operator(user.id)


async def test_the_first_admin_is_an_operator(clocked: Store, tmp_path: Path) -> None:
    first = await first_start(clocked, tmp_path / "admin-api-key")
    assert first.new_key is not None
    admin = await clocked.get_user_by_name("admin")
    assert await clocked.is_operator(admin.id)


async def test_a_sign_in_state_works_once_and_expires(clocked: Store, clock: FakeClock) -> None:
    org_id, _ = await _setup(clocked)

    async def login(state: str) -> None:
        await clocked.create_oidc_login(
            org_id=org_id,
            state_hash=tokens.hash_secret(state),
            browser_hash=tokens.hash_secret("browser"),
            nonce_hash=tokens.hash_secret("nonce-" + state),
            verifier_sealed="v1:sealed",
            return_to="/",
            ttl_s=60,
        )

    await login("one")
    won: list[bool] = []

    async def consume() -> None:
        try:
            found = await clocked.consume_oidc_login(tokens.hash_secret("one"))
        except store_errors.NotFound:
            won.append(False)
        else:
            assert found.org_id == org_id and found.return_to == "/"
            won.append(True)

    async with trio.open_nursery() as nursery:
        for _ in range(3):
            nursery.start_soon(consume)
    assert sorted(won) == [False, False, True]
    await login("two")
    clock.now += timedelta(seconds=61)
    with pytest.raises(store_errors.NotFound):
        await clocked.consume_oidc_login(tokens.hash_secret("two"))


async def test_a_sign_in_joins_once_and_reuses_its_key(clocked: Store) -> None:
    org_id, admin_id = await _setup(clocked)

    async def join(email: str, role: Role = Role.MEMBER) -> SsoJoin:
        key = tokens.new_api_key()
        return await clocked.sso_join(
            org_id,
            email=email,
            user_names=("alice", "dana", "dana-2"),
            role=role,
            key_lookup_id=key.lookup_id,
            key_secret_hash=key.secret_hash,
        )

    first = await join("Dana@Example.com")
    again = await join("dana@example.com")
    assert first.user.name == "dana" and first.user_created and first.joined
    assert (again.user.id, again.api_key.id) == (first.user.id, first.api_key.id)
    assert not again.user_created and not again.joined
    # An existing member keeps its role; its sign-in key is its own.
    admin = await join("alice@example.com", Role.VIEWER)
    assert (admin.user.id, admin.role, admin.joined) == (admin_id, Role.ADMIN, False)
    assert admin.api_key.id != first.api_key.id
