"""A host reports only about its own instances (issue 14 finding 5): a real server, a real
host daemon running an instance, and a second, forging host on a real link."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import trio

from devyard import __version__
from devyard.core import ControlChannel, open_session, open_transport
from devyard.core.link import HOST_PATH, PROTO
from devyard.core.transports import link_url
from devyard.server.edge import HOST_TOKENS_FILE, create_host_token
from tests.polling import eventually
from tests.server.gateway.conftest import open_gateway_rig


async def test_a_host_cannot_end_another_hosts_instance(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with open_gateway_rig(tmp_path) as rig:
        instance = await rig.create("android")
        iid = instance["metadata"]["id"]
        forger_id, forger_token = create_host_token(tmp_path / "server" / HOST_TOKENS_FILE)
        url = link_url(rig.url, HOST_PATH)
        headers = [(b"authorization", f"Bearer {forger_token}".encode())]
        async with (
            open_transport(url, extra_headers=headers) as transport,
            open_session(transport, client=True) as session,
        ):
            control = ControlChannel(await session.open_stream())
            await control.send(
                {
                    "type": "hello",
                    "proto": PROTO,
                    "role": "host",
                    "version": __version__,
                    "os": sys.platform,
                    "hostname": "forger",
                    "region": "local",
                    "capacity": 1,
                    "platforms": ["android"],
                    "drivers": ["virtual"],
                    "instances": [],
                }
            )
            with trio.fail_after(10):
                assert (await control.receive())["type"] == "registered"
            for phase in ("terminated", "ready"):
                await control.send(
                    {
                        "type": "instance_event",
                        "instance_id": iid,
                        "phase": phase,
                        "error_message": "forged",
                    }
                )
            await eventually(lambda: "not placed on it: ignored" in caplog.text)
            response = await rig.client.get(f"/v1/android_instances/{iid}")
            assert response.json()["status"]["state"] == "ready", "the forged end is ignored"
            assert rig.bound.hosts is not None
            assert forger_id in {h.id for h in rig.bound.hosts.hosts()}, "its link stays up"
        await rig.delete(instance)
