"""The team page in-process: members and roles, invitations (accepted by the link a real SMTP
server received: the mailed link opens the console's join page, which signs the new member
in and shows the key once), API keys shown once and revoked, domains with their TXT record,
the OIDC connection, the audit log; refusals as messages; CSRF; viewers and another
organization."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from quart.typing import TestClientProtocol as Client

from devyard.server.api.app import api_state, create_app
from devyard.server.api.contract import Contract
from devyard.server.bootstrap import bootstrap_organization
from devyard.server.config import ServerConfig
from devyard.server.store import Role, open_store
from tests.polling import eventually
from tests.server.accounts.conftest import SmtpPeer, smtp_accounts, smtp_server

from .conftest import Console, Person, add_person, signed_in

__all__ = ["smtp_server"]  # the fixture, imported


@pytest.fixture
async def mailing(
    tmp_path: Path, contract: Contract, smtp_server: SmtpPeer
) -> AsyncIterator[tuple[Client, Person, SmtpPeer]]:
    """A console whose server mails invitations to the test's SMTP server; alice, admin."""
    async with open_store(str(tmp_path / "devyard.db")) as store:
        acme = await bootstrap_organization(store, org_name="acme", user_name="alice")
        config = ServerConfig(data_dir=tmp_path, accounts=smtp_accounts(smtp_server))
        app = create_app(api_state(store, config, contract=contract))
        alice = Person("alice", acme.plaintext_key, acme.organization.id)
        yield app.test_client(), alice, smtp_server


async def test_signed_out_goes_to_sign_in(console: Console) -> None:
    response = await console.client().get("/console/team/")
    assert response.headers["Location"] == "/console/sign-in?next=/console/team/"


async def test_an_invitation_is_accepted_by_the_mailed_link(
    mailing: tuple[Client, Person, SmtpPeer],
) -> None:
    admin, alice, smtp = mailing
    csrf = await signed_in(admin, alice.key)
    sent = await admin.post(
        "/console/team/invitations",
        form={"csrf": csrf, "email": "dana@example.com", "role": "viewer"},
    )
    assert sent.status_code == 303 and "mail" in sent.headers["Location"]
    page = await (await admin.get("/console/team/")).get_data(as_text=True)
    assert 'data-email="dana@example.com"' in page
    await eventually(lambda: len(smtp.mailbox.messages) == 1)
    payload = smtp.mailbox.messages[0][2].get_payload(decode=True)
    assert isinstance(payload, bytes)
    match = re.search(r"(http\S+/invitations/accept\?token=\S+)", payload.decode())
    assert match is not None
    link = urlsplit(match.group(1))
    # dana opens the link in her browser: the console's join page
    dana = admin.__class__(admin.app)  # a browser of her own (its own cookies)
    opened = await dana.get(f"{link.path}?{link.query}")
    assert opened.status_code == 303
    assert opened.headers["Location"].startswith("/console/team/join?organization=")
    form_page = await dana.get(opened.headers["Location"])
    text = await form_page.get_data(as_text=True)
    join = re.search(r'name="join" value="([^"]+)"', text)
    organization = re.search(r'name="organization" value="([^"]+)"', text)
    token = re.search(r'name="token" value="([^"]+)"', text)
    assert join and organization and token and organization.group(1) == alice.org_id
    joined = await dana.post(
        "/console/team/join",
        form={"join": join.group(1), "organization": organization.group(1),
              "token": token.group(1), "userName": "dana"},
    )  # fmt: skip
    welcome = await joined.get_data(as_text=True)
    assert joined.status_code == 200, welcome
    key = re.search(r'id="new-key">(dy_[^<]+)<', welcome)
    assert key is not None
    who = await (await dana.get("/whoami")).get_json()  # signed in by the join
    assert (who["user"]["name"], who["role"], who["organization"]["id"]) == (
        "dana", "viewer", alice.org_id,
    )  # fmt: skip
    team = await (await dana.get("/console/team/")).get_data(as_text=True)
    assert key.group(1) not in team and 'data-name="dana"' in team
    # the link works once
    again = await dana.post(
        "/console/team/join",
        form={"join": join.group(1), "organization": organization.group(1),
              "token": token.group(1)},
    )  # fmt: skip
    assert again.status_code in (403, 404)
    # without the join form's own token (another site's form) nothing happens
    forged = await admin.__class__(admin.app).post(
        "/console/team/join", form={"organization": alice.org_id, "token": token.group(1)}
    )
    assert forged.status_code == 403


