"""The client methods and ``devyard token`` / ``devyard analytics`` against a real server on
127.0.0.1 port 0 (both backends)."""

from __future__ import annotations

import io
import json

import pytest

from devyard.cli import build_parser
from devyard.client._errors import APIError
from devyard.client.client import AsyncClient
from tests.client.conftest import Server, server, server_config

__all__ = ["server", "server_config"]


async def _run(client: AsyncClient, *argv: str) -> str:
    args = build_parser().parse_args(list(argv))
    out = io.StringIO()
    await args.handler(client, args, out)
    return out.getvalue()


async def test_client_mints_uses_and_revokes_a_token(server: Server) -> None:
    async with AsyncClient(server.url, server.admin_key) as client:
        made = await client.create_scoped_token(["asset:*:read"], ttl_seconds=60)
        assert made["token"].startswith("dyst_") and made["scopes"] == ["asset:*:read"]
        async with AsyncClient(server.url, made["token"]) as scoped:
            # /whoami answers every credential kind (issue 18; tests/server/accounts checks
            # that it names the token) ...
            who = await scoped.whoami()
            # ... while an operation the token's scopes do not open stays 403.
            with pytest.raises(APIError) as refused:
                await scoped.get_organization(who.organization.id)
            assert refused.value.status == 403
            assert (await client.revoke_scoped_token(made["id"]))["revokedAt"] is not None
            with pytest.raises(APIError) as gone:
                await scoped.list_assets()
            assert gone.value.status == 401


async def test_client_analytics_needs_a_bound(server: Server) -> None:
    async with AsyncClient(server.url, server.admin_key) as client:
        with pytest.raises(APIError) as missing:
            await client.analytics({})
        assert missing.value.status == 400
        answer = await client.analytics(
            {"from": "2030-01-01T00:00:00Z", "to": "2030-01-03T00:00:00Z"}
        )
        assert [b["instances"] for b in answer["buckets"]] == [0, 0]
        assert answer["from"] == "2030-01-01T00:00:00Z"
        page = await client.instance_analytics({"startedAt[gte]": "2030-01-01T00:00:00Z"})
        # devyard's page, plus the commercial SDKs' fields beside it (docs/compatibility.md)
        assert {k: page[k] for k in ("startedAt[gte]", "items", "hasMore")} == {
            "startedAt[gte]": "2030-01-01T00:00:00Z",
            "items": [],
            "hasMore": False,
        }
        assert page["series"] == [] and page["timezone"] == "UTC"


async def test_cli_commands(server: Server) -> None:
    async with AsyncClient(server.url, server.admin_key) as client:
        token = (await _run(client, "token", "create", "asset:*:read", "--ttl", "30")).strip()
        assert token.startswith("dyst_")
        made = json.loads(await _run(client, "token", "create", "device:*:install", "--json"))
        assert await _run(client, "token", "revoke", made["id"]) == f"revoked {made['id']}\n"
        table = await _run(
            client, "analytics", "--since", "2030-01-01T00:00:00Z", "--until",
            "2030-01-01T23:59:59Z",
        )  # fmt: skip
        assert "2030-01-01T00:00:00Z" in table and "total" in table
        listing = await _run(
            client, "analytics", "--stopped-since", "2030-01-01T00:00:00Z", "--instances", "--json"
        )
        assert json.loads(listing) == []
