"""Two real servers (`serve_server`, in-process) with ``[cluster]`` on one PostgreSQL and a real
host daemon linked to the first: an instance created through the second server's API (with
``wait=true``) runs on the host and is answered ready by the replica it hit."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import httpx
import pytest
import trio

from devyard.hostd.daemon import HostdConfig, serve_hostd
from devyard.server.api.serve import BoundServer
from devyard.server.bootstrap import bootstrap_organization
from devyard.server.edge import HOST_TOKENS_FILE, create_host_token
from devyard.server.serve import open_configured_store, serve_server
from tests.polling import eventually
from tests.server.cluster.conftest import server_config

pytestmark = pytest.mark.postgres


async def test_a_create_through_one_server_runs_on_a_host_linked_to_the_other(
    postgres_url: str, tmp_path: Path
) -> None:
    first, second = (
        server_config(postgres_url, tmp_path / "a"),
        server_config(postgres_url, tmp_path / "b"),
    )
    async with open_configured_store(first) as store:
        made = await bootstrap_organization(store, org_name="acme")
    _, host_token = create_host_token(first.data_dir / HOST_TOKENS_FILE)
    async with trio.open_nursery() as nursery:
        a: BoundServer = await nursery.start(partial(serve_server, first))
        b: BoundServer = await nursery.start(partial(serve_server, second))
        shutdown = trio.Event()
        hostd = HostdConfig(
            server_url=a.local_url,
            token=host_token,
            region=first.region,
            data_dir=tmp_path / "host",
            capacity=2,
            backoff_base=0.05,
        )
        async with trio.open_nursery() as host_nursery:
            await host_nursery.start(partial(serve_hostd, hostd, shutdown=shutdown))
            headers = {"Authorization": f"Bearer {made.plaintext_key}"}
            async with httpx.AsyncClient(base_url=b.local_url, headers=headers) as client:
                await eventually(lambda: a.hosts is not None and bool(a.hosts.hosts()))
                with trio.fail_after(10):  # until b's host list has heard of a's host
                    while True:
                        response = await client.post(
                            "/v1/android_instances", params={"wait": "true"}, json={"spec": {}}
                        )
                        if response.status_code != 409:
                            break
                        assert response.json()["reason"] == "no_capacity", response.text
                        await trio.sleep(0.05)
                assert response.status_code in (200, 201), response.text
                body = response.json()
                assert body["status"]["state"] == "ready", body
                iid = body["metadata"]["id"]
                response = await client.delete(f"/v1/android_instances/{iid}")
                assert response.status_code == 200, response.text
                assert response.json()["status"]["state"] == "terminated"
            shutdown.set()
            host_nursery.cancel_scope.deadline = trio.current_time() + 15
        nursery.cancel_scope.cancel()
