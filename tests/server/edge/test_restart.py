"""A host that never comes back after a server restart loses its instances: the server gives
every host the store has live instances on the host-lost grace, from its start."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import httpx
import trio

from devyard.hostd.daemon import HostdConfig, serve_hostd
from devyard.server.api.serve import BoundServer
from devyard.server.bootstrap import bootstrap_organization
from devyard.server.config import ListenAddress, ServerConfig
from devyard.server.edge import HOST_TOKENS_FILE, create_host_token
from devyard.server.serve import open_configured_store, serve_server


async def test_instances_of_a_host_that_never_returns_end_after_the_grace(
    tmp_path: Path,
) -> None:
    config = ServerConfig(data_dir=tmp_path / "server", listen=ListenAddress("127.0.0.1", 0))
    async with open_configured_store(config) as store:
        made = await bootstrap_organization(store, org_name="acme")
    host_id, host_token = create_host_token(config.data_dir / HOST_TOKENS_FILE)
    auth = {"Authorization": f"Bearer {made.plaintext_key}"}
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:  # the server and its host, then both gone
            bound: BoundServer = await nursery.start(partial(serve_server, config))
            hostd = HostdConfig(
                server_url=bound.local_url,
                token=host_token,
                region=config.region,
                data_dir=tmp_path / "host",
                backoff_base=0.05,
            )
            await nursery.start(partial(serve_hostd, hostd, shutdown=trio.Event()))
            async with httpx.AsyncClient(base_url=bound.local_url, headers=auth) as http:
                while not (bound.hosts and bound.hosts.hosts()):  # noqa: ASYNC110
                    await trio.sleep(0.02)
                created = await http.post("/v1/android_instances", params={"wait": "true"}, json={})
                assert created.json()["status"]["state"] == "ready", created.text
                iid = created.json()["metadata"]["id"]
            nursery.cancel_scope.cancel()  # no goodbye from either: as after a kill -9

        async with trio.open_nursery() as nursery:  # the server alone; the host never returns
            bound = await nursery.start(partial(serve_server, config, host_grace=0.5))
            async with httpx.AsyncClient(base_url=bound.local_url, headers=auth) as http:
                while True:
                    status = (await http.get(f"/v1/android_instances/{iid}")).json()["status"]
                    if status["state"] == "terminated":
                        break
                    await trio.sleep(0.05)
            assert status["terminationReason"] == "HostLost"
            assert host_id in status["errorMessage"]
            nursery.cancel_scope.cancel()
