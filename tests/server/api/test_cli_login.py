"""The command-line login requests (routes/cli_login.py): approved once, the new key handed
out once, expiring, refused to scoped tokens, a wrong secret is 404; the approval page is
HTML that cannot be framed. End to end with ``lim login``: tests/e2e/test_compat_sdks.py."""

from __future__ import annotations

from typing import Any

import trio
from quart.typing import TestClientProtocol as Client

from devyard.server.api.routes.cli_login import TTL

from .conftest import Callers, assert_api_error


async def _start(client: Client) -> dict[str, Any]:
    response = await client.post(
        "/authn/cli/sessions", json={"hostname": "laptop", "cliVersion": "0.18.6"}
    )
    assert response.status_code == 200
    started: dict[str, Any] = await response.get_json()
    assert started["sessionId"] in started["verificationUrl"]
    assert started["secret"] not in started["verificationUrl"]
    assert started["pollIntervalSeconds"] == 1
    return started


def _poll_url(started: dict[str, Any]) -> str:
    return f"/authn/cli/sessions/{started['sessionId']}/token"


async def test_approved_once_collected_once_as_a_new_key_of_the_approver(
    client: Client, callers: Callers
) -> None:
    started = await _start(client)
    secret = {"secret": started["secret"]}
    pending = await client.get(_poll_url(started), query_string=secret)
    assert pending.status_code == 202
    wrong = await client.get(_poll_url(started), query_string={"secret": "guess"})
    await assert_api_error(wrong, 404, "secret")

    page = await client.get("/authn/cli", query_string={"session": started["sessionId"]})
    assert page.status_code == 200 and page.content_type.startswith("text/html")
    html = await page.get_data(as_text=True)
    assert started["phrase"] in html and "laptop" in html
    assert started["secret"] not in html
    assert "frame-ancestors 'none'" in page.headers["Content-Security-Policy"]

    approve = f"/authn/cli/sessions/{started['sessionId']}/approve"
    approved = await client.post(approve, json={}, headers=callers.member.headers)
    assert approved.status_code == 200
    again = await client.post(approve, json={}, headers=callers.member.headers)
    await assert_api_error(again, 409, "already approved")

    collected = await client.get(_poll_url(started), query_string=secret)
    assert collected.status_code == 200
    key = (await collected.get_json())["apiKey"]
    assert key.startswith("dy_") and key != callers.member.key
    me = await (await client.get("/whoami", headers={"Authorization": f"Bearer {key}"})).get_json()
    assert me["user"]["id"] == callers.member.user_id
    assert me["apiKey"]["readOnly"] is False
    twice = await client.get(_poll_url(started), query_string=secret)
    await assert_api_error(twice, 410, "already used")
    gone_page = await client.get("/authn/cli", query_string={"session": started["sessionId"]})
    assert "expired or was already used" in await gone_page.get_data(as_text=True)


async def test_read_only_keys_and_scoped_tokens_cannot_approve_a_viewer_can(
    client: Client, callers: Callers
) -> None:
    started = await _start(client)
    approve = f"/authn/cli/sessions/{started['sessionId']}/approve"
    minted = await client.post(
        "/v1/scoped_tokens", json={"scopes": ["asset:*:read"]}, headers=callers.admin.headers
    )
    scoped = (await minted.get_json())["token"]
    refused = await client.post(approve, json={}, headers={"Authorization": f"Bearer {scoped}"})
    assert refused.status_code in (401, 403)
    assert (await client.post(approve, json={})).status_code == 401
    read_only = await client.post(approve, json={}, headers=callers.read_only.headers)
    assert read_only.status_code == 403  # a read-only key writes nothing, keys included
    approved = await client.post(approve, json={}, headers=callers.viewer.headers)
    assert approved.status_code == 200
    collected = await client.get(_poll_url(started), query_string={"secret": started["secret"]})
    key = (await collected.get_json())["apiKey"]
    me = await (await client.get("/whoami", headers={"Authorization": f"Bearer {key}"})).get_json()
    assert (me["user"]["id"], me["role"]) == (callers.viewer.user_id, "viewer")


async def test_a_request_expires(client: Client, callers: Callers, autojump_clock: Any) -> None:
    started = await _start(client)
    await trio.sleep(TTL + 1)
    late = await client.post(
        f"/authn/cli/sessions/{started['sessionId']}/approve",
        json={},
        headers=callers.member.headers,
    )
    await assert_api_error(late, 410, "expired")
    poll = await client.get(_poll_url(started), query_string={"secret": started["secret"]})
    await assert_api_error(poll, 410, "expired")
