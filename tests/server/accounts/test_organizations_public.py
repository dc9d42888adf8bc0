"""POST /organizations on a public deployment (``organization_creation = "users"``): any
user with a full key creates one; names stay unique; bad input is 400."""

from __future__ import annotations

import pytest
from quart.typing import TestClientProtocol as Client

from devyard.server.accounts.settings import AccountsConfig, OrganizationCreation

from ..api.conftest import Callers, assert_api_error


@pytest.fixture
def accounts() -> AccountsConfig:
    return AccountsConfig(organization_creation=OrganizationCreation.USERS)


async def test_any_user_creates_one_when_the_setting_says_so(
    client: Client, callers: Callers
) -> None:
    response = await client.post(
        "/organizations", json={"name": "hooli"}, headers=callers.viewer.headers
    )
    assert response.status_code == 200
    taken = await client.post(
        "/organizations", json={"name": "globex"}, headers=callers.viewer.headers
    )
    await assert_api_error(taken, 409, "taken")
    read_only = await client.post(
        "/organizations", json={"name": "other"}, headers=callers.read_only.headers
    )
    await assert_api_error(read_only, 403, "read-only")
    for bad in ({}, {"name": ""}, {"name": "x", "extra": 1}, {"name": " padded "}):
        response = await client.post("/organizations", json=bad, headers=callers.viewer.headers)
        await assert_api_error(response, 400)
    await assert_api_error(await client.post("/organizations", json={"name": "n"}), 401)
