"""Billing in SQL: each organization's billing account, its subscriptions and the payment
provider's processed events (migration 12, docs/billing.md).

- A *billing account* (``billing_accounts``) exists once billing was enabled for the
  organization: the provider, the provider's customer id and whether the organization is
  *unpaid* (its last invoice event was a failed payment). ``payment_version`` is the
  ``created`` time of the invoice event that set it, so an older event never undoes a newer
  one.
- A *subscription* (``subscriptions``) is the provider's subscription as its events last
  described it: plan, status, period end and a plan change scheduled for the period end.
  ``version`` orders the events applied to it (event ``created``, then the kind: created <
  updated < deleted), so an event older than the one applied is dropped (out of order).
- ``billing_events`` holds the ids of the events handled: `apply_billing_event` inserts the id
  if absent and applies the change in the same transaction, so an event is acted on at most
  once even when the provider delivers it twice at the same moment.

Nothing here deletes an organization's data: an unpaid or cancelled organization keeps all of
it (the API only limits what it may start).
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from datetime import datetime
from typing import Final, Protocol

import attrs

from .database import Database, Row, Tx, as_datetime
from .errors import NotFound
from .org_guard import require_live_organization

__all__ = [
    "BillingAccount",
    "BillingStore",
    "CustomerLinked",
    "EventOutcome",
    "PaymentChange",
    "SqlBilling",
    "Subscription",
    "SubscriptionChange",
]

LIVE_STATUSES: Final = frozenset({"active", "trialing", "past_due", "unpaid"})


@attrs.frozen
class BillingAccount:
    org_id: str
    provider: str
    customer_id: str | None
    email: str | None
    enabled_at: datetime
    unpaid: bool = False
    unpaid_since: datetime | None = None


@attrs.frozen
class Subscription:
    id: str  # the provider's subscription id ("local_<org>" for the none provider)
    org_id: str
    provider: str
    plan_tid: str | None  # None: the provider's price is not in the catalog
    price_id: str | None
    status: str  # the provider's: active, trialing, past_due, unpaid, canceled, ...
    current_period_end: datetime | None
    scheduled_plan_tid: str | None = None  # a downgrade taking effect at scheduled_at
    scheduled_at: datetime | None = None
    schedule_id: str | None = None  # the provider's subscription schedule, if any
    updated_at: datetime | None = None

    @property
    def live(self) -> bool:
        return self.status in LIVE_STATUSES


class EventOutcome(enum.StrEnum):
    APPLIED = "applied"
    DUPLICATE = "duplicate"  # this event id was handled before: nothing done
    STALE = "stale"  # older than what is stored: recorded, state unchanged
    UNMATCHED = "unmatched"  # names no organization of ours: recorded, nothing changed


@attrs.frozen
class SubscriptionChange:
    """A subscription as an event describes it; ``deleted`` for customer.subscription.deleted."""

    subscription_id: str
    org_id: str | None  # from the subscription's metadata, when set
    customer_id: str | None
    plan_tid: str | None
    price_id: str | None
    status: str
    current_period_end: datetime | None
    has_schedule: bool
    version: int  # event created (unix seconds) * 4 + kind order


@attrs.frozen
class PaymentChange:
    """invoice.paid (``paid``) or invoice.payment_failed of a customer."""

    customer_id: str
    paid: bool
    version: int  # the event's created, unix seconds


@attrs.frozen
class CustomerLinked:
    """checkout.session.completed: the session's customer belongs to this organization."""

    org_id: str
    customer_id: str


BillingChange = SubscriptionChange | PaymentChange | CustomerLinked | None


