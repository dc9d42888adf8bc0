"""Single sign-on against a real OpenID provider on loopback (authlib's provider side,
`oidc_provider`), through a real listener with httpx as the browser (it keeps the cookies):
a good sign-in joins the user just in time and its session cookie works on the API; a forged
signature, another audience, an expired token, a replayed state and a replayed id token
(its nonce) are each refused with a 4xx and no session; a key rotation is followed."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import attrs
import httpx
import pytest
import trio

from devyard.server.accounts.settings import AccountsConfig
from devyard.server.api.app import api_state
from devyard.server.api.requestlog import redact_target
from devyard.server.api.serve import BoundServer, serve_api
from devyard.server.config import ListenAddress, RateLimitConfig, ServerConfig
from devyard.server.store import Role, Store
from devyard.server.store.accounts import AuditQuery

from ..api.conftest import Callers
from .oidc_provider import (
    CLIENT_ID,
    CLIENT_SECRET,
    LOOPBACK,
    Provider,
    ProviderUser,
    running_provider,
)


@pytest.fixture(scope="module")
def provider() -> Iterator[Provider]:
    with pytest.MonkeyPatch.context() as patch:
        # authlib's provider refuses plain HTTP unless told; the issuer is on loopback.
        patch.setenv("AUTHLIB_INSECURE_TRANSPORT", "1")
        yield from running_provider("(set once the server is bound)")


@attrs.frozen
class Site:
    url: str
    org_id: str
    provider: Provider


@pytest.fixture
async def site(
    store: Store, callers: Callers, provider: Provider, tmp_path: Path
) -> AsyncIterator[Site]:
    async with _open_site(store, callers, provider, tmp_path, LOOPBACK) as opened:
        yield opened


@asynccontextmanager
async def _open_site(
    store: Store, callers: Callers, provider: Provider, tmp_path: Path, networks: tuple[str, ...]
) -> AsyncIterator[Site]:
    """A server whose SSO may reach *networks* besides public addresses (docs/accounts.md)."""
    provider.reset()
    config = ServerConfig(
        data_dir=tmp_path,
        listen=ListenAddress("127.0.0.1", 0),
        rate_limit=RateLimitConfig(enabled=False),
        shutdown_grace=1,
        accounts=AccountsConfig(oidc_allowed_networks=networks),
    )
    org = callers.admin.org_id
    await store.replace_domains(org, {"example.com": "t", "pending.example": "u"})
    await store.mark_domain_verified(org, "example.com")
    async with trio.open_nursery() as nursery:
        bound: BoundServer = await nursery.start(partial(serve_api, api_state(store, config)))
        provider.client.redirect_uri = f"{bound.local_url}/auth/oidc/callback"
        async with httpx.AsyncClient(base_url=bound.local_url) as admin:
            put = await admin.put(
                f"/organizations/{org}/oidcConnection",
                json={
                    "issuer": provider.issuer,
                    "clientId": CLIENT_ID,
                    "clientSecret": CLIENT_SECRET,
                    "allowedDomains": ["example.com", "pending.example"],
                },
                headers=callers.admin.headers,
            )
            assert put.status_code == 200, put.text
        yield Site(url=bound.local_url, org_id=org, provider=provider)
        nursery.cancel_scope.cancel()


async def test_an_issuer_on_a_network_not_allowed_is_not_fetched(
    store: Store, callers: Callers, provider: Provider, tmp_path: Path
) -> None:
    """By default the server fetches public addresses only: an organization's issuer on the
    server's loopback is refused before any request reaches it."""
    async with (
        _open_site(store, callers, provider, tmp_path, ()) as closed,
        httpx.AsyncClient(base_url=closed.url) as browser,
    ):
        before = provider.requests
        start = await browser.get(f"/auth/oidc/{closed.org_id}/start")
        assert start.status_code == 503, start.text
        message = start.json()["message"]
        assert "resolves to 127.0.0.1, which is not a public address" in message, message
        assert provider.requests == before


async def _to_provider(browser: httpx.AsyncClient, site: Site) -> str:
    """Starts a sign-in; the query string the provider sends the browser back with."""
    start = await browser.get(f"/auth/oidc/{site.org_id}/start", params={"returnTo": "/console"})
    assert start.status_code == 302, start.text
    location = start.headers["location"]
    assert location.startswith(site.provider.issuer + "/authorize?")
    sent = parse_qs(urlsplit(location).query)
    assert sent["code_challenge_method"] == ["S256"] and sent["nonce"] and sent["state"]
    consent = await browser.get(location)  # the provider consents at once for its user
    assert consent.status_code == 302, consent.text
    back = urlsplit(consent.headers["location"])
    assert f"{back.scheme}://{back.netloc}{back.path}" == site.provider.client.redirect_uri
    return back.query


async def _sign_in(browser: httpx.AsyncClient, site: Site) -> httpx.Response:
    query = await _to_provider(browser, site)
    return await browser.get(f"/auth/oidc/callback?{query}")


def _session_cookies(response: httpx.Response) -> list[str]:
    return [c for c in response.headers.get_list("set-cookie") if c.startswith("devyard_session=")]


def _refused(response: httpx.Response, status: int, reason: str) -> None:
    assert response.status_code == status, response.text
    assert response.json()["reason"] == reason, response.json()
    assert _session_cookies(response) == []


