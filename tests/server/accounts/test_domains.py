"""Verified email domains: the list is replaced as a whole, a new domain is pending with a TXT
token, and verification asks a real DNS server (dnslib on loopback) for the record."""

from __future__ import annotations

import pytest
from quart.typing import TestClientProtocol as Client

from devyard.server.accounts.settings import AccountsConfig
from devyard.server.store import Store

from ..api.conftest import Callers, assert_api_error
from .conftest import DnsPeer


@pytest.fixture
def accounts(dns_server: DnsPeer) -> AccountsConfig:
    return AccountsConfig(dns_nameserver=("127.0.0.1", dns_server.port), dns_timeout_s=5.0)


async def test_a_domain_is_verified_once_dns_serves_its_token(
    client: Client, callers: Callers, dns_server: DnsPeer, store: Store
) -> None:
    base = f"/organizations/{callers.admin.org_id}/domains"
    admin = callers.admin.headers
    response = await client.put(
        base, json={"domains": ["Example.COM.", "corp.example.org"]}, headers=admin
    )
    assert response.status_code == 200, await response.get_data()
    listed = await response.get_json()
    assert [(d["domain"], d["status"]) for d in listed] == [
        ("corp.example.org", "pending"),
        ("example.com", "pending"),
    ]
    record = listed[1]["txtRecord"]
    assert record["name"] == "_devyard-verification.example.com"
    # Not published yet: still pending, and the server really asked.
    check = await client.post(f"{base}/example.com/verify", headers=admin)
    assert (await check.get_json())["status"] == "pending"
    assert "_devyard-verification.example.com" in dns_server.records.questions
    # A wrong token is not enough.
    dns_server.records.records[record["name"]] = ["devyard-verification=someone-else"]
    check = await client.post(f"{base}/example.com/verify", headers=admin)
    assert (await check.get_json())["status"] == "pending"
    dns_server.records.records[record["name"]] = ["v=spf1 -all", record["value"]]
    check = await client.post(f"{base}/EXAMPLE.com/verify", headers=admin)
    verified = await check.get_json()
    assert (verified["status"], verified["verifiedAt"] is not None) == ("verified", True)
    # Replacing the list keeps what stays (verified), drops the rest, adds new ones pending.
    response = await client.put(
        base, json={"domains": ["example.com", "new.example"]}, headers=admin
    )
    assert [(d["domain"], d["status"]) for d in await response.get_json()] == [
        ("example.com", "verified"),
        ("new.example", "pending"),
    ]
    listed = await (await client.get(base, headers=callers.viewer.headers)).get_json()
    assert [d["domain"] for d in listed] == ["example.com", "new.example"]
    kinds = [e.kind for e in await store.list_audit_events(callers.admin.org_id)]
    assert "domain_verified" in kinds


async def test_roles_other_organizations_and_bad_input(client: Client, callers: Callers) -> None:
    base = f"/organizations/{callers.admin.org_id}/domains"
    await assert_api_error(
        await client.put(base, json={"domains": ["a.example"]}, headers=callers.member.headers),
        403,
    )
    await assert_api_error(
        await client.post(f"{base}/a.example/verify", headers=callers.member.headers), 403
    )
    await assert_api_error(await client.get(base, headers=callers.other_admin.headers), 404)
    await assert_api_error(
        await client.put(base, json={"domains": []}, headers=callers.other_admin.headers), 404
    )
    for bad in (
        {"domains": ["not a domain"]},
        {"domains": "x.example"},
        {},
        {"domains": ["-a.example"]},
    ):
        await assert_api_error(await client.put(base, json=bad, headers=callers.admin.headers), 400)
    await assert_api_error(
        await client.post(f"{base}/unlisted.example/verify", headers=callers.admin.headers), 404
    )


async def test_an_empty_txt_set_leaves_the_domain_pending(
    client: Client, callers: Callers, dns_server: DnsPeer
) -> None:
    base = f"/organizations/{callers.admin.org_id}/domains"
    await client.put(base, json={"domains": ["empty.example"]}, headers=callers.admin.headers)
    dns_server.records.records["_devyard-verification.empty.example"] = []
    check = await client.post(f"{base}/empty.example/verify", headers=callers.admin.headers)
    assert (check.status_code, (await check.get_json())["status"]) == (200, "pending")