class BillingStore(Protocol):
    async def get_billing_account(self, org_id: str) -> BillingAccount | None: ...

    async def enable_billing(
        self, org_id: str, *, provider: str, customer_id: str | None, email: str | None
    ) -> BillingAccount:
        """The organization's account, created now if it has none (an existing one is kept,
        with its customer id set if it had none)."""

    async def list_subscriptions(self, org_id: str) -> list[Subscription]:
        """Newest first."""

    async def put_local_subscription(
        self, org_id: str, *, plan_tid: str, price_id: str | None, period_end: datetime
    ) -> Subscription:
        """The none provider's one subscription of *org_id*, set to *plan_tid* now (any
        scheduled change is dropped)."""

    async def set_scheduled_change(
        self,
        org_id: str,
        subscription_id: str,
        *,
        plan_tid: str | None,
        at: datetime | None,
        schedule_id: str | None,
    ) -> Subscription:
        """Schedule (or with ``plan_tid=None`` release) a plan change; NotFound if the
        subscription is not the organization's."""

    async def apply_billing_event(
        self, *, provider: str, event_id: str, kind: str, change: BillingChange
    ) -> EventOutcome:
        """Record *event_id* and apply *change*, in one transaction; DUPLICATE (and nothing
        done) when the id was recorded before."""


_ACCOUNT: Final = (
    "SELECT org_id, provider, customer_id, email, enabled_at, unpaid, unpaid_since"
    " FROM billing_accounts"
)
_SUBSCRIPTION: Final = (
    "SELECT id, org_id, provider, plan_tid, price_id, status, current_period_end,"
    " scheduled_plan_tid, scheduled_at, schedule_id, updated_at FROM subscriptions"
)


def _opt_time(value: object) -> datetime | None:
    return None if value is None else as_datetime(value)


def _account(row: Row) -> BillingAccount:
    return BillingAccount(
        org_id=row["org_id"],
        provider=row["provider"],
        customer_id=row["customer_id"],
        email=row["email"],
        enabled_at=as_datetime(row["enabled_at"]),
        unpaid=bool(row["unpaid"]),
        unpaid_since=_opt_time(row["unpaid_since"]),
    )


def _subscription(row: Row) -> Subscription:
    return Subscription(
        id=row["id"],
        org_id=row["org_id"],
        provider=row["provider"],
        plan_tid=row["plan_tid"],
        price_id=row["price_id"],
        status=row["status"],
        current_period_end=_opt_time(row["current_period_end"]),
        scheduled_plan_tid=row["scheduled_plan_tid"],
        scheduled_at=_opt_time(row["scheduled_at"]),
        schedule_id=row["schedule_id"],
        updated_at=_opt_time(row["updated_at"]),
    )


def _org_of_customer(tx: Tx, customer_id: str | None) -> str | None:
    if customer_id is None:
        return None
    row = tx.fetchone(
        "SELECT org_id FROM billing_accounts WHERE customer_id = :c", {"c": customer_id}
    )
    return None if row is None else str(row["org_id"])


def _org_exists(tx: Tx, org_id: str | None) -> bool:
    if org_id is None:
        return False
    return tx.fetchone("SELECT id FROM organizations WHERE id = :id", {"id": org_id}) is not None


