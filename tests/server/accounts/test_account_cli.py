"""The account commands (`devyard.client.account_commands`) and their client methods against
a real server on 127.0.0.1 port 0, with the loopback DNS server for domain verification."""

from __future__ import annotations

import io
from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path

import pytest
import trio

from devyard.cli import build_parser
from devyard.client.client import AsyncClient
from devyard.client.commands import CommandError
from devyard.server.accounts.settings import AccountsConfig
from devyard.server.api.app import api_state
from devyard.server.api.serve import BoundServer, serve_api
from devyard.server.config import ListenAddress, RateLimitConfig, ServerConfig
from devyard.server.store import Store

from ..api.conftest import Callers
from .conftest import DnsPeer

pytestmark = pytest.mark.parametrize("database_target", ["sqlite"], indirect=True)


@pytest.fixture
async def url(store: Store, tmp_path: Path, dns_server: DnsPeer) -> AsyncIterator[str]:
    config = ServerConfig(
        data_dir=tmp_path / "data",
        listen=ListenAddress("127.0.0.1", 0),
        rate_limit=RateLimitConfig(enabled=False),
        shutdown_grace=1,
        accounts=AccountsConfig(dns_nameserver=("127.0.0.1", dns_server.port), dns_timeout_s=5),
    )
    async with trio.open_nursery() as nursery:
        bound: BoundServer = await nursery.start(partial(serve_api, api_state(store, config)))
        yield bound.local_url
        nursery.cancel_scope.cancel()


async def _run(client: AsyncClient, *argv: str) -> str:
    args = build_parser().parse_args(list(argv))
    out = io.StringIO()
    await args.handler(client, args, out)
    return out.getvalue()


async def test_account_commands(
    url: str, store: Store, callers: Callers, dns_server: DnsPeer, tmp_path: Path
) -> None:
    await store.set_operator(callers.admin.user_id, True)
    async with AsyncClient(url, callers.admin.key) as admin:
        # org create prints the new organization's key alone; org get, org delete.
        key = (await _run(admin, "org", "create", "newco")).strip()
        async with AsyncClient(url, key) as newco:
            org_id = (await newco.whoami()).organization.id
            assert "newco" in await _run(newco, "org", "get")
            with pytest.raises(CommandError):
                await _run(newco, "org", "delete")
            assert "deleted newco" in await _run(newco, "org", "delete", "--yes", org_id)
        # Invitations without SMTP: the accept link is printed.
        link = (await _run(admin, "invite", "zed@example.org", "--role", "viewer")).strip()
        assert "/invitations/accept?token=dyinv_" in link
        listed = await _run(admin, "invitations", "list")
        assert "zed@example.org" in listed and "viewer" in listed
        invitation_id = (await admin.list_invitations(callers.admin.org_id))[0]["id"]
        assert "revoked" in await _run(admin, "invitations", "revoke", invitation_id)
        # Domains: added pending, verified once the TXT record is in the DNS.
        added = await _run(admin, "domains", "add", "Example.org")
        assert "example.org" in added and "pending" in added
        [domain] = await admin.list_domains(callers.admin.org_id)
        with pytest.raises(CommandError):
            await _run(admin, "domains", "verify", "example.org")
        record = domain["txtRecord"]
        dns_server.records.records[record["name"]] = [record["value"]]
        assert "verified" in await _run(admin, "domains", "verify", "example.org")
        # Single sign-on: the secret from a file, never shown.
        secret = tmp_path / "secret"
        secret.write_text("the-client-secret\n")
        shown = await _run(
            admin,
            "sso", "set",
            "--issuer", "https://idp.example.com",
            "--client-id", "devyard",
            "--client-secret-file", str(secret),
            "--allowed-domain", "example.org",
        )  # fmt: skip
        assert "the-client-secret" not in shown and "set" in shown and "example.org" in shown
        assert "idp.example.com" in await _run(admin, "sso", "get")
        assert "removed" in await _run(admin, "sso", "delete")
        # Support: a member writes, the operator lists and answers.
        async with AsyncClient(url, callers.member.key) as member:
            await member.send_support_message(callers.member.org_id, "help me please")
        listing = await _run(admin, "support", "list")
        assert "help me please" in listing
        [message] = await admin.list_support_messages()
        answered = await _run(admin, "support", "answer", message["id"], "on it")
        assert "stored (not mailed)" in answered
        assert [a["message"] for a in (await admin.list_support_messages())[0]["answers"]] == [
            "on it"
        ]
