"""``devyard login`` and ``devyard profiles``: named servers and keys (`profiles`).

    devyard login --base-url https://devyard.example.com [--profile work]   (asks for the key)
    devyard login --api-key-file key.txt --profile ci
    devyard profiles [--json]

``login`` checks the key against the server (``whoami``) before it saves anything, then
writes the profile to ``config.toml`` (0600) and makes it the default unless
``--no-default``. Keys are never printed; ``profiles`` lists names and URLs only. Browser
approval is not implemented: a key comes from ``--api-key-file``, ``DEVYARD_API_KEY``, or a
hidden prompt.
"""

from __future__ import annotations

import argparse
import getpass
import json
import sys
from collections.abc import Mapping
from pathlib import Path

from .commands import EXIT_OK, EXIT_USAGE, _one_line, exit_code_of
from .profiles import DEFAULT_PROFILE, ENV_API_KEY, ConfigFileError, Profile

__all__ = ["add_commands"]


def _key(args: argparse.Namespace, env: Mapping[str, str]) -> str | None:
    if args.api_key_file:
        return Path(args.api_key_file).read_text(encoding="utf-8").strip() or None
    if args.api_key:
        return str(args.api_key).strip() or None
    if env.get(ENV_API_KEY):
        return env[ENV_API_KEY].strip()
    if sys.stdin.isatty():
        return getpass.getpass("API key (input hidden): ").strip() or None
    return None


def _login(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    import trio  # noqa: PLC0415

    from ._errors import DevyardError  # noqa: PLC0415
    from .client import AsyncClient  # noqa: PLC0415
    from .profiles import read_profiles, resolve, save_profile  # noqa: PLC0415

    name = args.profile or DEFAULT_PROFILE
    try:
        _, profiles = read_profiles(env)
        existing = profiles.get(name)
        key = _key(args, env)
        base_url = args.base_url or (existing.base_url if existing else None)
        base_url = base_url or resolve(env, base_url=None).base_url
    except (OSError, ConfigFileError) as exc:
        print(f"devyard login: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if key is None:
        print(
            f"devyard login: error: no API key: pass --api-key-file FILE, set {ENV_API_KEY}, "
            "or run it in a terminal to be asked",
            file=sys.stderr,
        )
        return EXIT_USAGE

    async def check() -> str:
        async with AsyncClient(base_url.rstrip("/"), key) as client:
            me = await client.whoami()
        return f"{me.user.name} in {me.organization.name} ({me.role})"

    try:
        who = trio.run(check)
    except DevyardError as exc:
        print(f"devyard login: error: {_one_line(exc)}", file=sys.stderr)
        return exit_code_of(exc)
    path = save_profile(
        env, Profile(name, base_url.rstrip("/"), key), make_default=not args.no_default
    )
    if args.json:
        json.dump(
            {"profile": name, "baseUrl": base_url, "as": who, "config": str(path)}, sys.stdout
        )
        sys.stdout.write("\n")
    else:
        print(f"logged in to {base_url} as {who}; profile {name!r} saved in {path}")
    return EXIT_OK


def _profiles(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    from .output import print_table  # noqa: PLC0415
    from .profiles import read_profiles  # noqa: PLC0415

    try:
        default, profiles = read_profiles(env)
    except ConfigFileError as exc:
        print(f"devyard profiles: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    rows = [
        {
            "name": p.name,
            "baseUrl": p.base_url,
            "default": p.name == default,
            "hasKey": bool(p.api_key),
        }
        for p in sorted(profiles.values(), key=lambda p: p.name)
    ]
    if args.json:
        json.dump(rows, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        table = [(r["name"], r["baseUrl"], r["default"], r["hasKey"]) for r in rows]
        print_table(("PROFILE", "BASE URL", "DEFAULT", "KEY"), table, sys.stdout)
    return EXIT_OK


def add_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    login = sub.add_parser(
        "login",
        help="save a server and API key as a profile (checked against the server first)",
        description=__doc__.split("\n\n")[1] if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    login.add_argument("--profile", metavar="NAME", help=f"default: {DEFAULT_PROFILE}")
    login.add_argument("--base-url", "--server", dest="base_url", metavar="URL")
    login.add_argument("--api-key", metavar="KEY", help="visible in ps: prefer the file or prompt")
    login.add_argument("--api-key-file", metavar="FILE")
    login.add_argument("--no-default", action="store_true", help="keep the current default")
    login.add_argument("--json", action="store_true")
    login.set_defaults(run=_login)
    profiles = sub.add_parser("profiles", help="list the saved profiles (never their keys)")
    profiles.add_argument("--json", action="store_true")
    profiles.set_defaults(run=_profiles)