class SqlBilling:
    """Mixed into `SqlStore`; see `BillingStore` for the contract of each method."""

    _db: Database
    _now: Callable[[], datetime]

    async def get_billing_account(self, org_id: str) -> BillingAccount | None:
        def read(tx: Tx) -> BillingAccount | None:
            row = tx.fetchone(_ACCOUNT + " WHERE org_id = :org_id", {"org_id": org_id})
            return None if row is None else _account(row)

        return await self._db.read(read)

    async def enable_billing(
        self, org_id: str, *, provider: str, customer_id: str | None, email: str | None
    ) -> BillingAccount:
        now = self._now()

        def write(tx: Tx) -> BillingAccount:
            require_live_organization(tx, org_id)
            tx.execute(
                "INSERT INTO billing_accounts (org_id, provider, customer_id, email, enabled_at,"
                " unpaid, payment_version) VALUES (:org_id, :provider, :customer_id, :email,"
                " :now, FALSE, 0) ON CONFLICT (org_id) DO NOTHING",
                {"org_id": org_id, "provider": provider, "customer_id": customer_id,
                 "email": email, "now": now},
            )  # fmt: skip
            if customer_id is not None:
                tx.execute(
                    "UPDATE billing_accounts SET customer_id = :c"
                    " WHERE org_id = :org_id AND customer_id IS NULL",
                    {"c": customer_id, "org_id": org_id},
                )
            row = tx.fetchone(_ACCOUNT + " WHERE org_id = :org_id", {"org_id": org_id})
            assert row is not None
            return _account(row)

        return await self._db.write(write)

    async def list_subscriptions(self, org_id: str) -> list[Subscription]:
        def read(tx: Tx) -> list[Subscription]:
            rows = tx.fetchall(
                _SUBSCRIPTION + " WHERE org_id = :org_id ORDER BY created_at DESC, id",
                {"org_id": org_id},
            )
            return [_subscription(r) for r in rows]

        return await self._db.read(read)

    async def put_local_subscription(
        self, org_id: str, *, plan_tid: str, price_id: str | None, period_end: datetime
    ) -> Subscription:
        now = self._now()
        sub_id = f"local_{org_id}"

        def write(tx: Tx) -> Subscription:
            require_live_organization(tx, org_id)
            params: dict[str, object] = {
                "id": sub_id, "org_id": org_id, "plan": plan_tid, "price": price_id,
                "end": period_end, "now": now,
            }  # fmt: skip
            changed = tx.execute(
                "UPDATE subscriptions SET plan_tid = :plan, price_id = :price, status = 'active',"
                " current_period_end = :end, scheduled_plan_tid = NULL, scheduled_at = NULL,"
                " schedule_id = NULL, updated_at = :now WHERE id = :id AND org_id = :org_id",
                params,
            )
            if not changed:
                tx.execute(
                    "INSERT INTO subscriptions (id, org_id, provider, plan_tid, price_id, status,"
                    " current_period_end, version, created_at, updated_at) VALUES (:id, :org_id,"
                    " 'none', :plan, :price, 'active', :end, 0, :now, :now)",
                    params,
                )
            row = tx.fetchone(_SUBSCRIPTION + " WHERE id = :id", {"id": sub_id})
            assert row is not None
            return _subscription(row)

        return await self._db.write(write)

    async def set_scheduled_change(
        self,
        org_id: str,
        subscription_id: str,
        *,
        plan_tid: str | None,
        at: datetime | None,
        schedule_id: str | None,
    ) -> Subscription:
        now = self._now()

        def write(tx: Tx) -> Subscription:
            changed = tx.execute(
                "UPDATE subscriptions SET scheduled_plan_tid = :plan, scheduled_at = :at,"
                " schedule_id = :schedule, updated_at = :now WHERE id = :id AND org_id = :org_id",
                {"plan": plan_tid, "at": at, "schedule": schedule_id, "now": now,
                 "id": subscription_id, "org_id": org_id},
            )  # fmt: skip
            if not changed:
                raise NotFound("subscription", subscription_id)
            row = tx.fetchone(_SUBSCRIPTION + " WHERE id = :id", {"id": subscription_id})
            assert row is not None
            return _subscription(row)

        return await self._db.write(write)

    async def apply_billing_event(
        self, *, provider: str, event_id: str, kind: str, change: BillingChange
    ) -> EventOutcome:
        now = self._now()

        def write(tx: Tx) -> EventOutcome:
            inserted = tx.execute(
                "INSERT INTO billing_events (provider, event_id, kind, received_at)"
                " VALUES (:provider, :event_id, :kind, :now)"
                " ON CONFLICT (provider, event_id) DO NOTHING",
                {"provider": provider, "event_id": event_id, "kind": kind, "now": now},
            )
            if not inserted:
                return EventOutcome.DUPLICATE
            if isinstance(change, SubscriptionChange):
                outcome = _apply_subscription(tx, provider, change, now)
            elif isinstance(change, PaymentChange):
                outcome = _apply_payment(tx, change, now)
            elif isinstance(change, CustomerLinked):
                outcome = _apply_link(tx, provider, change, now)
            else:
                outcome = EventOutcome.UNMATCHED
            tx.execute(
                "UPDATE billing_events SET outcome = :o WHERE provider = :p AND event_id = :e",
                {"o": outcome.value, "p": provider, "e": event_id},
            )
            return outcome

        return await self._db.write(write)


