"""``devyard adb forward`` and ``devyard adb connect``: the real ``adb`` reaches an instance.

``forward`` runs in the foreground: it checks the instance's ADB WebSocket, listens on
127.0.0.1, prints the address and carries connections until Ctrl-C or until the instance ends.
``connect`` starts the same forwarder in the background (its own session, so closing the
terminal leaves it running; it ends with the instance), waits until it listens, and runs
``adb connect`` for the user. This module only declares the commands.
"""

from __future__ import annotations

import argparse
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Final, TextIO

from .commands import _common, _leaf  # the shared options of every API command

if TYPE_CHECKING:
    from .client import AsyncClient

__all__ = ["add_commands", "add_connect"]

_START_TIMEOUT_S: Final = 20.0


async def _forward(client: AsyncClient, args: argparse.Namespace, out: TextIO) -> None:
    import trio  # noqa: PLC0415

    from .adb_forward import resolve_target, serve_forward, watch_instance  # noqa: PLC0415

    target = await resolve_target(client, args.instance_id)
    async with trio.open_nursery() as nursery:
        port, url = await nursery.start(
            lambda task_status: serve_forward(
                target,
                host=args.host,
                port=args.port,
                raw=not args.websocket,
                task_status=task_status,
            )
        )
        how = "WebSocket" if url.startswith(("ws://", "wss://")) else "the raw link port"
        print(
            f"forwarding {args.host}:{port} -> {target.instance_id} (ADB over {how})",
            file=out,
            flush=True,
        )
        print(f"run: adb connect {args.host}:{port}", file=out, flush=True)
        reason = await watch_instance(client, target.instance_id)
        print(f"stopping: {reason}", file=out, flush=True)
        nursery.cancel_scope.cancel()


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def _wait_listening(host: str, port: int, child: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + _START_TIMEOUT_S
    while time.monotonic() < deadline:
        if child.poll() is not None:
            text = log.read_text(errors="replace").strip()
            raise SystemExit(f"devyard: error: the forwarder stopped: {text or 'no output'}")
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    child.terminate()
    raise SystemExit(f"devyard: error: the forwarder did not listen within {_START_TIMEOUT_S:g} s")


def _connect(args: argparse.Namespace, env: dict[str, str]) -> int:
    """Synchronous: start the background forwarder, then `adb connect`."""
    adb = args.adb or shutil.which("adb")
    if adb is None:
        print("devyard: error: adb is not installed (or pass --adb PATH)", file=sys.stderr)
        return 2
    port = args.port or _free_port(args.host)
    command = [
        sys.executable,
        "-m",
        "devyard",
        "adb",
        "forward",
        args.instance_id,
        "--host",
        args.host,
        "--port",
        str(port),
    ]
    for flag, value in (
        ("--base-url", args.base_url),
        ("--profile", args.profile),
        ("--api-key-file", args.api_key_file),
    ):
        if value:
            command += [flag, value]
    # a key given as --api-key goes to the child in its environment, not its command line
    env = {**env, "DEVYARD_API_KEY": args.api_key} if args.api_key else env
    log = Path(tempfile.gettempdir()) / f"devyard-adb-forward-{args.instance_id}.log"
    with open(log, "wb") as sink:
        child = subprocess.Popen(  # noqa: S603 - our own interpreter and module
            command,
            stdin=subprocess.DEVNULL,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=env,
        )
    _wait_listening(args.host, port, child, log)
    address = f"{args.host}:{port}"
    result = subprocess.run([adb, "connect", address], env=env, check=False)  # noqa: S603
    print(
        f"forwarder pid {child.pid} on {address} (log {log}); it stops when the instance "
        f"ends, or with: kill {child.pid}"
    )
    return result.returncode


def _run_connect(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    return _connect(args, dict(env))


def add_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    common = _common()
    adb = sub.add_parser("adb", help="reach Android instances with the real adb").add_subparsers(
        dest="adb_command", metavar="COMMAND", required=True
    )
    forward = _leaf(
        adb,
        "forward",
        _forward,
        "listen on 127.0.0.1 and carry adb connections to an instance",
        common,
    )
    _forward_options(forward)
    add_connect(adb, common)


def add_connect(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    """``connect`` under *sub*: ``devyard adb connect`` and ``devyard android connect``."""
    connect = sub.add_parser(
        "connect",
        parents=[common],
        help="forward in the background and run adb connect",
        description="forward in the background and run adb connect",
    )
    connect.set_defaults(run=_run_connect)
    connect.add_argument("--adb", metavar="PATH", help="the adb binary (default: adb on PATH)")
    _forward_options(connect)


def _forward_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("instance_id", metavar="INSTANCE_ID")
    parser.add_argument("--port", type=int, default=0, help="local port (default: any free)")
    parser.add_argument("--host", default="127.0.0.1", help="local address (default 127.0.0.1)")
    parser.add_argument(
        "--websocket",
        action="store_true",
        help="always carry ADB over adbWebSocketUrl, even when the server offers its raw link port",
    )
