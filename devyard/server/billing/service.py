"""Billing's one service: an organization's plan, its subscription, the provider's pages and
events. The API's billing routes and the instance create call it; docs/billing.md.

- **The plan** of an organization is read from the store only (never from the provider), so a
  provider outage never blocks instance creation: the highest-ranked live subscription's plan,
  else the catalog's default. A plan change scheduled for a time already past counts as done.
- **Provider calls** run in worker threads, at most ``provider_concurrency`` at once (a
  `trio.CapacityLimiter`), each bounded by ``provider_timeout_s``; past it the caller gets
  ``payment_provider_unavailable`` (503) and the thread is abandoned (the HTTP client's own
  timeout ends it). Creating calls carry idempotency keys derived from what they ask.
- **Plan changes**: an upgrade takes effect at once (none: stored; stripe: the provider's
  confirmation page, then its subscription event); a downgrade is scheduled for the period
  end and can be released. With no subscription yet, stripe answers a checkout page.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TypeVar

import attrs
import trio

from ..store.base import Store
from ..store.billing import BillingAccount, EventOutcome, Subscription
from .events import change_of
from .invoices import month_of
from .plans import Catalog, Plan
from .provider import (
    BillingError,
    BillingReason,
    InvoicePreview,
    NoProvider,
    PaymentMethod,
    PaymentProvider,
    no_provider_error,
)
from .settings import ProviderConfig, ProviderKind, UnpaidPolicy
from .stripe_provider import StripeProvider

__all__ = ["BillingDetails", "BillingService", "PlanChange", "provider_of"]

T = TypeVar("T")


def provider_of(config: ProviderConfig) -> PaymentProvider:
    if config.provider is ProviderKind.STRIPE:
        assert config.stripe_secret_key is not None  # settings.build checks it
        return StripeProvider(
            config.stripe_secret_key,
            api_base=config.stripe_api_base,
            timeout_s=config.provider_timeout_s,
            retries=config.provider_retries,
        )
    return NoProvider()


@attrs.frozen
class BillingDetails:
    payment_method: PaymentMethod | None
    upcoming: InvoicePreview | None


@attrs.frozen
class PlanChange:
    url: str
    scheduled: bool  # a downgrade, for the period end


def _key(*parts: object) -> str:
    """An idempotency key: the same request gets the same key (at most 255 characters)."""
    digest = hashlib.sha256("\x1f".join(map(str, parts)).encode()).hexdigest()[:40]
    return f"devyard-{parts[0]}-{digest}"


class BillingService:
    def __init__(
        self,
        store: Store,
        catalog: Catalog,
        config: ProviderConfig,
        *,
        base_url: str,
        provider: PaymentProvider | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._store = store
        self.catalog = catalog
        self.config = config
        self.provider = provider if provider is not None else provider_of(config)
        self._limiter = trio.CapacityLimiter(config.provider_concurrency)
        self._base_url = base_url.rstrip("/")
        self._clock = clock

    @property
    def return_url(self) -> str:
        return self.config.return_url or self._base_url + "/"

    async def _call(self, fn: Callable[[], T]) -> T:
        with trio.move_on_after(self.config.provider_timeout_s) as scope:
            return await trio.to_thread.run_sync(fn, limiter=self._limiter, abandon_on_cancel=True)
        assert scope.cancelled_caught
        raise BillingError(
            BillingReason.PROVIDER_UNAVAILABLE,
            "the payment provider did not answer in time; try again later",
        )

    # -- the plan ----------------------------------------------------------------------
    def _effective(self, sub: Subscription, now: datetime) -> Plan | None:
        tid = sub.plan_tid
        if sub.scheduled_plan_tid and sub.scheduled_at is not None and sub.scheduled_at <= now:
            tid = sub.scheduled_plan_tid
        return None if tid is None else self.catalog.get(tid)

    async def current(self, org_id: str) -> tuple[Plan, Subscription | None]:
        """The organization's plan and the subscription it comes from (None: the default)."""
        now = self._clock()
        best: tuple[Plan, Subscription | None] = (self.catalog.default, None)
        for sub in await self._store.list_subscriptions(org_id):
            plan = self._effective(sub, now) if sub.live else None
            if plan is not None and (best[1] is None or plan.rank > best[0].rank):
                best = (plan, sub)
        return best

    async def plan_for_create(self, org_id: str) -> Plan:
        """The plan an instance create is checked against; `BillingError` payment_required
        when the organization is unpaid and the policy blocks creates. Store only."""
        plan, sub = await self.current(org_id)
        if self.config.unpaid_policy is UnpaidPolicy.BLOCK_CREATES:
            account = await self._store.get_billing_account(org_id)
            unpaid = sub is not None and sub.status == "unpaid"
            if unpaid or (account is not None and account.unpaid):
                raise BillingError(
                    BillingReason.PAYMENT_REQUIRED,
                    "the organization's last payment failed: no new instances until it is "
                    "paid (running instances and all data are kept); see GET "
                    "/organizations/{id}/billing",
                )
        return plan

    async def subscriptions(self, org_id: str) -> list[Subscription]:
        return await self._store.list_subscriptions(org_id)

    # -- the provider's pages --------------------------------------------------------------
    async def _account(self, org_id: str, email: str | None) -> BillingAccount:
        account = await self._store.get_billing_account(org_id)
        if account is not None and account.customer_id is not None:
            return account
        customer = await self._call(
            lambda: self.provider.create_customer(
                org_id, email, idempotency_key=_key("customer", org_id)
            )
        )
        return await self._store.enable_billing(
            org_id, provider=self.provider.name, customer_id=customer, email=email
        )

    async def portal(self, org_id: str, email: str | None) -> str:
        account = await self._account(org_id, email)
        assert account.customer_id is not None
        customer = account.customer_id
        return await self._call(lambda: self.provider.portal_url(customer, self.return_url))

    def price(self, price_id: str | None, fallback: Plan) -> Plan:
        if price_id is None:
            if fallback.price_id is None:
                raise BillingError(
                    BillingReason.PRICE_REQUIRED,
                    f"priceId: the current plan ({fallback.tid}) has no price; name one",
                )
            return fallback
        plan = self.catalog.by_price(price_id)
        if plan is None:
            raise BillingError(BillingReason.UNKNOWN_PRICE, f"no plan has the price {price_id!r}")
        return plan

    async def checkout(self, org_id: str, email: str | None, price_id: str | None) -> str:
        if isinstance(self.provider, NoProvider):  # say so before judging the price
            raise no_provider_error()
        plan = self.price(price_id, (await self.current(org_id))[0])
        account = await self._account(org_id, email)
        customer, price = account.customer_id, plan.price_id
        assert customer is not None and price is not None
        return await self._call(
            lambda: self.provider.checkout_url(
                customer, org_id, price, self.return_url,
                idempotency_key=_key("checkout", org_id, price, self._clock().date()),
            )
        )  # fmt: skip

    async def details(self, org_id: str) -> BillingDetails:
        """Each part None when unavailable (no account, nothing due, the provider down)."""
        account = await self._store.get_billing_account(org_id)
        method = upcoming = None
        if account is not None and account.customer_id is not None:
            customer = account.customer_id
            try:
                method = await self._call(lambda: self.provider.default_payment_method(customer))
            except BillingError:
                method = None
            _, sub = await self.current(org_id)
            if sub is not None and sub.provider == self.provider.name:
                sub_id = sub.id
                try:
                    upcoming = await self._call(
                        lambda: self.provider.upcoming_invoice(customer, sub_id)
                    )
                except BillingError:
                    upcoming = None
        return BillingDetails(method, upcoming)

    # -- plan changes ------------------------------------------------------------------
    async def change_plan(self, org_id: str, email: str | None, price_id: str) -> PlanChange:
        current, sub = await self.current(org_id)
        target = self.price(price_id, current)
        if target.tid == current.tid:
            raise BillingError(BillingReason.ALREADY_ON_PLAN, f"already on {target.tid}")
        downgrade = target.rank < current.rank
        if isinstance(self.provider, NoProvider):
            return await self._change_locally(org_id, sub, target, downgrade=downgrade)
        if sub is None or sub.provider != self.provider.name:
            return PlanChange(await self.checkout(org_id, email, price_id), scheduled=False)
        account = await self._account(org_id, email)
        customer, sub_id = account.customer_id, sub.id
        assert customer is not None
        if not downgrade:
            url = await self._call(
                lambda: self.provider.confirm_change_url(
                    customer, sub_id, price_id, self.return_url
                )
            )
            return PlanChange(url, scheduled=False)
        if sub.schedule_id is not None:
            await self.release(org_id)
        key = _key("schedule", sub_id, price_id, sub.current_period_end)
        schedule_id, at = await self._call(
            lambda: self.provider.schedule_change(sub_id, price_id, idempotency_key=key)
        )
        await self._store.set_scheduled_change(
            org_id, sub_id, plan_tid=target.tid, at=at or sub.current_period_end,
            schedule_id=schedule_id,
        )  # fmt: skip
        url = await self._call(lambda: self.provider.portal_url(customer, self.return_url))
        return PlanChange(url, scheduled=True)

    async def _change_locally(
        self, org_id: str, sub: Subscription | None, target: Plan, *, downgrade: bool
    ) -> PlanChange:
        now = self._clock()
        period_end = month_of(now).end
        url = f"{self._base_url}/organizations/{org_id}/subscriptions"
        if not downgrade:
            await self._store.put_local_subscription(
                org_id, plan_tid=target.tid, price_id=target.price_id, period_end=period_end
            )
            return PlanChange(url, scheduled=False)
        if sub is None:  # on the default plan: a subscription to it holds the schedule
            default = self.catalog.default
            await self._store.put_local_subscription(
                org_id, plan_tid=default.tid, price_id=default.price_id, period_end=period_end
            )
        await self._store.set_scheduled_change(
            org_id, f"local_{org_id}", plan_tid=target.tid, at=period_end, schedule_id=None
        )
        return PlanChange(url, scheduled=True)

    async def release(self, org_id: str) -> Subscription | None:
        """Drop the scheduled change, if any (idempotent); the subscription after."""
        _, sub = await self.current(org_id)
        if sub is None or sub.scheduled_plan_tid is None:
            return sub
        if sub.schedule_id is not None:
            schedule_id = sub.schedule_id
            await self._call(lambda: self.provider.release_schedule(schedule_id))
        return await self._store.set_scheduled_change(
            org_id, sub.id, plan_tid=None, at=None, schedule_id=None
        )

    # -- events ------------------------------------------------------------------------
    async def handle_event(self, event: dict[str, object]) -> EventOutcome:
        """Apply a verified event at most once (docs/billing.md: the kinds and effects)."""
        return await self._store.apply_billing_event(
            provider=self.provider.name,
            event_id=str(event["id"]),
            kind=str(event["type"]),
            change=change_of(event, self.catalog),
        )
