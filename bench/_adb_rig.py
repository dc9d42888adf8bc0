"""What `python -m bench adb` pushes to: a real server (API + edge), a real host daemon linked
to it, and one more virtual Android device behind its own TCP ADB port ("direct"), which
lives next to hostd so that both devices run in the same kind of process.

In-process, as tests/server/gateway/conftest.py does it:
    `open_server(workdir)`  the server, an organization and a host token
    `open_host(...)`        hostd linked to that server, plus the direct device
    `open_rig(workdir)`     both in the calling trio loop

As helper processes, each printing `READY {json}` once it serves and exiting when its stdin
closes (the harness is gone) or on SIGTERM:
    python -m bench._adb_rig all WORKDIR [ws]                 server + hostd + direct device
    python -m bench._adb_rig server WORKDIR                   the server
    python -m bench._adb_rig host WORKDIR URL TOKENFILE [LINK]  hostd + direct device

hostd links over the server's raw link port (LINK, tcp://HOST:PORT; `all` uses it unless
given `ws`), else over the API port's WebSocket.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any, Final

import attrs
import trio

from bench._child import run_with_lifeline
from devyard.hostd.adb import serve_adb_tcp
from devyard.hostd.daemon import HostdConfig, serve_hostd
from devyard.hostd.drivers import DeviceSpec, Platform, open_device
from devyard.hostd.drivers.virtual import VirtualDevice
from devyard.server.api.serve import BoundServer
from devyard.server.bootstrap import bootstrap_organization
from devyard.server.config import ListenAddress, ServerConfig
from devyard.server.edge import HOST_TOKENS_FILE, create_host_token
from devyard.server.serve import open_configured_store, serve_server

READY: Final = "READY "
START_TIMEOUT: Final = 60.0
_REGION: Final = ServerConfig(data_dir=Path(".")).region


@attrs.frozen
class ServerInfo:
    url: str  # the server's base URL
    api_key_file: str  # the organization admin's API key
    host_token_file: str
    link: str  # the raw link port, tcp://127.0.0.1:PORT (hosts and connectors may --link it)


@attrs.frozen
class RigInfo:
    url: str
    api_key_file: str
    direct_port: int  # the direct device's own ADB port on 127.0.0.1


@asynccontextmanager
async def open_server(workdir: Path) -> AsyncIterator[tuple[ServerInfo, BoundServer]]:
    server_dir = workdir / "server"
    config = ServerConfig(
        data_dir=server_dir,
        listen=ListenAddress("127.0.0.1", 0),
        link_listen=ListenAddress("127.0.0.1", 0),
    )
    async with open_configured_store(config) as store:
        made = await bootstrap_organization(store, org_name="bench")
    _, host_token = create_host_token(server_dir / HOST_TOKENS_FILE)
    key_file, token_file = workdir / "api-key", workdir / "host-token"
    key_file.write_text(made.plaintext_key)
    token_file.write_text(host_token)
    async with trio.open_nursery() as nursery:
        bound: BoundServer = await nursery.start(partial(serve_server, config))
        link = f"tcp://127.0.0.1:{bound.link_port}"
        yield ServerInfo(bound.local_url, str(key_file), str(token_file), link), bound
        nursery.cancel_scope.cancel()


async def bench_hostd_config(
    workdir: Path, url: str, token_file: str, *, capacity: int, link: str | None
) -> HostdConfig:
    """hostd of a bench rig: virtual drivers, data in WORKDIR/host, quick reconnects."""
    token = (await trio.Path(token_file).read_text()).strip()
    return HostdConfig(
        server_url=url,
        token=token,
        region=_REGION,
        data_dir=workdir / "host",
        capacity=capacity,
        backoff_base=0.05,
        link=link,
    )


@asynccontextmanager
async def open_host(
    workdir: Path, url: str, token_file: str, link: str | None = None
) -> AsyncIterator[int]:
    """hostd (capacity 2) linked to `url`, and the direct device; yields the direct port."""
    hostd = await bench_hostd_config(workdir, url, token_file, capacity=2, link=link)
    spec = DeviceSpec(Platform.ANDROID, "bench-direct", workdir / "direct-device")
    shutdown = trio.Event()
    async with trio.open_nursery() as nursery, open_device(spec) as device:
        assert isinstance(device, VirtualDevice)
        await nursery.start(partial(serve_hostd, hostd, shutdown=shutdown))
        port: int = await nursery.start(
            lambda task_status: serve_adb_tcp(device, task_status=task_status)
        )
        yield port
        shutdown.set()  # the host stops its instances and reports them while linked
        nursery.cancel_scope.deadline = trio.current_time() + 15


async def wait_host_linked(bound: BoundServer) -> None:
    with trio.fail_after(START_TIMEOUT):
        while not (bound.hosts and bound.hosts.hosts()):  # noqa: ASYNC110
            await trio.sleep(0.02)


@asynccontextmanager
async def open_rig(workdir: Path, *, raw: bool = True) -> AsyncIterator[RigInfo]:
    """Server, hostd (on the raw link port unless not *raw*) and the direct device, all in
    this trio loop."""
    async with (
        open_server(workdir) as (server, bound),
        open_host(
            workdir, server.url, server.host_token_file, server.link if raw else None
        ) as port,
    ):
        await wait_host_linked(bound)
        yield RigInfo(server.url, server.api_key_file, port)


async def _serve(role: str, args: list[str]) -> None:
    def ready(info: Any) -> None:
        print(
            READY + json.dumps(info if isinstance(info, dict) else attrs.asdict(info)), flush=True
        )

    if role == "all":
        async with open_rig(Path(args[0]), raw=args[1:] != ["ws"]) as info:
            ready(info)
            await trio.sleep_forever()
    elif role == "server":
        async with open_server(Path(args[0])) as (server, _):
            ready(server)
            await trio.sleep_forever()
    else:
        workdir, url, token_file, *link = args
        async with open_host(Path(workdir), url, token_file, *link) as port:
            ready({"direct_port": port})
            await trio.sleep_forever()


def main(argv: list[str]) -> int:
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    role, args = argv[0], argv[1:]
    if role not in ("all", "server", "host"):
        print(__doc__, file=sys.stderr)
        return 2
    body: Callable[[], Awaitable[None]] = partial(_serve, role, args)
    trio.run(run_with_lifeline, body)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
