"""Browser sessions over a real listener (cookies as a browser keeps them, httpx): an API key
pasted once becomes an HttpOnly, SameSite=Strict cookie; writes need the CSRF token; the
session acts as its key (role, read-only, organization); sessions are listed and revoked."""

from __future__ import annotations

from collections.abc import AsyncIterator
from functools import partial

import httpx
import pytest
import trio

from devyard.server.api.app import api_state
from devyard.server.api.serve import BoundServer, serve_api
from devyard.server.config import ListenAddress, RateLimitConfig, ServerConfig
from devyard.server.store import Store, tokens

from ..api.conftest import Caller, Callers


@pytest.fixture
async def server(store: Store, tmp_path: object) -> AsyncIterator[str]:
    config = ServerConfig(
        data_dir=tmp_path,  # type: ignore[arg-type]
        listen=ListenAddress("127.0.0.1", 0),
        rate_limit=RateLimitConfig(enabled=False),
        shutdown_grace=1,
    )
    async with trio.open_nursery() as nursery:
        bound: BoundServer = await nursery.start(partial(serve_api, api_state(store, config)))
        yield bound.local_url
        nursery.cancel_scope.cancel()


async def _sign_in(browser: httpx.AsyncClient, caller: Caller) -> dict[str, object]:
    response = await browser.post("/sessions", headers=caller.headers)
    assert response.status_code == 200, response.text
    cookie = response.headers.get_list("set-cookie")
    session_cookie = next(c for c in cookie if c.startswith("devyard_session="))
    lowered = session_cookie.lower()
    assert "httponly" in lowered and "samesite=strict" in lowered and "path=/" in lowered
    assert "secure" not in lowered  # plain HTTP here; over TLS the cookie is Secure
    body: dict[str, object] = response.json()
    assert browser.cookies.get("devyard_csrf") == body["csrfToken"]
    return body


async def test_a_session_acts_as_its_key(server: str, callers: Callers, store: Store) -> None:
    async with httpx.AsyncClient(base_url=server) as browser:
        session = await _sign_in(browser, callers.member)
        who = (await browser.get("/whoami")).json()
        assert who["credential"] == {
            "kind": "session",
            "id": session["id"],
            "expiresAt": session["expiresAt"],
        }
        assert (who["user"]["name"], who["role"]) == ("bob", "member")
        # The cookie's secret is stored hashed: the store never returns it.
        cookie = browser.cookies["devyard_session"]
        lookup = cookie.split("_")[1]
        credential = await store.get_session_by_lookup(lookup)
        assert credential.secret_hash == tokens.hash_secret(cookie)
        assert cookie not in repr(credential)
        # Writes need the CSRF token; a wrong one is refused too.
        org = callers.member.org_id
        support = f"/organizations/{org}/support"
        refused = await browser.post(support, json={"message": "hi"})
        assert (refused.status_code, refused.json()["reason"]) == (403, "csrf")
        wrong = await browser.post(support, json={"message": "hi"}, headers={"X-CSRF-Token": "x"})
        assert wrong.status_code == 403
        ok = await browser.post(
            support, json={"message": "hi"}, headers={"X-CSRF-Token": str(session["csrfToken"])}
        )
        assert ok.status_code == 200
        # The key's role applies: a member cannot do admin things, nor reach another org.
        csrf = {"X-CSRF-Token": str(session["csrfToken"])}
        patch = await browser.patch(f"/organizations/{org}", json={"name": "x"}, headers=csrf)
        assert patch.status_code == 403
        other = await browser.get(f"/organizations/{callers.other_admin.org_id}")
        assert other.status_code == 404
        # A session does not make another session.
        again = await browser.post("/sessions", headers=csrf)
        assert (again.status_code, again.json()["reason"]) == (403, "session")


async def test_sessions_are_listed_and_revoked(server: str, callers: Callers) -> None:
    org = callers.admin.org_id
    async with (
        httpx.AsyncClient(base_url=server) as member,
        httpx.AsyncClient(base_url=server) as admin,
    ):
        member_session = await _sign_in(member, callers.member)
        admin_session = await _sign_in(admin, callers.admin)
        mine = (await member.get(f"/organizations/{org}/sessions")).json()
        assert [s["id"] for s in mine] == [member_session["id"]]
        everyone = (await admin.get(f"/organizations/{org}/sessions")).json()
        assert [s["id"] for s in everyone] == [member_session["id"], admin_session["id"]]
        # Someone else's session is 404 to a member, and revocable by an admin.
        member_csrf = {"X-CSRF-Token": str(member_session["csrfToken"])}
        hidden = await member.delete(
            f"/organizations/{org}/sessions/{admin_session['id']}", headers=member_csrf
        )
        assert hidden.status_code == 404
        admin_csrf = {"X-CSRF-Token": str(admin_session["csrfToken"])}
        gone = await admin.delete(
            f"/organizations/{org}/sessions/{member_session['id']}", headers=admin_csrf
        )
        assert gone.status_code == 200
        assert (await member.get("/whoami")).status_code == 401
        # Signing out: revoking the current session clears its cookies.
        out = await admin.delete(
            f"/organizations/{org}/sessions/{admin_session['id']}", headers=admin_csrf
        )
        assert out.status_code == 200
        assert "devyard_session" not in admin.cookies
        other = await admin.get(
            f"/organizations/{org}/sessions", headers=callers.other_admin.headers
        )
        assert other.status_code == 404


async def test_a_session_dies_with_its_key_and_read_only_keys_do_not_sign_in(
    server: str, callers: Callers, store: Store
) -> None:
    async with httpx.AsyncClient(base_url=server) as browser:
        refused = await browser.post("/sessions", headers=callers.read_only.headers)
        assert (refused.status_code, refused.json()["reason"]) == (403, "read_only_key")
        assert "devyard_session" not in browser.cookies
        await _sign_in(browser, callers.viewer)
        key_id = (await browser.get("/whoami")).json()["apiKey"]["id"]
        await store.revoke_api_key(callers.viewer.org_id, key_id)
        assert (await browser.get("/whoami")).status_code == 401


async def test_whoami_names_every_credential_kind(server: str, callers: Callers) -> None:
    async with httpx.AsyncClient(base_url=server) as http:
        who = (await http.get("/whoami", headers=callers.member.headers)).json()
        assert who["credential"]["kind"] == "apiKey"
        minted = await http.post(
            "/v1/scoped_tokens",
            json={"scopes": ["asset:*:read"], "ttlSeconds": 60},
            headers=callers.member.headers,
        )
        assert minted.status_code == 200, minted.text
        token = minted.json()
        scoped = await http.get("/whoami", headers={"Authorization": f"Bearer {token['token']}"})
        assert scoped.status_code == 200, scoped.text
        credential = scoped.json()["credential"]
        assert (credential["kind"], credential["id"], credential["scopes"]) == (
            "scopedToken",
            token["id"],
            ["asset:*:read"],
        )
        # Any other operation without x-devyard-scope stays closed to the token.
        org = callers.member.org_id
        closed = await http.get(
            f"/organizations/{org}", headers={"Authorization": f"Bearer {token['token']}"}
        )
        assert closed.status_code == 403
