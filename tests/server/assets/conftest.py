"""A real API server (Hypercorn on 127.0.0.1 port 0) over a store on both backends, with the
callers of the API tests, for the asset tests that need the ``/blobs/`` endpoint."""

from __future__ import annotations

from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path

import attrs
import httpx
import pytest
import trio

from devyard.server.api.app import api_state
from devyard.server.api.serve import BoundServer, serve_api
from devyard.server.config import ListenAddress, RateLimitConfig, ServerConfig
from devyard.server.store import Store
from tests.server.api.conftest import Caller, Callers, callers, store

__all__ = ["Caller", "Callers", "Served", "callers", "store"]


@pytest.fixture
def config(tmp_path: Path) -> ServerConfig:
    return ServerConfig(
        data_dir=tmp_path / "data",
        listen=ListenAddress("127.0.0.1", 0),
        shutdown_grace=2,
        rate_limit=RateLimitConfig(enabled=False),
    )


@attrs.frozen
class Served:
    bound: BoundServer
    config: ServerConfig
    http: httpx.AsyncClient

    @property
    def url(self) -> str:
        return self.bound.base_url

    async def upsert(self, caller: Caller, name: str, **fields: object) -> dict[str, object]:
        response = await self.http.put(
            f"{self.url}/v1/assets", json={"name": name, **fields}, headers=caller.headers
        )
        assert response.status_code == 200, response.text
        body: dict[str, object] = response.json()
        return body


@pytest.fixture
async def served(
    nursery: trio.Nursery, store: Store, config: ServerConfig
) -> AsyncIterator[Served]:
    shutdown = trio.Event()
    bound = await nursery.start(
        partial(serve_api, api_state(store, config), shutdown_trigger=shutdown.wait)
    )
    async with httpx.AsyncClient(timeout=60) as http:
        yield Served(bound=bound, config=config, http=http)
    shutdown.set()
