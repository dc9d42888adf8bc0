"""Scoped tokens over HTTP (in-process ASGI client, both backends): minting and its limits,
enforcement of scopes on every operation, revocation of one token, expiry, and the token's
dependence on its minting key."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
from quart.typing import TestClientProtocol as Client

from devyard.server.store import Store
from devyard.server.store.base import Instance, Platform
from tests.server.api.conftest import assert_api_error

from .conftest import Caller, Callers, SetClock, run_instance


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def _mint(client: Client, caller: Caller, scopes: list[str], **extra: Any) -> Any:
    response = await client.post(
        "/v1/scoped_tokens", json={"scopes": scopes, **extra}, headers=caller.headers
    )
    assert response.status_code == 200, await response.get_data()
    return await response.get_json()


@pytest.fixture
async def device(store: Store, store_clock: SetClock, callers: Callers) -> Instance:
    return await run_instance(
        store, store_clock, callers.admin.org_id, created="2030-03-01T10:00:00Z",
        ready="2030-03-01T10:00:30Z",
    )  # fmt: skip


@pytest.fixture
async def other_device(store: Store, store_clock: SetClock, callers: Callers) -> Instance:
    return await run_instance(
        store, store_clock, callers.admin.org_id, platform=Platform.ANDROID,
        created="2030-03-01T10:01:00Z", ready="2030-03-01T10:01:30Z",
    )  # fmt: skip


async def test_mint_returns_the_token_once_with_its_id(
    client: Client, callers: Callers, store_clock: SetClock
) -> None:
    made = await _mint(client, callers.member, ["device:*:install", "asset:asset_X:read"])
    assert made["token"].startswith("dyst_")
    assert made["id"].startswith("stk_")
    assert made["scopes"] == ["device:*:install", "asset:asset_X:read"]
    assert made["userId"] == callers.member.user_id
    assert made["revokedAt"] is None
    created = datetime.fromisoformat(made["createdAt"])
    assert datetime.fromisoformat(made["expiresAt"]) - created == _seconds(3600)  # the default
    for ttl in (1, 14400):
        made = await _mint(client, callers.member, ["asset:*:read"], ttlSeconds=ttl)
        expires = datetime.fromisoformat(made["expiresAt"])
        assert expires - datetime.fromisoformat(made["createdAt"]) == _seconds(ttl)


def _seconds(n: int) -> timedelta:
    return timedelta(seconds=n)


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ({"scopes": ["asset:*:read"], "ttlSeconds": 0}, ["ttlSeconds"]),
        ({"scopes": ["asset:*:read"], "ttlSeconds": 14401}, ["ttlSeconds"]),
        ({"scopes": ["asset:*:read"], "ttlSeconds": "60"}, ["ttlSeconds"]),
        ({"scopes": ["asset:*:read"], "ttlSeconds": 1.5}, ["ttlSeconds"]),
        ({"scopes": []}, ["scopes"]),
        ({"ttlSeconds": 60}, ["scopes"]),
        ({"scopes": ["device:*:read"]}, ["scopes[0]"]),
        ({"scopes": ["asset:*:read", "asset:a:b:read"]}, ["scopes[1]"]),
        ({"scopes": ["admin:*:*"]}, ["scopes[0]"]),
        ({"scopes": ["asset:*:read", "asset:*:read"]}, ["scopes"]),
        ({"scopes": ["asset:*:read"], "name": "x"}, ["name"]),
    ],
)
async def test_bad_mint_requests_are_400_naming_the_field(
    client: Client, callers: Callers, body: dict[str, Any], words: list[str]
) -> None:
    response = await client.post("/v1/scoped_tokens", json=body, headers=callers.admin.headers)
    await assert_api_error(response, 400, *words)


async def test_a_scope_never_exceeds_the_minters_role(client: Client, callers: Callers) -> None:
    response = await client.post(
        "/v1/scoped_tokens", json={"scopes": ["device:*:install"]}, headers=callers.viewer.headers
    )
    body = await assert_api_error(response, 403, "scopes[0]", "member")
    assert body["reason"] == "insufficient_role"
    await _mint(client, callers.viewer, ["asset:*:read"])
    response = await client.post(
        "/v1/scoped_tokens", json={"scopes": ["asset:*:read"]}, headers=callers.read_only.headers
    )
    await assert_api_error(response, 403, "read-only")


async def test_device_scope_opens_only_that_instance(
    client: Client, callers: Callers, device: Instance, other_device: Instance
) -> None:
    made = await _mint(client, callers.member, [f"device:{device.id}:install"])
    headers = _bearer(made["token"])
    response = await client.get(f"/v1/ios_instances/{device.id}", headers=headers)
    assert response.status_code == 200
    shown = await response.get_json()
    assert shown["metadata"]["id"] == device.id
    # A scoped token is not a credential that controls the instance: no per-instance secrets.
    assert "token" not in shown["status"] and "streamToken" not in shown["status"]

    closed = [
        ("GET", f"/v1/android_instances/{other_device.id}"),
        ("GET", "/v1/ios_instances"),
        ("DELETE", f"/v1/ios_instances/{device.id}"),
        ("POST", "/v1/ios_instances"),
        ("GET", f"/organizations/{callers.member.org_id}"),
        ("GET", "/v1/analytics?from=2030-01-01T00:00:00Z"),
        ("POST", "/v1/scoped_tokens"),
        ("DELETE", f"/v1/scoped_tokens/{made['id']}"),
    ]
    for method, path in closed:
        response = await client.open(path, method=method, headers=headers, json={})
        body = await assert_api_error(response, 403, "scoped token")
        assert body["reason"] == "insufficient_scope", (method, path)
    # /whoami is open to every credential kind (issue 18, x-devyard-any-token).
    who = await client.get("/whoami", headers=headers)
    assert (await who.get_json())["credential"]["kind"] == "scopedToken"


@pytest.fixture
async def foreign_device(store: Store, store_clock: SetClock, callers: Callers) -> Instance:
    return await run_instance(
        store, store_clock, callers.other_admin.org_id, created="2030-03-01T11:00:00Z"
    )


async def test_wildcard_device_scope_opens_every_instance_of_the_organization(
    client: Client,
    callers: Callers,
    device: Instance,
    other_device: Instance,
    foreign_device: Instance,
) -> None:
    made = await _mint(client, callers.member, ["device:*:install"])
    headers = _bearer(made["token"])
    for instance in (device, other_device):
        path = f"/v1/{instance.platform}_instances/{instance.id}"
        assert (await client.get(path, headers=headers)).status_code == 200
    response = await client.get(f"/v1/ios_instances/{foreign_device.id}", headers=headers)
    await assert_api_error(response, 404)
    # An asset scope opens no instance.
    asset_only = _bearer((await _mint(client, callers.member, ["asset:*:read"]))["token"])
    response = await client.get(f"/v1/ios_instances/{device.id}", headers=asset_only)
    await assert_api_error(response, 403, "scoped token")


async def test_scoped_token_keeps_the_minters_current_role(
    client: Client, callers: Callers, store: Store, device: Instance
) -> None:
    made = await _mint(client, callers.member, ["device:*:install"])
    await store.remove_membership(callers.member.org_id, callers.member.user_id)
    # Removing the member revokes its keys, and so every token they minted.
    response = await client.get(f"/v1/ios_instances/{device.id}", headers=_bearer(made["token"]))
    await assert_api_error(response, 401)


async def test_revoke_ends_that_one_token_from_the_next_request(
    client: Client, callers: Callers, device: Instance
) -> None:
    scopes = [f"device:{device.id}:install"]
    first = await _mint(client, callers.member, scopes)
    second = await _mint(client, callers.member, scopes)
    path = f"/v1/ios_instances/{device.id}"
    assert (await client.get(path, headers=_bearer(first["token"]))).status_code == 200

    response = await client.delete(
        f"/v1/scoped_tokens/{first['id']}", headers=callers.member.headers
    )
    assert response.status_code == 200
    revoked = await response.get_json()
    assert revoked["id"] == first["id"] and revoked["revokedAt"] is not None
    assert "token" not in revoked

    await assert_api_error(await client.get(path, headers=_bearer(first["token"])), 401)
    assert (await client.get(path, headers=_bearer(second["token"]))).status_code == 200
    assert (await client.get("/whoami", headers=callers.member.headers)).status_code == 200
    # Idempotent: revoking again answers the same record.
    again = await client.delete(f"/v1/scoped_tokens/{first['id']}", headers=callers.member.headers)
    assert (await again.get_json())["revokedAt"] == revoked["revokedAt"]


async def test_who_may_revoke(client: Client, callers: Callers) -> None:
    members = await _mint(client, callers.member, ["asset:*:read"])
    admins = await _mint(client, callers.admin, ["asset:*:read"])
    for caller, token_id in [
        (callers.member, admins["id"]),  # another user's token
        (callers.viewer, members["id"]),
        (callers.other_admin, members["id"]),  # another organization's
        (callers.admin, "stk_01JAAAAAAAAAAAAAAAAAAAAAAA"),  # no such token
    ]:
        response = await client.delete(f"/v1/scoped_tokens/{token_id}", headers=caller.headers)
        await assert_api_error(response, 404, "scoped token")
    response = await client.delete(
        f"/v1/scoped_tokens/{members['id']}", headers=callers.admin.headers
    )
    assert response.status_code == 200


async def test_expired_token_is_401(
    client: Client, callers: Callers, store_clock: SetClock, device: Instance
) -> None:
    made = await _mint(client, callers.member, ["device:*:install"], ttlSeconds=60)
    path = f"/v1/ios_instances/{device.id}"
    store_clock.advance(59)
    assert (await client.get(path, headers=_bearer(made["token"]))).status_code == 200
    store_clock.advance(1)
    await assert_api_error(await client.get(path, headers=_bearer(made["token"])), 401)


async def test_revoking_the_minting_key_ends_its_tokens(
    client: Client, callers: Callers, store: Store, device: Instance
) -> None:
    made = await _mint(client, callers.member, ["device:*:install"])
    other = await _mint(client, callers.admin, ["device:*:install"])
    await store.revoke_api_key(callers.member.org_id, made["apiKeyId"])
    path = f"/v1/ios_instances/{device.id}"
    await assert_api_error(await client.get(path, headers=_bearer(made["token"])), 401)
    assert (await client.get(path, headers=_bearer(other["token"]))).status_code == 200


async def test_forged_tokens_are_401(client: Client, callers: Callers, device: Instance) -> None:
    made = await _mint(client, callers.member, ["device:*:install"])
    token: str = made["token"]
    wrong_secret = token[:-4] + ("AAAA" if not token.endswith("AAAA") else "BBBB")
    path = f"/v1/ios_instances/{device.id}"
    for bad in (wrong_secret, token + "x", "dyst_short_secret"):
        await assert_api_error(await client.get(path, headers=_bearer(bad)), 401)


async def test_asset_scope_opens_only_that_asset(
    client: Client, callers: Callers, store: Store
) -> None:
    org = callers.admin.org_id
    app_asset = await store.upsert_asset(org_id=org, name="app.apk")
    other = await store.upsert_asset(org_id=org, name="other.apk")
    made = await _mint(client, callers.viewer, [f"asset:{app_asset.id}:read"])
    headers = _bearer(made["token"])
    response = await client.get(
        f"/v1/assets/{app_asset.id}", query_string={"includeDownloadUrl": "true"}, headers=headers
    )
    assert response.status_code == 200, await response.get_data()
    shown = await response.get_json()
    assert shown["id"] == app_asset.id and "signedDownloadUrl" in shown
    for method, path in [
        ("GET", f"/v1/assets/{other.id}"),
        ("GET", "/v1/assets"),
        ("PUT", "/v1/assets"),
        ("DELETE", f"/v1/assets/{app_asset.id}"),
    ]:
        response = await client.open(path, method=method, headers=headers, json={"name": "x"})
        await assert_api_error(response, 403, "scoped token")
    everything = _bearer((await _mint(client, callers.viewer, ["asset:*:read"]))["token"])
    assert (await client.get(f"/v1/assets/{other.id}", headers=everything)).status_code == 200
