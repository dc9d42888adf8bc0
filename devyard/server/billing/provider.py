"""The payment provider behind devyard's billing: an interface and its `none` implementation.

devyard computes plans, limits and invoices itself; a provider only charges, holds payment
methods and runs the pages a customer pays on (portal, checkout, plan-change confirmation).
Its methods are plain blocking calls: `BillingService` runs them in worker threads, bounded
and timed, so nothing here touches the event loop. Every call that creates something carries
an idempotency key the caller derives from what it asks, so a retry (the provider client's own,
or a user's second click) never makes a second customer, session or schedule.

The `none` provider (a self-hosted deployment that bills nobody) has no pages: its page
methods raise `BillingError` ``no_payment_provider``; plan changes are devyard's own
(`BillingService`).
"""

from __future__ import annotations

import enum
from datetime import datetime
from typing import Protocol

import attrs

__all__ = [
    "BillingError",
    "BillingReason",
    "InvoicePreview",
    "NoProvider",
    "PaymentMethod",
    "PaymentProvider",
    "no_provider_error",
]


class BillingReason(enum.StrEnum):
    NO_PAYMENT_PROVIDER = "no_payment_provider"
    PROVIDER_UNAVAILABLE = "payment_provider_unavailable"
    PROVIDER_REJECTED = "payment_provider_rejected"
    UNKNOWN_PRICE = "unknown_price"
    PRICE_REQUIRED = "price_required"
    ALREADY_ON_PLAN = "already_on_plan"
    PAYMENT_REQUIRED = "payment_required"


class BillingError(Exception):
    """A billing operation could not be done; the reason is the API's, the message says why
    (never a secret)."""

    def __init__(self, reason: BillingReason, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


@attrs.frozen
class PaymentMethod:
    id: str
    type: str  # card, sepa_debit, ...
    brand: str | None = None
    last4: str | None = None
    exp_month: int | None = None
    exp_year: int | None = None


@attrs.frozen
class InvoicePreview:
    amount_due: int  # minor units
    currency: str
    period_start: datetime | None
    period_end: datetime | None
    next_payment_attempt: datetime | None = None


class PaymentProvider(Protocol):
    """What billing needs from a payment provider. Blocking; raise `BillingError`."""

    @property
    def name(self) -> str:
        """The provider's name, as in the webhook path and the stored rows."""

    def create_customer(self, org_id: str, email: str | None, *, idempotency_key: str) -> str:
        """A new customer for *org_id*; its id."""

    def portal_url(self, customer_id: str, return_url: str) -> str: ...

    def checkout_url(
        self, customer_id: str, org_id: str, price_id: str, return_url: str, *, idempotency_key: str
    ) -> str: ...

    def confirm_change_url(
        self, customer_id: str, subscription_id: str, price_id: str, return_url: str
    ) -> str:
        """A page where the customer confirms moving *subscription_id* to *price_id* now."""

    def schedule_change(
        self, subscription_id: str, price_id: str, *, idempotency_key: str
    ) -> tuple[str, datetime | None]:
        """Move *subscription_id* to *price_id* at its period end; (schedule id, when)."""

    def release_schedule(self, schedule_id: str) -> None: ...

    def default_payment_method(self, customer_id: str) -> PaymentMethod | None: ...

    def upcoming_invoice(self, customer_id: str, subscription_id: str) -> InvoicePreview | None:
        """The next invoice of *subscription_id*; None when nothing is due."""


def no_provider_error() -> BillingError:
    return BillingError(
        BillingReason.NO_PAYMENT_PROVIDER,
        "this deployment has no payment provider (billing.provider = none): there is no "
        "portal or checkout; plans change with POST /organizations/{id}/plan",
    )


class NoProvider:
    """``billing.provider = none``."""

    name = "none"

    def create_customer(self, org_id: str, email: str | None, *, idempotency_key: str) -> str:
        raise no_provider_error()

    def portal_url(self, customer_id: str, return_url: str) -> str:
        raise no_provider_error()

    def checkout_url(
        self, customer_id: str, org_id: str, price_id: str, return_url: str, *, idempotency_key: str
    ) -> str:
        raise no_provider_error()

    def confirm_change_url(
        self, customer_id: str, subscription_id: str, price_id: str, return_url: str
    ) -> str:
        raise no_provider_error()

    def schedule_change(
        self, subscription_id: str, price_id: str, *, idempotency_key: str
    ) -> tuple[str, datetime | None]:
        raise no_provider_error()

    def release_schedule(self, schedule_id: str) -> None:
        raise no_provider_error()

    def default_payment_method(self, customer_id: str) -> PaymentMethod | None:
        return None

    def upcoming_invoice(self, customer_id: str, subscription_id: str) -> InvoicePreview | None:
        return None
