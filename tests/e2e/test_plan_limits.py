"""A plan's concurrency limit against ``devyard up`` (issue 19): with a catalog whose default
plan allows two Android instances at once, the third create is refused with a 429 that names
the limit and the plan, and works again once one of the two is deleted; iOS is not limited."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import httpx
import pytest
import trio

from ._cli import clean_env, create_ready_android, start

pytestmark = pytest.mark.slow

PLANS = [{"tid": "starter", "name": "Starter", "concurrency": {"android": 2}}]


async def test_the_third_android_instance_is_over_the_plan(tmp_path: Path) -> None:
    data = tmp_path / "data"
    env = clean_env(DEVYARD_BILLING_PLANS=json.dumps(PLANS))
    with trio.fail_after(60):
        up = await start(["up", "--data-dir", str(data), "--port", "0"], env, tmp_path)
        url = (await up.read_until(r"serving at (http://127\.0\.0\.1:\d+)")).group(1)
    key = (data / "admin-api-key").read_text().strip()
    try:
        async with httpx.AsyncClient(
            base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=60
        ) as http:
            first = await create_ready_android(http)
            await create_ready_android(http)
            with trio.fail_after(30):
                third = await http.post("/v1/android_instances", json={})
            assert third.status_code == 429, third.text
            error = third.json()
            assert error["reason"] == "plan_limit_reached"
            assert "2 android" in error["message"] and "starter" in error["message"]
            with trio.fail_after(30):
                ios = await http.post("/v1/ios_instances", json={})
            assert ios.status_code == 200, ios.text
            with trio.fail_after(30):
                gone = await http.delete(f"/v1/android_instances/{first['metadata']['id']}")
            assert gone.status_code == 200
            again = await create_ready_android(http)
            assert again["status"]["state"] == "ready"
    finally:
        with trio.fail_after(30):
            await up.stop(signal.SIGINT)
