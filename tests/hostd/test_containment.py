"""A malformed message on one instance's WebSocket ends that stream, never the host's link.

Issue 14 finding 2 / corridors 3.3: nested JSON on the browser stream or 24 random bytes on the
ADB WebSocket used to escape hostd's per-stream handler, tear down the host link and drop every
organization's instances on that host. Real processes: ``devyard up`` (server and its host
daemon) and a second organization bootstrapped next to it; the test talks to them as a user.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
import trio_websocket

from tests.e2e._cli import DEVYARD, Running, clean_env, create_ready_android, run

_DEEP: int = 100_000


async def _screenshot(instance: dict[str, Any]) -> bytes:
    status = instance["status"]
    headers = {"Authorization": f"Bearer {status['token']}"}
    async with httpx.AsyncClient(headers=headers, timeout=10) as http:
        got = await http.get(status["apiUrl"] + "/screenshot")
    assert got.status_code == 200, got.text
    return got.content


async def _nested_json_on_the_stream(instance: dict[str, Any]) -> None:
    status = instance["status"]
    url = f"{status['endpointWebSocketUrl']}?token={status['streamToken']}"
    async with trio_websocket.open_websocket_url(url) as ws:
        hello = json.loads(await ws.get_message())
        assert hello["type"] == "hello"
        await ws.send_message("[" * _DEEP + "]" * _DEEP)
        # Either an error answer on this stream or this stream's end: both are contained.
        try:
            answer = await ws.get_message()
        except trio_websocket.ConnectionClosed:
            return
        assert json.loads(answer)["type"] == "error"
        await ws.send_message(json.dumps({"type": "keepAlive"}))  # the viewer still serves


async def _random_bytes_on_adb(instance: dict[str, Any]) -> None:
    status = instance["status"]
    headers = [(b"Authorization", f"Bearer {status['token']}".encode())]
    async with trio_websocket.open_websocket_url(
        status["adbWebSocketUrl"], extra_headers=headers
    ) as ws:
        await ws.send_message(os.urandom(24))
        with pytest.raises(trio_websocket.ConnectionClosed):  # that ADB connection ends
            while True:
                await ws.get_message()


@pytest.mark.filterwarnings("ignore::ResourceWarning")
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
async def test_bad_input_on_one_instance_leaves_the_host_link_up(tmp_path: Path) -> None:
    data = tmp_path / "data"
    log_path = tmp_path / "up.log"
    env = clean_env()
    with trio.fail_after(120), log_path.open("wb") as log_file:
        process = await trio.lowlevel.open_process(
            [*DEVYARD, "up", "--data-dir", str(data), "--port", "0"],
            stdout=subprocess.PIPE, stderr=log_file, env=env, cwd=tmp_path,
        )  # fmt: skip
        up = Running(process)
        try:
            url = (await up.read_until(r"serving at (http://127\.0\.0\.1:\d+)")).group(1)
            acme_key = (data / "admin-api-key").read_text().strip()
            beta = await run(
                ["admin", "bootstrap", "--data-dir", str(data), "--org", "beta"], env, tmp_path
            )
            assert beta.returncode == 0, beta.stderr
            beta_key = beta.stdout.decode().splitlines()[-1]
            clients = [
                httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {k}"},
                                  timeout=60)
                for k in (acme_key, beta_key)
            ]  # fmt: skip
            async with clients[0] as acme, clients[1] as beta_http:
                attacked = await create_ready_android(acme)
                bystander = await create_ready_android(beta_http)
                await _screenshot(bystander)

                await _nested_json_on_the_stream(attacked)
                await _random_bytes_on_adb(attacked)

                # The other organization's instance answers at once, over the same link...
                with trio.fail_after(2):
                    assert (await _screenshot(bystander))[:8] == b"\x89PNG\r\n\x1a\n"
                # ... and so does the attacked instance's device API: only its streams ended.
                with trio.fail_after(2):
                    await _screenshot(attacked)
                got = await beta_http.get(f"/v1/android_instances/{bystander['metadata']['id']}")
                assert got.json()["status"]["state"] == "ready"
            log = log_path.read_text()  # before shutdown, which ends the link on purpose
        finally:
            await up.stop(signal.SIGINT)
    assert "lost" not in log, log[-4000:]  # neither end saw the host link go
    assert log.count("registered with") <= 1, "hostd never reconnected"
    assert "Traceback" not in log, log[-4000:]
