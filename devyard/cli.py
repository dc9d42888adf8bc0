"""``devyard``: the one command-line entry point.

    devyard up [--data-dir DIR] [--port PORT]         the all-in-one embedded default
    devyard server --data-dir DIR --listen HOST:PORT  the control plane alone
    devyard admin bootstrap --data-dir DIR --org NAME an organization and a new admin key
    devyard admin host-token --data-dir DIR          a new host token (for devyard hostd)
    devyard admin host-token list|revoke ID|rotate ID   list, revoke or rotate host tokens
    devyard hostd --server URL --token-file F --region NAME   a host daemon
    devyard whoami | org | members | keys | regions   user commands (devyard.client.commands)
    devyard android|ios|xcode|gradle ...             instances and device verbs
    devyard tunnel ... | login | profiles             tunnels; saved servers and keys (docs/cli.md)
    devyard usage | completion bash|zsh|fish         a usage chart; shell completion

This is the edge where configuration is read: flags, ``os.environ`` and an optional file
become one frozen config value, passed down. Subcommands live in their packages and are
imported when the parser is built only as thin argparse declarations; each command's real
work (the web stack, the database drivers, the host daemon, the HTTP client) is imported when
it runs, so every command parses in any install and runs in one with its extra
(``_EXTRAS``; tests/e2e/test_packaging.py). A package that adds commands (the connector, the
host daemon) exposes ``add_commands(subparsers)`` and is listed in ``_COMMAND_MODULES``.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Final, TypeAlias

from . import __version__

if TYPE_CHECKING:
    from .server.config import ServerConfig

__all__ = ["build_parser", "main"]

EXIT_INTERRUPTED: Final = 130  # Ctrl-C (128 + SIGINT)
EXIT_BROKEN_PIPE: Final = 141  # stdout closed by its reader (128 + SIGPIPE)
EXIT_INTERNAL: Final = 70  # a bug of an API command (sysexits' EX_SOFTWARE)

DEFAULT_UP_DATA_DIR: Final = "./data"
DEFAULT_UP_HOST: Final = "127.0.0.1"
DEFAULT_UP_PORT: Final = 8080

# Packages that declare subcommands with `add_commands(subparsers)`.
_COMMAND_MODULES: Final = (
    "devyard.client.commands",
    "devyard.client.adb_commands",
    "devyard.client.asset_commands",
    "devyard.client.token_commands",
    "devyard.client.instance_commands",
    "devyard.client.tunnel_commands",
    "devyard.client.login_commands",
    "devyard.client.billing_commands",
    "devyard.client.account_commands",  # after commands: it adds to `org`
    "devyard.hostd.commands",
    "devyard.connector.commands",
)

_CONNECTOR_COMMANDS: Final = "devyard.connector.commands"

# What a command needs beyond `pip install devyard` (the connector): pyproject's extras.
_EXTRAS: Final[Mapping[str, str]] = {
    "up": "server,hostd",
    "server": "server",
    "admin": "server",
    "hostd": "hostd",
    "connector quick": "client",
}
_CLIENT_EXTRA: Final = "client"  # every other command outside the connector calls the API

_METRICS_HELP: Final = (
    "serve Prometheus /metrics on this operator port (env DEVYARD_METRICS_LISTEN; keep it "
    "private: docs/operations.md)"
)

Sub: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


def _server_config(
    args: argparse.Namespace, env: Mapping[str, str], defaults: Mapping[str, object]
) -> object:
    from .server.config import load_server_config  # noqa: PLC0415

    flags = {
        "data_dir": args.data_dir,
        "database_url": getattr(args, "database_url", None),
        "public_url": getattr(args, "public_url", None),
        "listen": getattr(args, "listen", None),
        "link_listen": getattr(args, "link_listen", None),
        "tls_cert": getattr(args, "tls_cert", None),
        "tls_key": getattr(args, "tls_key", None),
        "tls_self_signed": True if getattr(args, "tls", False) else None,
        "allow_plain_http": True if getattr(args, "allow_plain_http", False) else None,
        "metrics_listen": getattr(args, "metrics_listen", None),
        "replica_id": getattr(args, "replica_id", None),
    }
    return load_server_config(
        flags=flags,
        env=env,
        file=Path(args.config) if args.config else None,
        defaults=defaults,
    )


def _configure_logging(level: str, fmt: str) -> None:
    from ._process import setup_logging, tune_collector  # noqa: PLC0415

    setup_logging(level, fmt=fmt)
    tune_collector()


def _run_server_command(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    import trio  # noqa: PLC0415

    from .server.config import ConfigError, ServerConfig  # noqa: PLC0415
    from .server.serve import run_admin_bootstrap, run_server  # noqa: PLC0415
    from .server.store import errors as store_errors  # noqa: PLC0415
    from .server.tls import TLSFilesError  # noqa: PLC0415

    defaults: dict[str, object] = {}
    if args.command == "up":
        # up's own host daemon links over a loopback raw link port (docs/edge.md): no
        # WebSocket masking and framing between two parts of one machine.
        defaults = {"data_dir": DEFAULT_UP_DATA_DIR, "link_listen": "127.0.0.1:0"}
        if args.port is not None or args.host is not None:
            host = args.host or DEFAULT_UP_HOST
            port = DEFAULT_UP_PORT if args.port is None else args.port
            args.listen = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    try:
        config = _server_config(args, env, defaults)
    except ConfigError as exc:
        print(f"devyard: error: {exc}", file=sys.stderr)
        return 2
    assert isinstance(config, ServerConfig)
    _configure_logging(args.log_level, args.log_format)
    if args.command in ("up", "server"):  # optional device-request traces (docs/operations.md)
        from .core import tracing  # noqa: PLC0415

        sides = (tracing.SERVER, tracing.HOSTD) if args.command == "up" else (tracing.SERVER,)
        try:
            tracing.enable_named(env.get(tracing.EXPORTER_ENV), *sides)
        except tracing.TracingError as exc:
            print(f"devyard: error: {exc}", file=sys.stderr)
            return 2
    try:
        if args.command == "admin" and args.admin_command == "host-token":
            return _host_token(config, args.action, args.host)
        if args.command == "admin":
            return trio.run(
                lambda: run_admin_bootstrap(
                    config, org_name=args.org, user_name=args.user, out=sys.stdout
                )
            )
        if args.command == "up":
            from .up import run_up  # noqa: PLC0415

            return trio.run(lambda: run_up(config, out=sys.stdout))
        return trio.run(lambda: run_server(config, out=sys.stdout, bootstrap=False))
    except (store_errors.StoreUnavailable, store_errors.MigrationError, TLSFilesError) as exc:
        print(f"devyard: error: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:  # e.g. the listen address is in use
        print(f"devyard: error: {exc}", file=sys.stderr)
        return 1


def _add_server_options(parser: argparse.ArgumentParser, *, data_dir_help: str) -> None:
    parser.add_argument("--data-dir", metavar="DIR", help=data_dir_help)
    parser.add_argument(
        "--database-url",
        metavar="URL",
        help="postgresql://... (env DEVYARD_DATABASE_URL); default: SQLite in the data dir",
    )
    parser.add_argument(
        "--config", metavar="FILE", help="a .toml or .yaml config file (env DEVYARD_CONFIG)"
    )
    parser.add_argument(
        "--log-level", default="info", choices=("debug", "info", "warning", "error")
    )
    parser.add_argument(
        "--log-format", default="text", choices=("text", "json"), help="one line per event"
    )
    parser.set_defaults(run=_run_server_command)


def _add_server_commands(sub: Sub) -> None:
    up = sub.add_parser(
        "up",
        help="run everything on this machine with embedded defaults",
        description="Run devyard on one machine: SQLite in the data dir; on the first start, "
        "an organization and an admin API key (printed once, saved to DIR/admin-api-key).",
    )
    _add_server_options(
        up, data_dir_help=f"where state lives (env DEVYARD_DATA_DIR; default {DEFAULT_UP_DATA_DIR})"
    )
    up.add_argument("--port", type=int, help=f"HTTP port (default {DEFAULT_UP_PORT})")
    up.add_argument("--host", help=f"address to listen on (default {DEFAULT_UP_HOST})")
    up.add_argument("--public-url", metavar="URL", help="base URL clients use")
    up.add_argument(
        "--tls",
        action="store_true",
        help="HTTPS (HTTP/2) with a CA of devyard's own, made in DIR/tls on the first start",
    )
    up.add_argument(
        "--allow-plain-http",
        action="store_true",
        help="serve plain HTTP on a non-loopback --host (a TLS proxy is in front)",
    )
    up.add_argument("--metrics-listen", metavar="HOST:PORT", help=_METRICS_HELP)

    server = sub.add_parser("server", help="run the control plane server")
    _add_server_options(server, data_dir_help="where state lives (env DEVYARD_DATA_DIR)")
    server.add_argument("--listen", metavar="HOST:PORT", help="default 127.0.0.1:8080")
    server.add_argument("--public-url", metavar="URL", help="base URL clients use")
    server.add_argument(
        "--link-listen",
        metavar="HOST:PORT",
        help="also take raw (non-WebSocket) host and connector links here (docs/edge.md)",
    )
    server.add_argument("--tls-cert", metavar="PEM", help="HTTPS: certificate chain (docs/tls.md)")
    server.add_argument("--tls-key", metavar="PEM", help="HTTPS: its private key")
    server.add_argument(
        "--allow-plain-http",
        action="store_true",
        help="serve plain HTTP on a non-loopback address (a TLS proxy is in front)",
    )
    server.add_argument("--metrics-listen", metavar="HOST:PORT", help=_METRICS_HELP)
    server.add_argument(
        "--replica-id",
        metavar="ID",
        help="this replica's name in logs, metrics and /readyz (env DEVYARD_REPLICA_ID; "
        "default: one made once and kept in the data dir)",
    )

    admin = sub.add_parser("admin", help="operator commands with direct store access")
    admin_sub = admin.add_subparsers(dest="admin_command", metavar="COMMAND", required=True)
    bootstrap = admin_sub.add_parser(
        "bootstrap",
        help="create an organization (if missing) with an admin user and print a new API key",
    )
    _add_server_options(bootstrap, data_dir_help="the server's data dir (env DEVYARD_DATA_DIR)")
    bootstrap.add_argument("--org", required=True, metavar="NAME", help="organization name")
    bootstrap.add_argument("--user", default="admin", metavar="NAME", help="default: admin")
    host_token = admin_sub.add_parser(
        "host-token",
        help="host tokens for devyard hostd: create (the default; printed once), list, "
        "revoke HOST_ID (its link is closed within seconds), rotate HOST_ID (a new token)",
    )
    _add_server_options(host_token, data_dir_help="the server's data dir (env DEVYARD_DATA_DIR)")
    host_token.add_argument(
        "action", nargs="?", default="create", choices=("create", "list", "revoke", "rotate")
    )
    host_token.add_argument("host", nargs="?", metavar="HOST_ID", help="for revoke and rotate")


def _host_token(config: ServerConfig, action: str, host: str | None) -> int:
    """``devyard admin host-token [create|list|revoke HOST_ID|rotate HOST_ID]``: the data
    dir's file, or with ``[cluster]`` the table the replicas share (docs/scale-out.md)."""
    import trio  # noqa: PLC0415

    if action in ("revoke", "rotate") and not host:
        print(f"devyard: error: host-token {action} needs a HOST_ID", file=sys.stderr)
        return 2
    return trio.run(_host_token_async, config, action, host)


