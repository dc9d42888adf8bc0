"""Two real servers (`serve_server`, in-process) with ``[cluster]`` on one PostgreSQL and a real
host daemon linked to the second: an instance created (``wait=true``) through the first, which
then stops, still ends at its hard timeout, through the second."""

from __future__ import annotations

from datetime import datetime, timedelta
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
from tests.polling import eventually, until
from tests.server.cluster.conftest import server_config

pytestmark = pytest.mark.postgres


async def test_the_hard_timeout_of_a_stopped_servers_instance_ends_it_through_another(
    postgres_url: str, tmp_path: Path
) -> None:
    first, second = (
        server_config(postgres_url, tmp_path / "a"),
        server_config(postgres_url, tmp_path / "b"),
    )
    async with open_configured_store(first) as store:
        made = await bootstrap_organization(store, org_name="acme")
    _, host_token = create_host_token(second.data_dir / HOST_TOKENS_FILE)
    headers = {"Authorization": f"Bearer {made.plaintext_key}"}
    async with trio.open_nursery() as nursery:
        b: BoundServer = await nursery.start(partial(serve_server, second))
        shutdown = trio.Event()
        hostd = HostdConfig(
            server_url=b.local_url,
            token=host_token,
            region=second.region,
            data_dir=tmp_path / "host",
            capacity=2,
            backoff_base=0.05,
        )
        async with trio.open_nursery() as host_nursery:
            await host_nursery.start(partial(serve_hostd, hostd, shutdown=shutdown))
            await eventually(lambda: b.hosts is not None and bool(b.hosts.hosts()))
            async with trio.open_nursery() as a_nursery:
                a: BoundServer = await a_nursery.start(partial(serve_server, first))
                async with httpx.AsyncClient(base_url=a.local_url, headers=headers) as client:
                    with trio.fail_after(10):  # until a's host list has heard of b's host
                        while True:
                            response = await client.post(
                                "/v1/android_instances",
                                params={"wait": "true"},
                                json={"spec": {"hardTimeout": "4s"}},
                            )
                            if response.status_code != 409:
                                break
                            await trio.sleep(0.05)
                assert response.status_code in (200, 201), response.text
                body = response.json()
                assert body["status"]["state"] == "ready", body
                a_nursery.cancel_scope.cancel()  # the creating server stops
            iid = body["metadata"]["id"]
            async with httpx.AsyncClient(base_url=b.local_url, headers=headers) as client:

                async def ended() -> bool:
                    got = await client.get(f"/v1/android_instances/{iid}")
                    return bool(got.json()["status"]["state"] == "terminated")

                await until(ended, seconds=20)
                ended_body = (await client.get(f"/v1/android_instances/{iid}")).json()
            assert ended_body["status"]["terminationReason"] == "HardTimeout", ended_body
            created = datetime.fromisoformat(ended_body["metadata"]["createdAt"])
            terminated = datetime.fromisoformat(ended_body["metadata"]["terminatedAt"])
            assert timedelta(seconds=4) <= terminated - created < timedelta(seconds=10)
            shutdown.set()
            host_nursery.cancel_scope.deadline = trio.current_time() + 15
        nursery.cancel_scope.cancel()