async def test_without_smtp_the_link_is_shown_once(console: Console) -> None:
    client = console.client()
    csrf = await signed_in(client, console.alice.key)
    response = await client.post(
        "/console/team/invitations", form={"csrf": csrf, "email": "eve@example.com"}
    )
    page = await response.get_data(as_text=True)
    assert response.status_code == 200
    link = re.search(r'id="accept-url">([^<]+)<', page)
    assert link is not None and "/invitations/accept?token=" in link.group(1)
    again = await (await client.get("/console/team/")).get_data(as_text=True)
    assert link.group(1) not in again and "eve@example.com" in again
    invitation = re.search(r"/console/team/invitations/([^/]+)/revoke", again)
    assert invitation is not None
    revoked = await client.post(invitation.group(0), form={"csrf": csrf})
    assert revoked.status_code == 303
    assert "eve@example.com" not in await (await client.get("/console/team/")).get_data(True)


async def test_roles_members_and_the_audit_log(console: Console) -> None:
    client = console.client()
    csrf = await signed_in(client, console.alice.key)
    changed = await client.post(
        "/console/team/members/bob/role", form={"csrf": csrf, "role": "viewer"}
    )
    assert changed.status_code == 303
    bob = await (await client.get(f"/organizations/{console.alice.org_id}/members/bob")).get_json()
    assert bob["role"] == "viewer"
    removed = await client.post("/console/team/members/carol/remove", form={"csrf": csrf})
    assert removed.status_code == 303
    page = await (await client.get("/console/team/")).get_data(as_text=True)
    assert 'data-name="carol"' not in page and 'data-name="bob"' in page
    # the API's refusal: the last admin cannot step down
    refused = await client.post(
        "/console/team/members/alice/role", form={"csrf": csrf, "role": "member"}
    )
    text = await refused.get_data(as_text=True)
    assert refused.status_code == 422 and 'role="alert"' in text and "Traceback" not in text
    audit = await (await client.get("/console/team/audit")).get_data(as_text=True)
    assert "member" in audit and 'data-kind="' in audit and "alice" in audit


async def test_api_keys_are_shown_once_and_revoked(console: Console) -> None:
    client = console.client()
    csrf = await signed_in(client, console.bob.key)
    made = await client.post(
        "/console/team/keys", form={"csrf": csrf, "name": "ci", "readOnly": "1"}
    )
    page = await made.get_data(as_text=True)
    secret = re.search(r'id="new-key">(dy_[^<]+)<', page)
    assert made.status_code == 200 and secret is not None
    listed = await (await client.get("/console/team/")).get_data(as_text=True)
    assert secret.group(1) not in listed and "read-only" in listed
    assert "alice-key" not in listed  # a member sees only their own keys
    keys = await (await client.get(f"/organizations/{console.bob.org_id}/apiKeys")).get_json()
    ci = next(k for k in keys if k["name"] == "ci")
    revoked = await client.post(f"/console/team/keys/{ci['id']}/revoke", form={"csrf": csrf})
    assert revoked.status_code == 303
    gone = await client.get("/whoami", headers={"Authorization": f"Bearer {secret.group(1)}"})
    assert gone.status_code == 401
    bad = await client.post("/console/team/keys", form={"csrf": csrf, "name": ""})
    assert bad.status_code == 400 and 'role="alert"' in await bad.get_data(as_text=True)