async def _host_token_async(config: ServerConfig, action: str, host: str | None) -> int:
    from contextlib import AsyncExitStack  # noqa: PLC0415

    from .server.cluster.serve import clustered  # noqa: PLC0415
    from .server.cluster.tokens import open_host_tokens  # noqa: PLC0415
    from .server.serve import open_configured_store  # noqa: PLC0415

    shared = clustered(config)
    async with AsyncExitStack() as stack:
        if shared:
            await stack.enter_async_context(open_configured_store(config))  # migrates
        elif action == "create":
            config.data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        tokens = await stack.enter_async_context(open_host_tokens(config))
        where = "every replica" if shared else "a running server"
        if action == "create":
            host_id, token = await tokens.create()
            print(f"host {host_id}; new host token (shown once):")
            print(token)
            return 0
        if action == "list":
            for host_id in await tokens.live_host_ids():
                print(host_id)
            return 0
        assert host is not None
        if action == "revoke":
            if not await tokens.revoke_host(host):
                print(f"devyard: error: no host token for {host}", file=sys.stderr)
                return 1
            print(f"host {host}: token revoked ({where} closes its link within seconds)")
            return 0
        rotated = await tokens.rotate_host(host)
        if rotated is None:
            print(f"devyard: error: no host token for {host}", file=sys.stderr)
            return 1
        print(f"host {host}; new host token (shown once; the old one no longer links):")
        print(rotated)
        return 0
    raise AssertionError("unreachable")


