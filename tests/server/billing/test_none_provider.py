"""Billing with ``provider = none`` end to end through the API, on both backends: devyard's own
plan changes (an upgrade at once, a downgrade at the period end, released on request), the
plans' actions following the subscription, the next invoice computed locally, and the
provider's pages refused with a clear 409."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import attrs
import pytest
from quart.typing import TestClientProtocol as Client
from quart_trio import QuartTrio

from devyard.server.api.app import api_state, create_app
from devyard.server.billing.plans import parse_catalog
from devyard.server.billing.service import BillingService
from devyard.server.config import RateLimitConfig, ServerConfig
from devyard.server.store import Store
from tests.server.api.conftest import ManualClock, assert_api_error
from tests.server.tokens.conftest import Callers, SetClock

CATALOG = parse_catalog(
    [
        {"tid": "free", "name": "Free", "rank": 0, "price_id": "price_free"},
        {"tid": "starter", "name": "Starter", "rank": 1, "price_id": "price_starter",
         "concurrency": {"android": 1}},
        {"tid": "team", "name": "Team", "rank": 2, "monthly_fee": 4900,
         "price_id": "price_team"},
    ],
    default="starter",
)  # fmt: skip


@pytest.fixture
def config(tmp_path: Path) -> ServerConfig:
    return ServerConfig(
        data_dir=tmp_path,
        rate_limit=RateLimitConfig(enabled=True, rate=1000.0, burst=1000),
        billing=CATALOG,
    )


@pytest.fixture
def app(
    store: Store, config: ServerConfig, manual_clock: ManualClock, store_clock: SetClock
) -> QuartTrio:
    state = api_state(store, config, clock=manual_clock)
    billing = BillingService(
        store, CATALOG, config.payments, base_url=config.base_url, clock=store_clock
    )
    return create_app(attrs.evolve(state, billing=billing))


async def _call(
    client: Client, callers: Callers, method: str, path: str, *, status: int = 200, **kw: Any
) -> Any:
    org = callers.admin.org_id
    response = await client.open(
        f"/organizations/{org}{path}", method=method, headers=callers.admin.headers, **kw
    )
    assert response.status_code == status, await response.get_data()
    return await response.get_json()


async def _actions(client: Client, callers: Callers) -> dict[str, str]:
    options = await _call(client, callers, "GET", "/plans")
    return {o["plan"]["tid"]: o["action"] for o in options}


async def test_upgrade_at_once_downgrade_at_period_end_and_its_release(
    client: Client, callers: Callers, store_clock: SetClock
) -> None:
    store_clock.now = datetime(2030, 3, 10, 12, tzinfo=UTC)
    assert await _call(client, callers, "GET", "/subscriptions") == []
    assert await _actions(client, callers) == {"free": "downgrade", "starter": "current",
                                               "team": "upgrade"}  # fmt: skip

    upgrade = await _call(client, callers, "POST", "/plan", json={"priceId": "price_team"})
    assert upgrade["scheduled"] is False
    assert upgrade["url"].endswith(f"/organizations/{callers.admin.org_id}/subscriptions")
    (sub,) = await _call(client, callers, "GET", "/subscriptions")
    assert (sub["provider"], sub["planTid"], sub["status"]) == ("none", "team", "active")
    assert sub["currentPeriodEnd"] == "2030-04-01T00:00:00Z" and sub["scheduledChange"] is None
    assert (await _actions(client, callers))["team"] == "current"

    downgrade = await _call(client, callers, "POST", "/plan", json={"priceId": "price_free"})
    assert downgrade["scheduled"] is True
    schedule = await _call(client, callers, "GET", "/plan/schedule")
    assert schedule == {"currentPlanTid": "team", "scheduled": True, "planTid": "free",
                        "effectiveAt": "2030-04-01T00:00:00Z"}  # fmt: skip
    released = await _call(client, callers, "DELETE", "/plan/schedule")
    assert released == {"currentPlanTid": "team", "scheduled": False}
    # releasing again is not an error: nothing is scheduled
    assert (await _call(client, callers, "DELETE", "/plan/schedule"))["scheduled"] is False

    await _call(client, callers, "POST", "/plan", json={"priceId": "price_free"})
    store_clock.now = datetime(2030, 4, 1, tzinfo=UTC)  # the period ends: the change is due
    assert (await _call(client, callers, "GET", "/plan/schedule"))["currentPlanTid"] == "free"
    assert (await _actions(client, callers))["free"] == "current"


async def test_a_downgrade_from_the_default_plan_is_scheduled_too(
    client: Client, callers: Callers, store_clock: SetClock
) -> None:
    store_clock.now = datetime(2030, 12, 31, 23, tzinfo=UTC)
    answer = await _call(client, callers, "POST", "/plan", json={"priceId": "price_free"})
    assert answer["scheduled"] is True
    schedule = await _call(client, callers, "GET", "/plan/schedule")
    assert schedule["currentPlanTid"] == "starter"
    assert schedule["effectiveAt"] == "2031-01-01T00:00:00Z"


async def test_the_provider_pages_are_409_and_bad_input_4xx(
    client: Client, callers: Callers
) -> None:
    org = callers.admin.org_id
    for path in ("/billing", "/checkout?priceId=price_team", "/checkout?priceId=price_nope"):
        error = await _call(client, callers, "GET", path, status=409)
        assert error["reason"] == "no_payment_provider"
    error = await _call(client, callers, "POST", "/plan", status=404, json={"priceId": "price_x"})
    assert error["reason"] == "unknown_price"
    error = await _call(client, callers, "POST", "/plan", status=409,
                        json={"priceId": "price_starter"})  # fmt: skip
    assert error["reason"] == "already_on_plan"
    await _call(client, callers, "POST", "/plan", status=400, json={"price": "price_team"})
    response = await client.post(
        f"/organizations/{org}/plan", json={"priceId": "price_team"},
        headers=callers.member.headers,
    )  # fmt: skip
    await assert_api_error(response, 403)
    for path in ("/subscriptions", "/billing-details", "/plan/schedule"):
        response = await client.get(f"/organizations/{org}{path}",
                                    headers=callers.other_admin.headers)  # fmt: skip
        await assert_api_error(response, 404)
    # no webhook without a payment provider
    response = await client.post("/stripe/webhook", data=b"{}")
    await assert_api_error(response, 404)


async def test_billing_details_preview_the_open_month_computed_locally(
    client: Client, callers: Callers
) -> None:
    await _call(client, callers, "POST", "/plan", json={"priceId": "price_team"})
    details = await _call(client, callers, "GET", "/billing-details")
    assert details["provider"] == "none" and details["billingEnabled"] is False
    assert details["unpaid"] is False and "defaultPaymentMethod" not in details
    # the team plan's monthly fee, nothing used yet (the preview is of the real month)
    assert details["upcomingInvoice"]["amountDue"] == 4900
    assert details["upcomingInvoice"]["currency"] == "usd"
