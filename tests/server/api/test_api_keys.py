"""API keys: shown once, hash stored, own keys for everyone, all keys for admins."""

from __future__ import annotations

from quart.typing import TestClientProtocol as Client

from devyard.server.store import Store

from .conftest import Callers, assert_api_error


async def test_a_created_key_is_shown_once_and_works(
    client: Client, callers: Callers, store: Store
) -> None:
    base = f"/organizations/{callers.member.org_id}/apiKeys"
    response = await client.post(base, json={"name": "ci"}, headers=callers.member.headers)
    assert response.status_code == 200
    created = await response.get_json()
    assert created["key"].startswith("dy_")
    assert created["key"].startswith(created["prefix"] + "_")
    assert (created["name"], created["readOnly"], created["userId"]) == (
        "ci",
        False,
        callers.member.user_id,
    )
    me = await client.get("/whoami", headers={"Authorization": f"Bearer {created['key']}"})
    assert (await me.get_json())["apiKey"]["id"] == created["id"]
    # Never again: not in the list, not in a get.
    listed = await (await client.get(base, headers=callers.member.headers)).get_json()
    assert all("key" not in k for k in listed)
    one = await client.get(f"{base}/{created['id']}", headers=callers.member.headers)
    assert "key" not in await one.get_json()
    # And the store holds no plaintext.
    credential = await store.get_api_key_by_lookup(created["prefix"].removeprefix("dy_"))
    assert created["key"] not in credential.secret_hash


async def test_a_read_only_key_can_be_made_and_only_reads(client: Client, callers: Callers) -> None:
    org = callers.member.org_id
    response = await client.post(
        f"/organizations/{org}/apiKeys",
        json={"name": "dashboard", "readOnly": True},
        headers=callers.member.headers,
    )
    key = (await response.get_json())["key"]
    headers = {"Authorization": f"Bearer {key}"}
    assert (await client.get("/whoami", headers=headers)).status_code == 200
    response = await client.post(
        f"/organizations/{org}/support", json={"message": "hi"}, headers=headers
    )
    await assert_api_error(response, 403, "read-only")


async def test_non_admins_see_only_their_own_keys(client: Client, callers: Callers) -> None:
    base = f"/organizations/{callers.admin.org_id}/apiKeys"
    mine = await (await client.get(base, headers=callers.member.headers)).get_json()
    assert {k["userId"] for k in mine} == {callers.member.user_id}
    everyone = await (await client.get(base, headers=callers.admin.headers)).get_json()
    assert {k["userId"] for k in everyone} == {
        callers.admin.user_id,
        callers.member.user_id,
        callers.viewer.user_id,
    }
    alices = next(k for k in everyone if k["userId"] == callers.admin.user_id)
    await assert_api_error(
        await client.get(f"{base}/{alices['id']}", headers=callers.member.headers), 404
    )
    await assert_api_error(
        await client.delete(f"{base}/{alices['id']}", headers=callers.member.headers), 404
    )


async def test_revoking_a_key_stops_it_and_is_idempotent(client: Client, callers: Callers) -> None:
    base = f"/organizations/{callers.admin.org_id}/apiKeys"
    me = await (await client.get("/whoami", headers=callers.viewer.headers)).get_json()
    key_id = me["apiKey"]["id"]
    first = await client.delete(f"{base}/{key_id}", headers=callers.admin.headers)
    assert first.status_code == 200
    revoked_at = (await first.get_json())["revokedAt"]
    assert revoked_at is not None
    await assert_api_error(await client.get("/whoami", headers=callers.viewer.headers), 401)
    second = await client.delete(f"{base}/{key_id}", headers=callers.admin.headers)
    assert (await second.get_json())["revokedAt"] == revoked_at
    active = await (await client.get(base, headers=callers.admin.headers)).get_json()
    assert key_id not in {k["id"] for k in active}
    with_revoked = await client.get(f"{base}?includeRevoked=true", headers=callers.admin.headers)
    assert key_id in {k["id"] for k in await with_revoked.get_json()}


async def test_admins_make_keys_for_members_and_others_cannot(
    client: Client, callers: Callers
) -> None:
    base = f"/organizations/{callers.admin.org_id}/apiKeys"
    made = await client.post(
        base, json={"name": "for-carol", "userName": "carol"}, headers=callers.admin.headers
    )
    created = await made.get_json()
    assert created["userId"] == callers.viewer.user_id
    as_carol = await client.get("/whoami", headers={"Authorization": f"Bearer {created['key']}"})
    assert (await as_carol.get_json())["role"] == "viewer"  # the member's role, not the admin's
    refused = await client.post(
        base, json={"name": "x", "userName": "carol"}, headers=callers.member.headers
    )
    await assert_api_error(refused, 403, "admin")
    outsider = await client.post(
        base, json={"name": "x", "userName": "olga"}, headers=callers.admin.headers
    )
    await assert_api_error(outsider, 404, "olga")


async def test_keys_of_another_organization_are_404(client: Client, callers: Callers) -> None:
    theirs = await (await client.get("/whoami", headers=callers.other_admin.headers)).get_json()
    path = f"/organizations/{callers.admin.org_id}/apiKeys/{theirs['apiKey']['id']}"
    await assert_api_error(await client.delete(path, headers=callers.admin.headers), 404)
