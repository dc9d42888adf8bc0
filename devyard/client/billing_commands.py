"""``devyard billing plans|invoices|subscription``: the organization's plans, invoices and
subscription (docs/billing.md). Tables by default, the API's JSON with ``--json``.

- ``plans`` lists the catalog with what each plan is to the organization (current, upgrade,
  downgrade); ``--change PRICE_ID`` asks for that plan and prints the URL to confirm at.
- ``invoices`` prints up to the last six invoices (``--from``, ``--to``, ``--timezone``).
- ``subscription`` prints the subscriptions and the scheduled change; ``--release`` keeps the
  current plan by releasing a scheduled downgrade.
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any, TextIO

from .commands import _common, _leaf

if TYPE_CHECKING:
    from .client import AsyncClient

__all__ = ["add_commands"]


def _dump(data: Any, out: TextIO) -> None:
    json.dump(data, out, indent=2)
    out.write("\n")


def _money(amount: int, currency: str) -> str:
    """Minor units as a decimal string (2 digits: every ISO currency devyard is set up with
    in the docs; the number is exact, never a float)."""
    sign = "-" if amount < 0 else ""
    whole, cents = divmod(abs(amount), 100)
    return f"{sign}{whole}.{cents:02d} {currency.upper()}"


async def _org(client: AsyncClient) -> str:
    return (await client.whoami()).organization.id


async def _plans(client: AsyncClient, args: argparse.Namespace, out: TextIO) -> None:
    from .output import print_table  # noqa: PLC0415

    org_id = await _org(client)
    if args.change is not None:
        change = await client.change_plan(org_id, args.change)
        if args.json:
            _dump(change, out)
            return
        when = "at the end of the period" if change["scheduled"] else "now"
        out.write(f"plan change ({when}); confirm at: {change['url']}\n")
        return
    options = await client.list_plan_options(org_id)
    if args.json:
        _dump(options, out)
        return
    rows = [
        (o["plan"]["tid"], o["plan"]["name"], o["action"],
         _money(o["plan"]["monthlyFee"], o["plan"]["currency"]), o["plan"].get("priceId", "-"))
        for o in options
    ]  # fmt: skip
    print_table(("PLAN", "NAME", "ACTION", "MONTHLY", "PRICE ID"), rows, out)


async def _invoices(client: AsyncClient, args: argparse.Namespace, out: TextIO) -> None:
    from .output import print_table  # noqa: PLC0415

    query = {k: v for k, v in (("from", args.since), ("to", args.until),
                               ("timezone", args.timezone)) if v is not None}  # fmt: skip
    answer = await client.list_invoices(await _org(client), query)
    if args.json:
        _dump(answer, out)
        return
    rows = [
        (i["periodStart"], i["status"], i["planTid"], i["minutes"],
         _money(i["credits"]["used"], i["currency"]), _money(i["total"], i["currency"]))
        for i in answer["invoices"]
    ]  # fmt: skip
    print_table(("PERIOD START", "STATUS", "PLAN", "MINUTES", "CREDITS", "TOTAL"), rows, out)


async def _subscription(client: AsyncClient, args: argparse.Namespace, out: TextIO) -> None:
    from .output import print_table  # noqa: PLC0415

    org_id = await _org(client)
    schedule = await client.plan_schedule(org_id, release=args.release)
    subscriptions = await client.list_subscriptions(org_id)
    if args.json:
        _dump({"schedule": schedule, "subscriptions": subscriptions}, out)
        return
    out.write(f"current plan: {schedule['currentPlanTid']}\n")
    if schedule["scheduled"]:
        out.write(f"scheduled: {schedule['planTid']} from {schedule['effectiveAt']}\n")
    elif args.release:
        out.write("no plan change is scheduled\n")
    rows = [
        (s["id"], s["provider"], s["planTid"] or "-", s["status"], s["currentPeriodEnd"] or "-")
        for s in subscriptions
    ]
    if rows:
        print_table(("SUBSCRIPTION", "PROVIDER", "PLAN", "STATUS", "PERIOD END"), rows, out)


def add_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Declare ``devyard billing ...`` under the top-level parser."""
    common = _common()
    billing = sub.add_parser("billing", help="plans, invoices and the subscription")
    commands = billing.add_subparsers(dest="billing_command", metavar="COMMAND", required=True)
    plans = _leaf(commands, "plans", _plans, "list the plans and what each would be", common)
    plans.add_argument("--change", metavar="PRICE_ID", help="move to the plan of this price")
    invoices = _leaf(commands, "invoices", _invoices, "up to the last six invoices", common)
    invoices.add_argument("--from", dest="since", metavar="T", help="RFC 3339, inclusive")
    invoices.add_argument("--to", dest="until", metavar="T", help="RFC 3339, exclusive")
    invoices.add_argument("--timezone", metavar="ZONE", help="IANA name for the boundaries")
    subscription = _leaf(
        commands, "subscription", _subscription, "the subscription and scheduled change", common
    )
    subscription.add_argument(
        "--release", action="store_true", help="release a scheduled change (keep the plan)"
    )
