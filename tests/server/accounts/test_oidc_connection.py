"""GET/PUT/DELETE .../oidcConnection: admins only, the client secret sealed at rest and never
shown, kept by an update that does not repeat it; another organization's is 404."""

from __future__ import annotations

from pathlib import Path

import pytest
from quart.typing import TestClientProtocol as Client

from devyard.server.accounts.secretbox import SecretBoxError, load_secret_box
from devyard.server.config import ServerConfig
from devyard.server.store import Store

from ..api.conftest import Callers, assert_api_error

SECRET = "s3cr3t-client-secret-value"


async def test_the_connection_is_set_read_and_deleted(
    client: Client, callers: Callers, store: Store, config: ServerConfig, tmp_path: Path
) -> None:
    org = callers.admin.org_id
    url = f"/organizations/{org}/oidcConnection"
    admin = callers.admin.headers
    await assert_api_error(await client.get(url, headers=admin), 404)
    await store.replace_domains(org, {"example.com": "t", "other.example": "u"})
    await store.mark_domain_verified(org, "example.com")
    put = await client.put(
        url,
        json={
            "issuer": "https://idp.example.com/",
            "clientId": "devyard",
            "clientSecret": SECRET,
            "allowedDomains": ["Example.com", "other.example"],
        },
        headers=admin,
    )
    assert put.status_code == 200, await put.get_data()
    shown = await put.get_json()
    assert SECRET not in str(shown)
    assert (shown["issuer"], shown["clientSecretSet"], shown["defaultRole"]) == (
        "https://idp.example.com",
        True,
        "member",
    )
    assert (shown["allowedDomains"], shown["verifiedDomains"]) == (
        ["example.com", "other.example"],
        ["example.com"],
    )
    # At rest: sealed for this organization only, and opened with the data dir's key.
    stored = await store.get_oidc_connection(org)
    assert stored.secret_sealed is not None and SECRET not in stored.secret_sealed
    box = await load_secret_box(config.data_dir)
    assert box.open(stored.secret_sealed, context=org) == SECRET
    with pytest.raises(SecretBoxError):
        box.open(stored.secret_sealed, context=callers.other_admin.org_id)
    # An update without the secret keeps it; null removes it (a public client).
    again = await client.put(
        url, json={"issuer": "https://idp.example.com", "clientId": "devyard2"}, headers=admin
    )
    assert (await again.get_json())["clientSecretSet"] is True
    assert (await store.get_oidc_connection(org)).secret_sealed == stored.secret_sealed
    public = await client.put(
        url,
        json={"issuer": "https://idp.example.com", "clientId": "pub", "clientSecret": None},
        headers=admin,
    )
    assert (await public.get_json())["clientSecretSet"] is False
    got = await client.get(url, headers=admin)
    assert (await got.get_json())["clientId"] == "pub"
    deleted = await client.delete(url, headers=admin)
    assert (deleted.status_code, await deleted.get_json()) == (200, {"success": True})
    await assert_api_error(await client.delete(url, headers=admin), 404)


async def test_roles_organizations_and_bad_input(client: Client, callers: Callers) -> None:
    url = f"/organizations/{callers.admin.org_id}/oidcConnection"
    good = {"issuer": "https://idp.example.com", "clientId": "c"}
    for caller in (callers.member, callers.viewer):
        await assert_api_error(await client.get(url, headers=caller.headers), 403)
        await assert_api_error(await client.put(url, json=good, headers=caller.headers), 403)
    await assert_api_error(
        await client.put(url, json=good, headers=callers.other_admin.headers), 404
    )
    for bad in (
        {},
        {"issuer": "https://idp.example.com"},
        {"issuer": "http://idp.example.com", "clientId": "c"},
        {"issuer": "https://idp.example.com?x=1", "clientId": "c"},
        {"issuer": "ftp://idp.example.com", "clientId": "c"},
        {**good, "defaultRole": "owner"},
        {**good, "allowedDomains": ["not a domain"]},
    ):
        await assert_api_error(await client.put(url, json=bad, headers=callers.admin.headers), 400)
    loopback = {"issuer": "http://127.0.0.1:9000/realm", "clientId": "dev"}
    assert (await client.put(url, json=loopback, headers=callers.admin.headers)).status_code == 200
