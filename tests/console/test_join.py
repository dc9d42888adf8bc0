"""Joining by an invitation's link in the console (pages/join.py): the link's GET shows a
page and consumes nothing; a signed-in invited user joins through a CSRF-protected form (the
API binds the invitation to the session's user as it would a key's); another email is the
API's 403; a member is told so; signed out, sign-in comes back to the page; a new user joins
even from a browser signed in as someone else; the API's accept still ignores a session
cookie that comes without its CSRF token (another site's form post)."""

from __future__ import annotations

import html
import re
from urllib.parse import urlsplit

from quart.typing import TestClientProtocol as Client

from devyard.server.console.pages.join import NOT_OPEN
from devyard.server.store import Role

from .conftest import Console, add_person, signed_in


async def _invite(console: Console, email: str, role: str = "member") -> str:
    """alice invites *email*; the link's path and query, as the admin got it (no SMTP)."""
    response = await console.client().post(
        f"/organizations/{console.alice.org_id}/invitations",
        json={"email": email, "role": role},
        headers={"Authorization": f"Bearer {console.alice.key}"},
    )
    assert response.status_code == 200, await response.get_data()
    link = urlsplit((await response.get_json())["acceptUrl"])
    return f"{link.path}?{link.query}"


async def _open(client: Client, link: str) -> tuple[int, str]:
    """The link opened in the browser: the API's redirect, then the console's page."""
    opened = await client.get(link)
    assert opened.status_code == 303
    location = opened.headers["Location"]
    assert location.startswith("/console/team/join?organization=")
    page = await client.get(location)
    return page.status_code, await page.get_data(as_text=True)


async def _open_invitations(console: Console) -> list[str]:
    listed = await console.client().get(
        f"/organizations/{console.alice.org_id}/invitations",
        headers={"Authorization": f"Bearer {console.alice.key}"},
    )
    return [i["email"] for i in await listed.get_json()]


async def _members(console: Console) -> dict[str, str]:
    listed = await console.client().get(
        f"/organizations/{console.alice.org_id}/members",
        headers={"Authorization": f"Bearer {console.alice.key}"},
    )
    return {m["user"]["name"]: m["role"] for m in await listed.get_json()}


def _field(page: str, name: str) -> str:
    match = re.search(rf'name="{name}" value="([^"]*)"', page)
    assert match is not None, (name, page)
    return html.unescape(match.group(1))


async def test_signed_out_the_link_changes_nothing_and_sign_in_comes_back(
    console: Console,
) -> None:
    dana = await add_person(console.store, console.olga.org_id, "dana", Role.MEMBER)
    link = await _invite(console, "dana@example.com", "viewer")
    browser = console.client()
    for _ in range(2):  # a mail scanner's prefetch, then the person: nothing is consumed
        status, page = await _open(browser, link)
        assert status == 200, page
        assert "Join acme" in page and "viewer" in page
    assert await _open_invitations(console) == ["dana@example.com"]
    # Signed out: sign in, which comes back here (a local path only), or join as a new user.
    sign_in = re.search(r'id="sign-in-to-join" href="([^"]+)"', page)
    assert sign_in is not None
    form = await (await browser.get(html.unescape(sign_in.group(1)))).get_data(as_text=True)
    back = _field(form, "next")
    assert back.startswith("/console/team/join?organization=")
    signed = await browser.post(
        "/console/sign-in",
        form={"login": _field(form, "login"), "apiKey": dana.key, "next": back},
    )
    assert (signed.status_code, signed.headers["Location"]) == (303, back)
    page = await (await browser.get(back)).get_data(as_text=True)
    asked = re.search(r'id="accept-question">(.*?)</p>', page)
    assert asked is not None
    question = re.sub(r"<[^>]+>", "", asked.group(1))
    assert question == "Join acme as dana (dana@example.com) with the role viewer?"
    assert await _open_invitations(console) == ["dana@example.com"]
    # Unknown tokens and incomplete links: one message, 404.
    for query in (f"organization={console.alice.org_id}&token=dyinv_nope", "token=dyinv_x", ""):
        refused = await browser.get(f"/console/team/join?{query}")
        assert refused.status_code == 404
        assert html.escape(NOT_OPEN) in await refused.get_data(as_text=True)


