"""``devyard token create|revoke`` and ``devyard analytics``: scoped tokens for browsers
(docs/scoped-tokens.md) and the organization's usage (docs/analytics.md).

``token create`` prints the token alone on stdout (so ``$(devyard token create ...)`` works)
and its id on stderr; ``analytics`` prints the buckets, or with ``--instances`` every ended
instance of the window (all pages), as tables, or the API's JSON with ``--json``.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any, Final, TextIO

from .commands import _common, _leaf

if TYPE_CHECKING:
    from .client import AsyncClient

__all__ = ["add_commands"]

_BOUND_FLAGS: Final = (
    ("since", "startedAt[gte]", "instances started at or after T (RFC 3339)"),
    ("until", "startedAt[lte]", "instances started at or before T"),
    ("stopped_since", "stoppedAt[gte]", "instances stopped at or after T"),
    ("stopped_until", "stoppedAt[lte]", "instances stopped at or before T"),
)


async def _token_create(client: AsyncClient, args: argparse.Namespace, out: TextIO) -> None:
    made = await client.create_scoped_token(args.scopes, ttl_seconds=args.ttl)
    if args.json:
        json.dump(made, out, indent=2)
        out.write("\n")
        return
    print(f"created {made['id']}, expires {made['expiresAt']}", file=sys.stderr)
    out.write(f"{made['token']}\n")


async def _token_revoke(client: AsyncClient, args: argparse.Namespace, out: TextIO) -> None:
    revoked = await client.revoke_scoped_token(args.token_id)
    if args.json:
        json.dump(revoked, out, indent=2)
        out.write("\n")
        return
    out.write(f"revoked {revoked['id']}\n")


def _bounds(args: argparse.Namespace) -> dict[str, str]:
    bounds = {name: getattr(args, flag) for flag, name, _ in _BOUND_FLAGS}
    if args.labels is not None:
        bounds["labels"] = args.labels
    return {name: value for name, value in bounds.items() if value is not None}


async def _all_instances(client: AsyncClient, bounds: dict[str, str]) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    after = None
    while True:
        page = await client.instance_analytics(bounds, limit=1000, starting_after=after)
        items += page["items"]
        if not page["hasMore"] or not page["items"]:
            return items
        after = page["items"][-1]["instanceTid"]


async def _analytics(client: AsyncClient, args: argparse.Namespace, out: TextIO) -> None:
    from .output import print_table  # noqa: PLC0415

    bounds = _bounds(args)
    if args.instances:
        items = await _all_instances(client, bounds)
        if args.json:
            json.dump(items, out, indent=2)
            out.write("\n")
            return
        per_instance = [
            (i["instanceTid"], i["platform"], i["startedAt"], i["stoppedAt"], i["billedMinutes"])
            for i in items
        ]
        print_table(("INSTANCE", "PLATFORM", "STARTED", "STOPPED", "MINUTES"), per_instance, out)
        return
    totals = await client.analytics(bounds, bucket=args.bucket)
    if args.json:
        json.dump(totals, out, indent=2)
        out.write("\n")
        return
    rows = [(b["start"], b["instances"], b["billedMinutes"]) for b in totals["buckets"]]
    rows.append(("total", totals["instances"], totals["billedMinutes"]))
    print_table(("START", "INSTANCES", "MINUTES"), rows, out)


def add_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Declare ``devyard token ...`` and ``devyard analytics`` under the top-level parser."""
    common = _common()
    token = sub.add_parser("token", help="scoped tokens for browsers").add_subparsers(
        dest="token_command", metavar="COMMAND", required=True
    )
    create = _leaf(token, "create", _token_create, "mint a scoped token; prints it once", common)
    create.add_argument(
        "scopes",
        metavar="SCOPE",
        nargs="+",
        help="device:<instance id>|*:install or asset:<asset id>|*:read",
    )
    create.add_argument("--ttl", type=int, metavar="SECONDS", help="1-14400, default 3600")
    revoke = _leaf(token, "revoke", _token_revoke, "revoke one scoped token", common)
    revoke.add_argument("token_id", metavar="TOKEN_ID")

    from .usage_commands import add_usage  # noqa: PLC0415

    add_usage(sub, common)
    analytics = _leaf(sub, "analytics", _analytics, "usage of ended instances", common)
    for flag, _, help_text in _BOUND_FLAGS:
        option = "--" + flag.replace("_", "-")
        analytics.add_argument(option, dest=flag, metavar="T", help=help_text)
    analytics.add_argument("--labels", metavar="K=V,...", help="every pair must match")
    analytics.add_argument("--bucket", choices=("hour", "day"), default="day")
    analytics.add_argument(
        "--instances", action="store_true", help="list each instance instead of buckets"
    )
