"""Without SMTP the accept link goes back to the inviting admin, once; it works the same."""

from __future__ import annotations

from urllib.parse import urlsplit

from quart.typing import TestClientProtocol as Client

from devyard.server.store import Store

from ..api.conftest import Callers, assert_api_error


async def test_the_link_is_returned_to_the_admin(
    client: Client, callers: Callers, store: Store
) -> None:
    base = f"/organizations/{callers.admin.org_id}/invitations"
    response = await client.post(
        base, json={"email": "hank@example.com"}, headers=callers.admin.headers
    )
    sent = await response.get_json()
    assert sent["emailed"] is False
    link = urlsplit(sent["acceptUrl"])
    assert link.path == f"{base}/accept"
    listed = await (await client.get(base, headers=callers.admin.headers)).get_json()
    assert "acceptUrl" not in listed[0] and link.query not in str(listed)
    # The token of one organization is no token in another.
    other = f"/organizations/{callers.other_admin.org_id}/invitations/accept?{link.query}"
    await assert_api_error(await client.post(other), 404)
    accepted = await client.post(f"{link.path}?{link.query}")
    assert accepted.status_code == 200
    members = await store.list_members(callers.admin.org_id)
    assert ("hank", "hank@example.com") in [(m.user.name, m.user.email) for m in members]
