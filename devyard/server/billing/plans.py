"""The plan catalog: what each plan costs and allows. Pure: parsed from the server config.

A plan has a monthly fee, minutes included, a price per billed minute beyond them in
graduated tiers, a credit per period, and concurrency limits per platform. Every amount is an
integer in the currency's minor unit (cents): no float ever touches money. Platforms weigh
their minutes by an integer percentage (``weights``: 100 = 1x, 250 = 2.5x), so a build
machine's minute can cost more than an emulator's; weighted minutes round up per platform.

``rank`` orders plans for upgrade/downgrade. The default catalog (no ``[[billing.plans]]`` in
the config) is one plan, ``self-hosted``: free, no limits, which is what a self-hosted
deployment wants.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

import attrs

__all__ = [
    "DEFAULT_CATALOG",
    "Catalog",
    "CatalogError",
    "Plan",
    "Tier",
    "parse_catalog",
]

PLATFORMS: Final = ("ios", "android", "xcode", "gradle")


class CatalogError(ValueError):
    """The billing section of the config is wrong; the message says where."""


@attrs.frozen
class Tier:
    """Minutes beyond the included ones, up to ``up_to`` of them (None: no end), each
    ``unit_amount`` minor units."""

    up_to: int | None
    unit_amount: int


@attrs.frozen
class Plan:
    tid: str
    name: str
    description: str = ""
    rank: int = 0
    currency: str = "usd"
    monthly_fee: int = 0
    included_minutes: int = 0
    tiers: tuple[Tier, ...] = ()
    credits: int = 0
    concurrency: Mapping[str, int] = attrs.field(factory=dict)  # platform -> running at once
    weights: Mapping[str, int] = attrs.field(factory=dict)  # platform -> percent (100 = 1x)
    price_id: str | None = None  # the payment provider's price of this plan

    def weight(self, platform: str) -> int:
        return self.weights.get(platform, 100)

    def limit(self, platform: str) -> int | None:
        """How many instances of *platform* may run at once (None: no limit)."""
        return self.concurrency.get(platform)


@attrs.frozen
class Catalog:
    plans: tuple[Plan, ...]
    default_tid: str

    def get(self, tid: str) -> Plan | None:
        return next((p for p in self.plans if p.tid == tid), None)

    def by_price(self, price_id: str) -> Plan | None:
        return next((p for p in self.plans if p.price_id == price_id), None)

    @property
    def default(self) -> Plan:
        plan = self.get(self.default_tid)
        assert plan is not None  # parse_catalog checks it
        return plan


DEFAULT_CATALOG: Final = Catalog(
    plans=(
        Plan(
            tid="self-hosted",
            name="Self-hosted",
            description="Your own deployment: no metering, limits set by your hardware.",
        ),
    ),
    default_tid="self-hosted",
)

_PLAN_KEYS: Final = frozenset(
    {"tid", "name", "description", "rank", "currency", "monthly_fee", "included_minutes",
     "tiers", "credits", "concurrency", "weights", "price_id"}
)  # fmt: skip


def _int(value: object, where: str, *, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise CatalogError(f"{where}: expected an integer >= {minimum}, got {value!r}")
    return value


def _str(value: object, where: str) -> str:
    if not isinstance(value, str) or not value or len(value) > 100:
        raise CatalogError(f"{where}: expected a non-empty string, got {value!r}")
    return value


def _per_platform(value: object, where: str, *, minimum: int) -> dict[str, int]:
    if not isinstance(value, Mapping):
        raise CatalogError(f"{where}: expected a table of platform = number")
    unknown = sorted(set(value) - set(PLATFORMS))
    if unknown:
        raise CatalogError(f"{where}: unknown platform(s) {', '.join(map(str, unknown))}")
    return {str(k): _int(v, f"{where}.{k}", minimum=minimum) for k, v in value.items()}


def _tiers(value: object, where: str) -> tuple[Tier, ...]:
    if not isinstance(value, Sequence) or isinstance(value, str):
        raise CatalogError(f"{where}: expected a list of {{up_to, unit_amount}} tables")
    tiers: list[Tier] = []
    previous = 0
    for index, entry in enumerate(value):
        at = f"{where}[{index}]"
        if not isinstance(entry, Mapping) or set(entry) - {"up_to", "unit_amount"}:
            raise CatalogError(f"{at}: expected a table with up_to and unit_amount")
        up_to = entry.get("up_to")
        if up_to is not None:
            up_to = _int(up_to, f"{at}.up_to", minimum=previous + 1)
            previous = up_to
        elif index != len(value) - 1:
            raise CatalogError(f"{at}: only the last tier may have no up_to")
        tiers.append(Tier(up_to, _int(entry.get("unit_amount"), f"{at}.unit_amount")))
    if tiers and tiers[-1].up_to is not None:
        raise CatalogError(f"{where}: the last tier has no up_to (it prices every minute after)")
    return tuple(tiers)


def _plan(entry: object, index: int) -> Plan:
    where = f"billing.plans[{index}]"
    if not isinstance(entry, Mapping):
        raise CatalogError(f"{where}: expected a table")
    unknown = sorted(set(entry) - _PLAN_KEYS)
    if unknown:
        raise CatalogError(f"{where}: unknown key(s) {', '.join(map(str, unknown))}")
    fields: dict[str, Any] = {
        "tid": _str(entry.get("tid"), f"{where}.tid"),
        "name": _str(entry.get("name", entry.get("tid")), f"{where}.name"),
    }
    if "description" in entry:
        description = entry["description"]
        if not isinstance(description, str) or len(description) > 1000:
            raise CatalogError(f"{where}.description: expected a string of at most 1000")
        fields["description"] = description
    for key in ("rank", "monthly_fee", "included_minutes", "credits"):
        if key in entry:
            fields[key] = _int(entry[key], f"{where}.{key}")
    if "currency" in entry:
        currency = _str(entry["currency"], f"{where}.currency").lower()
        if len(currency) != 3 or not currency.isalpha():
            raise CatalogError(f"{where}.currency: expected an ISO 4217 code like usd")
        fields["currency"] = currency
    if "tiers" in entry:
        fields["tiers"] = _tiers(entry["tiers"], f"{where}.tiers")
    if "concurrency" in entry:
        fields["concurrency"] = _per_platform(
            entry["concurrency"], f"{where}.concurrency", minimum=0
        )
    if "weights" in entry:
        fields["weights"] = _per_platform(entry["weights"], f"{where}.weights", minimum=1)
    if "price_id" in entry:
        fields["price_id"] = _str(entry["price_id"], f"{where}.price_id")
    return Plan(**fields)


def parse_catalog(plans: Iterable[object], default: str | None = None) -> Catalog:
    """The catalog of the config's ``[[billing.plans]]`` tables; *default* names the plan an
    organization without a subscription is on (the first plan when not given)."""
    parsed = tuple(_plan(entry, i) for i, entry in enumerate(plans))
    if not parsed:
        return DEFAULT_CATALOG
    tids = [p.tid for p in parsed]
    if len(set(tids)) != len(tids):
        raise CatalogError("billing.plans: plan tids must be unique")
    prices = [p.price_id for p in parsed if p.price_id is not None]
    if len(set(prices)) != len(prices):
        raise CatalogError("billing.plans: price_id must be unique")
    currencies = {p.currency for p in parsed}
    if len(currencies) > 1:
        raise CatalogError("billing.plans: every plan must use the same currency")
    chosen = default or parsed[0].tid
    if chosen not in tids:
        raise CatalogError(f"billing.default_plan: no plan {chosen!r}")
    return Catalog(plans=parsed, default_tid=chosen)