def build_parser(*, connector_only: bool = False) -> argparse.ArgumentParser:
    """The whole command tree; *connector_only*: just ``devyard connector ...``, so the
    connector's start does not pay for declaring every API command (docs/cli.md)."""
    parser = argparse.ArgumentParser(
        prog="devyard", description="An open, self-hostable remote device service."
    )
    parser.add_argument("--version", action="version", version=f"devyard {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    if connector_only:
        importlib.import_module(_CONNECTOR_COMMANDS).add_commands(sub)
        return parser
    _add_server_commands(sub)
    for name in _COMMAND_MODULES:
        importlib.import_module(name).add_commands(sub)
    _add_completion(sub, parser)
    return parser


def _add_completion(sub: Sub, root: argparse.ArgumentParser) -> None:
    """``devyard completion bash|zsh|fish``: needs no server and no extra."""

    def run(args: argparse.Namespace, env: Mapping[str, str]) -> int:
        from .client.completion import script  # noqa: PLC0415

        sys.stdout.write(script(root, args.shell))
        return 0

    completion = sub.add_parser(
        "completion",
        help="print a shell completion script (bash, zsh, fish)",
        description="source <(devyard completion bash); for zsh and fish: docs/cli.md",
    )
    completion.add_argument("shell", choices=("bash", "zsh", "fish"))
    completion.set_defaults(run=run)


def _extra_of(args: argparse.Namespace) -> str | None:
    if args.command == "connector":
        return _EXTRAS.get(f"connector {args.connector_command}")
    return _EXTRAS.get(args.command, _CLIENT_EXTRA)


def _quiet_broken_pipe() -> int:
    """stdout's reader went away (``| head -1``): exit like a Unix tool killed by SIGPIPE,
    silently; the interpreter's last flush goes to /dev/null instead of raising again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    return EXIT_BROKEN_PIPE


def _only(group: BaseExceptionGroup[BaseException], kind: type[BaseException]) -> bool:
    return all(
        isinstance(e, kind) or (isinstance(e, BaseExceptionGroup) and _only(e, kind))
        for e in group.exceptions
    )


def main(argv: Sequence[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else list(argv)
    args = build_parser(connector_only=words[:1] == ["connector"]).parse_args(words)
    try:
        code: int = args.run(args, os.environ)
        sys.stdout.flush()
        # The interpreter's last collections walk every object the run made or imported:
        # seconds for a server with its libraries (most of `devyard up`'s stop time). Nothing
        # is left to finalize that matters (every resource was closed by its owner), so the
        # collector skips them all.
        gc.freeze()
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return _quiet_broken_pipe()
    except BaseExceptionGroup as group:
        if _only(group, BrokenPipeError):
            return _quiet_broken_pipe()
        if _only(group, KeyboardInterrupt):
            return EXIT_INTERRUPTED
        raise
    except ModuleNotFoundError as exc:
        extra = _extra_of(args)
        if extra is None or (exc.name or "devyard").partition(".")[0] == "devyard":
            raise
        print(
            f"devyard {args.command}: error: {exc}; this command needs devyard[{extra}]: "
            f"pip install 'devyard[{extra}]'",
            file=sys.stderr,
        )
        return 1
    except Exception as exc:
        if _extra_of(args) != _CLIENT_EXTRA or args.command == "connector":
            raise  # a daemon's crash: its traceback is the bug report
        # an API command never shows a traceback: one line, and a code of its own
        text = " ".join(str(exc).split())
        print(
            f"devyard {args.command}: internal error: {type(exc).__name__}: {text} "
            "(please report it)",
            file=sys.stderr,
        )
        return EXIT_INTERNAL
    return code


if __name__ == "__main__":
    sys.exit(main())