def _apply_subscription(
    tx: Tx, provider: str, change: SubscriptionChange, now: datetime
) -> EventOutcome:
    row = tx.fetchone(
        "SELECT org_id, version FROM subscriptions WHERE id = :id", {"id": change.subscription_id}
    )
    params: dict[str, object] = {
        "id": change.subscription_id, "plan": change.plan_tid, "price": change.price_id,
        "status": change.status, "end": change.current_period_end,
        "version": change.version, "now": now,
    }  # fmt: skip
    # the provider dropped the schedule (released, or its change took effect): none is pending
    keep = change.has_schedule
    if row is not None:
        if int(row["version"]) >= change.version:
            return EventOutcome.STALE
        tx.execute(
            "UPDATE subscriptions SET plan_tid = :plan, price_id = :price, status = :status,"
            " current_period_end = :end, version = :version, updated_at = :now,"
            " scheduled_plan_tid = CASE WHEN :keep THEN scheduled_plan_tid END,"
            " scheduled_at = CASE WHEN :keep THEN scheduled_at END,"
            " schedule_id = CASE WHEN :keep THEN schedule_id END WHERE id = :id",
            {**params, "keep": keep},
        )
        return EventOutcome.APPLIED
    org_id = change.org_id if _org_exists(tx, change.org_id) else None
    org_id = org_id or _org_of_customer(tx, change.customer_id)
    if org_id is None:
        return EventOutcome.UNMATCHED
    tx.execute(
        "INSERT INTO subscriptions (id, org_id, provider, plan_tid, price_id, status,"
        " current_period_end, version, created_at, updated_at) VALUES (:id, :org_id, :provider,"
        " :plan, :price, :status, :end, :version, :now, :now)",
        {**params, "org_id": org_id, "provider": provider},
    )
    return EventOutcome.APPLIED


def _apply_payment(tx: Tx, change: PaymentChange, now: datetime) -> EventOutcome:
    row = tx.fetchone(
        "SELECT payment_version, unpaid_since FROM billing_accounts WHERE customer_id = :c",
        {"c": change.customer_id},
    )
    if row is None:
        return EventOutcome.UNMATCHED
    if int(row["payment_version"]) > change.version:
        return EventOutcome.STALE
    since = None if change.paid else (row["unpaid_since"] or now)
    tx.execute(
        "UPDATE billing_accounts SET unpaid = :unpaid, unpaid_since = :since,"
        " payment_version = :version WHERE customer_id = :c",
        {"unpaid": not change.paid, "since": since, "version": change.version,
         "c": change.customer_id},
    )  # fmt: skip
    return EventOutcome.APPLIED


def _apply_link(tx: Tx, provider: str, change: CustomerLinked, now: datetime) -> EventOutcome:
    if not _org_exists(tx, change.org_id):
        return EventOutcome.UNMATCHED
    tx.execute(
        "INSERT INTO billing_accounts (org_id, provider, customer_id, enabled_at, unpaid,"
        " payment_version) VALUES (:org_id, :provider, :c, :now, FALSE, 0)"
        " ON CONFLICT (org_id) DO NOTHING",
        {"org_id": change.org_id, "provider": provider, "c": change.customer_id, "now": now},
    )
    tx.execute(
        "UPDATE billing_accounts SET customer_id = :c WHERE org_id = :org_id"
        " AND customer_id IS NULL",
        {"org_id": change.org_id, "c": change.customer_id},
    )
    return EventOutcome.APPLIED
