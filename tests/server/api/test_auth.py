"""Identity and access: 401 without a valid key, 403 without the role, 404 across orgs."""

from __future__ import annotations

import pytest
from quart.typing import TestClientProtocol as Client

from devyard.server.store import Role, Store

from .conftest import Callers, assert_api_error


@pytest.mark.parametrize(
    "authorization",
    [
        None,
        "",
        "Bearer",
        "Basic dXNlcjpwYXNz",
        "Bearer not-a-key",
        "Bearer dy_AAAAAAAAAAAA_" + "A" * 43,  # well-formed, unknown
        "Bearer " + "x" * 2000,
    ],
)
async def test_missing_or_invalid_key_is_401(
    client: Client, callers: Callers, authorization: str | None
) -> None:
    headers = {} if authorization is None else {"Authorization": authorization}
    response = await client.get("/whoami", headers=headers)
    body = await assert_api_error(response, 401)
    assert body["reason"] == "unauthenticated"
    assert response.headers["WWW-Authenticate"].startswith("Bearer")


async def test_a_wrong_secret_with_a_real_lookup_id_is_401(
    client: Client, callers: Callers
) -> None:
    key = callers.admin.key
    tampered = key[:-1] + ("A" if key[-1] != "A" else "B")
    await assert_api_error(
        await client.get("/whoami", headers={"Authorization": f"Bearer {tampered}"}), 401
    )


async def test_scheme_is_case_insensitive(client: Client, callers: Callers) -> None:
    response = await client.get("/whoami", headers={"Authorization": f"bearer {callers.admin.key}"})
    assert response.status_code == 200


async def test_whoami_names_the_key_user_organization_and_role(
    client: Client, callers: Callers
) -> None:
    response = await client.get("/whoami", headers=callers.member.headers)
    assert response.status_code == 200
    me = await response.get_json()
    assert me["user"]["name"] == "bob"
    assert me["organization"]["id"] == callers.member.org_id
    assert me["role"] == "member"
    assert me["apiKey"]["readOnly"] is False
    assert "key" not in me["apiKey"]  # the secret is never echoed


async def test_read_only_key_reads_but_never_writes(client: Client, callers: Callers) -> None:
    org = callers.read_only.org_id
    headers = callers.read_only.headers
    assert (await client.get(f"/organizations/{org}", headers=headers)).status_code == 200
    response = await client.patch(f"/organizations/{org}", json={"name": "x"}, headers=headers)
    body = await assert_api_error(response, 403, "read-only")
    assert body["reason"] == "read_only_key"
    response = await client.post(
        f"/organizations/{org}/apiKeys", json={"name": "k"}, headers=headers
    )
    await assert_api_error(response, 403, "read-only")


@pytest.mark.parametrize("who", ["member", "viewer"])
async def test_admin_operations_are_403_below_admin(
    client: Client, callers: Callers, who: str
) -> None:
    caller = getattr(callers, who)
    org = caller.org_id
    attempts = [
        client.patch(f"/organizations/{org}", json={"name": "mine"}, headers=caller.headers),
        client.delete(f"/organizations/{org}", headers=caller.headers),
        client.post(
            f"/organizations/{org}/members",
            json={"userName": "eve", "role": "admin"},
            headers=caller.headers,
        ),
        client.patch(
            f"/organizations/{org}/members/{caller.user_name}",
            json={"role": "admin"},
            headers=caller.headers,
        ),
        client.delete(f"/organizations/{org}/members/alice", headers=caller.headers),
    ]
    for attempt in attempts:
        body = await assert_api_error(await attempt, 403, "admin")
        assert body["reason"] == "insufficient_role"


async def test_another_organizations_ids_are_404_even_for_its_admin_elsewhere(
    client: Client, callers: Callers
) -> None:
    theirs = callers.other_admin.org_id
    for path in (
        f"/organizations/{theirs}",
        f"/organizations/{theirs}/members",
        f"/organizations/{theirs}/apiKeys",
        "/users/olga",
        "/users/olga/memberships",
    ):
        await assert_api_error(await client.get(path, headers=callers.viewer.headers), 404)
    # A write to another organization is 404 before it is 403: nothing is revealed.
    response = await client.delete(f"/organizations/{theirs}", headers=callers.viewer.headers)
    await assert_api_error(response, 404)


async def test_a_role_change_applies_to_the_next_request(
    client: Client, callers: Callers, store: Store
) -> None:
    org = callers.member.org_id
    path = f"/organizations/{org}/members"
    new = {"userName": "dave", "role": "viewer"}
    await assert_api_error(await client.post(path, json=new, headers=callers.member.headers), 403)
    await store.set_membership_role(org, callers.member.user_id, Role.ADMIN)
    response = await client.post(path, json=new, headers=callers.member.headers)
    assert response.status_code == 200


async def test_a_removed_members_key_stops_working(client: Client, callers: Callers) -> None:
    org = callers.admin.org_id
    response = await client.delete(
        f"/organizations/{org}/members/bob", headers=callers.admin.headers
    )
    assert response.status_code == 200
    await assert_api_error(await client.get("/whoami", headers=callers.member.headers), 401)


async def test_use_is_recorded_as_last_used(client: Client, callers: Callers, store: Store) -> None:
    [before] = await store.list_api_keys(callers.viewer.org_id, user_id=callers.viewer.user_id)
    assert before.last_used_at is None
    assert (await client.get("/whoami", headers=callers.viewer.headers)).status_code == 200
    [after] = await store.list_api_keys(callers.viewer.org_id, user_id=callers.viewer.user_id)
    assert after.last_used_at is not None
