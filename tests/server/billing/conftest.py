"""The billing API tests' fixtures: the analytics fixtures (both backends, a store clock the
test sets, callers) with a server config that has a plan catalog."""

from __future__ import annotations

from pathlib import Path

import pytest

from devyard.server.billing.plans import parse_catalog
from devyard.server.config import RateLimitConfig, ServerConfig
from tests.server.tokens.conftest import (  # fixtures, used by name
    app,
    callers,
    client,
    manual_clock,
    store,
    store_clock,
)

__all__ = ["app", "callers", "client", "config", "manual_clock", "store", "store_clock"]

CATALOG = parse_catalog(
    [
        {"tid": "starter", "name": "Starter", "rank": 1, "included_minutes": 30,
         "tiers": [{"up_to": 100, "unit_amount": 10}, {"unit_amount": 5}],
         "weights": {"xcode": 200}, "concurrency": {"android": 2}},
        {"tid": "team", "name": "Team", "rank": 2, "monthly_fee": 4900, "credits": 500,
         "price_id": "price_team"},
        {"tid": "free", "name": "Free", "rank": 0},
    ],
    default="starter",
)  # fmt: skip


@pytest.fixture
def config(tmp_path: Path) -> ServerConfig:
    return ServerConfig(
        data_dir=tmp_path,
        rate_limit=RateLimitConfig(enabled=True, rate=1000.0, burst=1000),
        max_body_bytes=64 * 1024,
        billing=CATALOG,
    )
