"""View tokens (issue 14 finding 3; docs/security.md, "The stream-token model"), and the
instance token kept out of query strings on ``apiUrl`` and ``adbWebSocketUrl`` (finding 11).

A reader that cannot control an instance (here a read-only API key) gets a ``dyv_`` view token
in ``signedStreamUrl``: frames flow, nothing it sends drives the device, and it dies with the
key it was made for. A real server and host (conftest), the device checked through its API.
"""

from __future__ import annotations

import gc
import json
import struct
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
import trio
import trio_websocket

from devyard.server import viewing
from devyard.server.edge.gateway import RECHECK_VIEW_S

from .conftest import Rig, upgrade_refusal

_MEDIA = struct.Struct(">BBQ")
_VIEW_ONLY = "this stream is view-only: only frame requests are accepted"
# Everything a controlling browser may send that a view-only one may not.
_CONTROL: list[str | bytes] = [
    json.dumps(m)
    for m in (
        {"type": "touch", "pointerId": 0, "action": "down", "x": 0.5, "y": 0.5},
        {"type": "touch", "pointerId": 0, "action": "up", "x": 0.5, "y": 0.5},
        {"type": "key", "key": "home"},
        {"type": "text", "text": "hi"},
        {"type": "scroll", "x": 0.5, "y": 0.5, "dx": 0, "dy": 100},
        {"type": "clipboard", "text": "stolen?"},
        {"type": "clipboard"},
        {"type": "rotate", "rotation": 90},
        {"type": "openUrl", "url": "https://example.com/"},
        {"type": "screenshot"},
    )
] + [b"\x00binary"]


async def _read_only_key(rig: Rig, org_id: str) -> tuple[str, str]:
    """(plaintext, id) of a new read-only key of the admin."""
    response = await rig.client.post(
        f"/organizations/{org_id}/apiKeys", json={"name": "dashboard", "readOnly": True}
    )
    assert response.status_code in (200, 201), response.text
    created = response.json()
    return created["key"], created["id"]


async def _as(rig: Rig, key: str, instance: dict[str, Any]) -> dict[str, Any]:
    """The instance as the holder of *key* reads it."""
    response = await rig.client.get(
        f"/v1/android_instances/{instance['metadata']['id']}",
        headers={"Authorization": f"Bearer {key}"},
    )
    assert response.status_code == 200, response.text
    status: dict[str, Any] = response.json()["status"]
    return status


def _token_of(signed_stream_url: str) -> str:
    return parse_qs(urlsplit(signed_stream_url).query)["token"][0]


async def _viewer(rig: Rig) -> tuple[dict[str, Any], str, str, str]:
    """(instance, view token, read-only key, its id): a ready instance and a reader's token."""
    instance = await rig.create("android")
    key, key_id = await _read_only_key(rig, instance["metadata"]["organizationId"])
    status = await _as(rig, key, instance)
    assert "token" not in status and "streamToken" not in status, status
    view = _token_of(status["signedStreamUrl"])
    assert view.startswith("dyv_"), "a reader's signedStreamUrl carries a view token"
    return instance, view, key, key_id


@asynccontextmanager
async def _stream(url: str) -> AsyncIterator[trio_websocket.WebSocketConnection]:
    async with trio_websocket.open_websocket_url(url) as ws:
        hello = json.loads(await ws.get_message())
        assert hello["type"] == "hello"
        await ws.send_message(json.dumps({"type": "start", "codec": "jpeg"}))
        while not isinstance(message := await ws.get_message(), bytes):
            pass
        kind, _flags, _pts = _MEDIA.unpack_from(message)
        assert kind == 3, "a JPEG frame"
        yield ws


