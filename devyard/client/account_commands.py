"""Account commands (docs/accounts.md): ``devyard org create|get|delete`` (beside ``org
show``), ``devyard invite`` and ``devyard invitations list|revoke``, ``devyard domains
list|add|verify``, ``devyard sso get|set|delete``, and the operators' ``devyard support
list|answer``. ``devyard members`` is in `commands`; ``devyard login`` in `login_commands`.

Every command acts on the organization of the key (a key acts in one organization only);
``--json`` prints the API's JSON. A client secret is read from a file or stdin, never from an
argument (which ``ps`` would show).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from .commands import CommandError, _common, _leaf

if TYPE_CHECKING:
    from .client import AsyncClient

__all__ = ["add_commands"]

_ROLES = ("admin", "member", "viewer")


def _dump(value: object, out: TextIO) -> None:
    json.dump(value, out, indent=2)
    out.write("\n")


async def _org_id(client: AsyncClient, args: argparse.Namespace) -> str:
    """The key's organization: a key acts in one organization only."""
    return (await client.whoami()).organization.id


# -- organizations --------------------------------------------------------------------------


async def _org_create(client: AsyncClient, args: argparse.Namespace, out: TextIO) -> None:
    made = await client.create_organization(args.name)
    if args.json:
        _dump(made, out)
        return
    key = made["apiKey"]
    print(f"created {made['name']} ({made['id']}); you are its admin", file=sys.stderr)
    print(f"your API key there ({key['id']}) is shown only now:", file=sys.stderr)
    out.write(f"{key['key']}\n")


async def _org_get(client: AsyncClient, args: argparse.Namespace, out: TextIO) -> None:
    from .output import print_json, print_record  # noqa: PLC0415

    org = await client.get_organization(await _org_id(client, args))
    if args.json:
        print_json(org, out)
        return
    print_record([("id", org.id), ("name", org.name), ("created", org.created_at)], out)


async def _org_delete(client: AsyncClient, args: argparse.Namespace, out: TextIO) -> None:
    from .output import print_json  # noqa: PLC0415

    org_id = await _org_id(client, args)
    if args.yes != org_id:
        raise CommandError(
            f"deleting ends every instance, tunnel, asset and key of {org_id}: "
            f"repeat its id with --yes {org_id}"
        )
    deleted = await client.delete_organization(org_id)
    if args.json:
        print_json(deleted, out)
        return
    out.write(f"deleted {deleted.name} ({deleted.id})\n")


# -- invitations ----------------------------------------------------------------------------


async def _invite(client: AsyncClient, args: argparse.Namespace, out: TextIO) -> None:
    sent = await client.invite(await _org_id(client, args), args.email, role=args.role)
    if args.json:
        _dump(sent, out)
        return
    if sent.get("emailed"):
        out.write(f"invited {args.email} as {args.role}; the link is in their mail\n")
    else:
        print(f"invited {args.email} as {args.role}; no mail server: send them", file=sys.stderr)
        out.write(f"{sent.get('acceptUrl')}\n")


async def _invitations_list(client: AsyncClient, args: argparse.Namespace, out: TextIO) -> None:
    from .output import print_table  # noqa: PLC0415

    found = await client.list_invitations(await _org_id(client, args))
    if args.json:
        _dump(found, out)
        return
    rows = [(i["id"], i["email"], i["role"], i["expiresAt"]) for i in found]
    print_table(("ID", "EMAIL", "ROLE", "EXPIRES"), rows, out)


async def _invitations_revoke(client: AsyncClient, args: argparse.Namespace, out: TextIO) -> None:
    await client.revoke_invitation(await _org_id(client, args), args.invitation_id)
    if not args.json:
        out.write(f"revoked {args.invitation_id}\n")


# -- domains --------------------------------------------------------------------------------


def _print_domains(domains: list[dict[str, Any]], args: argparse.Namespace, out: TextIO) -> None:
    from .output import print_table  # noqa: PLC0415

    if args.json:
        _dump(domains, out)
        return
    rows = [
        (d["domain"], d["status"], d["txtRecord"]["name"], d["txtRecord"]["value"]) for d in domains
    ]
    print_table(("DOMAIN", "STATUS", "TXT NAME", "TXT VALUE"), rows, out)


