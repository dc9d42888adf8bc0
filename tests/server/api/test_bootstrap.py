"""The first organization and admin key: `devyard up`'s first start, `admin bootstrap`."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from devyard.server.bootstrap import bootstrap_organization, first_start, write_secret_file
from devyard.server.store import Role, Store, tokens


async def test_first_start_bootstraps_once(store: Store, tmp_path: Path) -> None:
    key_file = tmp_path / "admin-api-key"
    first = await first_start(store, key_file)
    assert first.new_key is not None and first.new_key.startswith("dy_")
    assert first.new_key not in repr(first)
    assert key_file.read_text() == first.new_key + "\n"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    [org] = await store.list_organizations()
    [member] = await store.list_members(org.id)
    assert (org.name, member.user.name, member.role) == ("default", "admin", Role.ADMIN)

    again = await first_start(store, key_file)
    assert again.new_key is None and again.key_file_exists
    assert len(await store.list_organizations()) == 1


async def test_a_lost_key_file_is_not_replaced_behind_the_operators_back(
    store: Store, tmp_path: Path
) -> None:
    await bootstrap_organization(store, org_name="acme")
    found = await first_start(store, tmp_path / "admin-api-key")
    assert (found.new_key, found.key_file_exists) == (None, False)
    assert not (tmp_path / "admin-api-key").exists()


async def test_bootstrap_again_recovers_an_admin(store: Store) -> None:
    first = await bootstrap_organization(store, org_name="acme", user_name="ops")
    await store.set_membership_role(first.organization.id, first.user.id, Role.VIEWER)
    second = await bootstrap_organization(store, org_name="acme", user_name="ops")
    assert second.organization.id == first.organization.id
    assert second.plaintext_key != first.plaintext_key
    membership = await store.get_membership(first.organization.id, first.user.id)
    assert membership.role == Role.ADMIN
    credential = await store.get_api_key_by_lookup(tokens.parse_api_key(second.plaintext_key) or "")
    assert tokens.verify_api_key(second.plaintext_key, credential.secret_hash)


async def test_secret_files_are_never_overwritten(tmp_path: Path) -> None:
    path = tmp_path / "secret"
    await write_secret_file(path, "dy_one")
    with pytest.raises(FileExistsError):
        await write_secret_file(path, "dy_two")
    assert path.read_text() == "dy_one\n"
