"""A host reports only about its own instances (issue 14 finding 5): a real server, a real
host daemon running an instance, and a second, forging host on a real link."""

from __future__ import annotations

import sys
from functools import partial
from pathlib import Path

import httpx
import pytest
import trio

from devyard import __version__
from devyard.core import ControlChannel, open_session, open_transport
from devyard.core.link import HOST_PATH, PROTO
from devyard.core.transports import link_url
from devyard.server.api.serve import BoundServer
from devyard.server.bootstrap import bootstrap_organization
from devyard.server.config import ListenAddress, ServerConfig
from devyard.server.edge import HOST_TOKENS_FILE, create_host_token
from devyard.server.serve import open_configured_store, serve_server
from tests.polling import eventually, until
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
            await control.send(_hello("forger"))
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


async def test_a_hosts_odd_report_ends_its_instance_and_the_server_serves_on(
    tmp_path: Path,
) -> None:
    config = ServerConfig(data_dir=tmp_path / "server", listen=ListenAddress("127.0.0.1", 0))
    async with open_configured_store(config) as store:
        made = await bootstrap_organization(store, org_name="acme")
    _, token = create_host_token(config.data_dir / HOST_TOKENS_FILE)
    auth = {"Authorization": f"Bearer {made.plaintext_key}"}
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            bound: BoundServer = await nursery.start(partial(serve_server, config))
            headers = [(b"authorization", f"Bearer {token}".encode())]
            async with (
                open_transport(link_url(bound.local_url, HOST_PATH), extra_headers=headers) as t,
                open_session(t, client=True) as session,
                httpx.AsyncClient(base_url=bound.local_url, headers=auth) as http,
            ):
                control = ControlChannel(await session.open_stream())
                await control.send(_hello("hand-made"))
                assert (await control.receive())["type"] == "registered"
                created = await http.post("/v1/android_instances", json={})
                assert created.json()["status"]["state"] == "creating"  # at once
                order = await control.receive()
                assert order["type"] == "instance_start"
                iid = order["order"]["instance_id"]
                nested: object = "deep"
                for _ in range(50):
                    nested = {"a": [nested]}
                await control.send(
                    {
                        "type": "instance_event",
                        "instance_id": iid,
                        "phase": "terminated",
                        "error_message": nested,
                    }
                )
                while True:
                    got = (await http.get(f"/v1/android_instances/{iid}")).json()["status"]
                    if got["state"] == "terminated":
                        break
                    await trio.sleep(0.02)
                assert got["terminationReason"] == "Error" and "deep" in got["errorMessage"]
                again = await http.post("/v1/android_instances", json={})
                assert again.status_code == 200, "the server serves on, and the link too"
                kinds = [(await control.receive())["type"] for _ in range(2)]
                assert kinds == ["instance_stop", "instance_start"]  # the end, then the new one
            nursery.cancel_scope.cancel()


@pytest.mark.parametrize("runs_it", [True, False], ids=["ready-lost", "order-lost"])
async def test_a_host_linking_again_with_an_instance_not_ready_is_asked_about_it_again(
    tmp_path: Path, runs_it: bool
) -> None:
    """The store holds an instance ``assigned`` and its host links again: with the instance
    in its list, the host's ``ready`` was lost with its link (the server replica died as it
    arrived); without, the order was (the replica died before its bytes left). Either way
    the server sends the order again, and the host's ``ready`` completes it."""
    config = ServerConfig(data_dir=tmp_path / "server", listen=ListenAddress("127.0.0.1", 0))
    async with open_configured_store(config) as store:
        made = await bootstrap_organization(store, org_name="acme")
    _, token = create_host_token(config.data_dir / HOST_TOKENS_FILE)
    auth = {"Authorization": f"Bearer {made.plaintext_key}"}
    headers = [(b"authorization", f"Bearer {token}".encode())]
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            bound: BoundServer = await nursery.start(partial(serve_server, config))
            url = link_url(bound.local_url, HOST_PATH)
            async with httpx.AsyncClient(base_url=bound.local_url, headers=auth) as http:

                async def is_in(iid: str, state: str) -> bool:
                    got = await http.get(f"/v1/android_instances/{iid}")
                    return bool(got.json()["status"]["state"] == state)

                async with (
                    open_transport(url, extra_headers=headers) as t,
                    open_session(t, client=True) as session,
                ):
                    control = ControlChannel(await session.open_stream())
                    await control.send(_hello("hand-made"))
                    assert (await control.receive())["type"] == "registered"
                    await http.post("/v1/android_instances", json={})
                    order = await control.receive()
                    assert order["type"] == "instance_start"
                    iid = order["order"]["instance_id"]
                    await until(partial(is_in, iid, "assigned"), 10)
                # the link ended before the host's ready reached the server
                async with (
                    open_transport(url, extra_headers=headers) as t,
                    open_session(t, client=True) as session,
                ):
                    control = ControlChannel(await session.open_stream())
                    listed = [iid] if runs_it else []
                    await control.send({**_hello("hand-made"), "instances": listed})
                    assert (await control.receive())["type"] == "registered"
                    again = await control.receive()
                    assert again["type"] == "instance_start", again
                    assert again["order"] == order["order"]
                    ready = {"type": "instance_event", "instance_id": iid, "phase": "ready"}
                    await control.send({**ready, "error_message": None})
                    await until(partial(is_in, iid, "ready"), 10)
            nursery.cancel_scope.cancel()


def _hello(hostname: str) -> dict[str, object]:
    return {
        "type": "hello",
        "proto": PROTO,
        "role": "host",
        "version": __version__,
        "os": sys.platform,
        "hostname": hostname,
        "region": "local",
        "capacity": 4,
        "platforms": ["android"],
        "drivers": ["virtual"],
        "instances": [],
    }
