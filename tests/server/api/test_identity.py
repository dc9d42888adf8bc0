"""Spec 4.4 users: visible within the key's organization, changed only by themselves."""

from __future__ import annotations

from quart.typing import TestClientProtocol as Client

from devyard.server.store import Store

from .conftest import Callers, assert_api_error


async def test_a_user_of_the_same_organization_is_visible(client: Client, callers: Callers) -> None:
    response = await client.get("/users/bob", headers=callers.viewer.headers)
    assert response.status_code == 200
    user = await response.get_json()
    assert (user["id"], user["name"], user["email"]) == (
        callers.member.user_id,
        "bob",
        "bob@example.com",
    )
    assert user["createdAt"].endswith("Z")


async def test_unknown_users_are_404(client: Client, callers: Callers) -> None:
    await assert_api_error(await client.get("/users/nobody", headers=callers.admin.headers), 404)


async def test_users_change_their_own_name_and_email(
    client: Client, callers: Callers, store: Store
) -> None:
    response = await client.patch(
        "/users/bob", json={"name": "bobby", "email": None}, headers=callers.member.headers
    )
    assert response.status_code == 200
    assert (await response.get_json())["name"] == "bobby"
    stored = await store.get_user(callers.member.user_id)
    assert (stored.name, stored.email) == ("bobby", None)
    # The key keeps working: it names the user by id, not by name.
    assert (await client.get("/whoami", headers=callers.member.headers)).status_code == 200


async def test_nobody_changes_another_user_not_even_an_admin(
    client: Client, callers: Callers
) -> None:
    response = await client.patch("/users/bob", json={"name": "x"}, headers=callers.admin.headers)
    body = await assert_api_error(response, 403, "bob")
    assert body["reason"] == "not_self"


async def test_a_taken_email_is_409(client: Client, callers: Callers) -> None:
    response = await client.patch(
        "/users/bob", json={"email": "carol@example.com"}, headers=callers.member.headers
    )
    await assert_api_error(response, 409, "taken")


async def test_memberships_list_the_users_own_organizations(
    client: Client, callers: Callers, store: Store
) -> None:
    # alice joins globex too: her own list shows both, though her key is for acme only.
    await store.add_membership(callers.other_admin.org_id, callers.admin.user_id, "viewer")  # type: ignore[arg-type]
    response = await client.get("/users/alice/memberships", headers=callers.admin.headers)
    assert response.status_code == 200
    names = [org["name"] for org in await response.get_json()]
    assert names == ["acme", "globex"]
    await assert_api_error(
        await client.get("/users/bob/memberships", headers=callers.admin.headers), 403
    )


async def test_another_organizations_user_is_answered_like_an_unknown_name(
    client: Client, callers: Callers
) -> None:
    # Issue 14 finding 11: olga exists (in globex); a key of acme must not learn that from any
    # lookup by name. Every answer is the same as for a name nobody has, word for word.
    org = callers.admin.org_id
    probes = [
        ("GET", "/users/{name}", None),
        ("PATCH", "/users/{name}", {"email": "x@example.com"}),
        ("GET", "/users/{name}/memberships", None),
        ("GET", f"/organizations/{org}/members/{{name}}", None),
        ("PATCH", f"/organizations/{org}/members/{{name}}", {"role": "viewer"}),
        ("DELETE", f"/organizations/{org}/members/{{name}}", None),
        ("POST", f"/organizations/{org}/apiKeys", {"name": "k", "userName": "{name}"}),
    ]
    for method, template, payload in probes:
        answers = []
        for name in ("olga", "nobody"):
            body = (
                None
                if payload is None
                else {k: v.replace("{name}", name) for k, v in payload.items()}
            )
            response = await client.open(
                template.replace("{name}", name),
                method=method,
                json=body,
                headers=callers.admin.headers,
            )
            text = (await response.get_data(as_text=True)).replace(name, "NAME")
            answers.append((response.status_code, text))
        assert answers[0] == answers[1], (method, template, answers)
        assert answers[0][0] == 404, (method, template, answers)
