"""A real server (API + edge + instances service) and a real host daemon on 127.0.0.1, with an
organization, its admin key, and helpers to create instances through the public API."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import attrs
import httpx
import pytest
import trio

from devyard.hostd.daemon import HostdConfig, serve_hostd
from devyard.hostd.supervisor import Supervisor
from devyard.server.api.serve import BoundServer
from devyard.server.bootstrap import bootstrap_organization
from devyard.server.config import ListenAddress, ServerConfig
from devyard.server.edge import HOST_TOKENS_FILE, create_host_token
from devyard.server.serve import open_configured_store, serve_server


@attrs.define
class Rig:
    bound: BoundServer
    api_key: str
    client: httpx.AsyncClient
    supervisor: Supervisor
    api_key_file: Path

    @property
    def url(self) -> str:
        return self.bound.local_url

    async def create(self, kind: str = "android", **spec: Any) -> dict[str, Any]:
        """A new instance, ready (``wait=true``)."""
        response = await self.client.post(
            f"/v1/{kind}_instances", params={"wait": "true"}, json={"spec": spec}
        )
        assert response.status_code in (200, 201), response.text
        body: dict[str, Any] = response.json()
        assert body["status"]["state"] == "ready", body
        return body

    async def delete(self, instance: dict[str, Any]) -> None:
        kind = instance["metadata"]["id"].split("_")[0]
        response = await self.client.delete(f"/v1/{kind}_instances/{instance['metadata']['id']}")
        assert response.status_code == 200, response.text


@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[Rig]:
    async with open_gateway_rig(tmp_path) as made:
        yield made


@asynccontextmanager
async def open_gateway_rig(tmp_path: Path, *, raw: bool = False) -> AsyncIterator[Rig]:
    """The rig; with *raw*, the server opens its raw link port and hostd links there."""
    server_dir = tmp_path / "server"
    config = ServerConfig(
        data_dir=server_dir,
        listen=ListenAddress("127.0.0.1", 0),
        link_listen=ListenAddress("127.0.0.1", 0) if raw else None,
    )
    async with open_configured_store(config) as store:
        made = await bootstrap_organization(store, org_name="acme")
    _, host_token = create_host_token(server_dir / HOST_TOKENS_FILE)
    async with trio.open_nursery() as nursery:
        bound: BoundServer = await nursery.start(partial(serve_server, config))
        shutdown = trio.Event()
        hostd = HostdConfig(
            server_url=bound.local_url,
            token=host_token,
            region=config.region,
            data_dir=tmp_path / "host",
            capacity=4,
            backoff_base=0.05,
            link=f"tcp://127.0.0.1:{bound.link_port}" if raw else None,
        )
        async with trio.open_nursery() as host_nursery:
            supervisor = await host_nursery.start(partial(serve_hostd, hostd, shutdown=shutdown))
            key_file = tmp_path / "api-key"
            key_file.write_text(made.plaintext_key)
            headers = {"Authorization": f"Bearer {made.plaintext_key}"}
            async with httpx.AsyncClient(base_url=bound.local_url, headers=headers) as client:
                with trio.fail_after(10):
                    while not (bound.hosts and bound.hosts.hosts()):  # noqa: ASYNC110
                        await trio.sleep(0.02)
                yield Rig(bound, made.plaintext_key, client, supervisor, key_file)
            shutdown.set()  # the host stops its instances and reports them while linked
            host_nursery.cancel_scope.deadline = trio.current_time() + 15
        nursery.cancel_scope.cancel()


async def upgrade_refusal(url: str, headers: dict[str, str] | None = None) -> tuple[int, Any]:
    """Try a WebSocket upgrade with a plain socket; return the refusal's status and JSON body.

    (trio-websocket leaves the socket of a refused handshake to the GC: this does not.)
    """
    parts = urlsplit(url)
    assert parts.hostname is not None
    target = parts.path + (f"?{parts.query}" if parts.query else "")
    lines = [
        f"GET {target} HTTP/1.1",
        f"Host: {parts.netloc}",
        "Upgrade: websocket",
        "Connection: Upgrade",
        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==",
        "Sec-WebSocket-Version: 13",
        *(f"{k}: {v}" for k, v in (headers or {}).items()),
    ]
    stream = await trio.open_tcp_stream(parts.hostname, parts.port or 80)
    async with stream:
        await stream.send_all(("\r\n".join(lines) + "\r\n\r\n").encode())
        data = b""
        with trio.fail_after(10):
            while b"\r\n\r\n" not in data:
                chunk = await stream.receive_some()
                assert chunk, f"connection closed after {data!r}"
                data += chunk
            head, _, body = data.partition(b"\r\n\r\n")
            status = int(head.split(b" ")[1])
            length = next(
                int(line.split(b":")[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length:")
            )
            while len(body) < length:
                body += await stream.receive_some()
    return status, json.loads(body)
