"""POST /organizations: who may create one (operators, or any user), the creator becomes its
admin with a first key there; the new organization is separate from the caller's."""

from __future__ import annotations

from quart.typing import TestClientProtocol as Client

from devyard.server.store import Role, Store
from devyard.server.store.accounts import AuditQuery

from ..api.conftest import Callers, assert_api_error


async def test_only_operators_create_organizations_by_default(
    client: Client, callers: Callers, store: Store
) -> None:
    response = await client.post(
        "/organizations", json={"name": "initech"}, headers=callers.admin.headers
    )
    await assert_api_error(response, 403, "operators")
    await store.set_operator(callers.member.user_id, True)
    response = await client.post(
        "/organizations", json={"name": "initech"}, headers=callers.member.headers
    )
    assert response.status_code == 200, await response.get_data()
    created = await response.get_json()
    assert created["name"] == "initech"
    # The creator is the admin there, and the answered key acts in the new organization.
    key = {"Authorization": f"Bearer {created['apiKey']['key']}"}
    who = await (await client.get("/whoami", headers=key)).get_json()
    assert (who["organization"]["id"], who["role"], who["user"]["name"]) == (
        created["id"],
        "admin",
        "bob",
    )
    members = await store.list_members(created["id"])
    assert [(m.user.name, m.role) for m in members] == [("bob", Role.ADMIN)]
    # The caller's old key still acts in its own organization only.
    await assert_api_error(
        await client.get(f"/organizations/{created['id']}", headers=callers.member.headers), 404
    )
    events = await store.list_audit(created["id"], AuditQuery())
    assert [(e.kind, e.actor) for e in events] == [("organization_created", callers.member.user_id)]
