"""`devyard up` end to end: the server, its host daemon and a virtual device, as a user meets them.

The real CLI runs as a subprocess; the test talks HTTP to it like `curl` would.
"""

from __future__ import annotations

import signal
from pathlib import Path

import httpx
import trio

from ._cli import clean_env, start


async def test_up_creates_an_android_instance_that_becomes_ready_and_ends(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with trio.fail_after(90):
        up = await start(["up", "--data-dir", str(data), "--port", "0"], clean_env(), tmp_path)
        url = (await up.read_until(r"serving at (http://127\.0\.0\.1:\d+)")).group(1)
        key = (data / "admin-api-key").read_text().strip()
        auth = {"Authorization": f"Bearer {key}"}
        async with httpx.AsyncClient(base_url=url, headers=auth, timeout=60) as http:
            while True:  # until the companion host daemon has registered, there is no capacity
                created = await http.post(
                    "/v1/android_instances",
                    params={"wait": "true"},
                    json={"metadata": {"labels": {"pr": "42"}}},
                )
                if created.status_code != 409:
                    break
                assert created.json()["reason"] == "no_capacity", created.text
                await trio.sleep(0.1)
            assert created.status_code == 200, created.text
            instance = created.json()
            instance_id = instance["metadata"]["id"]
            assert instance_id.startswith("android_")
            status = instance["status"]
            assert status["state"] == "ready"
            assert status["token"] and status["streamToken"]
            for field in ("apiUrl", "endpointWebSocketUrl", "signedStreamUrl", "adbWebSocketUrl"):
                assert instance_id in status[field]

            listed = await http.get("/v1/android_instances", params={"labelSelector": "pr=42"})
            assert [i["metadata"]["id"] for i in listed.json()["items"]] == [instance_id]

            assert (await http.delete(f"/v1/android_instances/{instance_id}")).status_code == 200
            with trio.fail_after(10):
                while True:
                    got = (await http.get(f"/v1/android_instances/{instance_id}")).json()
                    if got["status"]["state"] == "terminated":
                        break
                    await trio.sleep(0.05)
            assert got["status"].get("token") is None, "a token works only while it runs"
            again = await http.delete(f"/v1/android_instances/{instance_id}")
            assert again.status_code == 200, "deleting what is gone is not a conflict"

        assert await up.stop(signal.SIGINT) == 0
    assert (data / "hostd" / "instances").is_dir(), "where the host keeps instance sandboxes"
    sandboxes = list((data / "hostd").rglob(instance_id))
    assert sandboxes == [], "the instance's sandbox directory is removed when it ends"
