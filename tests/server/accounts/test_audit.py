"""GET /organizations/{id}/audit: account changes with who, what, when and from where,
filtered by time and actor, paginated; admins only; another organization's is 404."""

from __future__ import annotations

from urllib.parse import quote

from quart.typing import TestClientProtocol as Client

from ..api.conftest import Callers, assert_api_error


async def test_changes_are_listed_with_actor_and_address(client: Client, callers: Callers) -> None:
    org = callers.admin.org_id
    admin = callers.admin.headers
    for email in ("a@example.com", "b@example.com", "c@example.com"):
        response = await client.post(
            f"/organizations/{org}/invitations", json={"email": email}, headers=admin
        )
        assert response.status_code == 200
    await client.put(
        f"/organizations/{org}/domains", json={"domains": ["x.example"]}, headers=admin
    )
    base = f"/organizations/{org}/audit"
    everything = await (await client.get(base, headers=admin)).get_json()
    assert [e["kind"] for e in everything] == ["domains_replaced"] + ["invitation_created"] * 3
    assert {e["actor"] for e in everything} == {callers.admin.user_id}
    assert all(e["address"] for e in everything)
    assert [e["detail"]["email"] for e in everything[1:]] == [
        "c@example.com",
        "b@example.com",
        "a@example.com",
    ]
    # Pages: two at a time, then the rest after the last id seen.
    first = await (await client.get(f"{base}?limit=2", headers=admin)).get_json()
    rest = await (
        await client.get(f"{base}?limit=2&before={first[-1]['id']}", headers=admin)
    ).get_json()
    assert [e["id"] for e in first + rest] == [e["id"] for e in everything]
    # Time bounds: from is inclusive, to exclusive.
    middle = everything[2]["createdAt"]
    newer = await (await client.get(f"{base}?from={quote(middle)}", headers=admin)).get_json()
    older = await (await client.get(f"{base}?to={quote(middle)}", headers=admin)).get_json()
    assert [e["id"] for e in newer + older] == [e["id"] for e in everything]
    nobody = await client.get(f"{base}?actor={callers.member.user_id}", headers=admin)
    assert await nobody.get_json() == []
    mine = await client.get(f"{base}?actor={callers.admin.user_id}&limit=1", headers=admin)
    assert len(await mine.get_json()) == 1
    await assert_api_error(await client.get(f"{base}?from=yesterday", headers=admin), 400)
    await assert_api_error(await client.get(f"{base}?from=2030-01-01T00:00:00", headers=admin), 400)
    await assert_api_error(await client.get(f"{base}?limit=0", headers=admin), 400)
    await assert_api_error(await client.get(base, headers=callers.member.headers), 403)
    await assert_api_error(await client.get(base, headers=callers.other_admin.headers), 404)


async def test_members_keys_and_tunnels_are_recorded(client: Client, callers: Callers) -> None:
    org = callers.admin.org_id
    admin = callers.admin.headers
    calls = [
        ("POST", f"/organizations/{org}/members", {"userName": "erin", "role": "viewer"}),
        ("PATCH", f"/organizations/{org}/members/erin", {"role": "member"}),
        ("DELETE", f"/organizations/{org}/members/erin", None),
        ("POST", f"/organizations/{org}/apiKeys", {"name": "ci"}),
        ("POST", "/v1/tunnels", {"name": "lab", "selectors": ["db.internal:5432"]}),
        ("PATCH", "/v1/tunnels/lab", {"selectors": ["db.internal:5433"]}),
        ("POST", "/v1/tunnels/lab/rotate", None),
        ("DELETE", "/v1/tunnels/lab", None),
        ("PATCH", f"/organizations/{org}", {"name": "acme2"}),
    ]
    key_id = None
    for method, path, payload in calls:
        response = await client.open(path, method=method, json=payload, headers=admin)
        assert response.status_code == 200, (path, await response.get_data())
        if path.endswith("/apiKeys"):
            key_id = (await response.get_json())["id"]
    revoked = await client.delete(f"/organizations/{org}/apiKeys/{key_id}", headers=admin)
    assert revoked.status_code == 200
    listed = await (await client.get(f"/organizations/{org}/audit", headers=admin)).get_json()
    assert [e["kind"] for e in reversed(listed)] == [
        "member_added",
        "member_role_changed",
        "member_removed",
        "api_key_created",
        "tunnel_created",
        "tunnel_selectors_set",
        "tunnel_token_rotated",
        "tunnel_deleted",
        "organization_updated",
        "api_key_revoked",
    ]
    assert {e["actor"] for e in listed} == {callers.admin.user_id}
    assert all(e["address"] for e in listed)
    assert "key" not in str([e["detail"] for e in listed if e["kind"] == "api_key_created"])
    # Another organization sees none of it.
    other = callers.other_admin
    theirs = await client.get(f"/organizations/{other.org_id}/audit", headers=other.headers)
    assert {e["subject"] for e in await theirs.get_json()}.isdisjoint({"lab", key_id})