async def _until_host_answers(ws: trio_websocket.WebSocketConnection) -> list[Any]:
    """Sends an allowed message the host refuses, and returns every text message and media
    kind received up to the host's answer: the host handles a stream's messages in order, so
    anything sent before it that reached the host has been handled by then."""
    await ws.send_message(json.dumps({"type": "start", "codec": "sync-marker"}))
    seen: list[Any] = []
    while True:
        message = await ws.get_message()
        if isinstance(message, bytes):
            seen.append(_MEDIA.unpack_from(message)[0])
            continue
        value = json.loads(message)
        if value.get("type") == "error" and "sync-marker" in value.get("message", ""):
            return seen
        seen.append(value)


class _Device:
    """The device API with the instance token, to see what reached the device."""

    def __init__(self, client: httpx.AsyncClient, instance: dict[str, Any]) -> None:
        self.client = client
        self.url = instance["status"]["apiUrl"]
        self.headers = {"Authorization": f"Bearer {instance['status']['token']}"}

    async def get(self, path: str) -> httpx.Response:
        response = await self.client.get(self.url + path, headers=self.headers)
        assert response.status_code == 200, response.text
        return response

    async def logs(self, *tags: str) -> list[str]:
        items = (await self.get("/logs")).json()["items"]
        return [f"{i['tag']}: {i['message']}" for i in items if i["tag"] in tags]


async def test_a_readers_stream_shows_frames_and_drives_nothing(rig: Rig) -> None:
    with trio.fail_after(30):
        instance, view, _, _ = await _viewer(rig)
        status = instance["status"]
        async with httpx.AsyncClient() as client:
            device = _Device(client, instance)
            page = await client.get(f"{status['signedStreamUrl'].split('?')[0]}?token={view}")
            assert page.status_code == 200, "the viewer page opens with the view token"
            described = (await device.get("/")).json()
            clipboard = (await device.get("/clipboard")).json()
            async with _stream(f"{status['endpointWebSocketUrl']}?token={view}") as ws:
                for message in _CONTROL:
                    await ws.send_message(message)
                seen = await _until_host_answers(ws)
            assert await device.logs("Input", "Clipboard") == []
            assert (await device.get("/clipboard")).json() == clipboard
            assert (await device.get("/")).json() == described
            refusals = [m for m in seen if m == {"type": "error", "message": _VIEW_ONLY}]
            assert len(refusals) == len(_CONTROL), seen
            assert not [m for m in seen if isinstance(m, dict) and m not in refusals], seen
            assert 4 not in seen, "no screenshot answered"

            # The admin's own URL still drives the device.
            assert _token_of(status["signedStreamUrl"]) == status["streamToken"]
            async with _stream(
                f"{status['endpointWebSocketUrl']}?token={status['streamToken']}"
            ) as ws:
                for message in _CONTROL[:2]:
                    await ws.send_message(message)
                seen = await _until_host_answers(ws)
            assert not [m for m in seen if isinstance(m, dict)], seen
            logs = await device.logs("Input")
            assert [m.split(" pointer")[0] for m in logs] == [
                "Input: touch down",
                "Input: touch up",
            ]


async def test_a_view_token_dies_with_its_api_key(rig: Rig) -> None:
    instance, view, _, key_id = await _viewer(rig)
    url = f"{instance['status']['endpointWebSocketUrl']}?token={view}"
    with trio.fail_after(20):
        async with _stream(url):
            pass
    org_id = instance["metadata"]["organizationId"]
    revoked = await rig.client.delete(f"/organizations/{org_id}/apiKeys/{key_id}")
    assert revoked.status_code in (200, 204), revoked.text
    status, body = await upgrade_refusal(url)
    assert (status, body["reason"]) == (401, "unauthorized")
    async with httpx.AsyncClient() as client:
        page = await client.get(
            instance["status"]["signedStreamUrl"].split("?")[0], params={"token": view}
        )
        assert page.status_code == 401


