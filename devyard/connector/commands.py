"""``devyard connector run | quick``: the argparse declarations; the connector loads when it
runs. Tokens come from ``--token-file`` or ``DEVYARD_TUNNEL_TOKEN``, never from the command
line (it would show in ``ps``); API keys from ``--api-key-file`` or ``DEVYARD_API_KEY``."""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Final, TypeAlias

Sub: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"

__all__ = ["add_commands", "parse_duration", "parse_listen"]

TOKEN_ENV: Final = "DEVYARD_TUNNEL_TOKEN"  # noqa: S105 - a variable name
API_KEY_ENV: Final = "DEVYARD_API_KEY"
_USAGE: Final = 2
_DURATION_RE: Final = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|s|m)?")


def parse_duration(text: str) -> float:
    """``30s``, ``500ms``, ``2m`` or plain seconds."""
    match = _DURATION_RE.fullmatch(text.strip())
    if match is None:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (e.g. 30s, 500ms, 2m)")
    value = float(match.group(1))
    return value * {"ms": 0.001, "s": 1.0, "m": 60.0, None: 1.0}[match.group(2)]


def parse_listen(text: str) -> tuple[str, int]:
    host, colon, port = text.rpartition(":")
    if not colon or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    return host.strip("[]") or "127.0.0.1", int(port)


def parse_link(text: str) -> str:
    from ..core.transports import check_link_url  # noqa: PLC0415

    try:
        return check_link_url(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _secret(path: str | None, env: Mapping[str, str], env_name: str, what: str) -> str | None:
    if path is not None:
        try:
            return Path(path).read_text().strip() or None
        except OSError as exc:
            print(f"devyard connector: error: cannot read the {what} file: {exc}", file=sys.stderr)
            return None
    return env.get(env_name, "").strip() or None


def _run(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    import trio  # noqa: PLC0415

    from .._process import setup_logging, tune_collector  # noqa: PLC0415
    from .link import ConnectorConfig  # noqa: PLC0415
    from .main import run_connector  # noqa: PLC0415

    token = _secret(args.token_file, env, TOKEN_ENV, "token")
    if token is None:
        print(
            f"devyard connector: error: give the tunnel token with --token-file or {TOKEN_ENV}",
            file=sys.stderr,
        )
        return _USAGE
    setup_logging(args.log_level, fmt=args.log_format)
    tune_collector()
    config = ConnectorConfig(
        server_url=args.server,
        token=token,
        replace=args.replace,
        grace=args.grace,
        link=args.link,
        ca_file=Path(args.ca_file) if args.ca_file else None,
    )
    return trio.run(lambda: run_connector(config, metrics_listen=args.metrics, err=sys.stderr))


def _quick(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    import trio  # noqa: PLC0415

    from .._process import setup_logging, tune_collector  # noqa: PLC0415
    from .link import ConnectorConfig  # noqa: PLC0415
    from .main import run_quick  # noqa: PLC0415

    api_key = _secret(args.api_key_file, env, API_KEY_ENV, "API key")
    if api_key is None:
        print(
            f"devyard connector quick: error: give an API key with --api-key-file or {API_KEY_ENV}",
            file=sys.stderr,
        )
        return _USAGE
    setup_logging(args.log_level, fmt=args.log_format)
    tune_collector()
    config = ConnectorConfig(
        server_url=args.server,
        token="",
        replace=False,
        grace=args.grace,
        link=args.link,
        ca_file=Path(args.ca_file) if args.ca_file else None,
    )
    return trio.run(
        lambda: run_quick(
            config,
            api_key=api_key,
            selectors=args.selector,
            metrics_listen=args.metrics,
            out=sys.stdout,
            err=sys.stderr,
        )
    )


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--server", required=True, metavar="URL", help="the server's base URL")
    parser.add_argument(
        "--link",
        type=parse_link,
        metavar="URL",
        help="hold the link on the server's raw link port (tcp://HOST:PORT or tls://HOST:PORT) "
        "instead of the WebSocket on --server",
    )
    parser.add_argument(
        "--ca-file",
        metavar="PEM",
        help="trust this CA for the server's certificate, besides the system's (docs/tls.md)",
    )
    parser.add_argument(
        "--metrics",
        type=parse_listen,
        metavar="HOST:PORT",
        help="serve /ready and /metrics (Prometheus text) here",
    )
    parser.add_argument(
        "--grace",
        type=parse_duration,
        default=30.0,
        metavar="DURATION",
        help="on SIGTERM, how long streams in flight may finish (default 30s)",
    )
    parser.add_argument(
        "--log-level", default="info", choices=("debug", "info", "warning", "error")
    )
    parser.add_argument("--log-format", default="text", choices=("text", "json"))


def add_commands(sub: Sub) -> None:
    connector = sub.add_parser(
        "connector",
        help="hold a tunnel: let devices reach destinations in this network",
        description="The tunnel connector. Exit codes: 0 clean stop, 1 error, 2 usage, "
        "10 token rotated, 11 token expired, 12 tunnel deleted, 13 replaced by another "
        "connector, 14 invalid token, 15 token revoked, 16 protocol unsupported, 17 this "
        "connector is older than the server takes (upgrade it).",
    )
    commands = connector.add_subparsers(dest="connector_command", metavar="COMMAND", required=True)
    run = commands.add_parser("run", help="hold a tunnel as its active connector, or as a standby")
    _common(run)
    run.add_argument("--token-file", metavar="FILE", help=f"the tunnel token (else ${TOKEN_ENV})")
    run.add_argument("--replace", action="store_true", help="take over from the active connector")
    run.set_defaults(run=_run)
    quick = commands.add_parser(
        "quick", help="create a quick (ephemeral) tunnel, print its name and hold it"
    )
    _common(quick)
    quick.add_argument(
        "--api-key-file", metavar="FILE", help=f"an admin API key (else ${API_KEY_ENV})"
    )
    quick.add_argument(
        "--selector",
        action="append",
        required=True,
        metavar="HOST:PORT",
        help="a destination (repeatable): host:port, *.domain:port or *.domain",
    )
    quick.set_defaults(run=_quick)
