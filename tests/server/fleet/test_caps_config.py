"""The edge's caps are the config's (issue 14 finding 9): a server configured for two streams
per instance refuses the third with 429 ``too_many_streams``."""

from __future__ import annotations

from contextlib import AsyncExitStack
from pathlib import Path

import attrs
import pytest
import trio

from devyard.core import UpgradeRejected, open_transport
from devyard.server.config import ListenAddress

from .rig import fleet_config, make_org, open_fleet


async def test_the_stream_cap_is_the_configs(tmp_path: Path) -> None:
    config = attrs.evolve(
        fleet_config(tmp_path),
        link_listen=ListenAddress("127.0.0.1", 0),
        max_streams_per_instance=2,
    )
    org = await make_org(config, "acme")
    async with open_fleet(config, tmp_path) as fleet:
        await fleet.add_host("host", capacity=1)
        created = await fleet.http.post(
            f"{fleet.url}/v1/android_instances",
            params={"wait": "true"},
            json={},
            headers=org.headers,
        )
        assert created.status_code == 200, created.text
        instance_id = created.json()["metadata"]["id"]
        token = created.json()["status"]["token"]
        url = f"tcp://127.0.0.1:{fleet.bound.link_port}/v1/instances/{instance_id}/adb"
        headers = [(b"authorization", f"Bearer {token}".encode())]
        with trio.fail_after(30):
            async with AsyncExitStack() as stack:
                for _ in range(2):
                    await stack.enter_async_context(open_transport(url, extra_headers=headers))
                with pytest.raises(UpgradeRejected) as refused:
                    async with open_transport(url, extra_headers=headers):
                        pass
                assert refused.value.status_code == 429
                assert b"too_many_streams" in refused.value.body
