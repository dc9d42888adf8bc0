"""A real server (in this trio run, on 127.0.0.1 port 0), an admin API key, a loopback HTTP
sink, and real ``devyard connector`` processes whose stderr is read line by line."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import attrs
import httpx
import trio

from devyard.server.api.serve import BoundServer
from devyard.server.bootstrap import bootstrap_organization
from devyard.server.config import ListenAddress, ServerConfig
from devyard.server.edge.connectors import ConnectorHub
from devyard.server.serve import open_configured_store, serve_server

DEVYARD = [sys.executable, "-m", "devyard"]
SINK_BODY = b"hello from the private network\n"


@attrs.define
class Connector:
    """A ``devyard connector`` process; its stderr lines are collected as they come."""

    process: trio.Process
    lines: list[str] = attrs.Factory(list)
    changed: trio.Event = attrs.Factory(trio.Event)
    ended: trio.Event = attrs.Factory(trio.Event)

    async def pump(self) -> None:
        assert self.process.stderr is not None
        buffer = b""
        while True:
            chunk = await self.process.stderr.receive_some(4096)
            if not chunk:
                break
            buffer += chunk
            while b"\n" in buffer:
                line, _, buffer = buffer.partition(b"\n")
                self.lines.append(line.decode(errors="replace"))
                self.changed.set()
                self.changed = trio.Event()
        self.ended.set()
        self.changed.set()

    async def wait_for(self, pattern: str) -> re.Match[str]:
        """The first stderr line matching *pattern* (the caller's fail_after bounds it)."""
        seen = 0
        while True:
            for line in self.lines[seen:]:
                match = re.search(pattern, line)
                if match:
                    return match
            seen = len(self.lines)
            if self.ended.is_set():
                raise AssertionError(f"connector exited; it said: {self.lines}")
            await self.changed.wait()

    async def exit_code(self) -> int:
        return await self.process.wait()

    def text(self) -> str:
        return "\n".join(self.lines)


@attrs.define
class Rig:
    bound: BoundServer
    hub: ConnectorHub
    http: httpx.AsyncClient
    org_id: str
    api_key: str = attrs.field(repr=False)
    sink_port: int
    tmp: Path
    nursery: trio.Nursery
    config: ServerConfig
    connectors: list[Connector] = attrs.Factory(list)
    raw: bool = False  # connectors hold their link on the raw link port (--link tcp://...)

    @property
    def url(self) -> str:
        return self.bound.local_url

    async def create(self, name: str, selectors: list[str], **extra: Any) -> str:
        response = await self.http.post(
            "/v1/tunnels", json={"name": name, "selectors": selectors, **extra}
        )
        assert response.status_code == 200, response.text
        token: str = response.json()["token"]
        return token

    async def record(self, name: str) -> httpx.Response:
        return await self.http.get(f"/v1/tunnels/{name}")

    async def start(self, token: str, *args: str) -> Connector:
        token_file = self.tmp / f"token-{len(os.listdir(self.tmp))}"
        token_file.write_text(token)
        env = {k: v for k, v in os.environ.items() if not k.startswith("DEVYARD_")}
        process = await trio.lowlevel.open_process(
            [
                *DEVYARD,
                "connector",
                "run",
                "--server",
                self.url,
                "--token-file",
                str(token_file),
                "--log-level",
                "debug",
                *(["--link", f"tcp://127.0.0.1:{self.bound.link_port}"] if self.raw else []),
                *args,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env=env,
        )
        connector = Connector(process)
        self.connectors.append(connector)
        self.nursery.start_soon(connector.pump)
        return connector

    async def wait_status(self, name: str, check: Any) -> dict[str, Any]:
        """Poll the API's record until *check(record)* (the caller's fail_after bounds it)."""
        while True:
            response = await self.record(name)
            record: dict[str, Any] = response.json()
            if check(record):
                return record
            await trio.sleep(0.02)


async def _serve_sink(stream: trio.SocketStream) -> None:
    """A tiny HTTP server: reads a request head, answers SINK_BODY, closes."""
    try:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = await stream.receive_some(4096)
            if not chunk:
                return
            data += chunk
        head = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(
            SINK_BODY
        )
        await stream.send_all(head + SINK_BODY)
    except trio.BrokenResourceError:
        pass
    finally:
        await stream.aclose()


async def http_get_over(stream: trio.abc.Stream, host: str) -> bytes:
    """One HTTP/1.1 GET over an open byte stream; the whole answer."""
    await stream.send_all(f"GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
    answer = b""
    while True:
        chunk = await stream.receive_some(65536)
        if not chunk:
            return answer
        answer += chunk


@asynccontextmanager
async def open_rig(
    tmp_path: Path, *, quick_grace: float = 600.0, raw: bool = False
) -> AsyncIterator[Rig]:
    server_dir = tmp_path / "server"
    config = ServerConfig(
        data_dir=server_dir,
        listen=ListenAddress("127.0.0.1", 0),
        link_listen=ListenAddress("127.0.0.1", 0) if raw else None,
    )
    async with open_configured_store(config) as store:
        boot = await bootstrap_organization(store, org_name="acme", user_name="alice")
    (tmp_path / "connectors").mkdir()
    async with trio.open_nursery() as nursery:
        bound: BoundServer = await nursery.start(
            partial(serve_server, config, quick_grace=quick_grace)
        )
        assert isinstance(bound.tunnels, ConnectorHub)
        listeners = await nursery.start(partial(trio.serve_tcp, _serve_sink, 0, host="127.0.0.1"))
        sink_port = listeners[0].socket.getsockname()[1]
        headers = {"Authorization": f"Bearer {boot.plaintext_key}"}
        async with httpx.AsyncClient(base_url=bound.local_url, headers=headers, timeout=30) as http:
            rig = Rig(
                bound=bound,
                hub=bound.tunnels,
                http=http,
                org_id=boot.organization.id,
                api_key=boot.plaintext_key,
                sink_port=sink_port,
                tmp=tmp_path / "connectors",
                nursery=nursery,
                config=config,
                raw=raw,
            )
            try:
                yield rig
            finally:
                with trio.CancelScope(shield=True):
                    for connector in rig.connectors:
                        kill(connector)
                        await connector.process.wait()
            nursery.cancel_scope.cancel()


def kill(connector: Connector, signum: int = signal.SIGKILL) -> None:
    if connector.process.returncode is None:
        connector.process.send_signal(signum)
