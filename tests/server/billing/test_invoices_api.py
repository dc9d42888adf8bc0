"""Plans and invoices through the API (both backends), over a known usage history: the invoice
of a month has exactly the billed minutes analytics reports for it, priced by the plan."""

from __future__ import annotations

from typing import Any

import pytest
from quart.typing import TestClientProtocol as Client

from devyard.server.store import Store
from devyard.server.store.base import Platform
from tests.server.api.conftest import assert_api_error
from tests.server.tokens.conftest import Callers, SetClock, run_instance


@pytest.fixture
async def history(store: Store, store_clock: SetClock, callers: Callers) -> None:
    """March 2030: ios 31 + 10 min, xcode 25 h; February: android 10 min; another org too."""
    org = callers.admin.org_id
    other = callers.other_admin.org_id
    runs: list[tuple[str, Platform, str, str, str]] = [
        (org, Platform.IOS, "03-01T10:00:00", "03-01T10:01:00", "03-01T10:31:00.5"),
        (org, Platform.IOS, "03-31T23:50:00", "03-31T23:50:00", "04-01T00:00:00"),
        (org, Platform.XCODE, "03-05T08:00:00", "03-05T08:02:00", "03-06T09:02:00"),
        (org, Platform.ANDROID, "02-28T23:59:00", "02-28T23:59:50", "03-01T00:09:50"),
        (other, Platform.IOS, "03-02T00:00:00", "03-02T00:00:00", "03-02T05:00:00"),
    ]
    for owner, platform, created, ready, terminated in runs:
        await run_instance(
            store, store_clock, owner, platform=platform, created=f"2030-{created}Z",
            ready=f"2030-{ready}Z", terminated=f"2030-{terminated}Z",
        )  # fmt: skip


async def _get(client: Client, callers: Callers, path: str, **query: str) -> Any:
    response = await client.get(path, query_string=query, headers=callers.admin.headers)
    assert response.status_code == 200, await response.get_data()
    return await response.get_json()


async def test_an_invoice_has_the_minutes_analytics_reports_priced_by_the_plan(
    client: Client, callers: Callers, history: None
) -> None:
    org = callers.admin.org_id
    march = {"from": "2030-03-01T00:00:00Z", "to": "2030-04-01T00:00:00Z"}
    answer = await _get(client, callers, f"/organizations/{org}/invoices", **march, timezone="UTC")
    (invoice,) = answer["invoices"]
    analytics = await _get(client, callers, "/v1/analytics", **march, bucket="day")
    assert invoice["minutes"] == sum(b["billedMinutes"] for b in analytics["buckets"]) == 1541
    assert {u["platform"]: u["minutes"] for u in invoice["usage"]} == {"ios": 41, "xcode": 1500}
    # xcode weighs 200%: 41 + 3000 = 3041 weighted, 30 included, 3011 billable
    assert invoice["billableMinutes"] == 3011
    assert [(t["quantity"], t["amount"]) for t in invoice["tiers"]] == [(100, 1000), (2911, 14555)]
    assert (invoice["subtotal"], invoice["total"]) == (15555, 15555)
    # 2030 is still to come: the period has not ended, so the invoice is open
    assert invoice["status"] == "open" and invoice["planTid"] == "starter"
    assert invoice["periodStart"] == "2030-03-01T00:00:00+00:00"


async def test_invoices_are_newest_first_at_most_six_with_boundaries_in_the_timezone(
    client: Client, callers: Callers, history: None
) -> None:
    org = callers.admin.org_id
    answer = await _get(
        client, callers, f"/organizations/{org}/invoices",
        **{"from": "2029-06-15T00:00:00Z", "to": "2030-03-15T00:00:00Z"},
    )  # fmt: skip
    assert answer["timezone"] == "America/Los_Angeles"  # the spec's default
    starts = [i["periodStart"] for i in answer["invoices"]]
    assert starts[0] == "2030-02-28T16:00:00-08:00"  # March 1 UTC, in Los Angeles
    assert len(starts) == 6 and starts == sorted(starts, reverse=True)
    february = answer["invoices"][1]
    assert february["usage"] == [
        {"platform": "android", "minutes": 10, "weightPercent": 100, "weightedMinutes": 10}
    ]
    assert february["billableMinutes"] == 0 and february["total"] == 0


async def test_bad_invoice_queries_are_400_and_other_orgs_404(
    client: Client, callers: Callers
) -> None:
    org = callers.admin.org_id
    path = f"/organizations/{org}/invoices"
    for query, words in (
        ({"timezone": "Mars/Olympus"}, "timezone"),
        ({"to": "2030-03-01T00:00:00"}, "date-time"),
    ):
        response = await client.get(path, query_string=query, headers=callers.admin.headers)
        await assert_api_error(response, 400, words)
    empty = await client.get(
        path,
        query_string={"from": "2030-03-01T00:00:00Z", "to": "2030-03-01T00:00:00Z"},
        headers=callers.admin.headers,
    )
    assert empty.status_code == 200 and (await empty.get_json())["invoices"] == []
    other = f"/organizations/{callers.other_admin.org_id}/invoices"
    await assert_api_error(await client.get(other, headers=callers.admin.headers), 404)
    viewer = await client.get(path, headers=callers.viewer.headers)
    assert viewer.status_code == 403


async def test_plans_are_the_catalog_with_actions_and_public_by_tid(
    client: Client, callers: Callers
) -> None:
    org = callers.admin.org_id
    options = await _get(client, callers, f"/organizations/{org}/plans")
    assert [(o["plan"]["tid"], o["action"]) for o in options] == [
        ("free", "downgrade"), ("starter", "current"), ("team", "upgrade"),
    ]  # fmt: skip
    team = await client.get("/plans/team")  # no key: the catalog is public
    assert team.status_code == 200
    body = await team.get_json()
    assert (body["monthlyFee"], body["credits"], body["priceId"]) == (4900, 500, "price_team")
    await assert_api_error(await client.get("/plans/gold"), 404, "gold")
