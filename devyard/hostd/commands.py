"""``devyard hostd``: the argparse declaration; the daemon is imported when it runs."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Final, TypeAlias

if TYPE_CHECKING:
    from .drivers.emulator import EmulatorConfig
    from .netpolicy import NetPolicy

Sub: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"

__all__ = ["add_commands"]

DEFAULT_HOSTD_DATA_DIR: Final = "./hostd-data"


def _parse_link(text: str) -> str:
    from ..core.transports import check_link_url  # noqa: PLC0415

    try:
        return check_link_url(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _parse_network(text: str) -> str:
    from .netpolicy import parse_networks  # noqa: PLC0415

    try:
        parse_networks([text])
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


# hostd/browser's defaults, repeated here so that building the parser imports nothing
_CHROMIUM: Final = "/usr/bin/chromium"
_BROWSER_MEMORY_MIB: Final = 2048


def _parse_listen(text: str) -> tuple[str, int]:
    host, colon, port = text.rpartition(":")
    if not colon or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    return host.strip("[]") or "127.0.0.1", int(port)


def _run_hostd(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    import trio  # noqa: PLC0415

    from .._process import setup_logging, tune_collector  # noqa: PLC0415
    from ..core import tracing  # noqa: PLC0415
    from .browser import BrowserConfig  # noqa: PLC0415
    from .daemon import HostdConfig, run_hostd  # noqa: PLC0415
    from .netpolicy import NetPolicy, parse_networks  # noqa: PLC0415

    try:
        token = Path(args.token_file).read_text().strip()
    except OSError as exc:
        print(f"devyard hostd: error: cannot read the token file: {exc}", file=sys.stderr)
        return 2
    from .drivers import InvalidSpecError, drivers_by_name  # noqa: PLC0415
    from .drivers.emulator import EmulatorConfig  # noqa: PLC0415
    from .drivers.xcode import XcodeConfig  # noqa: PLC0415

    drivers = tuple(dict.fromkeys(d.strip() for d in args.drivers.split(",") if d.strip()))
    unknown = [d for d in drivers if d not in drivers_by_name()]
    if not drivers or unknown:
        known = ", ".join(sorted(drivers_by_name()))
        print(
            f"devyard hostd: error: --drivers takes a comma-separated list of: {known}"
            + (f" (unknown: {', '.join(unknown)})" if unknown else ""),
            file=sys.stderr,
        )
        return 2
    if args.browser_memory_mib < 64:
        print("devyard hostd: error: --browser-memory-mib must be at least 64", file=sys.stderr)
        return 2
    if args.capacity < 1:
        print("devyard hostd: error: --capacity must be at least 1", file=sys.stderr)
        return 2
    emulator = None
    policy = NetPolicy(allow=parse_networks(args.allow_network))
    setup_logging(args.log_level, fmt=args.log_format)
    tune_collector()
    try:  # optional device-request traces (docs/operations.md, "Tracing")
        tracing.enable_named(env.get(tracing.EXPORTER_ENV), tracing.HOSTD)
    except tracing.TracingError as exc:
        print(f"devyard hostd: error: {exc}", file=sys.stderr)
        return 2
    if "android-emulator" in drivers:
        try:  # the environment is read here, at the edge, and handed down
            emulator = _emulator_config(EmulatorConfig.from_env(env), args, policy)
        except (InvalidSpecError, OSError) as exc:
            print(f"devyard hostd: error: {exc}", file=sys.stderr)
            return 2
    config = HostdConfig(
        server_url=args.server,
        token=token,
        region=args.region,
        data_dir=Path(args.data_dir),
        capacity=args.capacity,
        drivers=drivers,
        link=args.link,
        emulator=emulator,
        xcode=XcodeConfig.from_env(env),  # DEVYARD_XCODE_TOOLS, DEVYARD_XCODE_ALLOW_NON_MACOS
        net_policy=policy,
        ca_file=Path(args.ca_file) if args.ca_file else None,
        browser=BrowserConfig(
            executable=Path(args.chromium), memory_limit=args.browser_memory_mib * 1024 * 1024
        ),
        metrics_listen=args.metrics_listen,
    )
    return trio.run(lambda: run_hostd(config, err=sys.stderr))


def _emulator_config(
    config: EmulatorConfig, args: argparse.Namespace, policy: NetPolicy
) -> EmulatorConfig:
    """``--emulator-netns`` and the policy into the driver's config; namespaces a crash of
    this hostd (same data directory) left behind are swept now (netns.py)."""
    import logging  # noqa: PLC0415

    import attrs  # noqa: PLC0415

    from . import netns  # noqa: PLC0415
    from .drivers.emulator import Mode  # noqa: PLC0415
    from .drivers.emulator.isolation import use_netns  # noqa: PLC0415

    config = attrs.evolve(
        config,
        netns=args.emulator_netns,
        netns_prefix=netns.owner_prefix(Path(args.data_dir)),
        net_policy=policy,
    )
    if config.mode is Mode.LAUNCH and use_netns(config):  # required + unavailable: refused
        ip = netns.find_ip(config.tool_env().get("PATH"))
        assert ip is not None  # use_netns checked
        for name in netns.sweep(ip, config.netns_prefix):
            logging.getLogger(__name__).warning("removed a leftover network namespace %s", name)
    return config


def add_commands(sub: Sub) -> None:
    hostd = sub.add_parser(
        "hostd",
        help="run a host daemon that links to a server and runs its instances",
        description="Dial the server's edge (outbound only), register this host and run the "
        "instances the server places here. Reconnects with backoff; a refused token exits 3, "
        "a host older than the server takes exits 4.",
    )
    hostd.add_argument("--server", required=True, metavar="URL", help="the server's base URL")
    hostd.add_argument(
        "--link",
        type=_parse_link,
        metavar="URL",
        help="link on the server's raw link port (tcp://HOST:PORT or tls://HOST:PORT) "
        "instead of the WebSocket on --server",
    )
    hostd.add_argument(
        "--ca-file",
        metavar="PEM",
        help="trust this CA for the server's certificate, besides the system's (docs/tls.md)",
    )
    hostd.add_argument(
        "--token-file", required=True, metavar="FILE", help="file holding the host token"
    )
    hostd.add_argument("--region", required=True, metavar="NAME", help="this host's region")
    hostd.add_argument("--capacity", type=int, default=4, help="instances at once (default 4)")
    hostd.add_argument(
        "--drivers",
        default="virtual",
        help="the device drivers this host runs, comma-separated: virtual (default), "
        "android-emulator; each order runs on the driver for its platform",
    )
    hostd.add_argument(
        "--data-dir", default=DEFAULT_HOSTD_DATA_DIR, metavar="DIR", help="instance sandboxes"
    )
    hostd.add_argument(
        "--allow-network",
        action="append",
        default=[],
        type=_parse_network,
        metavar="CIDR",
        help="a private network devices may dial and initial apps may come from (repeatable; "
        "by default only public addresses: docs/tunnels.md 'Egress')",
    )
    hostd.add_argument(
        "--emulator-netns",
        choices=("auto", "required", "off"),
        default="auto",
        help="run each emulator this host launches in a network namespace of its own, "
        "reaching only its instance's egress proxy: auto (default: when root on Linux, else "
        "warn), required (refuse emulators without one), off (docs/tunnels.md 'Egress')",
    )
    hostd.add_argument(
        "--chromium",
        default=_CHROMIUM,
        metavar="PATH",
        help=f"the browser of spec.sandbox.playwrightAndroid (default {_CHROMIUM}; "
        "docs/sandbox.md)",
    )
    hostd.add_argument(
        "--browser-memory-mib",
        type=int,
        default=_BROWSER_MEMORY_MIB,
        metavar="MIB",
        help="resident memory one instance's browser may use before it is ended "
        f"(default {_BROWSER_MEMORY_MIB})",
    )
    hostd.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"))
    hostd.add_argument("--log-format", default="text", choices=("text", "json"))
    hostd.add_argument(
        "--metrics-listen",
        type=_parse_listen,
        metavar="HOST:PORT",
        help="serve /metrics here (the operator port)",
    )
    hostd.set_defaults(run=_run_hostd)
