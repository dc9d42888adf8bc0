"""Invitations mailed through a real SMTP server (aiosmtpd on loopback): the link in the
message works end to end, once; it is bound to the invited person; admins list and revoke."""

from __future__ import annotations

import re
from email.message import Message
from typing import Any
from urllib.parse import urlsplit

import pytest
from quart.typing import TestClientProtocol as Client

from devyard.server.accounts.settings import AccountsConfig
from devyard.server.store import Role, Store, tokens
from tests.polling import eventually

from ..api.conftest import Callers, add_caller, assert_api_error
from .conftest import SmtpPeer, smtp_accounts


@pytest.fixture
def accounts(smtp_server: SmtpPeer) -> AccountsConfig:
    return smtp_accounts(smtp_server)


def _link(message: Message) -> str:
    payload = message.get_payload(decode=True)
    assert isinstance(payload, bytes)
    match = re.search(r"(http\S+/invitations/accept\?token=\S+)", payload.decode())
    assert match is not None, payload
    return match.group(1)


async def _invite(
    client: Client, callers: Callers, email: str, role: str = "member"
) -> dict[str, Any]:
    response = await client.post(
        f"/organizations/{callers.admin.org_id}/invitations",
        json={"email": email, "role": role},
        headers=callers.admin.headers,
    )
    assert response.status_code == 200, await response.get_data()
    body: dict[str, Any] = await response.get_json()
    return body


async def test_a_mailed_link_lets_a_new_person_join_once(
    client: Client, callers: Callers, smtp_server: SmtpPeer, store: Store
) -> None:
    sent = await _invite(client, callers, "Dana@Example.com", "viewer")
    assert sent["emailed"] is True and "acceptUrl" not in sent
    await eventually(lambda: len(smtp_server.mailbox.messages) == 1)
    sender, recipients, message = smtp_server.mailbox.messages[0]
    assert (sender, recipients) == ("devyard@test.invalid", ["dana@example.com"])
    assert "acme" in message["Subject"]
    link = urlsplit(_link(message))
    # Listed as open, without its token; the store keeps only the token's hash.
    listed = await (
        await client.get(
            f"/organizations/{callers.admin.org_id}/invitations", headers=callers.admin.headers
        )
    ).get_json()
    assert [(i["email"], i["role"]) for i in listed] == [("dana@example.com", "viewer")]
    assert "token" not in str(listed)
    token = link.query.removeprefix("token=")
    assert await store.get_invitation_by_token(callers.admin.org_id, tokens.hash_secret(token))
    # The link, as mailed, works: the new user joins with the invited role and a key.
    accepted = await client.post(f"{link.path}?{link.query}&userName=dana")
    assert accepted.status_code == 200, await accepted.get_data()
    body = await accepted.get_json()
    assert body["organizationId"] == callers.admin.org_id
    key = {"Authorization": f"Bearer {body['apiKey']['key']}"}
    who = await (await client.get("/whoami", headers=key)).get_json()
    assert (who["user"]["name"], who["user"]["email"], who["role"]) == (
        "dana",
        "dana@example.com",
        "viewer",
    )
    # Single use: the same link again is 404, and the invitation is no longer open.
    await assert_api_error(await client.post(f"{link.path}?{link.query}"), 404)
    listed = await client.get(
        f"/organizations/{callers.admin.org_id}/invitations", headers=callers.admin.headers
    )
    assert await listed.get_json() == []
    kinds = [e.kind for e in await store.list_audit_events(callers.admin.org_id)]
    assert kinds[:2] == ["invitation_accepted", "invitation_created"]


async def test_an_invitation_is_bound_to_the_invited_person(
    client: Client, callers: Callers, smtp_server: SmtpPeer, store: Store
) -> None:
    # erin exists in another organization, with her own key there.
    erin = await add_caller(store, callers.other_admin.org_id, "erin", Role.MEMBER)
    await _invite(client, callers, "erin@example.com")
    await eventually(lambda: len(smtp_server.mailbox.messages) == 1)
    link = urlsplit(_link(smtp_server.mailbox.messages[0][2]))
    url = f"{link.path}?{link.query}"
    # Someone else's key cannot take it (olga's email is not the invited one) ...
    await assert_api_error(await client.post(url, headers=callers.other_admin.headers), 403)
    # ... nor an anonymous caller, since a user with that email exists (409: sign in as her).
    await assert_api_error(await client.post(url), 409)
    # erin's key of another organization joins her to this one, with the invited role.
    joined = await client.post(url, headers=erin.headers)
    assert joined.status_code == 200, await joined.get_data()
    membership = await store.get_membership(callers.admin.org_id, erin.user_id)
    assert membership.role is Role.MEMBER
    # ... and answers her a first key of this organization (a key belongs to one), once.
    key = {"Authorization": f"Bearer {(await joined.get_json())['apiKey']['key']}"}
    who = await (await client.get("/whoami", headers=key)).get_json()
    assert (who["user"]["id"], who["organization"]["id"]) == (erin.user_id, callers.admin.org_id)


