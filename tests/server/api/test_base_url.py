"""Issue 14 finding 11: the URLs the API hands out never come from the client's Host header.

Without a configured public URL they name the address of the socket that accepted the request
(the listening address, with the port actually bound); with one, that URL. A client that sends
``Host: evil.example`` gets neither a signed upload URL nor a region URL pointing there.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

import httpx
import pytest
import trio

from devyard.server.api.app import api_state
from devyard.server.api.serve import BoundServer, serve_api
from devyard.server.config import ListenAddress, ServerConfig
from devyard.server.store import Store

from .conftest import Callers

_EVIL = {"Host": "evil.example:6666", "X-Forwarded-Host": "evil.example"}


async def _urls(store: Store, config: ServerConfig, callers: Callers) -> tuple[int, list[str]]:
    async with trio.open_nursery() as nursery:
        shutdown = trio.Event()
        bound: BoundServer = await nursery.start(
            partial(serve_api, api_state(store, config), shutdown_trigger=shutdown.wait)
        )
        target = f"http://127.0.0.1:{bound.port}"
        async with httpx.AsyncClient(base_url=target, timeout=30) as http:
            asset = await http.put(
                "/v1/assets", json={"name": "a"}, headers={**callers.admin.headers, **_EVIL}
            )
            regions = await http.get("/regions", headers={**callers.admin.headers, **_EVIL})
        shutdown.set()
    assert asset.status_code == 200 and regions.status_code == 200, (asset.text, regions.text)
    body = asset.json()
    return bound.port, [
        body["signedUploadUrl"],
        body["signedDownloadUrl"],
        regions.json()[0]["url"],
    ]


@pytest.mark.parametrize("host", ["127.0.0.1", "0.0.0.0"])
async def test_without_a_public_url_urls_name_the_listening_address(
    store: Store, callers: Callers, tmp_path: Path, host: str
) -> None:
    config = ServerConfig(data_dir=tmp_path, listen=ListenAddress(host, 0))
    port, urls = await _urls(store, config, callers)
    for url in urls:
        assert url.startswith(f"http://127.0.0.1:{port}"), url
        assert "evil" not in url


async def test_a_public_url_wins_over_everything(
    store: Store, callers: Callers, tmp_path: Path
) -> None:
    config = ServerConfig(
        data_dir=tmp_path,
        listen=ListenAddress("127.0.0.1", 0),
        public_url="https://devyard.example.com",
    )
    _, urls = await _urls(store, config, callers)
    assert all(url.startswith("https://devyard.example.com") for url in urls), urls
