"""Instances tell the truth across restarts (issue 13): after `devyard up` is killed (SIGKILL)
or stopped (SIGTERM) and started again, no instance shows ready for a device that is gone.

The real CLI runs as a subprocess; the test talks HTTP to it like `curl` would.
"""

from __future__ import annotations

import signal
from pathlib import Path

import httpx
import pytest
import trio

from devyard.server.instances.service import NOT_ON_HOST_AFTER_RESTART

from ._cli import Running, clean_env, create_ready_android, start

pytestmark = pytest.mark.slow


async def _up(data: Path, cwd: Path) -> tuple[Running, str]:
    up = await start(["up", "--data-dir", str(data), "--port", "0"], clean_env(), cwd)
    url = (await up.read_until(r"serving at (http://127\.0\.0\.1:\d+)")).group(1)
    return up, url


@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGTERM])
async def test_an_instance_of_a_restarted_up_is_not_ready(tmp_path: Path, signum: int) -> None:
    data = tmp_path / "data"
    with trio.fail_after(120):
        up, url = await _up(data, tmp_path)
        auth = {"Authorization": f"Bearer {(data / 'admin-api-key').read_text().strip()}"}
        try:
            async with httpx.AsyncClient(base_url=url, headers=auth, timeout=60) as http:
                iid = (await create_ready_android(http))["metadata"]["id"]
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