async def test_a_signed_in_invited_user_joins_by_the_form(console: Console) -> None:
    dana = await add_person(console.store, console.olga.org_id, "dana", Role.MEMBER)
    link = await _invite(console, "dana@example.com")
    browser = console.client()
    csrf = await signed_in(browser, dana.key)
    # Another site's form posting the link to the API with dana's cookie: the cookie alone
    # is ignored, so this is the new-user path, refused since a user has that email.
    forged = await browser.post(link, headers={"Origin": "https://evil.example"})
    assert forged.status_code == 409, await forged.get_data()
    assert "dana" not in await _members(console)
    _, page = await _open(browser, link)
    form = {"organization": _field(page, "organization"), "token": _field(page, "token")}
    assert _field(page, "csrf") == csrf
    # The console's form without the session's CSRF token, or with another: refused.
    for bad in ({}, {"csrf": "forged"}):
        refused = await browser.post("/console/team/join/accept", form={**form, **bad})
        assert refused.status_code == 403
    assert "dana" not in await _members(console)
    joined = await browser.post("/console/team/join/accept", form={**form, "csrf": csrf})
    welcome = await joined.get_data(as_text=True)
    assert joined.status_code == 200, welcome
    key = re.search(r'id="new-key">(dy_[^<]+)<', welcome)
    assert key is not None and "Welcome to acme" in welcome
    assert (await _members(console))["dana"] == "member"
    assert await _open_invitations(console) == []
    # The browser is now signed in to acme with the new key's session; the key works there.
    who = await (await browser.get("/whoami")).get_json()
    assert (who["user"]["name"], who["organization"]["id"]) == ("dana", console.alice.org_id)
    assert who["credential"]["kind"] == "session"
    by_key = await console.client().get(
        "/whoami", headers={"Authorization": f"Bearer {key.group(1)}"}
    )
    assert (await by_key.get_json())["organization"]["id"] == console.alice.org_id
    assert key.group(1) not in await (await browser.get("/console/team/")).get_data(as_text=True)
    # Used: the link's page says so, as for an unknown token.
    status, page = await _open(browser, link)
    assert status == 404 and html.escape(NOT_OPEN) in page


async def test_another_email_is_refused_and_a_new_user_may_join(console: Console) -> None:
    gus = await add_person(console.store, console.olga.org_id, "gus", Role.MEMBER)
    link = await _invite(console, "hana@example.com")
    browser = console.client()
    csrf = await signed_in(browser, gus.key)
    _, page = await _open(browser, link)
    form = {"organization": _field(page, "organization"), "token": _field(page, "token")}
    refused = await browser.post("/console/team/join/accept", form={**form, "csrf": csrf})
    text = await refused.get_data(as_text=True)
    assert refused.status_code == 403
    assert "this invitation is for another email address" in text
    assert "gus" not in await _members(console)
    assert await _open_invitations(console) == ["hana@example.com"]
    # From the refusal's page, the same browser joins hana as a new user (gus's session
    # cookie is not used for it).
    joined = await browser.post(
        "/console/team/join",
        form={**form, "join": _field(text, "join"), "userName": "hana"},
    )
    assert joined.status_code == 200, await joined.get_data()
    members = await _members(console)
    assert members["hana"] == "member" and "gus" not in members
    who = await (await browser.get("/whoami")).get_json()
    assert who["user"]["name"] == "hana"


async def test_a_member_is_told_so(console: Console) -> None:
    # bob (acme member) may accept team@ once acme verified example.com, but is a member.
    await console.store.replace_domains(console.alice.org_id, {"example.com": "t"})
    await console.store.mark_domain_verified(console.alice.org_id, "example.com")
    link = await _invite(console, "team@example.com")
    browser = console.client()
    csrf = await signed_in(browser, console.bob.key)
    _, page = await _open(browser, link)
    assert 'id="already-member"' in page and 'action="/console/team/join/accept"' not in page
    form = {"organization": _field(page, "organization"), "token": _field(page, "token")}
    again = await browser.post("/console/team/join/accept", form={**form, "csrf": csrf})
    assert again.status_code == 409
    assert "already a member" in await again.get_data(as_text=True)
    assert await _open_invitations(console) == ["team@example.com"]
