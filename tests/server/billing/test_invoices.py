"""Invoices from usage: worked examples and properties over generated plans and usage."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from devyard.server.billing.invoices import (
    MAX_INVOICES,
    compute_invoice,
    month_of,
    periods_between,
)
from devyard.server.billing.plans import (
    DEFAULT_CATALOG,
    CatalogError,
    Plan,
    Tier,
    parse_catalog,
)
from devyard.server.config import ConfigError, load_server_config

TEAM = Plan(
    tid="team",
    name="Team",
    monthly_fee=4900,
    included_minutes=1000,
    tiers=(Tier(up_to=500, unit_amount=5), Tier(up_to=None, unit_amount=3)),
    credits=1000,
    weights={"xcode": 300},
)
MAY = month_of(datetime(2026, 5, 17, 12, tzinfo=UTC))


def test_a_worked_example_through_both_tiers_with_a_weight_and_credits() -> None:
    # 1,300 android minutes + 100 xcode minutes at 3x = 1,600 weighted; 600 beyond included
    invoice = compute_invoice(TEAM, MAY, {"android": 1300, "xcode": 100, "ios": 0})
    assert [(u.platform, u.minutes, u.weighted_minutes) for u in invoice.usage] == [
        ("android", 1300, 1300),
        ("xcode", 100, 300),
    ]
    assert invoice.minutes == 1400
    assert invoice.billable_minutes == 600
    assert [(t.first_minute, t.quantity, t.amount) for t in invoice.tiers] == [
        (1, 500, 2500),
        (501, 100, 300),
    ]
    assert invoice.subtotal == 4900 + 2500 + 300
    assert (invoice.credits_used, invoice.total) == (1000, 6700)


def test_usage_inside_the_included_minutes_costs_the_fee_less_credits() -> None:
    invoice = compute_invoice(TEAM, MAY, {"android": 999})
    assert invoice.billable_minutes == 0 and invoice.tiers == ()
    assert invoice.total == 3900
    free = compute_invoice(DEFAULT_CATALOG.default, MAY, {"ios": 10_000})
    assert free.total == 0 and free.minutes == 10_000


def test_months_are_utc_calendar_months_and_at_most_six() -> None:
    assert MAY.start == datetime(2026, 5, 1, tzinfo=UTC)
    assert MAY.end == datetime(2026, 6, 1, tzinfo=UTC)
    december = month_of(datetime(2026, 12, 31, 23, 59, tzinfo=UTC))
    assert december.end == datetime(2027, 1, 1, tzinfo=UTC)
    year = periods_between(datetime(2026, 1, 15, tzinfo=UTC), datetime(2026, 12, 2, tzinfo=UTC))
    assert len(year) == MAX_INVOICES
    assert year[-1] == month_of(datetime(2026, 12, 1, tzinfo=UTC))
    assert year[0] == month_of(datetime(2026, 7, 1, tzinfo=UTC))
    assert periods_between(MAY.end, MAY.start) == []
    assert periods_between(MAY.start, MAY.end) == [MAY]


tiers = st.lists(
    st.tuples(st.integers(1, 500), st.integers(0, 50)), min_size=0, max_size=4
).map(
    lambda steps: tuple(
        Tier(up_to=sum(s for s, _ in steps[: i + 1]) if i < len(steps) - 1 else None,
             unit_amount=price)
        for i, (_, price) in enumerate(steps)
    )
)  # fmt: skip
plans = st.builds(
    Plan,
    tid=st.just("p"),
    name=st.just("P"),
    monthly_fee=st.integers(0, 100_000),
    included_minutes=st.integers(0, 5000),
    tiers=tiers,
    credits=st.integers(0, 200_000),
    weights=st.dictionaries(st.sampled_from(["ios", "android", "xcode", "gradle"]),
                            st.integers(1, 1000)),
)  # fmt: skip
usage = st.dictionaries(st.sampled_from(["ios", "android", "xcode", "gradle"]),
                        st.integers(0, 100_000))  # fmt: skip


@given(plans, usage)
def test_invoice_arithmetic_holds_for_any_plan_and_usage(
    plan: Plan, minutes: dict[str, int]
) -> None:
    invoice = compute_invoice(plan, MAY, minutes)
    assert invoice.minutes == sum(minutes.values())
    weighted = sum(u.weighted_minutes for u in invoice.usage)
    assert all(u.weighted_minutes * 100 >= u.minutes * u.weight for u in invoice.usage)
    assert invoice.billable_minutes == max(0, weighted - plan.included_minutes)
    priced = sum(t.quantity for t in invoice.tiers)
    assert priced == (invoice.billable_minutes if plan.tiers else 0)
    assert all(t.amount == t.quantity * t.unit_amount for t in invoice.tiers)
    assert invoice.subtotal == plan.monthly_fee + sum(t.amount for t in invoice.tiers)
    assert 0 <= invoice.credits_used <= min(plan.credits, invoice.subtotal)
    assert invoice.total == invoice.subtotal - invoice.credits_used >= 0
    for amount in (invoice.subtotal, invoice.total, invoice.credits_used):
        assert isinstance(amount, int)


def test_the_catalog_parses_plans_and_names_what_is_wrong() -> None:
    catalog = parse_catalog(
        [
            {"tid": "free", "concurrency": {"android": 1}},
            {"tid": "team", "name": "Team", "rank": 1, "monthly_fee": 4900, "price_id": "price_1",
             "tiers": [{"up_to": 500, "unit_amount": 5}, {"unit_amount": 3}],
             "weights": {"xcode": 300}},
        ],
        default="free",
    )  # fmt: skip
    assert catalog.default.tid == "free" and catalog.default.limit("android") == 1
    assert catalog.default.limit("ios") is None
    team = catalog.by_price("price_1")
    assert team is not None and team.tiers[-1] == Tier(None, 3)
    assert parse_catalog([]) == DEFAULT_CATALOG
    bad: list[tuple[list[object], str]] = [
        ([{"tid": "a"}, {"tid": "a"}], "unique"),
        ([{"tid": "a", "monthly_fee": 1.5}], r"monthly_fee: expected an integer"),
        ([{"tid": "a", "monthly_fee": True}], r"monthly_fee: expected an integer"),
        ([{"tid": "a", "tiers": [{"up_to": 5, "unit_amount": 1}]}], "last tier has no up_to"),
        ([{"tid": "a", "tiers": [{"unit_amount": 1}, {"unit_amount": 2}]}], "only the last"),
        ([{"tid": "a", "tiers": [{"up_to": 5, "unit_amount": 1}, {"up_to": 5, "unit_amount": 1},
                                 {"unit_amount": 1}]}], r"up_to: expected an integer >= 6"),
        ([{"tid": "a", "concurrency": {"windows": 1}}], "unknown platform"),
        ([{"tid": "a", "weights": {"ios": 0}}], r"weights.ios: expected an integer >= 1"),
        ([{"tid": "a", "colour": "red"}], "unknown key"),
        ([{"tid": "a", "currency": "dollars"}], "ISO 4217"),
        ([{"tid": "a"}, {"tid": "b", "currency": "eur"}], "same currency"),
    ]  # fmt: skip
    for plans_, why in bad:
        with pytest.raises(CatalogError, match=why):
            parse_catalog(plans_)
    with pytest.raises(CatalogError, match="no plan 'gold'"):
        parse_catalog([{"tid": "a"}], default="gold")


def test_the_server_config_file_carries_the_catalog_and_refuses_a_bad_one(tmp_path: Path) -> None:
    good = tmp_path / "good.toml"
    good.write_text(
        'data_dir = "/d"\n[billing]\ndefault_plan = "team"\n'
        '[[billing.plans]]\ntid = "free"\n'
        '[[billing.plans]]\ntid = "team"\nrank = 1\nmonthly_fee = 4900\n'
        "tiers = [{ up_to = 10, unit_amount = 3 }, { unit_amount = 2 }]\n"
    )
    config = load_server_config(file=good)
    assert config.billing.default.tid == "team"
    assert config.billing.default.tiers == (Tier(10, 3), Tier(None, 2))
    assert load_server_config(flags={"data_dir": "/d"}).billing == DEFAULT_CATALOG
    bad = tmp_path / "bad.toml"
    bad.write_text('data_dir = "/d"\n[[billing.plans]]\ntid = "x"\nmonthly_fee = -1\n')
    with pytest.raises(ConfigError, match=r"billing.plans\[0\].monthly_fee"):
        load_server_config(file=bad)
    env = {"DEVYARD_BILLING_PLANS": '[{"tid": "env-plan"}]'}
    assert load_server_config(flags={"data_dir": "/d"}, env=env).billing.default.tid == "env-plan"