async def test_domains_and_single_sign_on(console: Console) -> None:
    client = console.client()
    csrf = await signed_in(client, console.alice.key)
    added = await client.post(
        "/console/team/domains", form={"csrf": csrf, "domain": "acme.example"}
    )
    assert added.status_code == 303
    page = await (await client.get("/console/team/")).get_data(as_text=True)
    assert 'data-domain="acme.example"' in page and "pending" in page
    domains = await (await client.get(f"/organizations/{console.alice.org_id}/domains")).get_json()
    assert domains[0]["txtRecord"]["value"] in page and domains[0]["txtRecord"]["name"] in page
    verify = await client.post("/console/team/domains/acme.example/verify", form={"csrf": csrf})
    assert verify.status_code in (303, 400, 409, 422, 503)
    assert "Traceback" not in await verify.get_data(as_text=True)
    saved = await client.post(
        "/console/team/oidc",
        form={"csrf": csrf, "issuer": "https://login.acme.example", "clientId": "devyard",
              "clientSecret": "s3cret-value", "allowedDomains": "acme.example",
              "defaultRole": "viewer"},
    )  # fmt: skip
    assert saved.status_code == 303, await saved.get_data(as_text=True)
    page = await (await client.get("/console/team/")).get_data(as_text=True)
    assert "https://login.acme.example" in page and "set (never shown)" in page
    assert "s3cret-value" not in page
    bad = await client.post(
        "/console/team/oidc", form={"csrf": csrf, "issuer": "http://evil.example", "clientId": "x"}
    )
    assert bad.status_code == 400 and 'role="alert"' in await bad.get_data(as_text=True)
    assert (await client.post("/console/team/oidc/delete", form={"csrf": csrf})).status_code == 303
    removed = await client.post("/console/team/domains/acme.example/remove", form={"csrf": csrf})
    assert removed.status_code == 303
    assert 'data-domain="acme.example"' not in await (await client.get("/console/team/")).get_data(
        True
    )


async def test_a_post_without_csrf_is_refused(console: Console) -> None:
    client = console.client()
    await signed_in(client, console.alice.key)
    for path, form in (
        ("/console/team/members/bob/role", {"role": "admin"}),
        ("/console/team/members/bob/remove", {"csrf": "nope"}),
        ("/console/team/invitations", {"email": "x@example.com"}),
        ("/console/team/keys", {"name": "k"}),
        ("/console/team/domains", {"domain": "x.example"}),
    ):
        assert (await client.post(path, form=form)).status_code == 403, path
    members = await (await client.get(f"/organizations/{console.alice.org_id}/members")).get_json()
    assert {m["user"]["name"]: m["role"] for m in members}["bob"] == "member"


async def test_viewers_and_other_organizations(console: Console) -> None:
    carol = console.client()
    carol_csrf = await signed_in(carol, console.carol.key)
    page = await (await carol.get("/console/team/")).get_data(as_text=True)
    assert 'data-name="bob"' in page and "Invitations" not in page and "Audit log" not in page
    refused = await carol.post(
        "/console/team/members/bob/role", form={"csrf": carol_csrf, "role": "admin"}
    )
    assert refused.status_code == 403
    assert (await carol.get("/console/team/audit")).status_code == 403
    olga = console.client()
    olga_csrf = await signed_in(olga, console.olga.key)
    page = await (await olga.get("/console/team/")).get_data(as_text=True)
    assert 'data-name="bob"' not in page and 'data-name="alice"' not in page and "olga" in page
    for path in ("/console/team/members/bob/role", "/console/team/members/bob/remove"):
        response = await olga.post(path, form={"csrf": olga_csrf, "role": "viewer"})
        assert response.status_code == 404, path
    audit = await (await olga.get("/console/team/audit")).get_data(as_text=True)
    assert "bob" not in audit and "alice" not in audit
    await add_person(console.store, console.olga.org_id, "gus", Role.MEMBER)
    assert 'data-name="gus"' in await (await olga.get("/console/team/")).get_data(as_text=True)
