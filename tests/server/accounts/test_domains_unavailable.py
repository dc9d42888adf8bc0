"""A resolver that does not answer: verification is 503 (retry later), the domain stays
pending, and the request ends within the configured DNS timeout."""

from __future__ import annotations

import pytest
import trio
from quart.typing import TestClientProtocol as Client

from devyard.server.accounts.settings import AccountsConfig
from tests.ports import free_port

from ..api.conftest import Callers, assert_api_error


@pytest.fixture
def accounts() -> AccountsConfig:
    return AccountsConfig(dns_nameserver=("127.0.0.1", free_port()), dns_timeout_s=0.5)


async def test_no_dns_answer_is_503(client: Client, callers: Callers) -> None:
    base = f"/organizations/{callers.admin.org_id}/domains"
    await client.put(base, json={"domains": ["x.example"]}, headers=callers.admin.headers)
    with trio.fail_after(10):
        response = await client.post(f"{base}/x.example/verify", headers=callers.admin.headers)
    await assert_api_error(response, 503, "retry")
    listed = await (await client.get(base, headers=callers.admin.headers)).get_json()
    assert listed[0]["status"] == "pending"
