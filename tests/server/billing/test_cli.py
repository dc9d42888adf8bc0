"""``devyard billing plans|invoices|subscription``: the real CLI as a subprocess against an
in-process server (provider none, a catalog with prices), on SQLite."""

from __future__ import annotations

from pathlib import Path

import pytest

from devyard.server.config import ListenAddress, RateLimitConfig, ServerConfig
from tests.client._cli import Cli
from tests.client.conftest import Server, server  # fixtures, used by name

from .test_none_provider import CATALOG

__all__ = ["server"]


@pytest.fixture
def server_config(tmp_path: Path) -> ServerConfig:
    return ServerConfig(
        data_dir=tmp_path,
        listen=ListenAddress("127.0.0.1", 0),
        rate_limit=RateLimitConfig(rate=1000.0, burst=1000),
        billing=CATALOG,
    )


@pytest.mark.parametrize("database_target", ["sqlite"], indirect=True)
async def test_plans_change_subscription_and_invoices(server: Server, tmp_path: Path) -> None:
    cli = Cli.of(tmp_path, DEVYARD_BASE_URL=server.url, DEVYARD_API_KEY=server.admin_key)
    plans = await cli("billing", "plans")
    assert plans.code == 0, plans.err
    assert [line.split()[:3] for line in plans.out.splitlines()[1:]] == [
        ["free", "Free", "downgrade"], ["starter", "Starter", "current"],
        ["team", "Team", "upgrade"],
    ]  # fmt: skip
    assert "49.00 USD" in plans.out  # the team plan's fee, from integer cents
    changed = await cli("billing", "plans", "--change", "price_team")
    assert changed.code == 0 and "(now)" in changed.out
    assert changed.out.strip().endswith(f"/organizations/{server.org_id}/subscriptions")
    shown = await cli("billing", "subscription", "--json")
    (sub,) = shown.json()["subscriptions"]
    assert (sub["planTid"], sub["status"]) == ("team", "active")
    assert shown.json()["schedule"] == {"currentPlanTid": "team", "scheduled": False}
    invoices = await cli("billing", "invoices", "--timezone", "UTC", "--json")
    assert invoices.json()["timezone"] == "UTC" and len(invoices.json()["invoices"]) == 6
