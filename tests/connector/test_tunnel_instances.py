"""Instances on a tunnel, end to end with real processes and sockets (issue 5, spec 4.1 rule 3).

A private HTTP server listens on 127.0.0.2 (a separate loopback address); a real
``devyard connector`` holds the tunnel; a host daemon runs a virtual Android device whose
``curl`` goes through the instance's egress proxy -> the host link -> the edge -> the
connector -> the private server. ``POST {apiUrl}/shell`` shows the answer.
"""

from __future__ import annotations

import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from devyard.hostd.daemon import HostdConfig, serve_hostd
from devyard.hostd.supervisor import Supervisor
from devyard.server.edge import HOST_TOKENS_FILE, create_host_token

from .rig import Rig, open_rig

PRIVATE = "127.0.0.2"
PRIVATE_BODY = b"the private service answers\n"


async def _private_http(stream: trio.SocketStream) -> None:
    async with stream:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = await stream.receive_some()
            if not chunk:
                return
            data += chunk
        await stream.send_all(
            b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s"
            % (len(PRIVATE_BODY), PRIVATE_BODY)
        )


@asynccontextmanager
async def open_tunnel_rig(tmp_path: Path) -> AsyncIterator[tuple[Rig, Supervisor, int]]:
    async with open_rig(tmp_path) as rig, trio.open_nursery() as nursery:
        try:
            serve = partial(trio.serve_tcp, _private_http, 0, host=PRIVATE)
            listeners = await nursery.start(serve)
        except OSError as exc:  # pragma: no cover - every Linux routes 127.0.0.0/8 to lo
            pytest.skip(f"cannot listen on {PRIVATE}: {exc}")
        private_port = int(listeners[0].socket.getsockname()[1])
        _, host_token = create_host_token(rig.config.data_dir / HOST_TOKENS_FILE)
        hostd = HostdConfig(
            server_url=rig.url,
            token=host_token,
            region=rig.config.region,
            data_dir=tmp_path / "host",
            backoff_base=0.05,
        )
        shutdown = trio.Event()
        async with trio.open_nursery() as host_nursery:
            supervisor: Supervisor = await host_nursery.start(
                partial(serve_hostd, hostd, shutdown=shutdown)
            )
            with trio.fail_after(10):
                while not (rig.bound.hosts and rig.bound.hosts.hosts()):  # noqa: ASYNC110
                    await trio.sleep(0.02)
            yield rig, supervisor, private_port
            shutdown.set()  # the host stops its instances and says so while still linked
            host_nursery.cancel_scope.deadline = trio.current_time() + 15
        nursery.cancel_scope.cancel()


async def _create(rig: Rig, tunnel: str, kind: str = "android") -> httpx.Response:
    return await rig.http.post(
        f"/v1/{kind}_instances", params={"wait": "true"}, json={"spec": {"tunnel": tunnel}}
    )


async def _shell(instance: dict[str, Any], command: str) -> dict[str, Any]:
    status = instance["status"]
    headers = {"Authorization": f"Bearer {status['token']}"}
    async with httpx.AsyncClient(headers=headers, timeout=60) as client:
        response = await client.post(status["apiUrl"] + "/shell", json={"command": command})
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


async def test_an_instance_reaches_the_private_service_through_the_tunnel(
    tmp_path: Path,
) -> None:
    async with open_tunnel_rig(tmp_path) as (rig, _, private_port):
        token = await rig.create("corp", [f"{PRIVATE}:{private_port}"])
        connector = await rig.start(token)
        with trio.fail_after(20):
            await rig.wait_status("corp", lambda r: r["status"] == "online")
            created = await _create(rig, "corp")
        assert created.status_code == 200, created.text
        instance = created.json()
        assert instance["status"]["state"] == "ready"
        assert instance["spec"]["tunnel"] == "corp"

        fetched = await _shell(instance, f"curl -sS http://{PRIVATE}:{private_port}/")
        assert fetched == {"stdout": PRIVATE_BODY.decode(), "stderr": "", "exitCode": 0}
        # The path is the tunnel: with the connector frozen, the same fetch cannot complete.
        connector.process.send_signal(signal.SIGSTOP)
        try:
            frozen = await _shell(instance, f"curl -sS -m 2 http://{PRIVATE}:{private_port}/")
        finally:
            connector.process.send_signal(signal.SIGCONT)
        assert frozen["exitCode"] == 28, frozen  # curl's "operation timed out"

        proxy = await _shell(instance, "settings get global http_proxy")
        assert proxy["stdout"].startswith("127.0.0.1:")

        # A destination outside the selectors is not sent into the tunnel.
        outside = await _shell(instance, f"curl -sS http://{PRIVATE}:1/")
        assert outside["exitCode"] != 0


async def test_missing_and_offline_tunnels_fail_the_create_clearly(tmp_path: Path) -> None:
    async with open_tunnel_rig(tmp_path) as (rig, _, private_port):
        missing = await _create(rig, "nope")
        assert missing.status_code == 404
        assert "'nope'" in missing.json()["message"]
        assert missing.json()["reason"] == "tunnel_not_found"

        await rig.create("corp", [f"{PRIVATE}:{private_port}"])
        offline = await _create(rig, "corp")
        assert offline.status_code == 409
        assert offline.json()["reason"] == "tunnel_offline"
        assert offline.headers["retry-after"] == "2"
        assert "offline" in offline.json()["message"]

        await rig.create("low", [f"{PRIVATE}:80"])
        low = await _create(rig, "low")
        assert low.status_code == 422  # Android: exact selector ports must be >= 1024
        assert "1024" in low.json()["message"]

        listed = (await rig.http.get("/v1/android_instances")).json()["items"]
        assert listed == []  # nothing was created by a refused request


async def test_a_tunnel_that_does_not_attach_fails_the_instance(tmp_path: Path) -> None:
    async with open_tunnel_rig(tmp_path) as (rig, supervisor, private_port):
        supervisor.attach_timeout = 2.0  # the spec's 30 s, shortened for the test
        token = await rig.create("corp", [f"{PRIVATE}:{private_port}"])
        connector = await rig.start(token)
        with trio.fail_after(20):
            await rig.wait_status("corp", lambda r: r["status"] == "online")
        connector.process.send_signal(signal.SIGSTOP)  # holds the link, answers nothing
        try:
            with trio.fail_after(30):
                created = await _create(rig, "corp")
        finally:
            connector.process.send_signal(signal.SIGCONT)
        assert created.status_code == 200, created.text
        status = created.json()["status"]
        assert status["state"] == "terminated"
        assert "did not attach within 2 s" in status["errorMessage"]
        assert status["terminationReason"] == "Error"
