"""Two real servers (`serve_server`, in-process) with ``[cluster]`` on one PostgreSQL and real
``devyard connector`` processes, one linked to each: the standby on the second replica serves
the tunnel once the first replica (holding the active connector) goes away, and a quick
tunnel whose last connector was lost on a replica that then went away is deleted by the
other replica when its deadline passes."""

from __future__ import annotations

import os
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import attrs
import httpx
import pytest
import trio

from devyard.server.api.serve import BoundServer
from devyard.server.bootstrap import bootstrap_organization
from devyard.server.config import ServerConfig
from devyard.server.edge.connectors import ConnectorHub, TunnelDialError, TunnelUnavailable
from devyard.server.serve import open_configured_store, serve_server
from tests.connector.rig import DEVYARD, SINK_BODY, Connector, http_get_over, kill
from tests.server.cluster.conftest import server_config

pytestmark = pytest.mark.postgres


@attrs.define
class Cluster:
    servers: list[BoundServer]
    scopes: list[trio.CancelScope]
    http: httpx.AsyncClient  # the API of the second server
    sink_port: int
    tmp: Path
    nursery: trio.Nursery
    connectors: list[Connector] = attrs.Factory(list)

    def hub(self, index: int) -> ConnectorHub:
        hub = self.servers[index].tunnels
        assert isinstance(hub, ConnectorHub)
        return hub

    async def start(self, token: str, server: int) -> Connector:
        token_file = self.tmp / f"token-{len(self.connectors)}"
        token_file.write_text(token)
        env = {k: v for k, v in os.environ.items() if not k.startswith("DEVYARD_")}
        process = await trio.lowlevel.open_process(
            [
                *DEVYARD,
                *("connector", "run", "--server", self.servers[server].local_url),
                *("--token-file", str(token_file), "--log-level", "debug"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env=env,
        )
        connector = Connector(process)
        self.connectors.append(connector)
        self.nursery.start_soon(connector.pump)
        return connector

    async def record(self, name: str) -> httpx.Response:
        return await self.http.get(f"/v1/tunnels/{name}")

    async def wait_record(self, name: str, check: Any) -> dict[str, Any]:
        while True:
            record: dict[str, Any] = (await self.record(name)).json()
            if check(record):
                return record
            await trio.sleep(0.05)


async def _serve(config: ServerConfig, scope: trio.CancelScope, *, task_status: Any) -> None:
    with scope:
        await serve_server(config, quick_grace=3.0, task_status=task_status)


async def _sink(stream: trio.SocketStream) -> None:
    try:
        await stream.receive_some(4096)
        await stream.send_all(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n" + SINK_BODY)
    except trio.BrokenResourceError:
        pass
    finally:
        await stream.aclose()


@asynccontextmanager
async def open_cluster(url: str, tmp: Path) -> AsyncIterator[Cluster]:
    configs = [server_config(url, tmp / "a"), server_config(url, tmp / "b")]
    async with open_configured_store(configs[0]) as store:
        made = await bootstrap_organization(store, org_name="acme")
    (tmp / "connectors").mkdir()
    async with trio.open_nursery() as nursery:
        scopes = [trio.CancelScope(), trio.CancelScope()]
        servers = [await nursery.start(_serve, c, s) for c, s in zip(configs, scopes, strict=True)]
        listeners = await nursery.start(partial(trio.serve_tcp, _sink, 0, host="127.0.0.1"))
        headers = {"Authorization": f"Bearer {made.plaintext_key}"}
        base = servers[1].local_url
        async with httpx.AsyncClient(base_url=base, headers=headers, timeout=30) as http:
            port = listeners[0].socket.getsockname()[1]
            cluster = Cluster(servers, scopes, http, port, tmp / "connectors", nursery)
            try:
                yield cluster
            finally:
                with trio.CancelScope(shield=True):
                    for connector in cluster.connectors:
                        kill(connector)
                        await connector.process.wait()
        nursery.cancel_scope.cancel()


def _active_id(record: dict[str, Any]) -> str | None:
    active = record["activeConnector"]
    return active["id"] if isinstance(active, dict) else None


async def test_when_a_replica_goes_its_tunnels_fail_over_and_its_quick_tunnels_expire(
    postgres_url: str, tmp_path: Path
) -> None:
    """One cluster for both (server and connector processes are what costs here): ``corp``
    has its active connector on the first replica and a standby on the second; the quick
    tunnel's only connector, on the first replica, is lost; then the first replica goes."""
    async with open_cluster(postgres_url, tmp_path) as cluster:
        with trio.fail_after(90):
            dest = f"127.0.0.1:{cluster.sink_port}"
            tokens = {}
            for name, ephemeral in (("corp", False), ("quick-a", True)):
                body = {"name": name, "selectors": [dest], "ephemeral": ephemeral}
                response = await cluster.http.post("/v1/tunnels", json=body)
                assert response.status_code == 200, response.text
                tokens[name] = response.json()["token"]
            first = await cluster.start(tokens["corp"], 0)
            await first.wait_for(r"registered as active")
            second = await cluster.start(tokens["corp"], 1)
            quick = await cluster.start(tokens["quick-a"], 0)
            await second.wait_for(r"registered as standby")
            await quick.wait_for(r"registered as active")
            # the second replica holds only a standby of corp, yet answers online: the
            # status the API and the instances service ask is cluster-wide
            record = await cluster.wait_record(
                "corp", lambda r: r["status"] == "online" and len(r["standbys"]) == 1
            )
            first_id, standby_id = _active_id(record), record["standbys"][0]["id"]
            await cluster.wait_record("quick-a", lambda r: r["status"] == "online")
            kill(quick)  # the quick tunnel's link is lost (no clean stop) ...
            await quick.exit_code()
            lost_at = trio.current_time()

            hub = cluster.hub(1)
            org_id = record["organizationId"]
            gone_at = trio.current_time()
            cluster.scopes[0].cancel()  # ... and the first replica goes, lock session and all
            while True:  # until a fetch goes through the standby the second replica promoted
                try:
                    stream = await hub.open_tunnel_stream(org_id, "corp", dest, "i")
                except (TunnelUnavailable, TunnelDialError):
                    await trio.sleep(0.005)
                    continue
                answer = await http_get_over(stream, "sink")
                await stream.aclose()
                if answer.endswith(SINK_BODY):
                    break
            took = trio.current_time() - gone_at
            print(
                f"\nreplica gone: the standby on the other replica served in {took * 1000:.0f} ms"
            )
            await second.wait_for(r"promoted to active")
            await cluster.wait_record("corp", lambda r: _active_id(r) == standby_id != first_id)

            while (await cluster.record("quick-a")).status_code != 404:  # noqa: ASYNC110
                await trio.sleep(0.05)
            took = trio.current_time() - lost_at
            print(f"quick tunnel (grace 3 s) deleted by the other replica after {took:.1f} s")
            assert took > 3.0 - 0.75 - 0.5  # the grace, less one renewal period (and slack)
