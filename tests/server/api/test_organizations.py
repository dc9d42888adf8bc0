"""Spec 4.4 organizations, and members: roles, the last admin, support messages."""

from __future__ import annotations

from quart.typing import TestClientProtocol as Client

from devyard.server.store import FeedbackKind, Store
from devyard.server.store import errors as store_errors

from .conftest import Callers, assert_api_error


async def test_get_and_update_the_organization(client: Client, callers: Callers) -> None:
    org = callers.admin.org_id
    response = await client.get(f"/organizations/{org}", headers=callers.viewer.headers)
    assert response.status_code == 200
    body = await response.get_json()
    assert body["name"] == "acme"
    assert body["settings"] == {"inactivityTimeoutSeconds": 600, "iphoneDuoEnabled": False}
    response = await client.patch(
        f"/organizations/{org}",
        json={"name": "Acme Corp", "settings": {"inactivityTimeoutSeconds": 3600}},
        headers=callers.admin.headers,
    )
    assert response.status_code == 200
    body = await response.get_json()
    assert (body["name"], body["settings"]["inactivityTimeoutSeconds"]) == ("Acme Corp", 3600)
    again = await client.get(f"/organizations/{org}", headers=callers.viewer.headers)
    assert (await again.get_json())["name"] == "Acme Corp"


async def test_renaming_to_a_taken_name_is_409(client: Client, callers: Callers) -> None:
    response = await client.patch(
        f"/organizations/{callers.admin.org_id}",
        json={"name": "globex"},
        headers=callers.admin.headers,
    )
    await assert_api_error(response, 409, "taken")


async def test_deleting_the_organization_revokes_its_keys(
    client: Client, callers: Callers, store: Store
) -> None:
    org = callers.admin.org_id
    response = await client.delete(f"/organizations/{org}", headers=callers.admin.headers)
    assert response.status_code == 200
    assert (await response.get_json())["id"] == org
    await assert_api_error(await client.get("/whoami", headers=callers.admin.headers), 401)
    try:
        await store.get_organization(org)
    except store_errors.NotFound:
        pass
    else:
        raise AssertionError("organization still exists")
    # The other organization is untouched.
    assert (await client.get("/whoami", headers=callers.other_admin.headers)).status_code == 200


async def test_members_are_listed_added_changed_and_removed(
    client: Client, callers: Callers
) -> None:
    base = f"/organizations/{callers.admin.org_id}/members"
    admin = callers.admin.headers
    listed = await (await client.get(base, headers=callers.viewer.headers)).get_json()
    assert [(m["user"]["name"], m["role"]) for m in listed] == [
        ("alice", "admin"),
        ("bob", "member"),
        ("carol", "viewer"),
    ]
    added = await client.post(
        base, json={"userName": "dave", "email": "d@example.com", "role": "member"}, headers=admin
    )
    assert added.status_code == 200
    assert (await added.get_json())["role"] == "member"
    changed = await client.patch(f"{base}/dave", json={"role": "viewer"}, headers=admin)
    assert (await changed.get_json())["role"] == "viewer"
    got = await client.get(f"{base}/dave", headers=callers.viewer.headers)
    assert (await got.get_json())["user"]["email"] == "d@example.com"
    removed = await client.delete(f"{base}/dave", headers=admin)
    assert (removed.status_code, await removed.get_json()) == (200, {"success": True})
    await assert_api_error(await client.get(f"{base}/dave", headers=admin), 404, "dave")


async def test_the_last_admin_cannot_be_demoted_or_removed(
    client: Client, callers: Callers
) -> None:
    base = f"/organizations/{callers.admin.org_id}/members"
    admin = callers.admin.headers
    demote = await client.patch(f"{base}/alice", json={"role": "member"}, headers=admin)
    body = await assert_api_error(demote, 422, "last admin")
    assert body["reason"] == "last_admin"
    await assert_api_error(await client.delete(f"{base}/alice", headers=admin), 422, "last admin")
    # With a second admin, the first may step down.
    await client.patch(f"{base}/bob", json={"role": "admin"}, headers=admin)
    stepped = await client.patch(f"{base}/alice", json={"role": "member"}, headers=admin)
    assert stepped.status_code == 200


async def test_members_of_other_organizations_are_404(client: Client, callers: Callers) -> None:
    base = f"/organizations/{callers.admin.org_id}/members"
    response = await client.patch(
        f"{base}/olga", json={"role": "viewer"}, headers=callers.admin.headers
    )
    await assert_api_error(response, 404, "olga")


async def test_support_messages_are_stored_for_the_organization(
    client: Client, callers: Callers, store: Store
) -> None:
    response = await client.post(
        f"/organizations/{callers.viewer.org_id}/support",
        json={"message": "the emulator is slow"},
        headers=callers.viewer.headers,
    )
    assert (response.status_code, await response.get_json()) == (200, {"success": True})
    [saved] = await store.list_feedback(org_id=callers.viewer.org_id)
    assert (saved.kind, saved.user_id, saved.email) == (
        FeedbackKind.SUPPORT,
        callers.viewer.user_id,
        "carol@example.com",
    )
