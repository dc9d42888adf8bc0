"""A real server (`serve_server`: API, edge, instances service) with real host daemons on
127.0.0.1, and organizations made by the bootstrap the operator runs."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path

import attrs
import httpx
import trio

from devyard.hostd.daemon import HostdConfig, serve_hostd
from devyard.hostd.supervisor import Supervisor
from devyard.server.api.serve import BoundServer
from devyard.server.bootstrap import bootstrap_organization
from devyard.server.config import ListenAddress, RateLimitConfig, ServerConfig
from devyard.server.edge import HOST_TOKENS_FILE, create_host_token
from devyard.server.hosts import HostInfo
from devyard.server.serve import open_configured_store, serve_server
from tests.polling import eventually


@attrs.frozen
class Org:
    id: str
    key: str

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}


@attrs.define
class Fleet:
    config: ServerConfig
    bound: BoundServer
    http: httpx.AsyncClient
    nursery: trio.Nursery
    tmp_path: Path
    supervisors: dict[str, Supervisor] = attrs.field(factory=dict)
    shutdowns: dict[str, trio.Event] = attrs.field(factory=dict)

    @property
    def url(self) -> str:
        return self.bound.local_url

    def hosts(self) -> list[HostInfo]:
        assert self.bound.hosts is not None
        return self.bound.hosts.hosts()

    async def add_host(self, name: str, *, capacity: int) -> str:
        """A real host daemon with its own token; returns its host id once it is linked."""
        host_id, token = create_host_token(self.config.data_dir / HOST_TOKENS_FILE)
        config = HostdConfig(
            server_url=self.url,
            token=token,
            region="local",
            data_dir=self.tmp_path / name,
            capacity=capacity,
            backoff_base=0.05,
            link=None
            if self.bound.link_port is None
            else f"tcp://127.0.0.1:{self.bound.link_port}",
        )
        shutdown = trio.Event()
        self.shutdowns[host_id] = shutdown
        self.supervisors[host_id] = await self.nursery.start(
            partial(serve_hostd, config, shutdown=shutdown)
        )
        await eventually(lambda: any(h.id == host_id for h in self.hosts()))
        return host_id


async def make_org(config: ServerConfig, name: str) -> Org:
    async with open_configured_store(config) as store:
        made = await bootstrap_organization(store, org_name=name, user_name=f"{name}-admin")
    return Org(made.organization.id, made.plaintext_key)


def fleet_config(tmp_path: Path) -> ServerConfig:
    return ServerConfig(
        data_dir=tmp_path / "server",
        listen=ListenAddress("127.0.0.1", 0),
        shutdown_grace=2,
        rate_limit=RateLimitConfig(enabled=False),
    )


@asynccontextmanager
async def open_fleet(config: ServerConfig, tmp_path: Path) -> AsyncIterator[Fleet]:
    async with trio.open_nursery() as nursery:
        bound: BoundServer = await nursery.start(partial(serve_server, config))
        async with httpx.AsyncClient(timeout=30) as http:
            yield Fleet(config, bound, http, nursery, tmp_path)
        nursery.cancel_scope.cancel()
