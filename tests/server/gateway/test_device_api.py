"""``apiUrl``: the device API through the edge and the host link to a virtual device."""

from __future__ import annotations

import io
from typing import Any

import httpx
from PIL import Image

from .conftest import Rig


def _api(instance: dict[str, Any]) -> tuple[str, dict[str, str]]:
    status = instance["status"]
    return status["apiUrl"], {"Authorization": f"Bearer {status['token']}"}


async def test_describe_screenshot_input_and_shell(rig: Rig) -> None:
    instance = await rig.create("android")
    url, auth = _api(instance)
    async with httpx.AsyncClient(headers=auth) as client:
        described = (await client.get(url + "/")).json()
        assert described["instanceId"] == instance["metadata"]["id"]
        assert described["platform"] == "android"
        width, height = described["width"], described["height"]

        before = await client.get(url + "/screenshot")
        assert before.status_code == 200
        assert before.headers["content-type"] == "image/png"
        assert Image.open(io.BytesIO(before.content)).size == (width, height)

        tapped = await client.post(
            url + "/input", json={"type": "tap", "x": width // 2, "y": height // 2}
        )
        assert tapped.status_code == 200, tapped.text
        typed = await client.post(url + "/input", json={"type": "text", "text": "hello"})
        assert typed.status_code == 200, typed.text
        after = await client.get(url + "/screenshot")
        assert after.content != before.content  # the touch and the text are visible

        hi = (await client.post(url + "/shell", json={"command": "echo hi"})).json()
        assert hi == {"stdout": "hi\n", "stderr": "", "exitCode": 0}
        failed = (await client.post(url + "/shell", json={"command": "false"})).json()
        assert failed["exitCode"] == 1
        missing = (await client.post(url + "/shell", json={"command": "nosuch"})).json()
        assert missing["exitCode"] == 127
        assert "not found" in missing["stderr"]


async def test_files_apps_and_urls(rig: Rig) -> None:
    instance = await rig.create("android")
    url, auth = _api(instance)
    payload = bytes(range(256)) * 4096  # 1 MiB, streamed both ways
    async with httpx.AsyncClient(headers=auth) as client:
        put = await client.put(url + "/files", params={"path": "/sdcard/blob.bin"}, content=payload)
        assert put.status_code == 201, put.text
        assert put.json()["size"] == len(payload)
        got = await client.get(url + "/files", params={"path": "/sdcard/blob.bin"})
        assert got.content == payload
        listing = (await client.get(url + "/files", params={"path": "/sdcard"})).json()
        assert "blob.bin" in [e["name"] for e in listing["items"]]
        gone = await client.get(url + "/files", params={"path": "/sdcard/none"})
        assert gone.status_code == 404
        assert gone.json()["reason"] == "file_not_found"

        apps = (await client.get(url + "/apps")).json()["items"]
        assert any(app["id"] == "com.android.settings" for app in apps)
        opened = await client.post(url + "/open-url", json={"url": "https://example.com/"})
        assert opened.status_code == 200, opened.text
        shown = await client.post(url + "/shell", json={"command": "logcat -d"})
        assert "example.com" in shown.json()["stdout"]


async def test_bad_requests_are_clear_json_errors(rig: Rig) -> None:
    instance = await rig.create("android")
    url, auth = _api(instance)
    async with httpx.AsyncClient(headers=auth) as client:
        cases = [
            (client.post(url + "/input", json={"type": "warp"}), 400, "unknown input type"),
            (client.post(url + "/input", json={"type": "tap", "x": -1, "y": 3}), 400, "outside"),
            (client.post(url + "/input", content=b"{nope"), 400, "not JSON"),
            (client.post(url + "/shell", json={}), 400, "'command' is required"),
            (client.get(url + "/nowhere"), 404, "no device API route"),
            (client.delete(url + "/screenshot"), 405, "not allowed"),
            (client.get(url + "/files"), 400, "'path' is required"),
        ]
        for request, status, text in cases:
            response = await request
            assert response.status_code == status, response.text
            assert text in response.json()["message"]


async def test_ios_has_no_shell(rig: Rig) -> None:
    instance = await rig.create("ios")
    url, auth = _api(instance)
    async with httpx.AsyncClient(headers=auth) as client:
        assert (await client.get(url + "/")).json()["platform"] == "ios"
        shell = await client.post(url + "/shell", json={"command": "echo hi"})
        assert shell.status_code == 400
        assert shell.json()["reason"] == "unsupported"


async def test_tokens_and_instance_states(rig: Rig) -> None:
    instance = await rig.create("android")
    status = instance["status"]
    url = status["apiUrl"]
    async with httpx.AsyncClient() as client:
        none = await client.get(url + "/")
        assert none.status_code == 401
        assert none.headers["www-authenticate"] == "Bearer"
        wrong = await client.get(url + "/", headers={"Authorization": "Bearer dyi_wrong"})
        assert wrong.status_code == 401
        assert wrong.json()["reason"] == "unauthorized"
        stream_only = await client.get(
            url + "/", headers={"Authorization": f"Bearer {status['streamToken']}"}
        )
        assert stream_only.status_code == 403
        unknown = await client.get(
            url.replace(instance["metadata"]["id"], "android_local_01NOPE") + "/",
            headers={"Authorization": f"Bearer {status['token']}"},
        )
        assert unknown.status_code == 404

        await rig.delete(instance)
        ended = await client.get(url + "/", headers={"Authorization": f"Bearer {status['token']}"})
        assert ended.status_code == 410
        assert "terminated" in ended.json()["message"]
