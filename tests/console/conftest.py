"""Fixtures of the console tests: the server's app in-process over a fresh SQLite store with
two organizations, and signing a test client in (docs/console.md, "Adding a page").

``console`` drives the whole app (API and console) through Quart's ASGI test client, which
keeps cookies like a browser; browser tests (``browser.py``) run a real server instead.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import attrs
import pytest
from quart.typing import TestClientProtocol as Client
from quart_trio import QuartTrio

from devyard.server.api.app import api_state, create_app
from devyard.server.api.contract import Contract, load_document
from devyard.server.bootstrap import bootstrap_organization
from devyard.server.config import ServerConfig
from devyard.server.store import Role, Store, open_store, tokens
from tests.server.accounts.oidc_provider import Provider, running_provider


@attrs.frozen
class Person:
    name: str
    key: str = attrs.field(repr=False)
    org_id: str


@attrs.frozen
class Console:
    app: QuartTrio
    store: Store
    alice: Person  # admin of acme
    bob: Person  # member of acme
    carol: Person  # viewer of acme
    olga: Person  # admin of globex, another organization

    def client(self) -> Client:
        return self.app.test_client()


async def add_person(store: Store, org_id: str, name: str, role: Role) -> Person:
    user = await store.create_user(name, email=f"{name}@example.com")
    await store.add_membership(org_id, user.id, role)
    secret = tokens.new_api_key()
    await store.create_api_key(
        org_id=org_id,
        user_id=user.id,
        name=f"{name}-key",
        lookup_id=secret.lookup_id,
        secret_hash=secret.secret_hash,
        read_only=False,
    )
    return Person(name=name, key=secret.plaintext, org_id=org_id)


@pytest.fixture(scope="module")
def provider() -> Iterator[Provider]:
    """The test OpenID provider of a browser module's site (single sign-on)."""
    with pytest.MonkeyPatch.context() as patch:
        # authlib's provider refuses plain HTTP unless told; the issuer is on loopback.
        patch.setenv("AUTHLIB_INSECURE_TRANSPORT", "1")
        yield from running_provider("(set once the server is bound)")


@pytest.fixture(scope="session")
def contract() -> Contract:
    """The compiled OpenAPI document, once per session (compiling it takes seconds)."""
    return Contract(load_document())


@pytest.fixture
async def console(tmp_path: Path, contract: Contract) -> AsyncIterator[Console]:
    async with open_store(str(tmp_path / "devyard.db")) as store:
        acme = await bootstrap_organization(store, org_name="acme", user_name="alice")
        globex = await bootstrap_organization(store, org_name="globex", user_name="olga")
        org = acme.organization.id
        app = create_app(api_state(store, ServerConfig(data_dir=tmp_path), contract=contract))
        yield Console(
            app=app,
            store=store,
            alice=Person("alice", acme.plaintext_key, org),
            bob=await add_person(store, org, "bob", Role.MEMBER),
            carol=await add_person(store, org, "carol", Role.VIEWER),
            olga=Person("olga", globex.plaintext_key, globex.organization.id),
        )


LOGIN_FIELD = re.compile(r'name="login" value="([^"]+)"')


async def signed_in(client: Client, key: str) -> str:
    """Sign *client* in with *key* through the sign-in form; the session's CSRF token."""
    page = await client.get("/console/sign-in")
    match = LOGIN_FIELD.search(await page.get_data(as_text=True))
    assert match is not None
    response = await client.post("/console/sign-in", form={"login": match.group(1), "apiKey": key})
    assert response.status_code == 303, await response.get_data(as_text=True)
    csrf = next(
        c.split(";")[0].partition("=")[2]
        for c in response.headers.getlist("Set-Cookie")
        if c.startswith("devyard_csrf=")
    )
    assert csrf
    return csrf
