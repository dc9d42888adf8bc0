"""The console's framework, in-process: routing beside the API, sign in and out, the
login-CSRF and CSRF refusals, the security headers, errors as pages, static files."""

from __future__ import annotations

import gzip
import re

from devyard.server.store.base import Platform

from .conftest import Console, signed_in


async def test_root_and_console_redirect_and_the_api_is_unchanged(console: Console) -> None:
    client = console.client()
    response = await client.get("/")
    assert (response.status_code, response.headers["Location"]) == (302, "/console/")
    response = await client.get("/console/instances/")
    assert response.status_code == 303
    assert response.headers["Location"] == "/console/sign-in?next=/console/instances/"
    # the API keeps its JSON answers for everything else
    response = await client.get("/v1/android_instances")
    assert response.status_code == 401 and response.content_type == "application/json"
    response = await client.get("/no/such/path")
    assert response.status_code == 404 and response.content_type == "application/json"


async def test_sign_in_with_a_key_shows_the_organization_and_never_the_key(
    console: Console,
) -> None:
    client = console.client()
    await signed_in(client, console.bob.key)
    response = await client.get("/console/instances/")
    page = await response.get_data(as_text=True)
    assert response.status_code == 200
    assert "acme" in page and "bob" in page and "member" in page
    assert console.bob.key not in page
    # the session is the API's: the same cookie reads the API
    who = await client.get("/whoami")
    assert (await who.get_json())["credential"]["kind"] == "session"


async def test_a_wrong_key_is_a_message_not_a_session(console: Console) -> None:
    client = console.client()
    page = await client.get("/console/sign-in")
    login = re.search(r'name="login" value="([^"]+)"', await page.get_data(as_text=True))
    assert login is not None
    response = await client.post(
        "/console/sign-in", form={"login": login.group(1), "apiKey": "dy_0123456789abcdef_x"}
    )
    text = await response.get_data(as_text=True)
    assert response.status_code == 401
    assert "not valid" in text and "Traceback" not in text
    assert not any(c.startswith("devyard_session=") for c in response.headers.getlist("Set-Cookie"))


async def test_the_sign_in_form_refuses_a_post_without_its_login_token(
    console: Console,
) -> None:
    """Login CSRF: another site's form cannot sign this browser into its organization."""
    client = console.client()
    response = await client.post("/console/sign-in", form={"apiKey": console.olga.key})
    assert response.status_code == 403
    assert not any(c.startswith("devyard_session=") for c in response.headers.getlist("Set-Cookie"))
    assert (await client.get("/whoami")).status_code == 401


async def test_a_form_without_the_csrf_token_is_refused_and_changes_nothing(
    console: Console,
) -> None:
    client = console.client()
    csrf = await signed_in(client, console.alice.key)
    for form in ({}, {"csrf": "wrong"}):
        response = await client.post("/console/sign-out", form=form)
        assert response.status_code == 403
        assert "CSRF" in await response.get_data(as_text=True)
        assert (await client.get("/whoami")).status_code == 200  # still signed in
    response = await client.post("/console/sign-out", form={"csrf": csrf})
    assert (response.status_code, response.headers["Location"]) == (303, "/console/sign-in")
    assert (await client.get("/whoami")).status_code == 401  # the session was revoked
    sessions = await console.store.list_sessions(console.alice.org_id, user_id=None)
    assert sessions == []


async def test_every_console_response_carries_the_security_headers(console: Console) -> None:
    client = console.client()
    await signed_in(client, console.carol.key)
    for path in ("/console/sign-in", "/console/instances/", "/console/nothing-here"):
        response = await client.get(path)
        csp = response.headers["Content-Security-Policy"]
        script = next(d for d in csp.split(";") if d.strip().startswith("script-src"))
        assert "'unsafe-inline'" not in script and "'unsafe-eval'" not in script
        assert "frame-ancestors 'none'" in csp and "default-src 'none'" in csp
        assert response.headers["X-Frame-Options"] == "DENY"
        assert response.headers["Referrer-Policy"] == "same-origin"
        assert response.headers["Cache-Control"] == "no-store"
        page = await response.get_data(as_text=True)
        assert not re.search(r"<script(?![^>]*\bsrc=)", page), "inline script"
        assert " style=" not in page


async def test_an_unknown_page_is_a_page_not_a_traceback(console: Console) -> None:
    client = console.client()
    await signed_in(client, console.alice.key)
    response = await client.get("/console/instances/android_nowhere_01J0000000000000000000000")
    text = await response.get_data(as_text=True)
    assert response.status_code == 404 and "text/html" in response.content_type
    assert "Traceback" not in text


async def test_static_files_are_gzipped_hashed_and_small(console: Console) -> None:
    client = console.client()
    await signed_in(client, console.alice.key)
    page = await (await client.get("/console/instances/")).get_data(as_text=True)
    links = re.findall(r'(?:src|href)="(/console/static/[^"]+)"', page)
    assert any("htmx" in link for link in links)
    total = 0
    for link in links:
        response = await client.get(link, headers={"Accept-Encoding": "gzip"})
        assert response.status_code == 200
        assert response.headers["Content-Encoding"] == "gzip"
        assert "immutable" in response.headers["Cache-Control"]
        body = await response.get_data(as_text=False)
        assert gzip.decompress(body)
        total += len(body)
    assert total < 100_000
    assert (await client.get("/console/static/../web.py")).status_code == 404


async def test_the_instances_table_names_who_created_each(console: Console) -> None:
    members = await console.store.list_members(console.alice.org_id)
    alice = next(m for m in members if m.user.name == "alice")
    made = await console.store.create_instance(
        org_id=console.alice.org_id, platform=Platform.ANDROID, region="local", labels={},
        spec={}, display_name="by-alice", token="dyi_t1", stream_token="dys_t1",
        created_by=alice.user.id,
    )  # fmt: skip
    client = console.client()
    await signed_in(client, console.carol.key)  # a viewer: the members list is hers to read
    table = await (await client.get("/console/instances/table?platform=android")).get_data(True)
    assert made.id in table
    assert '<td data-label="Created by">alice</td>' in table, table
