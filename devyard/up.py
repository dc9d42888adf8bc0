"""``devyard up``: the server and one host daemon with the virtual driver, in one process.

The server and the host daemon must not import each other (import-linter); this top-level
module is where the two meet. The host's token is made on the first start and kept in
``DATA_DIR/hostd/host-token`` (0600); the host's own data (instance sandboxes) live under
``DATA_DIR/hostd``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Final, TextIO

import trio

from .hostd.daemon import HostdConfig, serve_hostd
from .server.config import ServerConfig
from .server.edge import HOST_TOKENS_FILE, create_host_token
from .server.serve import raw_link_url, run_server

if TYPE_CHECKING:
    from .server.api.serve import BoundServer

__all__ = ["UP_HOST_CAPACITY", "ensure_up_host_token", "run_up", "up_hostd_config"]

UP_HOST_CAPACITY: Final = 4


def ensure_up_host_token(data_dir: Path) -> str:
    """The token of ``up``'s own host daemon, created (and registered) on the first start."""
    token_file = data_dir / "hostd" / "host-token"
    if token_file.exists():
        return token_file.read_text().strip()
    _, token = create_host_token(data_dir / HOST_TOKENS_FILE)
    token_file.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(token_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(token + "\n")
    return token


def up_hostd_config(
    config: ServerConfig, server_url: str, token: str, link: str | None = None
) -> HostdConfig:
    return HostdConfig(
        server_url=server_url,
        token=token,
        region=config.region,
        data_dir=config.data_dir / "hostd",
        capacity=UP_HOST_CAPACITY,
        drivers=("virtual",),
        link=link,
        # the server's certificate comes from up's own CA: the host fetches asset URLs there
        ca_file=config.tls_dir / "ca.pem" if config.tls_self_signed else None,
    )


async def run_up(config: ServerConfig, *, out: TextIO) -> int:
    """The server (with first-start bootstrap) and its host daemon, until SIGINT/SIGTERM."""
    await trio.to_thread.run_sync(lambda: config.data_dir.mkdir(mode=0o700, exist_ok=True))
    token = await trio.to_thread.run_sync(ensure_up_host_token, config.data_dir)

    async def hostd(bound: BoundServer, shutdown: trio.Event) -> None:
        # The raw link port when one is open (up opens one on loopback), else the WebSocket.
        link = None
        if config.link_listen is not None and bound.link_port is not None:
            link = raw_link_url(config, bound.link_port)
        hostd_config = up_hostd_config(config, bound.local_url, token, link)
        await serve_hostd(hostd_config, shutdown=shutdown)

    return await run_server(config, out=out, bootstrap=True, companion=hostd)
