"""The stripe provider through the API, with the real `stripe` package as the client of a
loopback fake of Stripe's API (`fake_stripe`; we cannot reach Stripe), and webhook events
signed with the package's own signer (`stripe.WebhookSignature.generate_signature_header`):
genuine, forged, stale, future, replayed and out-of-order deliveries, each checked by the
state it leaves. The webhook tests on both backends, the provider's pages on SQLite."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import stripe
from quart.typing import TestClientProtocol as Client

from devyard.server.api.app import api_state, create_app
from devyard.server.billing.plans import parse_catalog
from devyard.server.billing.settings import ProviderConfig, ProviderKind
from devyard.server.config import RateLimitConfig, ServerConfig
from devyard.server.store import Store
from tests.ports import free_port
from tests.server.api.conftest import ManualClock, assert_api_error
from tests.server.tokens.conftest import Callers

from . import fake_stripe
from .fake_stripe import PERIOD_END, FakeStripe

SECRET = "whsec_test_h19_0123456789"
CATALOG = parse_catalog(
    [
        {"tid": "free", "name": "Free", "rank": 0, "price_id": "price_free"},
        {"tid": "team", "name": "Team", "rank": 2, "price_id": "price_team",
         "concurrency": {"android": 3}},
        {"tid": "pro", "name": "Pro", "rank": 3, "price_id": "price_pro"},
    ],
    default="free",
)  # fmt: skip


@pytest.fixture
def fake() -> Iterator[FakeStripe]:
    yield from fake_stripe.running()


def _config(tmp_path: Path, api_base: str) -> ServerConfig:
    return ServerConfig(
        data_dir=tmp_path,
        rate_limit=RateLimitConfig(enabled=True, rate=1000.0, burst=1000),
        billing=CATALOG,
        payments=ProviderConfig(
            provider=ProviderKind.STRIPE,
            stripe_secret_key="sk_test_h19",
            stripe_webhook_secrets=("whsec_test_old", SECRET),
            stripe_api_base=api_base,
            return_url="https://console.example.test/billing",
            provider_retries=1,
            provider_timeout_s=10,
        ),
    )


@pytest.fixture
def config(tmp_path: Path, fake: FakeStripe) -> ServerConfig:
    return _config(tmp_path, fake.url)


async def _call(
    client: Client, callers: Callers, method: str, path: str, *, status: int = 200, **kw: Any
) -> Any:
    response = await client.open(
        f"/organizations/{callers.admin.org_id}{path}", method=method,
        headers=callers.admin.headers, **kw,
    )  # fmt: skip
    assert response.status_code == status, await response.get_data()
    return await response.get_json()


async def _deliver(
    client: Client, event: dict[str, Any], *, secret: str = SECRET, at: int | None = None
) -> Any:
    body = json.dumps(event)
    header = stripe.WebhookSignature.generate_signature_header(
        body, secret, timestamp=int(time.time()) if at is None else at
    )
    return await client.post(
        "/stripe/webhook", data=body.encode(),
        headers={"Stripe-Signature": header, "Content-Type": "application/json"},
    )  # fmt: skip


_counter = iter(range(1, 10**6))
# the provider's pages touch the store as any endpoint does: SQLite is enough for them (the CI
# budget); the webhook tests, whose at-most-once rests on each backend's ON CONFLICT, run on both
sqlite_only = pytest.mark.parametrize("database_target", ["sqlite"], indirect=True)


def _event(kind: str, obj: dict[str, Any], created: int, event_id: str | None = None) -> Any:
    return {"id": event_id or f"evt_test{next(_counter):05d}", "object": "event", "type": kind,
            "created": created, "api_version": "2026-10-28.endive", "livemode": False,
            "data": {"object": obj}}  # fmt: skip


async def _applied(client: Client, event: dict[str, Any], reason: str = "applied") -> None:
    response = await _deliver(client, event)
    assert response.status_code == 200, await response.get_data()
    assert (await response.get_json())["reason"] == reason


async def _subscribe(
    client: Client, callers: Callers, fake: FakeStripe, price: str = "price_team"
) -> dict[str, Any]:
    """Checkout completed and the subscription created, as Stripe reports them."""
    await _call(client, callers, "GET", "/billing", query_string={"emailAddress": "a@x.test"})
    (customer,) = fake.customers
    sub = fake.add_subscription(customer, price)
    sub["metadata"] = {"devyard_org": callers.admin.org_id}
    now = int(time.time())
    session = {"id": "cs_test_done", "object": "checkout.session", "customer": customer,
               "client_reference_id": callers.admin.org_id, "subscription": sub["id"]}  # fmt: skip
    await _applied(client, _event("checkout.session.completed", session, now - 60))
    await _applied(client, _event("customer.subscription.created", sub, now - 50))
    return sub


@sqlite_only
async def test_the_portal_enables_billing_once_with_an_idempotent_customer(
    client: Client, callers: Callers, fake: FakeStripe
) -> None:
    fake.fail_next = 1  # the first try fails with a 500: the client retries, same key
    first = await _call(client, callers, "GET", "/billing",
                        query_string={"emailAddress": "ops@acme.test"})  # fmt: skip
    second = await _call(client, callers, "GET", "/billing")
    creates = fake.calls("POST", "/v1/customers")
    assert len(creates) == 2 and len(fake.customers) == 1
    assert creates[0].idempotency_key and creates[0].idempotency_key == creates[1].idempotency_key
    assert creates[1].params["email"] == "ops@acme.test"
    assert creates[1].params["metadata[devyard_org]"] == callers.admin.org_id
    (customer,) = fake.customers
    assert first["url"] == second["url"] == f"https://billing.stripe.test/p/session/{customer}"
    portal = fake.calls("POST", "/v1/billing_portal/sessions")[-1]
    assert portal.params["return_url"] == "https://console.example.test/billing"
    details = await _call(client, callers, "GET", "/billing-details")
    assert details["billingEnabled"] is True and details["provider"] == "stripe"
    # a customer and no subscription: the payment method, no invoice to preview
    assert details["defaultPaymentMethod"]["last4"] == "4242"
    assert "upcomingInvoice" not in details


@sqlite_only
async def test_checkout_subscribes_to_a_catalog_price_only(
    client: Client, callers: Callers, fake: FakeStripe
) -> None:
    answer = await _call(client, callers, "GET", "/checkout", query_string={"priceId": "price_pro"})
    session = fake.calls("POST", "/v1/checkout/sessions")[-1]
    assert answer["url"].startswith("https://checkout.stripe.test/c/pay/cs_")
    assert session.params["mode"] == "subscription"
    assert session.params["line_items[0][price]"] == "price_pro"
    assert session.params["client_reference_id"] == callers.admin.org_id
    assert session.params["subscription_data[metadata][devyard_org]"] == callers.admin.org_id
    assert session.idempotency_key
    before = len(fake.requests)
    error = await _call(client, callers, "GET", "/checkout", status=404,
                        query_string={"priceId": "price_elsewhere"})  # fmt: skip
    assert error["reason"] == "unknown_price" and len(fake.requests) == before
    # the default plan (free) has a price; a checkout without priceId uses it
    await _call(client, callers, "GET", "/checkout")
    assert fake.calls("POST", "/v1/checkout/sessions")[-1].params["line_items[0][price]"] == (
        "price_free"
    )


@sqlite_only
async def test_subscription_events_set_the_plan_and_changes_go_through_the_provider(
    client: Client, callers: Callers, fake: FakeStripe
) -> None:
    sub = await _subscribe(client, callers, fake)
    (listed,) = await _call(client, callers, "GET", "/subscriptions")
    assert (listed["id"], listed["planTid"], listed["status"]) == (sub["id"], "team", "active")
    end = datetime.fromtimestamp(PERIOD_END, UTC).isoformat().replace("+00:00", "Z")
    assert listed["currentPeriodEnd"] == end
    options = {o["plan"]["tid"]: o["action"] for o in await _call(client, callers, "GET", "/plans")}
    assert options == {"free": "downgrade", "team": "current", "pro": "upgrade"}

    upgrade = await _call(client, callers, "POST", "/plan", json={"priceId": "price_pro"})
    confirm = fake.calls("POST", "/v1/billing_portal/sessions")[-1].params
    assert upgrade["scheduled"] is False and upgrade["url"].startswith("https://billing.stripe")
    assert confirm["flow_data[type]"] == "subscription_update_confirm"
    assert confirm["flow_data[subscription_update_confirm][subscription]"] == sub["id"]
    assert confirm["flow_data[subscription_update_confirm][items][0][price]"] == "price_pro"
    assert (
        confirm["flow_data[subscription_update_confirm][items][0][id]"]
        == (sub["items"]["data"][0]["id"])
    )

    downgrade = await _call(client, callers, "POST", "/plan", json={"priceId": "price_free"})
    assert downgrade["scheduled"] is True
    (created,) = fake.calls("POST", "/v1/subscription_schedules")
    assert created.params["from_subscription"] == sub["id"]
    (phases,) = fake.calls("POST", r"/v1/subscription_schedules/\w+")
    assert phases.params["phases[1][items][0][price]"] == "price_free"
    assert phases.params["phases[0][end_date]"] == str(PERIOD_END)
    schedule = await _call(client, callers, "GET", "/plan/schedule")
    assert schedule["scheduled"] is True and schedule["planTid"] == "free"
    assert schedule["currentPlanTid"] == "team"

    released = await _call(client, callers, "DELETE", "/plan/schedule")
    assert released == {"currentPlanTid": "team", "scheduled": False}
    assert len(fake.calls("POST", r"/v1/subscription_schedules/\w+/release")) == 1

    details = await _call(client, callers, "GET", "/billing-details")
    assert details["upcomingInvoice"]["amountDue"] == 4900
    preview = fake.calls("POST", "/v1/invoices/create_preview")[-1]
    assert preview.params["subscription"] == sub["id"]


async def test_webhook_refuses_forged_stale_and_future_deliveries(
    client: Client, callers: Callers, fake: FakeStripe
) -> None:
    await _call(client, callers, "GET", "/billing")
    (customer,) = fake.customers
    sub = fake.add_subscription(customer, "price_team")
    now = int(time.time())
    event = _event("customer.subscription.created", sub, now)
    # stale and future by a minute past the 300 s tolerance, from the clock at each delivery:
    # at +301 s from a clock read earlier, a delivery that came a second late was in tolerance
    for kw in ({"secret": "whsec_forged"}, {"at": -360}, {"at": 360}):
        sent = {"at": int(time.time()) + int(kw["at"])} if "at" in kw else kw
        response = await _deliver(client, event, **sent)
        error = await assert_api_error(response, 400)
        assert error["reason"] == "invalid_signature"
    unsigned = await client.post("/stripe/webhook", data=json.dumps(event).encode())
    await assert_api_error(unsigned, 400)
    tampered = await client.post(
        "/stripe/webhook", data=json.dumps(event).replace("active", "unpaid").encode(),
        headers={"Stripe-Signature": stripe.WebhookSignature.generate_signature_header(
            json.dumps(event), SECRET)},
    )  # fmt: skip
    await assert_api_error(tampered, 400)
    assert await _call(client, callers, "GET", "/subscriptions") == []
    # the refused ones were not recorded: the genuine delivery of the same id applies
    await _applied(client, event)
    # signed with the older of the two live secrets (rotation): accepted, a duplicate
    response = await _deliver(client, event, secret="whsec_test_old")
    assert (await response.get_json())["reason"] == "duplicate"


async def test_replayed_and_out_of_order_events_never_move_state_backwards(
    client: Client, callers: Callers, fake: FakeStripe
) -> None:
    sub = await _subscribe(client, callers, fake)
    now = int(time.time())
    past_due = dict(sub, status="past_due")
    newer = _event("customer.subscription.updated", past_due, now - 10)
    older = _event("customer.subscription.updated", dict(sub, status="active"), now - 20)
    await _applied(client, newer)
    await _applied(client, older, "stale")
    await _applied(client, newer, "duplicate")
    (listed,) = await _call(client, callers, "GET", "/subscriptions")
    assert listed["status"] == "past_due"

    customer = sub["customer"]
    failed = _event("invoice.payment_failed", {"id": "in_1", "object": "invoice",
                    "customer": customer, "created": now - 5}, now - 5)  # fmt: skip
    paid = _event("invoice.paid", {"id": "in_1", "object": "invoice", "customer": customer,
                  "created": now - 5}, now - 2)  # fmt: skip
    await _applied(client, failed)
    assert (await _call(client, callers, "GET", "/billing-details"))["unpaid"] is True
    create = await client.post("/v1/android_instances", json={},
                               headers=callers.member.headers)  # fmt: skip
    error = await assert_api_error(create, 402)
    assert error["reason"] == "payment_required"
    await _applied(client, paid)
    await _applied(client, failed, "duplicate")  # the failure redelivered: still paid
    stale_failure = _event("invoice.payment_failed", {"id": "in_0", "object": "invoice",
                           "customer": customer}, now - 30)  # fmt: skip
    await _applied(client, stale_failure, "stale")
    assert (await _call(client, callers, "GET", "/billing-details"))["unpaid"] is False
    create = await client.post("/v1/android_instances", json={}, headers=callers.member.headers)
    assert create.status_code != 402  # no fleet here: the create goes on to placement

    deleted = _event("customer.subscription.deleted", dict(sub, status="canceled"), now)
    await _applied(client, deleted)
    await _applied(client, _event("customer.subscription.updated", sub, now), "stale")
    (listed,) = await _call(client, callers, "GET", "/subscriptions")
    assert listed["status"] == "canceled"  # kept, not deleted; the plan is the default again
    assert (await _call(client, callers, "GET", "/plan/schedule"))["currentPlanTid"] == "free"
    unknown = _event("customer.subscription.created", dict(sub, id="sub_other", customer="cus_x",
                     metadata={}), now)  # fmt: skip
    await _applied(client, unknown, "unmatched")
    await _applied(client, _event("charge.refunded", {"id": "ch_1"}, now), "unmatched")


@sqlite_only
async def test_a_provider_outage_is_503_and_never_blocks_instance_creation(
    store: Store, callers: Callers, manual_clock: ManualClock, tmp_path: Path
) -> None:
    """Nothing listens at the provider's address: its pages answer 503 (after the client's
    retry), the billing details leave out what they cannot get, and an instance create is
    decided from the store alone."""
    config = _config(tmp_path, f"http://127.0.0.1:{free_port()}")
    client = create_app(api_state(store, config, clock=manual_clock)).test_client()
    error = await _call(client, callers, "GET", "/billing", status=503)
    assert error["reason"] == "payment_provider_unavailable"
    await store.enable_billing(
        callers.admin.org_id, provider="stripe", customer_id="cus_known", email=None
    )
    details = await _call(client, callers, "GET", "/billing-details")
    assert details["billingEnabled"] is True
    assert "defaultPaymentMethod" not in details and "upcomingInvoice" not in details
    create = await client.post("/v1/android_instances", json={}, headers=callers.member.headers)
    assert create.status_code == 409  # placement's no_capacity: billing let it through
    assert (await create.get_json())["reason"] == "no_capacity"