# When the server closes a WebSocket, trio-websocket 0.12 leaves the client's socket to the GC
# (docs/edge.md, open points): collect it here, where its ResourceWarning is expected.
@pytest.mark.filterwarnings("ignore::ResourceWarning")
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
async def test_an_open_view_stream_ends_when_its_api_key_is_revoked(rig: Rig) -> None:
    try:
        await _open_view_stream_ends_when_its_api_key_is_revoked(rig)
    finally:
        gc.collect()


async def _open_view_stream_ends_when_its_api_key_is_revoked(rig: Rig) -> None:
    instance, view, _, key_id = await _viewer(rig)
    org_id = instance["metadata"]["organizationId"]
    with trio.fail_after(RECHECK_VIEW_S + 15):
        async with _stream(f"{instance['status']['endpointWebSocketUrl']}?token={view}") as ws:
            revoked = await rig.client.delete(f"/organizations/{org_id}/apiKeys/{key_id}")
            assert revoked.status_code == 200, revoked.text
            with pytest.raises(trio_websocket.ConnectionClosed) as closed:
                while True:
                    await ws.get_message()
            reason = closed.value.reason
            assert reason is not None and reason.code == 1008, reason


async def test_a_view_token_opens_only_its_instance_and_only_the_stream(rig: Rig) -> None:
    x, view, key, _ = await _viewer(rig)
    y = await rig.create("android")
    other = y["status"]["endpointWebSocketUrl"] + f"?token={view}"
    status, body = await upgrade_refusal(other)
    assert (status, body["reason"]) == (401, "unauthorized")
    # Y's own view token for the same key opens Y: the refusal above is about the instance.
    y_view = _token_of((await _as(rig, key, y))["signedStreamUrl"])
    assert y_view != view
    with trio.fail_after(20):
        async with _stream(y["status"]["endpointWebSocketUrl"] + f"?token={y_view}"):
            pass
    # The device API and ADB refuse it.
    async with httpx.AsyncClient() as client:
        api = await client.get(
            x["status"]["apiUrl"] + "/", headers={"Authorization": f"Bearer {view}"}
        )
    assert (api.status_code, api.json()["reason"]) == (403, "forbidden")
    status, body = await upgrade_refusal(
        x["status"]["adbWebSocketUrl"], {"Authorization": f"Bearer {view}"}
    )
    assert (status, body["reason"]) == (403, "forbidden")


async def test_a_forged_view_token_is_refused(rig: Rig) -> None:
    instance, view, key, _ = await _viewer(rig)
    base = instance["status"]["endpointWebSocketUrl"]
    lookup = view.split("_")[1]
    forged = [
        viewing.view_token("dys_guessed", lookup),  # right shape, wrong stream token
        view[:-8] + ("A" if view[-8] != "A" else "B") + view[-7:],  # one character changed
        view.replace("dyv_", "dys_", 1),  # a view token passed off as the stream token
        viewing.view_token(instance["status"]["streamToken"], "000000000000"),  # no such key
    ]
    for token in forged:
        status, body = await upgrade_refusal(f"{base}?token={token}")
        assert (status, body["reason"]) == (401, "unauthorized"), token
    # A key's holder cannot make its view token into one for another key of the org.
    assert key not in view


async def test_the_instance_token_is_refused_in_the_query_of_api_and_adb(rig: Rig) -> None:
    instance = await rig.create("android")
    status = instance["status"]
    token = status["token"]
    async with httpx.AsyncClient() as client:
        queried = await client.get(status["apiUrl"] + "/", params={"token": token})
        assert (queried.status_code, queried.json()["reason"]) == (401, "unauthorized")
        bearer = await client.get(
            status["apiUrl"] + "/", headers={"Authorization": f"Bearer {token}"}
        )
        assert bearer.status_code == 200
    code, body = await upgrade_refusal(f"{status['adbWebSocketUrl']}?token={token}")
    assert (code, body["reason"]) == (401, "unauthorized")
    # The stream URLs keep their query token (spec 2.1).
    with trio.fail_after(20):
        async with _stream(f"{status['endpointWebSocketUrl']}?token={token}"):
            pass
