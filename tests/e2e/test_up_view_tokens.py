"""`devyard up` end to end (issue 14 finding 3): a viewer seat and a scoped token watch an
instance through their ``signedStreamUrl`` and drive nothing; revoking what minted a view token
revokes it. The real CLI runs as a subprocess; the test is a browser-less client of it.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import trio
import trio_websocket

from ._cli import clean_env, create_ready_android, start

_TOUCH = {"type": "touch", "pointerId": 0, "action": "down", "x": 0.5, "y": 0.5}


def _token_of(status: dict[str, Any]) -> str:
    token: str = parse_qs(urlsplit(status["signedStreamUrl"]).query)["token"][0]
    assert token.startswith("dyv_"), "a reader's signedStreamUrl carries a view token"
    assert "token" not in status and "streamToken" not in status, status
    return token


async def _watch_without_driving(url: str) -> None:
    """Frames arrive on *url*; a touch and a clipboard read are refused by the edge."""
    async with trio_websocket.open_websocket_url(url) as ws:
        assert json.loads(await ws.get_message())["type"] == "hello"
        await ws.send_message(json.dumps({"type": "start", "codec": "jpeg"}))
        while not isinstance(await ws.get_message(), bytes):
            pass
        for message in (_TOUCH, {"type": "clipboard"}):
            await ws.send_message(json.dumps(message))
            while isinstance(answer := await ws.get_message(), bytes):
                pass
            assert json.loads(answer)["message"].startswith("this stream is view-only"), answer


async def _refused(url: str) -> int:
    """The status of a WebSocket upgrade of *url* that the edge refuses before upgrading (a
    plain HTTP request: trio-websocket leaves a rejected handshake's socket to the GC)."""
    upgrade = {
        "Connection": "Upgrade",
        "Upgrade": "websocket",
        "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
        "Sec-WebSocket-Version": "13",
    }
    async with httpx.AsyncClient(timeout=10) as client:
        response = await client.get("http" + url.removeprefix("ws"), headers=upgrade)
    assert response.status_code != 101
    return response.status_code


async def test_readers_watch_without_driving_and_lose_the_view_with_their_credential(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    up = await start(["up", "--data-dir", str(data), "--port", "0"], clean_env(), tmp_path)
    try:
        with trio.fail_after(120):
            url = (await up.read_until(r"serving at (http://127\.0\.0\.1:\d+)")).group(1)
            await _scenario(url, (data / "admin-api-key").read_text().strip())
    finally:  # a failed check must not leave `devyard up` and its host running
        with trio.CancelScope(shield=True), trio.move_on_after(30):
            assert await up.stop(signal.SIGINT) == 0


async def _scenario(url: str, key: str) -> None:
    async with httpx.AsyncClient(
        base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=60
    ) as http:
        instance = await create_ready_android(http)
        iid, org = instance["metadata"]["id"], instance["metadata"]["organizationId"]
        device = {"Authorization": f"Bearer {instance['status']['token']}"}
        endpoint = instance["status"]["endpointWebSocketUrl"]

        seat = await http.post(
            f"/organizations/{org}/members", json={"userName": "vera", "role": "viewer"}
        )
        assert seat.status_code == 200, seat.text
        made = await http.post(
            f"/organizations/{org}/apiKeys", json={"name": "vera's", "userName": "vera"}
        )
        assert made.status_code == 200, made.text
        vera = made.json()
        minted = await http.post("/v1/scoped_tokens", json={"scopes": [f"device:{iid}:install"]})
        assert minted.status_code == 200, minted.text
        scoped = minted.json()

        views = {}
        for name, bearer in (("vera", vera["key"]), ("scoped", scoped["token"])):
            got = await http.get(
                f"/v1/android_instances/{iid}", headers={"Authorization": f"Bearer {bearer}"}
            )
            assert got.status_code == 200, got.text
            views[name] = _token_of(got.json()["status"])
            await _watch_without_driving(f"{endpoint}?token={views[name]}")

        logs = await http.get(f"{instance['status']['apiUrl']}/logs", headers=device)
        assert [i for i in logs.json()["items"] if i["tag"] in ("Input", "Clipboard")] == []

        revoked = await http.delete(f"/organizations/{org}/apiKeys/{vera['id']}")
        assert revoked.status_code == 200, revoked.text
        assert await _refused(f"{endpoint}?token={views['vera']}") == 401
        await _watch_without_driving(f"{endpoint}?token={views['scoped']}")
        revoked = await http.delete(f"/v1/scoped_tokens/{scoped['id']}")
        assert revoked.status_code == 200, revoked.text
        assert await _refused(f"{endpoint}?token={views['scoped']}") == 401

        assert (await http.delete(f"/v1/android_instances/{iid}")).status_code == 200
