"""What a verified payment-provider event changes: pure, from the event's JSON to a store change.

Handled kinds and their effects (docs/billing.md has the table):

- ``customer.subscription.created`` / ``.updated``: the subscription's plan (its first item's
  price, looked up in the catalog), status and period end are stored; the organization is
  the subscription's ``metadata.devyard_org`` or the customer's organization. A subscription
  without a ``schedule`` has no scheduled change any more.
- ``customer.subscription.deleted``: the subscription is stored ``canceled``; the
  organization falls back to the default plan. Nothing is deleted.
- ``invoice.paid``: the customer's organization is paid (no longer unpaid).
- ``invoice.payment_failed``: the customer's organization is unpaid (``unpaid_policy``).
- ``checkout.session.completed``: the session's customer is the organization of its
  ``client_reference_id`` (billing enabled with that customer).

Order: an event carries ``created`` (unix seconds). A subscription event applies only if it is
newer than the last one applied to that subscription (same second: created < updated <
deleted); an invoice event only if not older than the last invoice event of the customer.
Other kinds are recorded (so a replay is still a duplicate) and change nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Final

from ..store.billing import BillingChange, CustomerLinked, PaymentChange, SubscriptionChange
from .plans import Catalog

__all__ = ["HANDLED_KINDS", "change_of"]

_SUBSCRIPTION_ORDER: Final = {
    "customer.subscription.created": 0,
    "customer.subscription.updated": 1,
    "customer.subscription.deleted": 2,
}
HANDLED_KINDS: Final = frozenset(
    {*_SUBSCRIPTION_ORDER, "invoice.paid", "invoice.payment_failed", "checkout.session.completed"}
)


def _str(obj: Mapping[str, Any], key: str) -> str | None:
    value = obj.get(key)
    if isinstance(value, Mapping):  # an expanded object
        value = value.get("id")
    return value if isinstance(value, str) and value else None


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _subscription(
    kind: str, obj: Mapping[str, Any], created: int, catalog: Catalog
) -> SubscriptionChange | None:
    sub_id = _str(obj, "id")
    if sub_id is None:
        return None
    items = obj.get("items")
    data = items.get("data") if isinstance(items, Mapping) else None
    first: Mapping[str, Any] = data[0] if isinstance(data, list) and data else {}
    price = first.get("price") if isinstance(first, Mapping) else None
    price_id = _str(first, "price") if isinstance(price, Mapping | str) else None
    plan = catalog.by_price(price_id) if price_id else None
    # API versions since 2025-03-31 keep the period on the item; older ones on the subscription
    end = _int(first.get("current_period_end")) or _int(obj.get("current_period_end"))
    metadata = obj.get("metadata")
    org = metadata.get("devyard_org") if isinstance(metadata, Mapping) else None
    status = obj.get("status") if isinstance(obj.get("status"), str) else "incomplete"
    if kind == "customer.subscription.deleted":
        status = "canceled"
    return SubscriptionChange(
        subscription_id=sub_id,
        org_id=org if isinstance(org, str) else None,
        customer_id=_str(obj, "customer"),
        plan_tid=None if plan is None else plan.tid,
        price_id=price_id,
        status=str(status),
        current_period_end=None if end is None else datetime.fromtimestamp(end, UTC),
        has_schedule=_str(obj, "schedule") is not None,
        version=created * 4 + _SUBSCRIPTION_ORDER[kind],
    )


def change_of(event: Mapping[str, Any], catalog: Catalog) -> BillingChange:
    """The store change of a verified *event*; None when it changes nothing of ours."""
    kind = event.get("type")
    created = _int(event.get("created")) or 0
    data = event.get("data")
    obj = data.get("object") if isinstance(data, Mapping) else None
    if not isinstance(obj, Mapping) or kind not in HANDLED_KINDS:
        return None
    if kind in _SUBSCRIPTION_ORDER:
        return _subscription(str(kind), obj, created, catalog)
    customer = _str(obj, "customer")
    if kind in ("invoice.paid", "invoice.payment_failed"):
        if customer is None:
            return None
        return PaymentChange(customer, paid=kind == "invoice.paid", version=created)
    org = obj.get("client_reference_id")
    if customer is None or not isinstance(org, str) or not org:
        return None
    return CustomerLinked(org, customer)