async def _domains_list(client: AsyncClient, args: argparse.Namespace, out: TextIO) -> None:
    _print_domains(await client.list_domains(await _org_id(client, args)), args, out)


async def _domains_add(client: AsyncClient, args: argparse.Namespace, out: TextIO) -> None:
    org_id = await _org_id(client, args)
    current = [d["domain"] for d in await client.list_domains(org_id)]
    wanted = current + [d for d in args.domains if d.lower().rstrip(".") not in current]
    _print_domains(await client.replace_domains(org_id, wanted), args, out)


async def _domains_remove(client: AsyncClient, args: argparse.Namespace, out: TextIO) -> None:
    org_id = await _org_id(client, args)
    gone = {d.lower().rstrip(".") for d in args.domains}
    kept = [d["domain"] for d in await client.list_domains(org_id) if d["domain"] not in gone]
    _print_domains(await client.replace_domains(org_id, kept), args, out)


async def _domains_verify(client: AsyncClient, args: argparse.Namespace, out: TextIO) -> None:
    checked = await client.verify_domain(await _org_id(client, args), args.domain)
    if args.json:
        _dump(checked, out)
        return
    out.write(f"{checked['domain']}: {checked['status']}\n")
    if checked["status"] != "verified":
        raise CommandError(
            f"not verified yet: publish TXT {checked['txtRecord']['name']} = "
            f"{checked['txtRecord']['value']!r}, then ask again"
        )


# -- single sign-on -------------------------------------------------------------------------


def _print_sso(connection: dict[str, Any], args: argparse.Namespace, out: TextIO) -> None:
    from .output import print_record  # noqa: PLC0415

    if args.json:
        _dump(connection, out)
        return
    print_record(
        [
            ("issuer", connection["issuer"]),
            ("client id", connection["clientId"]),
            ("client secret", "set" if connection["clientSecretSet"] else "none (public client)"),
            ("allowed domains", ", ".join(connection["allowedDomains"]) or "-"),
            ("of them verified", ", ".join(connection["verifiedDomains"]) or "-"),
            ("role of new members", connection["defaultRole"]),
        ],
        out,
    )


async def _sso_get(client: AsyncClient, args: argparse.Namespace, out: TextIO) -> None:
    _print_sso(await client.get_oidc_connection(await _org_id(client, args)), args, out)


def _read_secret(source: str) -> str:
    try:
        text = sys.stdin.read() if source == "-" else Path(source).read_text(encoding="utf-8")
    except OSError as exc:
        raise CommandError(f"--client-secret-file: {exc.strerror or exc}") from None
    secret = text.strip()
    if not secret:
        raise CommandError("--client-secret-file: empty")
    return secret


async def _sso_set(client: AsyncClient, args: argparse.Namespace, out: TextIO) -> None:
    body: dict[str, Any] = {"issuer": args.issuer, "clientId": args.client_id}
    if args.client_secret_file is not None:
        body["clientSecret"] = _read_secret(args.client_secret_file)
    elif args.public_client:
        body["clientSecret"] = None
    if args.allowed_domain:
        body["allowedDomains"] = args.allowed_domain
    if args.default_role is not None:
        body["defaultRole"] = args.default_role
    _print_sso(await client.put_oidc_connection(await _org_id(client, args), body), args, out)


async def _sso_delete(client: AsyncClient, args: argparse.Namespace, out: TextIO) -> None:
    await client.delete_oidc_connection(await _org_id(client, args))
    if not args.json:
        out.write("single sign-on removed\n")


# -- support (operators) --------------------------------------------------------------------


async def _support_list(client: AsyncClient, args: argparse.Namespace, out: TextIO) -> None:
    from .output import print_table  # noqa: PLC0415

    found = await client.list_support_messages(limit=args.limit)
    if args.json:
        _dump(found, out)
        return
    rows = [
        (
            m["id"],
            m["kind"],
            m["organizationId"],
            m["email"],
            len(m["answers"]),
            " ".join(m["message"].split())[:60],
        )
        for m in found
    ]
    print_table(("ID", "KIND", "ORGANIZATION", "EMAIL", "ANSWERS", "MESSAGE"), rows, out)


