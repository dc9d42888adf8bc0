"""``/v1/tunnels`` in-process on SQLite and PostgreSQL: CRUD, tokens, validation, roles."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from quart.typing import TestClientProtocol as Client

from devyard.server.store import Store
from devyard.server.store.tokens import verify_secret
from devyard.server.tunnels import TokenExpired, TokenInvalid, TunnelService, add_months
from tests.server.api.conftest import Callers, assert_api_error


async def _create(client: Client, callers: Callers, **fields: object) -> dict[str, object]:
    body = {"name": "corp", "selectors": ["localhost:3000", "*.corp.example:443"], **fields}
    response = await client.post("/v1/tunnels", json=body, headers=callers.admin.headers)
    assert response.status_code == 200, await response.get_data()
    data = await response.get_json()
    assert isinstance(data, dict)
    return data


async def test_create_shows_the_token_once_and_stores_only_a_hash(
    client: Client, callers: Callers, store: Store
) -> None:
    created = await _create(client, callers)
    token = created["token"]
    assert isinstance(token, str) and token.startswith("dyt_")
    assert created["status"] == "offline" and created["activeConnector"] is None
    assert created["standbys"] == [] and created["selectorVersion"] == 1
    assert created["ephemeral"] is False
    expires = datetime.fromisoformat(str(created["tokenExpiresAt"]))
    issued = datetime.fromisoformat(str(created["tokenIssuedAt"]))
    assert abs((expires - add_months(issued, 12)).total_seconds()) < 5

    got = await client.get("/v1/tunnels/corp", headers=callers.admin.headers)
    record = await got.get_json()
    assert "token" not in record and record["selectors"] == created["selectors"]
    listed = await (await client.get("/v1/tunnels", headers=callers.admin.headers)).get_json()
    assert [t["name"] for t in listed] == ["corp"]

    credential = await store.get_tunnel_by_token(token.split("_")[1])
    assert credential.token_hash != token and verify_secret(token, credential.token_hash)
    assert (await TunnelService(store).authenticate(token)).name == "corp"


async def test_patch_replaces_the_list_and_bumps_the_version(
    client: Client, callers: Callers
) -> None:
    await _create(client, callers)
    response = await client.patch(
        "/v1/tunnels/corp", json={"selectors": ["db.internal:5432"]}, headers=callers.admin.headers
    )
    data = await response.get_json()
    assert response.status_code == 200
    assert data["selectors"] == ["db.internal:5432"] and data["selectorVersion"] == 2


async def test_rotate_invalidates_the_old_token(
    client: Client, callers: Callers, store: Store
) -> None:
    old = (await _create(client, callers, tokenExpiryMonths=3))["token"]
    response = await client.post(
        "/v1/tunnels/corp/rotate?tokenExpiryMonths=60", headers=callers.admin.headers
    )
    data = await response.get_json()
    assert response.status_code == 200 and data["token"] != old
    service = TunnelService(store)
    with pytest.raises(TokenInvalid):
        await service.authenticate(str(old))
    assert (await service.authenticate(data["token"])).name == "corp"
    issued = datetime.fromisoformat(data["tokenIssuedAt"])
    expires = datetime.fromisoformat(data["tokenExpiresAt"])
    assert abs((expires - add_months(issued, 60)).total_seconds()) < 5


async def test_delete_then_404_and_the_token_stops_working(
    client: Client, callers: Callers, store: Store
) -> None:
    token = (await _create(client, callers))["token"]
    response = await client.delete("/v1/tunnels/corp", headers=callers.admin.headers)
    assert response.status_code == 200
    again = await client.get("/v1/tunnels/corp", headers=callers.admin.headers)
    await assert_api_error(again, 404, "corp")
    with pytest.raises(TokenInvalid):
        await TunnelService(store).authenticate(str(token))


async def test_an_expired_token_is_refused_as_expired(store: Store, callers: Callers) -> None:
    later = datetime(2100, 1, 1, tzinfo=UTC)
    service = TunnelService(store)
    _, token = await service.create(callers.admin.org_id, "old", ["a.example:80"])
    with pytest.raises(TokenExpired):
        await TunnelService(store, now=lambda: later).authenticate(token)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": "Bad_Name", "selectors": ["a:1"]}, "name"),
        ({"name": "-x", "selectors": ["a:1"]}, "name"),
        ({"name": "x" * 64, "selectors": ["a:1"]}, "name"),
        ({"name": "ok", "selectors": []}, "selectors"),
        ({"name": "ok", "selectors": ["nohostport"]}, "selectors"),
        ({"name": "ok", "selectors": ["a*b.example:1"]}, "selectors"),
        ({"name": "ok", "selectors": ["a:70000"]}, "selectors"),
        ({"name": "ok", "selectors": ["a:1"], "tokenExpiryMonths": 0}, "tokenExpiryMonths"),
        ({"name": "ok", "selectors": ["a:1"], "tokenExpiryMonths": 61}, "tokenExpiryMonths"),
        ({"name": "ok", "selectors": ["a:1"], "tokenExpiryMonths": 1.5}, "tokenExpiryMonths"),
    ],
)
async def test_invalid_fields_are_400_naming_the_field(
    client: Client, callers: Callers, body: dict[str, object], field: str
) -> None:
    response = await client.post("/v1/tunnels", json=body, headers=callers.admin.headers)
    await assert_api_error(response, 400, field)


async def test_a_bad_selector_on_patch_names_the_field(client: Client, callers: Callers) -> None:
    await _create(client, callers)
    response = await client.patch(
        "/v1/tunnels/corp", json={"selectors": ["*"]}, headers=callers.admin.headers
    )
    await assert_api_error(response, 400, "selectors")


async def test_a_taken_name_is_409(client: Client, callers: Callers) -> None:
    await _create(client, callers)
    response = await client.post(
        "/v1/tunnels", json={"name": "corp", "selectors": ["a:1"]}, headers=callers.admin.headers
    )
    await assert_api_error(response, 409, "name")


async def test_only_admins_manage_and_other_organizations_see_nothing(
    client: Client, callers: Callers
) -> None:
    await _create(client, callers)
    for caller in (callers.member, callers.viewer):
        response = await client.get("/v1/tunnels", headers=caller.headers)
        await assert_api_error(response, 403)
        response = await client.post(
            "/v1/tunnels", json={"name": "x", "selectors": ["a:1"]}, headers=caller.headers
        )
        await assert_api_error(response, 403)
    response = await client.delete("/v1/tunnels/corp", headers=callers.read_only.headers)
    await assert_api_error(response, 403)
    response = await client.get("/v1/tunnels/corp", headers=callers.other_admin.headers)
    await assert_api_error(response, 404)
    listed = await client.get("/v1/tunnels", headers=callers.other_admin.headers)
    assert await listed.get_json() == []
    response = await client.get("/v1/tunnels")
    await assert_api_error(response, 401)