async def test_a_session_accepts_only_with_its_csrf_token(
    client: Client, callers: Callers, smtp_server: SmtpPeer, store: Store
) -> None:
    """The console's way: erin's browser session (made from her key of another organization)
    accepts with its CSRF token; the cookie alone, as another site's form post would bring
    it, is ignored, and a wrong token is refused."""
    erin = await add_caller(store, callers.other_admin.org_id, "erin", Role.MEMBER)
    await _invite(client, callers, "erin@example.com", "viewer")
    await eventually(lambda: len(smtp_server.mailbox.messages) == 1)
    link = urlsplit(_link(smtp_server.mailbox.messages[0][2]))
    url = f"{link.path}?{link.query}"
    # What the link would join, told to its holder without consuming it (twice: a read).
    preview = link.path.replace("/accept", "/preview") + f"?{link.query}"
    for _ in range(2):
        seen = await client.get(preview)
        assert seen.status_code == 200, await seen.get_data()
        body = await seen.get_json()
        assert (body["organizationId"], body["organizationName"], body["role"]) == (
            callers.admin.org_id, "acme", "viewer",
        )  # fmt: skip
    await assert_api_error(await client.get(f"{link.path[:-7]}/preview?token=dyinv_no"), 404)
    session = await client.post("/sessions", headers=erin.headers)
    assert session.status_code == 200, await session.get_data()
    csrf = str((await session.get_json())["csrfToken"])
    # Cookie only: ignored, so this is the no-key path, and erin's email is taken (409).
    await assert_api_error(await client.post(url, headers={"Origin": "https://evil.test"}), 409)
    await assert_api_error(await client.post(url, headers={"X-CSRF-Token": "forged"}), 403, "CSRF")
    members = await (
        await client.get(
            f"/organizations/{callers.admin.org_id}/members", headers=callers.admin.headers
        )
    ).get_json()
    assert "erin" not in [m["user"]["name"] for m in members]
    joined = await client.post(url, headers={"X-CSRF-Token": csrf})
    assert joined.status_code == 200, await joined.get_data()
    membership = await store.get_membership(callers.admin.org_id, erin.user_id)
    assert membership.role is Role.VIEWER
    await assert_api_error(await client.get(preview), 404)  # used: gone alike


async def test_a_verified_domain_lets_a_colleague_accept(
    client: Client, callers: Callers, smtp_server: SmtpPeer, store: Store
) -> None:
    frank = await add_caller(store, callers.other_admin.org_id, "frank", Role.MEMBER)
    await _invite(client, callers, "team@example.com")
    await eventually(lambda: len(smtp_server.mailbox.messages) == 1)
    link = urlsplit(_link(smtp_server.mailbox.messages[0][2]))
    url = f"{link.path}?{link.query}"
    await assert_api_error(await client.post(url, headers=frank.headers), 403)  # pending domain
    await store.replace_domains(callers.admin.org_id, {"example.com": "t"})
    await assert_api_error(await client.post(url, headers=frank.headers), 403)
    await store.mark_domain_verified(callers.admin.org_id, "example.com")
    assert (await client.post(url, headers=frank.headers)).status_code == 200


async def test_revoked_and_replaced_links_stop_working(
    client: Client, callers: Callers, smtp_server: SmtpPeer
) -> None:
    base = f"/organizations/{callers.admin.org_id}/invitations"
    first = await _invite(client, callers, "gina@example.com")
    await _invite(client, callers, "gina@example.com")  # replaces the first
    await eventually(lambda: len(smtp_server.mailbox.messages) == 2)
    old, new = (urlsplit(_link(message)) for _, _, message in smtp_server.mailbox.messages)
    await assert_api_error(await client.post(f"{old.path}?{old.query}"), 404)
    await assert_api_error(
        await client.delete(f"{base}/{first['invitationId']}", headers=callers.admin.headers), 404
    )
    listed = await (await client.get(base, headers=callers.admin.headers)).get_json()
    assert len(listed) == 1
    revoke = await client.delete(f"{base}/{listed[0]['id']}", headers=callers.admin.headers)
    assert (revoke.status_code, await revoke.get_json()) == (200, {"success": True})
    await assert_api_error(await client.post(f"{new.path}?{new.query}"), 404)


async def test_roles_organizations_and_bad_input(client: Client, callers: Callers) -> None:
    base = f"/organizations/{callers.admin.org_id}/invitations"
    for caller in (callers.member, callers.viewer):
        await assert_api_error(await client.get(base, headers=caller.headers), 403)
        await assert_api_error(
            await client.post(base, json={"email": "x@example.com"}, headers=caller.headers), 403
        )
    await assert_api_error(await client.get(base, headers=callers.other_admin.headers), 404)
    await assert_api_error(
        await client.post(
            base, json={"email": "x@example.com"}, headers=callers.other_admin.headers
        ),
        404,
    )
    for bad in ({}, {"email": "not-an-email"}, {"email": "x@example.com", "role": "owner"}):
        await assert_api_error(
            await client.post(base, json=bad, headers=callers.admin.headers), 400
        )
    await assert_api_error(
        await client.post(base, json={"email": "bob@example.com"}, headers=callers.admin.headers),
        409,
        "member",
    )
    await assert_api_error(await client.post(f"{base}/accept"), 400)
    await assert_api_error(await client.post(f"{base}/accept?token=dyinv_nothing"), 404)
