"""The `stripe` payment provider: the official `stripe` package's `StripeClient`.

One client per server, built from the config (the secret key never leaves it, never logged).
The client retries connection errors, 409, 429 and 5xx itself (``provider_retries`` times)
with the idempotency key each creating call passes, and each request has a timeout; the
service around it bounds the whole call and runs it in a worker thread.

What it calls (Stripe API v1): ``POST /v1/customers``, ``GET /v1/customers/{id}`` (expanding
the default payment method), ``POST /v1/billing_portal/sessions`` (plain, or the
``subscription_update_confirm`` flow for an upgrade), ``POST /v1/checkout/sessions`` (mode
``subscription``), ``GET /v1/subscriptions/{id}``, ``POST /v1/subscription_schedules``
(``from_subscription``) then ``POST /v1/subscription_schedules/{id}`` (two phases: the current
price to the period end, then the new one) and ``.../release``, and
``POST /v1/invoices/create_preview`` (customer and subscription).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

import stripe

from .provider import BillingError, BillingReason, InvoicePreview, PaymentMethod

__all__ = ["StripeProvider"]

log = logging.getLogger(__name__)

T = TypeVar("T")


def _time(value: object) -> datetime | None:
    if isinstance(value, int) and not isinstance(value, bool):
        return datetime.fromtimestamp(value, UTC)
    return None


def _get(obj: Any, key: str) -> Any:
    """A field of a Stripe object or plain dict, None when absent."""
    try:
        return obj[key]
    except (KeyError, TypeError, IndexError):
        return None


class StripeProvider:
    name = "stripe"

    def __init__(
        self,
        secret_key: str,
        *,
        api_base: str | None = None,
        timeout_s: float = 20.0,
        retries: int = 2,
    ) -> None:
        addresses: Any = {} if api_base is None else {"api": api_base}
        self._client = stripe.StripeClient(
            secret_key,
            base_addresses=addresses,
            max_network_retries=retries,
            http_client=stripe.RequestsClient(timeout=(min(5.0, timeout_s), timeout_s)),
        )

    def __repr__(self) -> str:
        return "<StripeProvider>"

    @staticmethod
    def _call(what: str, fn: Callable[[], T]) -> T:
        try:
            return fn()
        except stripe.APIConnectionError as exc:
            log.warning("stripe: %s: cannot reach the provider: %s", what, type(exc).__name__)
            raise BillingError(
                BillingReason.PROVIDER_UNAVAILABLE,
                f"the payment provider cannot be reached ({what}); try again later",
            ) from None
        except stripe.StripeError as exc:
            status = exc.http_status or 0
            log.warning("stripe: %s: HTTP %s %s", what, status, exc.code)
            if status >= 500 or status == 429:
                raise BillingError(
                    BillingReason.PROVIDER_UNAVAILABLE,
                    f"the payment provider failed ({what}, HTTP {status}); try again later",
                ) from None
            raise BillingError(
                BillingReason.PROVIDER_REJECTED,
                f"the payment provider refused {what}: {exc.user_message or exc.code or status}",
            ) from None

    def create_customer(self, org_id: str, email: str | None, *, idempotency_key: str) -> str:
        params: Any = {"metadata": {"devyard_org": org_id}}
        if email:
            params["email"] = email
        customer = self._call(
            "creating the customer",
            lambda: self._client.v1.customers.create(params, {"idempotency_key": idempotency_key}),
        )
        return str(customer.id)

    def portal_url(self, customer_id: str, return_url: str) -> str:
        session = self._call(
            "opening the billing portal",
            lambda: self._client.v1.billing_portal.sessions.create(
                {"customer": customer_id, "return_url": return_url}
            ),
        )
        return str(session.url)

    def checkout_url(
        self, customer_id: str, org_id: str, price_id: str, return_url: str, *, idempotency_key: str
    ) -> str:
        params: Any = {
            "mode": "subscription",
            "customer": customer_id,
            "client_reference_id": org_id,
            "line_items": [{"price": price_id, "quantity": 1}],
            "subscription_data": {"metadata": {"devyard_org": org_id}},
            "success_url": return_url,
            "cancel_url": return_url,
        }
        session = self._call(
            "starting checkout",
            lambda: self._client.v1.checkout.sessions.create(
                params, {"idempotency_key": idempotency_key}
            ),
        )
        if not session.url:
            raise BillingError(BillingReason.PROVIDER_REJECTED, "checkout session has no URL")
        return str(session.url)

    def _item_id(self, subscription_id: str) -> str:
        subscription = self._call(
            "reading the subscription",
            lambda: self._client.v1.subscriptions.retrieve(subscription_id),
        )
        items = _get(_get(subscription, "items"), "data") or []
        if not items:
            raise BillingError(BillingReason.PROVIDER_REJECTED, "the subscription has no item")
        return str(_get(items[0], "id"))

    def confirm_change_url(
        self, customer_id: str, subscription_id: str, price_id: str, return_url: str
    ) -> str:
        item_id = self._item_id(subscription_id)
        params: Any = {
            "customer": customer_id,
            "return_url": return_url,
            "flow_data": {
                "type": "subscription_update_confirm",
                "subscription_update_confirm": {
                    "subscription": subscription_id,
                    "items": [{"id": item_id, "price": price_id, "quantity": 1}],
                },
            },
        }
        session = self._call(
            "opening the plan change confirmation",
            lambda: self._client.v1.billing_portal.sessions.create(params),
        )
        return str(session.url)

    def schedule_change(
        self, subscription_id: str, price_id: str, *, idempotency_key: str
    ) -> tuple[str, datetime | None]:
        schedule = self._call(
            "scheduling the plan change",
            lambda: self._client.v1.subscription_schedules.create(
                {"from_subscription": subscription_id},
                {"idempotency_key": f"{idempotency_key}-create"},
            ),
        )
        phase = (_get(schedule, "phases") or [None])[0]
        current = [
            {"price": str(_get(_get(i, "price"), "id") or _get(i, "price")), "quantity": 1}
            for i in (_get(phase, "items") or [])
        ]
        start, end = _get(phase, "start_date"), _get(phase, "end_date")
        phases: list[dict[str, Any]] = [
            {"items": current, "start_date": start, "end_date": end},
            {"items": [{"price": price_id, "quantity": 1}],
             "duration": {"interval": "month", "interval_count": 1}},
        ]  # fmt: skip
        update: Any = {"end_behavior": "release", "phases": phases}
        self._call(
            "scheduling the plan change",
            lambda: self._client.v1.subscription_schedules.update(
                str(schedule.id), update, {"idempotency_key": f"{idempotency_key}-phases"}
            ),
        )
        return str(schedule.id), _time(end)

    def release_schedule(self, schedule_id: str) -> None:
        self._call(
            "releasing the scheduled change",
            lambda: self._client.v1.subscription_schedules.release(schedule_id),
        )

    def default_payment_method(self, customer_id: str) -> PaymentMethod | None:
        customer = self._call(
            "reading the customer",
            lambda: self._client.v1.customers.retrieve(
                customer_id, {"expand": ["invoice_settings.default_payment_method"]}
            ),
        )
        method = _get(_get(customer, "invoice_settings"), "default_payment_method")
        if method is None or isinstance(method, str):
            return None
        card = _get(method, "card")
        return PaymentMethod(
            id=str(_get(method, "id")),
            type=str(_get(method, "type")),
            brand=_get(card, "brand"),
            last4=_get(card, "last4"),
            exp_month=_get(card, "exp_month"),
            exp_year=_get(card, "exp_year"),
        )

    def upcoming_invoice(self, customer_id: str, subscription_id: str) -> InvoicePreview | None:
        # since API 2025-03-31 a preview names the subscription, not only the customer
        def preview() -> stripe.Invoice | None:
            try:
                return self._client.v1.invoices.create_preview(
                    {"customer": customer_id, "subscription": subscription_id}
                )
            except stripe.InvalidRequestError as exc:
                if exc.code == "invoice_upcoming_none":  # nothing to invoice: not an error
                    return None
                raise

        invoice = self._call("previewing the next invoice", preview)
        if invoice is None:
            return None
        return InvoicePreview(
            amount_due=int(_get(invoice, "amount_due") or 0),
            currency=str(_get(invoice, "currency") or ""),
            period_start=_time(_get(invoice, "period_start")),
            period_end=_time(_get(invoice, "period_end")),
            next_payment_attempt=_time(_get(invoice, "next_payment_attempt")),
        )