async def test_a_sign_in_joins_just_in_time_and_its_session_works(site: Site, store: Store) -> None:
    async with httpx.AsyncClient(base_url=site.url) as browser:
        done = await _sign_in(browser, site)
        assert done.status_code == 303, done.text
        assert done.headers["location"] == "/console"
        [cookie] = _session_cookies(done)
        assert "httponly" in cookie.lower() and "samesite=strict" in cookie.lower()
        assert "devyard_oidc" not in browser.cookies  # the binding cookie is cleared
        # The session works on the API: read, and write with its CSRF token.
        who = await browser.get("/whoami")
        assert who.status_code == 200, who.text
        shown = who.json()
        assert (shown["user"]["name"], shown["user"]["email"], shown["role"]) == (
            "dana",
            "dana@example.com",
            "member",
        )
        assert shown["credential"]["kind"] == "session"
        wrote = await browser.post(
            f"/organizations/{site.org_id}/support",
            json={"message": "signed in by SSO"},
            headers={"X-CSRF-Token": browser.cookies["devyard_csrf"]},
        )
        assert wrote.status_code == 200, wrote.text
        members = {m.user.name: m.role for m in await store.list_members(site.org_id)}
        assert members["dana"] == Role.MEMBER
        # The state is single-use: the same callback again is refused.
        again = await browser.get(f"/auth/oidc/callback?{done.request.url.query.decode()}")
        _refused(again, 404, "invalid_state")
    # The provider rotates its key: the next sign-in (a known user) still works.
    before = site.provider.jwks_requests
    site.provider.rotate()
    async with httpx.AsyncClient(base_url=site.url) as browser:
        done = await _sign_in(browser, site)
        assert done.status_code == 303, done.text
        assert site.provider.jwks_requests == before + 1
        assert (await browser.get("/whoami")).json()["user"]["name"] == "dana"
    assert [m.user.name for m in await store.list_members(site.org_id)].count("dana") == 1
    kinds = [e.kind for e in await store.list_audit(site.org_id, _everything())]
    assert kinds.count("member_joined_by_sso") == 1 and kinds.count("sso_sign_in") == 2


def _everything() -> AuditQuery:
    return AuditQuery(limit=500)


# The refusals do not depend on the backend (the good sign-in above runs on both).
@pytest.mark.parametrize("database_target", ["sqlite"], indirect=True)
async def test_hostile_or_broken_tokens_are_refused(site: Site, store: Store) -> None:
    provider = site.provider
    async with httpx.AsyncClient(base_url=site.url) as browser:
        # A first good sign-in, whose id token the provider will later replay.
        assert (await _sign_in(browser, site)).status_code == 303
    earlier = provider.last_id_token
    cases = [
        ("forge", 403, "invalid_id_token"),
        ("audience", 403, "invalid_id_token"),
        ("expired", 403, "invalid_id_token"),
        ("replay", 403, "nonce"),
    ]
    for knob, status, reason in cases:
        provider.reset()
        if knob == "audience":
            provider.audience = "someone-else"
        elif knob == "replay":
            provider.replay = earlier
        else:
            setattr(provider, knob, True)
        async with httpx.AsyncClient(base_url=site.url) as browser:
            _refused(await _sign_in(browser, site), status, reason)
            assert (await browser.get("/whoami")).status_code == 401, knob
    provider.reset()
    # The state is bound to the browser that started: another browser cannot finish it.
    async with httpx.AsyncClient(base_url=site.url) as starter:
        query = await _to_provider(starter, site)
    async with httpx.AsyncClient(base_url=site.url) as other:
        _refused(await other.get(f"/auth/oidc/callback?{query}"), 403, "state_not_bound")
    # Emails outside the allowed, verified domains; unverified emails.
    for user, reason in (
        (ProviderUser(sub="e", email="eve@elsewhere.org"), "domain_not_allowed"),
        (ProviderUser(sub="p", email="pat@pending.example"), "domain_not_allowed"),
        (
            ProviderUser(sub="u", email="ursula@example.com", email_verified=False),
            "email_not_verified",
        ),
    ):
        provider.user = user
        async with httpx.AsyncClient(base_url=site.url) as browser:
            _refused(await _sign_in(browser, site), 403, reason)
    # Tokens naming unknown keys make the server fetch the JWKS again, but boundedly.
    provider.reset()
    provider.kid_override = "made-up"
    before = provider.jwks_requests
    for _ in range(6):
        async with httpx.AsyncClient(base_url=site.url) as browser:
            _refused(await _sign_in(browser, site), 403, "invalid_id_token")
    assert 1 <= provider.jwks_requests - before <= 5
    names = {m.user.name for m in await store.list_members(site.org_id)}
    assert names.isdisjoint({"eve", "pat", "ursula"})


@pytest.mark.parametrize("database_target", ["sqlite"], indirect=True)
async def test_start_refusals(site: Site, callers: Callers) -> None:
    async with httpx.AsyncClient(base_url=site.url) as browser:
        other = callers.other_admin.org_id  # has no connection: 404 like an unknown id
        for org in (other, "org_unknown"):
            answer = await browser.get(f"/auth/oidc/{org}/start")
            assert answer.status_code == 404, answer.text
        for bad in ("//evil.example/", "https://evil.example/", "console", "/\\evil.example"):
            answer = await browser.get(f"/auth/oidc/{site.org_id}/start", params={"returnTo": bad})
            assert answer.status_code == 400, answer.text  # the document's pattern, then ours
            assert answer.json()["reason"] in {"invalid_parameter", "invalid_return_to"}
            assert "set-cookie" not in answer.headers
        answer = await browser.get("/auth/oidc/callback", params={"state": "nope", "code": "x"})
        assert (answer.status_code, answer.json()["reason"]) == (404, "invalid_state")


def test_the_access_log_hides_the_sign_in_secrets() -> None:
    shown = redact_target("/auth/oidc/callback", "state=s3cret&code=c0de&iss=x")
    assert "s3cret" not in shown and "c0de" not in shown and "iss=x" in shown
    assert "running" in redact_target("/v1/android_instances", "state=running")
