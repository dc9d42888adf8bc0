"""The user-facing ``devyard`` commands that call the API.

Each takes the server and the key from ``--server`` / ``--api-key-file`` or the environment
(``DEVYARD_BASE_URL``, ``DEVYARD_API_KEY``), prints a table for people or, with ``--json``,
the API's JSON for scripts, and on an error prints the server's message to stderr and exits 1
(2 for a usage error). This module only declares the commands; the client and trio are
imported when one runs, so ``devyard --help`` stays fast.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Final, TextIO

if TYPE_CHECKING:
    from .client import AsyncClient

__all__ = [
    "ENV_API_KEY",
    "ENV_BASE_URL",
    "EXIT_AUTH",
    "EXIT_CONFLICT",
    "EXIT_NOT_FOUND",
    "EXIT_UNAVAILABLE",
    "EXIT_USAGE",
    "CommandError",
    "add_commands",
    "exit_code_of",
]

from .profiles import DEFAULT_BASE_URL, ENV_API_KEY, ENV_BASE_URL, ENV_PROFILE

#: a CA to trust besides the system's, for a server with a private one (devyard up --tls)
ENV_CA_FILE: Final = "DEVYARD_CA_FILE"

Handler = Callable[["AsyncClient", argparse.Namespace, TextIO], Awaitable[None]]

#: Exit codes of the API commands (docs/cli.md): scripts can tell these apart.
EXIT_OK: Final = 0
EXIT_ERROR: Final = 1  # anything else the server refused (400, 422...)
EXIT_USAGE: Final = 2  # bad flags, no API key, an unknown profile, an unreadable file
EXIT_NOT_FOUND: Final = 3  # 404
EXIT_AUTH: Final = 4  # 401, 403: the key is wrong, revoked or not allowed
EXIT_CONFLICT: Final = 5  # 409: no capacity, already exists, not in that state
EXIT_UNAVAILABLE: Final = 6  # the server cannot be reached, or answered 5xx / 429
EXIT_TIMEOUT: Final = 7  # --wait gave up
EXIT_INTERRUPTED: Final = 130  # Ctrl-C


class UsageError(Exception):
    pass


class CommandExit(Exception):
    """End the command with this exit code and no message (``shell``, ``exec``: the remote
    command's own status)."""

    def __init__(self, exit_code: int) -> None:
        super().__init__(exit_code)
        self.exit_code = exit_code


class CommandError(Exception):
    """A command's own failure: one line for stderr and its exit code."""

    def __init__(self, message: str, exit_code: int = EXIT_ERROR) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def _resolve(args: argparse.Namespace, env: Mapping[str, str]) -> tuple[str, str]:
    from .profiles import ConfigFileError, resolve  # noqa: PLC0415

    api_key = getattr(args, "api_key", None)
    if getattr(args, "api_key_file", None) is not None:
        try:
            api_key = Path(args.api_key_file).read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise UsageError(f"cannot read {args.api_key_file}: {exc.strerror}") from exc
    try:
        found = resolve(
            env,
            profile=getattr(args, "profile", None),
            base_url=getattr(args, "base_url", None),
            api_key=api_key,
        )
    except ConfigFileError as exc:
        raise UsageError(str(exc)) from exc
    if not found.api_key:
        raise UsageError(
            f"no API key: run devyard login, or pass --api-key-file FILE, or set {ENV_API_KEY}"
        )
    return found.base_url, found.api_key


def exit_code_of(exc: BaseException) -> int:
    """The exit code an error of the client means."""
    from ._errors import (  # noqa: PLC0415
        APIError,
        AuthenticationError,
        ConflictError,
        NotFoundError,
        PermissionDeniedError,
        RateLimitError,
        ServerError,
        TransportError,
    )

    if isinstance(exc, CommandError):
        return exc.exit_code
    if isinstance(exc, NotFoundError):
        return EXIT_NOT_FOUND
    if isinstance(exc, AuthenticationError | PermissionDeniedError):
        return EXIT_AUTH
    if isinstance(exc, ConflictError):
        return EXIT_CONFLICT
    if isinstance(exc, TransportError | ServerError | RateLimitError):
        return EXIT_UNAVAILABLE
    if isinstance(exc, APIError):
        return EXIT_ERROR
    return EXIT_ERROR


def _one_line(exc: BaseException) -> str:
    from ._errors import APIError, AuthenticationError, TransportError  # noqa: PLC0415

    if isinstance(exc, AuthenticationError):
        return f"{exc.message} (HTTP {exc.status}); check the key (devyard login, --profile)"
    if isinstance(exc, APIError):
        return f"{exc.message} (HTTP {exc.status})"
    if isinstance(exc, TransportError):
        return f"cannot reach the server: {exc}; is the base URL right? (--base-url, --profile)"
    return " ".join(str(exc).split()) or type(exc).__name__


def _run(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    import trio  # noqa: PLC0415 - loaded only when a command runs

    from ._errors import DevyardError  # noqa: PLC0415
    from .client import AsyncClient  # noqa: PLC0415

    try:
        base_url, api_key = _resolve(args, env)
    except UsageError as exc:
        print(f"devyard: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    handler: Handler = args.handler

    out: TextIO = sys.stdout
    if getattr(args, "field", None):
        from .select import FieldSelector, SelectError  # noqa: PLC0415

        args.json = True
        try:
            out = FieldSelector(sys.stdout, args.field)
        except SelectError as exc:
            print(f"devyard: error: {exc}", file=sys.stderr)
            return EXIT_USAGE

    async def main() -> None:
        ca_file = Path(env[ENV_CA_FILE]) if env.get(ENV_CA_FILE) else None  # docs/tls.md
        async with AsyncClient(base_url, api_key, ca_file=ca_file) as client:
            await handler(client, args, out)
        out.flush()

    try:
        trio.run(main)
    except CommandExit as exc:
        return exc.exit_code
    except (DevyardError, CommandError, UsageError) as exc:
        print(f"devyard: error: {_one_line(exc)}", file=sys.stderr)
        return EXIT_USAGE if isinstance(exc, UsageError) else exit_code_of(exc)
    return EXIT_OK


# -- the commands ---------------------------------------------------------------------------


async def _whoami(client: AsyncClient, args: argparse.Namespace, out: TextIO) -> None:
    from .output import print_json, print_record  # noqa: PLC0415

    me = await client.whoami()
    if args.json:
        print_json(me, out)
        return
    key = me.api_key
    print_record(
        [
            ("user", f"{me.user.name} ({me.user.id})"),
            ("organization", f"{me.organization.name} ({me.organization.id})"),
            ("role", me.role),
            ("api key", f"{key.name} ({key.id}){', read-only' if key.read_only else ''}"),
        ],
        out,
    )


async def _org_show(client: AsyncClient, args: argparse.Namespace, out: TextIO) -> None:
    from .output import print_json, print_record  # noqa: PLC0415

    org = (await client.whoami()).organization
    if args.json:
        print_json(org, out)
        return
    print_record(
        [
            ("id", org.id),
            ("name", org.name),
            ("created", org.created_at),
            ("inactivity timeout", f"{org.settings.inactivity_timeout_seconds}s"),
        ],
        out,
    )


async def _members_list(client: AsyncClient, args: argparse.Namespace, out: TextIO) -> None:
    from .output import print_json, print_table  # noqa: PLC0415

    members = await client.list_members((await client.whoami()).organization.id)
    if args.json:
        print_json(members, out)
        return
    rows = [(m.user.name, m.role, m.user.email, m.user.id) for m in members]
    print_table(("USER", "ROLE", "EMAIL", "ID"), rows, out)


async def _members_add(client: AsyncClient, args: argparse.Namespace, out: TextIO) -> None:
    from .models import Role  # noqa: PLC0415
    from .output import print_json, print_table  # noqa: PLC0415

    org_id = (await client.whoami()).organization.id
    member = await client.add_member(org_id, args.user, Role(args.role), email=args.email)
    if args.json:
        print_json(member, out)
        return
    print_table(("USER", "ROLE", "ID"), [(member.user.name, member.role, member.user.id)], out)


async def _members_set_role(client: AsyncClient, args: argparse.Namespace, out: TextIO) -> None:
    from .models import Role  # noqa: PLC0415
    from .output import print_json, print_table  # noqa: PLC0415

    org_id = (await client.whoami()).organization.id
    member = await client.update_member(org_id, args.user, Role(args.role))
    if args.json:
        print_json(member, out)
        return
    print_table(("USER", "ROLE", "ID"), [(member.user.name, member.role, member.user.id)], out)


async def _members_remove(client: AsyncClient, args: argparse.Namespace, out: TextIO) -> None:
    await client.remove_member((await client.whoami()).organization.id, args.user)
    if not args.json:
        out.write(f"removed {args.user}\n")


async def _keys_list(client: AsyncClient, args: argparse.Namespace, out: TextIO) -> None:
    from .output import print_json, print_table  # noqa: PLC0415

    org_id = (await client.whoami()).organization.id
    keys = await client.list_api_keys(org_id, include_revoked=args.include_revoked)
    if args.json:
        print_json(keys, out)
        return
    rows = [
        (k.id, k.name, k.prefix, k.read_only, k.user_id, k.last_used_at, k.revoked_at) for k in keys
    ]
    print_table(("ID", "NAME", "PREFIX", "READ-ONLY", "USER", "LAST USED", "REVOKED"), rows, out)


async def _keys_create(client: AsyncClient, args: argparse.Namespace, out: TextIO) -> None:
    from .output import print_json  # noqa: PLC0415

    org_id = (await client.whoami()).organization.id
    created = await client.create_api_key(
        org_id, args.name, read_only=args.read_only, user_name=args.user
    )
    if args.json:
        print_json(created, out)
        return
    out.write(f"created {created.api_key.id}; the key is shown only now:\n{created.key}\n")


async def _keys_revoke(client: AsyncClient, args: argparse.Namespace, out: TextIO) -> None:
    from .output import print_json  # noqa: PLC0415

    key = await client.revoke_api_key((await client.whoami()).organization.id, args.key_id)
    if args.json:
        print_json(key, out)
        return
    out.write(f"revoked {key.id}\n")


async def _regions(client: AsyncClient, args: argparse.Namespace, out: TextIO) -> None:
    from .output import print_json, print_table  # noqa: PLC0415

    regions = await client.list_regions()
    if args.json:
        print_json(regions, out)
        return
    print_table(("NAME", "URL"), [(r.name, r.url) for r in regions], out)


# -- declaration ----------------------------------------------------------------------------


def _common() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    group = common.add_argument_group("server and credentials (docs/cli.md)")
    group.add_argument(
        "--profile", metavar="NAME", help=f"a profile of devyard login (env {ENV_PROFILE})"
    )
    group.add_argument(
        "--base-url",
        "--server",
        dest="base_url",
        metavar="URL",
        help=f"the devyard server (env {ENV_BASE_URL}; default: the profile's, "
        f"else {DEFAULT_BASE_URL})",
    )
    group.add_argument(
        "--api-key",
        metavar="KEY",
        help=f"the API key (env {ENV_API_KEY}; visible in ps: prefer a profile or the env)",
    )
    group.add_argument("--api-key-file", metavar="FILE", help="file holding the API key")
    group.add_argument("--json", action="store_true", help="print the API's JSON, for scripts")
    group.add_argument(
        "--field",
        action="append",
        metavar="PATH",
        help="print only this field of the JSON (dotted, e.g. status.state; repeatable: "
        "tab-separated); a list gives one line per item, and '.' each item as one JSON line",
    )
    return common


def _leaf(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
    name: str,
    handler: Handler,
    help_text: str,
    common: argparse.ArgumentParser,
) -> argparse.ArgumentParser:
    parser = sub.add_parser(name, help=help_text, description=help_text, parents=[common])
    parser.set_defaults(run=_run, handler=handler)
    return parser


def add_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Declare the user commands under the top-level ``devyard`` parser."""
    common = _common()
    roles = ("admin", "member", "viewer")
    _leaf(sub, "whoami", _whoami, "show the key's user, organization and role", common)
    _leaf(sub, "regions", _regions, "list the regions of the server", common)

    org = sub.add_parser("org", help="the key's organization").add_subparsers(
        dest="org_command", metavar="COMMAND", required=True
    )
    _leaf(org, "show", _org_show, "show the organization", common)

    members = sub.add_parser("members", help="members of the organization").add_subparsers(
        dest="members_command", metavar="COMMAND", required=True
    )
    _leaf(members, "list", _members_list, "list members and their roles", common)
    add = _leaf(members, "add", _members_add, "create a user and add it (admins)", common)
    add.add_argument("user", help="user name")
    add.add_argument("--role", choices=roles, required=True)
    add.add_argument("--email")
    set_role = _leaf(members, "set-role", _members_set_role, "change a role (admins)", common)
    set_role.add_argument("user")
    set_role.add_argument("role", choices=roles)
    remove = _leaf(members, "remove", _members_remove, "remove a member (admins)", common)
    remove.add_argument("user")

    keys = sub.add_parser("keys", help="API keys").add_subparsers(
        dest="keys_command", metavar="COMMAND", required=True
    )
    listing = _leaf(keys, "list", _keys_list, "list keys (admins: all of the organization)", common)
    listing.add_argument("--include-revoked", action="store_true")
    create = _leaf(keys, "create", _keys_create, "create a key; prints it once", common)
    create.add_argument("name")
    create.add_argument("--read-only", action="store_true", help="the key may only read")
    create.add_argument("--user", help="the member the key acts as (admins); default: you")
    revoke = _leaf(keys, "revoke", _keys_revoke, "revoke a key", common)
    revoke.add_argument("key_id", metavar="KEY_ID")
