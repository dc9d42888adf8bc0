"""Fixtures of the control API tests: a store on both backends, the app over it, callers.

``client`` drives the app in-process through Quart's ASGI test client (no sockets); the tests
that need a real listener start ``serve_api`` on 127.0.0.1 port 0 themselves. ``callers``
makes API keys of each role in one organization plus an admin of a second organization.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import attrs
import pytest
from quart.typing import TestClientProtocol as Client
from quart_trio import QuartTrio

from devyard.server.api.app import api_state, create_app
from devyard.server.bootstrap import bootstrap_organization
from devyard.server.config import RateLimitConfig, ServerConfig
from devyard.server.store import Role, Store, open_store, tokens


class ManualClock:
    """The rate limiter's clock, moved only by the test."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@attrs.frozen
class Caller:
    key: str = attrs.field(repr=False)
    org_id: str
    user_id: str
    user_name: str

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}


@attrs.frozen
class Callers:
    admin: Caller
    member: Caller
    viewer: Caller
    read_only: Caller  # an admin's read-only key
    other_admin: Caller  # admin of another organization


@pytest.fixture
def manual_clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def config(tmp_path: Path) -> ServerConfig:
    return ServerConfig(
        data_dir=tmp_path,
        rate_limit=RateLimitConfig(enabled=True, rate=1000.0, burst=1000),
        max_body_bytes=64 * 1024,
    )


@pytest.fixture
async def store(database_target: str) -> AsyncIterator[Store]:
    async with open_store(database_target) as opened:
        yield opened


@pytest.fixture
def app(store: Store, config: ServerConfig, manual_clock: ManualClock) -> QuartTrio:
    return create_app(api_state(store, config, clock=manual_clock))


@pytest.fixture
def client(app: QuartTrio) -> Client:
    return app.test_client()


async def add_caller(
    store: Store, org_id: str, name: str, role: Role, *, read_only: bool = False
) -> Caller:
    user = await store.create_user(name, email=f"{name}@example.com")
    await store.add_membership(org_id, user.id, role)
    return await key_for(store, org_id, user.id, name, read_only=read_only)


async def key_for(
    store: Store, org_id: str, user_id: str, user_name: str, *, read_only: bool = False
) -> Caller:
    secret = tokens.new_api_key()
    await store.create_api_key(
        org_id=org_id,
        user_id=user_id,
        name=f"{user_name}-key",
        lookup_id=secret.lookup_id,
        secret_hash=secret.secret_hash,
        read_only=read_only,
    )
    return Caller(key=secret.plaintext, org_id=org_id, user_id=user_id, user_name=user_name)


@pytest.fixture
async def callers(store: Store) -> Callers:
    boot = await bootstrap_organization(store, org_name="acme", user_name="alice")
    org_id = boot.organization.id
    admin = Caller(key=boot.plaintext_key, org_id=org_id, user_id=boot.user.id, user_name="alice")
    other = await bootstrap_organization(store, org_name="globex", user_name="olga")
    return Callers(
        admin=admin,
        member=await add_caller(store, org_id, "bob", Role.MEMBER),
        viewer=await add_caller(store, org_id, "carol", Role.VIEWER),
        read_only=await key_for(store, org_id, boot.user.id, "alice", read_only=True),
        other_admin=Caller(
            key=other.plaintext_key,
            org_id=other.organization.id,
            user_id=other.user.id,
            user_name="olga",
        ),
    )


async def json_of(response: Any) -> Any:
    return await response.get_json()


async def assert_api_error(response: Any, status: int, *words: str) -> dict[str, Any]:
    """The response is an APIError of *status* whose message mentions every word."""
    assert response.status_code == status, (response.status_code, await response.get_data())
    assert response.content_type == "application/json"
    body = await response.get_json()
    assert isinstance(body, dict)
    assert set(body) <= {"message", "reason"}
    assert isinstance(body["message"], str) and body["message"]
    for word in words:
        assert word in body["message"], (word, body["message"])
    return body
