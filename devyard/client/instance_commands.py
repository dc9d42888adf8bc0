"""``devyard android|ios|xcode|gradle create|list|get|delete``; the verbs on one instance
are declared by ``device_commands`` (android, ios) and ``build_commands`` (xcode, gradle).

    devyard android create --label pr=42 --wait [--rm] [--reuse] [--json]
    devyard android list [--label pr=42] [--state ready] [--json]
    devyard android get|delete ID

Device verbs talk to the instance's own API (``status.apiUrl``, with the instance token the
API returns to a controlling key), streamed through the server's gateway. Tables for people,
``--json`` for scripts (a list is every page, auto-paged, as one JSON array). Exit codes:
docs/cli.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any, Final, TextIO
from urllib.parse import quote

from .commands import EXIT_TIMEOUT, CommandError, UsageError, _common, _leaf

if TYPE_CHECKING:
    from .client import AsyncClient

__all__ = ["add_commands"]

PLATFORMS: Final = ("android", "ios", "xcode", "gradle")
_DEVICE_PLATFORMS: Final = ("android", "ios")
_PAGE: Final = 100
_CHUNK: Final = 256 * 1024


def _collection(args: argparse.Namespace) -> str:
    return f"/v1/{args.platform}_instances"


def _one(args: argparse.Namespace) -> str:
    return f"{_collection(args)}/{quote(str(args.id), safe='')}"


def _labels(pairs: list[str]) -> dict[str, str]:
    labels: dict[str, str] = {}
    for pair in pairs:
        key, eq, value = pair.partition("=")
        if not eq or not key:
            raise UsageError(f"--label takes KEY=VALUE, got {pair!r}")
        labels[key] = value
    return labels


def _row(instance: Mapping[str, Any]) -> tuple[object, ...]:
    meta, status = instance.get("metadata", {}), instance.get("status", {})
    labels = ",".join(f"{k}={v}" for k, v in sorted(meta.get("labels", {}).items()))
    return (
        meta.get("id"),
        status.get("state"),
        meta.get("region") or instance.get("spec", {}).get("region"),
        labels or None,
        meta.get("createdAt"),
    )


_HEADERS: Final = ("ID", "STATE", "REGION", "LABELS", "CREATED")


def _show(instances: list[Mapping[str, Any]], args: argparse.Namespace, out: TextIO) -> None:
    from .output import print_table  # noqa: PLC0415

    if args.json:
        json.dump(instances if args.many else instances[0], out, indent=2)
        out.write("\n")
        return
    print_table(_HEADERS, [_row(i) for i in instances], out)


async def _create(client: AsyncClient, args: argparse.Namespace, out: TextIO) -> None:
    import trio  # noqa: PLC0415

    labels = _labels(args.label)
    if args.reuse:  # a ready instance with these labels, if there is one
        selector = ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
        ready = {"state": "ready", **({"labelSelector": selector} if selector else {})}
        async for found in _pages(client, _collection(args), ready):
            args.many = False
            _show([found], args, out)
            return
    body: dict[str, Any] = {"metadata": {"labels": labels}}
    if args.name:
        body["metadata"]["displayName"] = args.name
    if args.region:
        body["spec"] = {"region": args.region}
    params = {"wait": "true"} if args.wait or args.rm else None
    with trio.move_on_after(args.timeout) as waited:
        created: Any = await client.request("POST", _collection(args), body=body, params=params)
    if waited.cancelled_caught:
        raise CommandError(f"not ready within {args.timeout:g} s", EXIT_TIMEOUT)
    args.many = False
    _show([created], args, out)
    out.flush()
    if not args.rm:
        return
    instance_id = created["metadata"]["id"]
    import signal  # noqa: PLC0415

    # the receiver first, then the message: a Ctrl-C right after it must delete, not kill
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        print(
            f"{instance_id} is ready; Ctrl-C (or SIGTERM) deletes it", file=sys.stderr, flush=True
        )
        async for _ in signals:
            break
    with trio.CancelScope(shield=True), trio.move_on_after(30):
        await client.request("DELETE", f"{_collection(args)}/{instance_id}")
        print(f"deleted {instance_id}", file=sys.stderr, flush=True)


async def _pages(client: AsyncClient, path: str, params: dict[str, str]) -> AsyncIterator[Any]:
    after: str | None = None
    while True:
        page: Any = await client.request(
            "GET",
            path,
            params={**params, "limit": str(_PAGE), **({"startingAfter": after} if after else {})},
        )
        for item in page["items"]:
            yield item
        if not page.get("hasMore") or not page["items"]:
            return
        after = page["items"][-1]["metadata"]["id"]


async def _list(client: AsyncClient, args: argparse.Namespace, out: TextIO) -> None:
    params: dict[str, str] = {}
    if args.label:
        params["labelSelector"] = ",".join(args.label)
    if args.state:
        params["state"] = args.state
    items = [item async for item in _pages(client, _collection(args), params)]
    args.many = True
    _show(items, args, out)


async def _get(client: AsyncClient, args: argparse.Namespace, out: TextIO) -> None:
    found: Any = await client.request("GET", _one(args))
    args.many = False
    _show([found], args, out)


async def _delete(client: AsyncClient, args: argparse.Namespace, out: TextIO) -> None:
    ended: Any = await client.request("DELETE", _one(args))
    if args.json:
        json.dump(ended, out, indent=2)
        out.write("\n")
        return
    out.write(f"deleted {args.id}\n")


def _article(platform: str) -> str:
    return f"{'an' if platform[0] in 'aeiou' else 'a'} {platform}"


def _positive(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return value


def add_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    common = _common()
    for platform in PLATFORMS:
        group = sub.add_parser(
            platform,
            help=f"{platform} instances: create, list, get, delete, "
            + ("device verbs" if platform in _DEVICE_PLATFORMS else "sync, build, exec, logs"),
        )
        group.set_defaults(platform=platform)
        verbs = group.add_subparsers(dest="instance_command", metavar="COMMAND", required=True)
        create = _leaf(verbs, "create", _create, f"create {_article(platform)} instance", common)
        create.add_argument("--label", action="append", default=[], metavar="KEY=VALUE")
        create.add_argument("--name", help="a display name")
        create.add_argument("--region", help="place it in this region")
        create.add_argument("--wait", action="store_true", help="return once it is ready")
        create.add_argument(
            "--rm", action="store_true", help="wait until ready, hold it; Ctrl-C deletes it"
        )
        create.add_argument(
            "--reuse", action="store_true", help="a ready instance with these labels, if any"
        )
        create.add_argument(
            "--timeout", type=_positive, default=300.0, metavar="SECONDS", help="for --wait"
        )
        listing = _leaf(verbs, "list", _list, f"list {platform} instances (every page)", common)
        listing.add_argument(
            "--label", action="append", default=[], metavar="SELECTOR", help="e.g. pr=42"
        )
        listing.add_argument("--state", help="comma list: creating,assigned,ready,terminated")
        for name, handler, text in (("get", _get, "show one"), ("delete", _delete, "end one")):
            _leaf(verbs, name, handler, f"{text} {platform} instance", common).add_argument("id")
        if platform in _DEVICE_PLATFORMS:
            from .device_commands import add_device_verbs  # noqa: PLC0415

            add_device_verbs(verbs, platform, common)
        else:
            from .build_commands import add_build_verbs  # noqa: PLC0415

            add_build_verbs(verbs, platform, common)
