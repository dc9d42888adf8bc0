"""A real devyard server on 127.0.0.1 port 0 for the client tests, on both store backends."""

from __future__ import annotations

from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path

import attrs
import pytest
import trio

from devyard.server.api.app import api_state
from devyard.server.api.serve import BoundServer, serve_api
from devyard.server.bootstrap import bootstrap_organization
from devyard.server.config import ListenAddress, RateLimitConfig, ServerConfig
from devyard.server.store import open_store


@attrs.frozen
class Server:
    url: str
    admin_key: str = attrs.field(repr=False)
    org_id: str


@pytest.fixture
def server_config(tmp_path: Path) -> ServerConfig:
    return ServerConfig(
        data_dir=tmp_path,
        listen=ListenAddress("127.0.0.1", 0),
        rate_limit=RateLimitConfig(rate=1000.0, burst=1000),
    )


@pytest.fixture
async def server(
    nursery: trio.Nursery, database_target: str, server_config: ServerConfig
) -> AsyncIterator[Server]:
    async with open_store(database_target) as store:
        boot = await bootstrap_organization(store, org_name="acme", user_name="alice")
        shutdown = trio.Event()
        bound: BoundServer = await nursery.start(
            partial(serve_api, api_state(store, server_config), shutdown_trigger=shutdown.wait)
        )
        yield Server(url=bound.base_url, admin_key=boot.plaintext_key, org_id=boot.organization.id)
        shutdown.set()
