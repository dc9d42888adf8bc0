"""Instances tell the truth across restarts (issue 13): after `devyard up` is killed (SIGKILL)
or stopped (SIGTERM) and started again, no instance shows ready for a device that is gone.

The real CLI runs as a subprocess; the test talks HTTP to it like `curl` would.
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from devyard.server.instances.service import NOT_ON_HOST_AFTER_RESTART

from ._cli import Running, clean_env, start

pytestmark = pytest.mark.slow


async def _up(data: Path, cwd: Path) -> tuple[Running, str]:
    up = await start(["up", "--data-dir", str(data), "--port", "0"], clean_env(), cwd)
    url = (await up.read_until(r"serving at (http://127\.0\.0\.1:\d+)")).group(1)
    return up, url


async def _create_ready(http: httpx.AsyncClient) -> dict[str, Any]:
    while True:  # until the companion host daemon has registered, there is no capacity
        created = await http.post("/v1/android_instances", params={"wait": "true"}, json={})
        if created.status_code != 409:
            break
        await trio.sleep(0.1)
    assert created.status_code == 200, created.text
    body: dict[str, Any] = created.json()
    assert body["status"]["state"] == "ready", body
    return body


@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGTERM])
async def test_an_instance_of_a_restarted_up_is_not_ready(tmp_path: Path, signum: int) -> None:
    data = tmp_path / "data"
    with trio.fail_after(120):
        up, url = await _up(data, tmp_path)
        auth = {"Authorization": f"Bearer {(data / 'admin-api-key').read_text().strip()}"}
        try:
            async with httpx.AsyncClient(base_url=url, headers=auth, timeout=60) as http:
                iid = (await _create_ready(http))["metadata"]["id"]
        finally:
            up.process.send_signal(signum)
            await up.process.wait()

        up, url = await _up(data, tmp_path)  # the same host (token), without the device
        try:
            async with httpx.AsyncClient(base_url=url, headers=auth, timeout=60) as http:
                while True:
                    status = (await http.get(f"/v1/android_instances/{iid}")).json()["status"]
                    if status["state"] == "terminated":
                        break
                    await trio.sleep(0.05)
                reason = (status["terminationReason"], status.get("errorMessage"))
                assert reason == ("HostLost", NOT_ON_HOST_AFTER_RESTART), reason
                # reuseIfExists never hands out the dead one
                again = await http.post(
                    "/v1/android_instances", params={"reuseIfExists": "true"}, json={}
                )
                assert again.status_code == 200, again.text
                assert again.json()["metadata"]["id"] != iid
        finally:
            assert await up.stop(signal.SIGINT) == 0
