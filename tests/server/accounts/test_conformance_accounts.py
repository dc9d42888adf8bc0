"""Conformance of the account operations alone (issue 18): schemathesis against a real server,
as tests/server/api/test_conformance.py runs it for the whole document, limited to these
operations so that a change here is checked in minutes. Domain verification asks the
loopback DNS server, never the network's."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import pytest
import trio

from devyard.server.accounts.settings import AccountsConfig
from devyard.server.api.app import api_state
from devyard.server.api.serve import BoundServer, serve_api
from devyard.server.config import ListenAddress, RateLimitConfig, ServerConfig
from devyard.server.store import Store
from tests.server.api.test_conformance import _schemathesis

from ..api.conftest import Callers
from .conftest import DnsPeer

pytest.importorskip("schemathesis")
pytestmark = pytest.mark.slow

OPERATIONS = (
    "whoami",
    "createOrganization",
    "listOrganizationDomains",
    "replaceOrganizationDomains",
    "verifyOrganizationDomain",
    "listInvitations",
    "createInvitation",
    "revokeInvitation",
    "acceptInvitation",
    "previewInvitation",
    "getOidcConnection",
    "putOidcConnection",
    "deleteOidcConnection",
    "listAudit",
    "createSession",
    "listSessions",
    "revokeSession",
    "sendSupportMessage",
    "listSupportMessages",
    "answerSupportMessage",
    "startSingleSignOn",
    "finishSingleSignOn",
)

# Single sign-on reaches the identity provider that a generated connection names: one that
# does not answer is 503, as documented (docs/accounts.md), not a server fault.
SSO_PROVIDER_DOWN = "".join(
    f'[[operations]]\ninclude-operation-id = "{op}"\n'
    'checks.not_a_server_error.expected-statuses = ["2xx", "3xx", "4xx", "503"]\n'
    for op in ("startSingleSignOn", "finishSingleSignOn")
)


async def test_the_account_operations_conform(
    store: Store, callers: Callers, tmp_path: Path, dns_server: DnsPeer
) -> None:
    config = ServerConfig(
        data_dir=tmp_path / "data",
        listen=ListenAddress("127.0.0.1", 0),
        rate_limit=RateLimitConfig(enabled=True, rate=1e6, burst=1_000_000),
        accounts=AccountsConfig(
            dns_nameserver=("127.0.0.1", dns_server.port), dns_timeout_s=2, oidc_timeout_s=2
        ),
    )
    await store.set_operator(callers.admin.user_id, True)
    settings = tmp_path / "schemathesis.toml"
    settings.write_text(
        "[phases.coverage.extra-data-sources]\nresponses = false\n"
        "[phases.fuzzing.extra-data-sources]\nresponses = false\n"
        + SSO_PROVIDER_DOWN
        + "[parameters]\n"
        f'"path.organizationId" = "{callers.admin.org_id}"\n'
    )
    selected = [arg for op in OPERATIONS for arg in ("--include-operation-id", op)]
    async with trio.open_nursery() as nursery:
        bound: BoundServer = await nursery.start(partial(serve_api, api_state(store, config)))
        output = await _schemathesis(
            tmp_path, bound, callers.admin.key, "--config-file", str(settings), *selected
        )
        assert "Authentication failed" not in output, output[-3000:]
        nursery.cancel_scope.cancel()