async def _support_answer(client: AsyncClient, args: argparse.Namespace, out: TextIO) -> None:
    answer = await client.answer_support_message(args.message_id, args.message)
    if args.json:
        _dump(answer, out)
        return
    mailed = "mailed to the sender" if answer["emailed"] else "stored (not mailed)"
    out.write(f"answered {args.message_id}: {mailed}\n")


# -- declaration ----------------------------------------------------------------------------


def _subcommands(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], name: str, help_text: str
) -> argparse._SubParsersAction[argparse.ArgumentParser]:
    """The subcommands of ``devyard NAME``: an existing group's (``org``, declared by
    `commands`) or a new one."""
    parser = sub.choices.get(name)
    if parser is not None:
        for action in parser._actions:  # argparse exposes no other way
            if isinstance(action, argparse._SubParsersAction):
                return action
    return sub.add_parser(name, help=help_text).add_subparsers(
        dest=f"{name}_command", metavar="COMMAND", required=True
    )


def add_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Declare the account commands under the top-level parser (after `commands`)."""
    common = _common()
    in_org = argparse.ArgumentParser(add_help=False, parents=[common])
    in_org.add_argument("--organization", metavar="ID", help="default: the organization of the key")

    org = _subcommands(sub, "org", "organizations")
    create = _leaf(org, "create", _org_create, "create an organization; you become admin", common)
    create.add_argument("name")
    _leaf(org, "get", _org_get, "show an organization (default: the key's)", in_org)
    delete = _leaf(org, "delete", _org_delete, "delete the organization and all it holds", in_org)
    delete.add_argument("--yes", metavar="ID", help="the organization's id, to confirm")

    invite = _leaf(sub, "invite", _invite, "invite an email to the organization (admins)", in_org)
    invite.add_argument("email")
    invite.add_argument("--role", choices=_ROLES, default="member")
    invitations = _subcommands(sub, "invitations", "open invitations")
    _leaf(invitations, "list", _invitations_list, "list the open invitations (admins)", in_org)
    revoke = _leaf(invitations, "revoke", _invitations_revoke, "revoke one (admins)", in_org)
    revoke.add_argument("invitation_id", metavar="INVITATION_ID")

    domains = _subcommands(sub, "domains", "the organization's email domains")
    _leaf(domains, "list", _domains_list, "list domains and their TXT records", in_org)
    add = _leaf(domains, "add", _domains_add, "add domains (pending until verified)", in_org)
    add.add_argument("domains", metavar="DOMAIN", nargs="+")
    remove = _leaf(domains, "remove", _domains_remove, "remove domains", in_org)
    remove.add_argument("domains", metavar="DOMAIN", nargs="+")
    verify = _leaf(domains, "verify", _domains_verify, "check a domain's TXT record", in_org)
    verify.add_argument("domain")

    sso = _subcommands(sub, "sso", "single sign-on (OpenID Connect)")
    _leaf(sso, "get", _sso_get, "show the organization's identity provider", in_org)
    put = _leaf(sso, "set", _sso_set, "set the identity provider (admins)", in_org)
    put.add_argument("--issuer", required=True, help="the provider's issuer URL (https)")
    put.add_argument("--client-id", required=True)
    secret = put.add_mutually_exclusive_group()
    secret.add_argument(
        "--client-secret-file", metavar="FILE", help="file holding the client secret; - for stdin"
    )
    secret.add_argument(
        "--public-client", action="store_true", help="remove the secret (PKCE only)"
    )
    put.add_argument(
        "--allowed-domain",
        action="append",
        metavar="DOMAIN",
        help="an email domain that may sign in (repeat); it must also be verified",
    )
    put.add_argument("--default-role", choices=_ROLES, help="of members who join by signing in")
    _leaf(sso, "delete", _sso_delete, "remove single sign-on (admins)", in_org)

    support = _subcommands(sub, "support", "support messages (operators)")
    listing = _leaf(support, "list", _support_list, "list support messages and feedback", common)
    listing.add_argument("--limit", type=int, default=100)
    answer = _leaf(support, "answer", _support_answer, "answer one (mailed when possible)", common)
    answer.add_argument("message_id", metavar="MESSAGE_ID")
    answer.add_argument("message")
