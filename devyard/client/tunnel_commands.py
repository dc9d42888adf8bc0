"""``devyard tunnel create|list|get|update|rotate|delete``.

A tunnel's token is shown once, by ``create`` and ``rotate``, together with the command that
runs its connector (the token goes in the environment, never on a command line that ``ps``
shows). Tables for people, ``--json`` for scripts; exit codes: docs/cli.md.
"""

from __future__ import annotations

import argparse
import json
import shlex
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TextIO
from urllib.parse import quote

from .commands import _common, _leaf

if TYPE_CHECKING:
    from .client import AsyncClient

__all__ = ["add_commands"]

_HEADERS = ("NAME", "STATUS", "SELECTORS", "VERSION", "TOKEN EXPIRES", "ID")


def _name(args: argparse.Namespace) -> str:
    return quote(str(args.name), safe="")


def _row(tunnel: Mapping[str, Any]) -> tuple[object, ...]:
    return (
        tunnel.get("name"),
        tunnel.get("status"),
        ",".join(tunnel.get("selectors", [])),
        tunnel.get("selectorVersion"),
        tunnel.get("tokenExpiresAt"),
        tunnel.get("id"),
    )


def _print(value: Any, args: argparse.Namespace, out: TextIO) -> None:
    from .output import print_table  # noqa: PLC0415

    if args.json:
        json.dump(value, out, indent=2)
        out.write("\n")
        return
    rows = value if isinstance(value, list) else [value]
    print_table(_HEADERS, [_row(t) for t in rows], out)


def _with_token(
    client: AsyncClient, tunnel: Mapping[str, Any], args: argparse.Namespace, out: TextIO, said: str
) -> None:
    if args.json:
        _print(dict(tunnel), args, out)
        return
    token = str(tunnel["token"])
    out.write(f"{said} {tunnel['name']}; its token (shown once, keep it secret):\n{token}\n\n")
    out.write("run its connector in the network it reaches:\n")
    out.write(
        f"  DEVYARD_TUNNEL_TOKEN={shlex.quote(token)} devyard connector run "
        f"--server {shlex.quote(client.base_url)}\n"
    )


async def _create(client: AsyncClient, args: argparse.Namespace, out: TextIO) -> None:
    body: dict[str, Any] = {"name": args.name, "selectors": args.selector}
    if args.token_expiry_months is not None:
        body["tokenExpiryMonths"] = args.token_expiry_months
    created: Any = await client.request("POST", "/v1/tunnels", body=body)
    _with_token(client, created, args, out, "created tunnel")


async def _list(client: AsyncClient, args: argparse.Namespace, out: TextIO) -> None:
    _print(await client.request("GET", "/v1/tunnels"), args, out)


async def _get(client: AsyncClient, args: argparse.Namespace, out: TextIO) -> None:
    _print(await client.request("GET", f"/v1/tunnels/{_name(args)}"), args, out)


async def _update(client: AsyncClient, args: argparse.Namespace, out: TextIO) -> None:
    body = {"selectors": args.selector}
    _print(await client.request("PATCH", f"/v1/tunnels/{_name(args)}", body=body), args, out)


async def _rotate(client: AsyncClient, args: argparse.Namespace, out: TextIO) -> None:
    params = None
    if args.token_expiry_months is not None:
        params = {"tokenExpiryMonths": str(args.token_expiry_months)}
    rotated: Any = await client.request("POST", f"/v1/tunnels/{_name(args)}/rotate", params=params)
    _with_token(client, rotated, args, out, "rotated the token of tunnel")


async def _delete(client: AsyncClient, args: argparse.Namespace, out: TextIO) -> None:
    deleted = await client.request("DELETE", f"/v1/tunnels/{_name(args)}")
    if args.json:
        json.dump(deleted if deleted is not None else {"name": args.name}, out, indent=2)
        out.write("\n")
        return
    out.write(f"deleted tunnel {args.name}\n")


def add_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    common = _common()
    verbs = sub.add_parser(
        "tunnel", help="tunnels into private networks: create, list, get, update, rotate, delete"
    ).add_subparsers(dest="tunnel_command", metavar="COMMAND", required=True)
    create = _leaf(verbs, "create", _create, "create a tunnel; prints its token once", common)
    create.add_argument("name")
    create.add_argument(
        "--selector",
        action="append",
        required=True,
        metavar="HOST:PORT",
        help="a destination devices may reach (repeatable): host:port, *.domain:port",
    )
    create.add_argument("--token-expiry-months", type=int, metavar="N")
    _leaf(verbs, "list", _list, "list the organization's tunnels", common)
    _leaf(verbs, "get", _get, "show one tunnel", common).add_argument("name")
    update = _leaf(verbs, "update", _update, "replace a tunnel's selectors", common)
    update.add_argument("name")
    update.add_argument("--selector", action="append", required=True, metavar="HOST:PORT")
    rotate = _leaf(verbs, "rotate", _rotate, "a new token; the old one stops linking", common)
    rotate.add_argument("name")
    rotate.add_argument("--token-expiry-months", type=int, metavar="N")
    _leaf(verbs, "delete", _delete, "delete a tunnel (its connectors stop)", common).add_argument(
        "name"
    )
