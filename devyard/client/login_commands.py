"""``devyard login`` and ``devyard profiles``: named servers and keys (`profiles`).

    devyard login --base-url https://devyard.example.com [--profile work]   (asks for the key)
    devyard login --api-key-file key.txt --profile ci
    devyard profiles [--json]

``login`` checks the key against the server (``whoami``) before it saves anything, then
writes the profile to ``config.toml`` (0600) and makes it the default unless
``--no-default``. Keys are never printed; ``profiles`` lists names and URLs only. A key comes
from ``--api-key-file``, ``--api-key`` or ``DEVYARD_API_KEY``; without one, ``login`` asks the
server for a login request, prints its phrase and approval URL, opens that in the browser
(unless ``--no-browser`` or there is none), and polls until someone signed in approves: the
server then hands out a new API key, once (the flow ``lim login`` uses too,
docs/compatibility.md).
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

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
    return None


LOGIN_WAIT = 600.0  # seconds to wait for the approval (the server keeps a request as long)


class BrowserLoginFailed(Exception):
    """The browser login ended without a key (expired, refused, or the server said no)."""


async def browser_login(base_url: str, *, open_browser: bool) -> str:
    """A new API key through the server's login request: prints the phrase and the URL,
    opens it in the browser when asked, polls until approved (docs/compatibility.md)."""
    import webbrowser  # noqa: PLC0415

    import httpx  # noqa: PLC0415
    import trio  # noqa: PLC0415

    from .. import __version__  # noqa: PLC0415

    async with httpx.AsyncClient(base_url=base_url, timeout=30.0) as http:
        started = await http.post(
            "/authn/cli/sessions",
            json={"hostname": socket.gethostname(), "cliVersion": f"devyard {__version__}"},
        )
        request = _json(started, "starting the login")
        print(f"Confirm this phrase in your browser: {request['phrase']}", file=sys.stderr)
        url = str(request["verificationUrl"])
        opened = open_browser and await trio.to_thread.run_sync(webbrowser.open, url)
        how = "Opened" if opened else "Open"
        print(f"{how} this URL to approve the login: {url}", file=sys.stderr)
        interval = max(1, int(request.get("pollIntervalSeconds", 2)))
        poll = f"/authn/cli/sessions/{request['sessionId']}/token"
        with trio.move_on_after(LOGIN_WAIT):
            while True:
                answer = await http.get(poll, params={"secret": request["secret"]})
                if answer.status_code == 200:
                    return str(_json(answer, "collecting the key")["apiKey"])
                if answer.status_code == 410:
                    raise BrowserLoginFailed("the login request expired: run login again")
                if answer.status_code != 202:
                    _json(answer, "waiting for approval")
                await trio.sleep(interval)
    raise BrowserLoginFailed("nobody approved the login in time: run login again")


def _json(response: Any, doing: str) -> dict[str, Any]:
    try:
        data = response.json()
    except ValueError:
        data = None
    if response.is_success and isinstance(data, dict):
        return data
    message = data.get("message") if isinstance(data, dict) else None
    raise BrowserLoginFailed(f"{doing}: {message or f'HTTP {response.status_code}'}")


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
        import httpx  # noqa: PLC0415
        import trio  # noqa: PLC0415

        try:
            key = trio.run(
                lambda: browser_login(base_url.rstrip("/"), open_browser=not args.no_browser)
            )
        except (BrowserLoginFailed, httpx.HTTPError) as exc:
            print(f"devyard login: error: {exc}", file=sys.stderr)
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
    login.add_argument(
        "--no-browser",
        action="store_true",
        help="without a key: print the approval URL instead of opening a browser",
    )
    login.add_argument("--json", action="store_true")
    login.set_defaults(run=_login)
    profiles = sub.add_parser("profiles", help="list the saved profiles (never their keys)")
    profiles.add_argument("--json", action="store_true")
    profiles.set_defaults(run=_profiles)
