"""``targetHttpPortUrlPrefix`` in depth on the gateway rig (a real server and host daemon in one
process): a real HTTP server and a real WebSocket echo server listen "on the device" (the
virtual device's port table maps device ports to them), and real clients (httpx,
trio-websocket, a raw socket) reach them through the prefix. The same through ``devyard up``
and adb reverse, with 64 MiB bodies, is tests/e2e/test_up_ports.py.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from functools import partial
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
import trio
from trio_websocket import ConnectionClosed, open_websocket_url
from wsproto import WSConnection
from wsproto.connection import ConnectionType
from wsproto.events import AcceptConnection, Request

from devyard.hostd.drivers.virtual import VirtualDevice
from tests.device_apps import DeviceHttp, serve_device_http, serve_device_ws

from .conftest import Rig, upgrade_refusal

pytestmark = pytest.mark.slow

HTTP_PORT = 8080
WS_PORT = 8081


async def _android(rig: Rig, nursery: trio.Nursery) -> tuple[dict[str, Any], DeviceHttp]:
    instance = await rig.create("android")
    device = rig.supervisor.device(instance["metadata"]["id"])
    assert isinstance(device, VirtualDevice)
    app = DeviceHttp()
    device.map_port(HTTP_PORT, await nursery.start(serve_device_http, app))
    device.map_port(WS_PORT, await nursery.start(serve_device_ws))
    return instance, app


@pytest.fixture
async def ported(rig: Rig, nursery: trio.Nursery) -> tuple[dict[str, Any], DeviceHttp]:
    return await _android(rig, nursery)


def _auth(instance: dict[str, Any]) -> dict[str, str]:
    return {"Authorization": f"Bearer {instance['status']['token']}"}


@pytest.fixture
async def client(ported: tuple[dict[str, Any], DeviceHttp]) -> AsyncIterator[httpx.AsyncClient]:
    instance, _ = ported
    prefix = instance["status"]["targetHttpPortUrlPrefix"]
    async with httpx.AsyncClient(base_url=prefix, headers=_auth(instance), timeout=30) as http:
        yield http


async def test_the_prefix_is_advertised_and_reaches_the_device_port(
    ported: tuple[dict[str, Any], DeviceHttp], client: httpx.AsyncClient
) -> None:
    instance, _ = ported
    prefix = instance["status"]["targetHttpPortUrlPrefix"]
    assert prefix == instance["status"]["apiUrl"].removesuffix("api") + "ports/"
    hello = await client.get(f"{HTTP_PORT}/hello")
    assert (hello.status_code, hello.text) == (200, "hello from the device")
    assert hello.headers["content-length"] == "21"
    missing = await client.get(f"{HTTP_PORT}/nothing-here")
    assert (missing.status_code, missing.text) == (404, "no such page on the device")


async def test_what_the_device_app_sees(
    ported: tuple[dict[str, Any], DeviceHttp], client: httpx.AsyncClient
) -> None:
    instance, _ = ported
    token = instance["status"]["token"]
    response = await client.post(
        f"{HTTP_PORT}/echo-request",
        params={"a": "1 2"},
        content=b"body!",
        headers={"X-App": "yes", "Connection": "keep-alive, X-Drop", "X-Drop": "hop",
                 "Cookie": "c=1"},
    )  # fmt: skip
    seen = response.json()
    headers = dict(seen["headers"])
    assert seen["method"] == "POST" and seen["body"] == "body!"
    assert seen["query"] == "a=1+2"
    assert headers["host"] == f"localhost:{HTTP_PORT}"
    assert headers["x-app"] == "yes" and headers["cookie"] == "c=1"
    assert headers["x-forwarded-for"] == "127.0.0.1"
    assert headers["x-forwarded-proto"] == "http"
    assert headers["x-forwarded-host"] == urlsplit(str(client.base_url)).netloc
    assert headers["x-forwarded-prefix"] == (
        f"/v1/instances/{instance['metadata']['id']}/ports/{HTTP_PORT}"
    )
    assert "x-drop" not in headers, "a field the Connection header names is hop-by-hop"
    assert "authorization" not in headers, "the instance token never reaches the device"
    assert token not in json.dumps(seen)

    # ?token= opens the port too; the parameter is removed, the app's own Authorization passes
    bare = httpx.AsyncClient(base_url=str(client.base_url), timeout=30)
    async with bare:
        response = await bare.get(
            f"{HTTP_PORT}/echo-request/a%2Fb",
            params={"token": token, "keep": "x"},
            headers={"Authorization": "Bearer the-apps-own"},
        )
    assert response.status_code == 200, response.text
    seen = response.json()
    assert seen["query"] == "keep=x"
    assert seen["rawPath"] == "/echo-request/a%2Fb", "the path goes as the caller wrote it"
    assert dict(seen["headers"])["authorization"] == "Bearer the-apps-own"


async def test_credentials_are_checked_first(
    rig: Rig, nursery: trio.Nursery, ported: tuple[dict[str, Any], DeviceHttp]
) -> None:
    instance, _ = ported
    url = instance["status"]["targetHttpPortUrlPrefix"] + f"{HTTP_PORT}/hello"
    other, _ = await _android(rig, nursery)
    async with httpx.AsyncClient(timeout=30) as http:
        for headers in ({}, {"Authorization": "Bearer dyi_wrong"}, _auth(other)):
            refused = await http.get(url, headers=headers)
            assert refused.status_code == 401, refused.text
            assert refused.json()["reason"] == "unauthorized"
        streamed = {"Authorization": f"Bearer {instance['status']['streamToken']}"}
        refused = await http.get(url, headers=streamed)
        assert (refused.status_code, refused.json()["reason"]) == (403, "forbidden")
        assert (await http.get(url, params={"token": instance["status"]["token"]})).text == (
            "hello from the device"
        )


async def test_closed_and_bad_ports_answer_api_errors(client: httpx.AsyncClient) -> None:
    closed = await client.get("9999/")
    assert closed.status_code == 502, closed.text
    assert closed.json() == {
        "message": "nothing listens on device port 9999",
        "reason": "port_closed",
    }
    for bad in ("0/", "65536/", "abc/", "-1/", "", "99999999999999999999/"):
        answer = await client.get(bad)
        assert answer.status_code == 400, (bad, answer.text)
        assert answer.json()["reason"] == "bad_request"


async def test_an_ended_instance_is_gone(
    rig: Rig, ported: tuple[dict[str, Any], DeviceHttp], client: httpx.AsyncClient
) -> None:
    instance, _ = ported
    await rig.delete(instance)
    gone = await client.get(f"{HTTP_PORT}/hello")
    assert (gone.status_code, gone.json()["reason"]) == (410, "gone")


async def test_chunked_both_ways(
    ported: tuple[dict[str, Any], DeviceHttp], client: httpx.AsyncClient
) -> None:
    async def body() -> AsyncIterator[bytes]:
        for i in range(100):
            yield b"piece %d;" % i

    counted = await client.post(f"{HTTP_PORT}/count", content=body())
    expected = b"".join(b"piece %d;" % i for i in range(100))
    assert counted.json()["size"] == len(expected)
    async with client.stream("GET", f"{HTTP_PORT}/stream", params={"n": 1000}) as streamed:
        assert streamed.headers.get("transfer-encoding") == "chunked"
        assert "content-length" not in streamed.headers
        lines = [line async for line in streamed.aiter_lines()]
    assert lines == [f"line {i}" for i in range(1000)]


async def test_the_callers_connection_is_kept_alive(
    ported: tuple[dict[str, Any], DeviceHttp],
) -> None:
    instance, app = ported
    parts = urlsplit(instance["status"]["targetHttpPortUrlPrefix"])
    assert parts.hostname is not None and parts.port is not None
    request = (
        f"GET {parts.path}{HTTP_PORT}/hello HTTP/1.1\r\nHost: {parts.netloc}\r\n"
        f"Authorization: Bearer {instance['status']['token']}\r\n\r\n"
    ).encode()
    async with await trio.open_tcp_stream(parts.hostname, parts.port) as stream:
        received = b""
        with trio.fail_after(10):
            for answered in (1, 2, 3):
                await stream.send_all(request)
                while received.count(b"hello from the device") < answered:
                    chunk = await stream.receive_some()
                    assert chunk, f"the connection was closed after {received!r}"
                    received += chunk
    assert received.count(b"HTTP/1.1 200") == 3
    assert b"connection: close" not in received.lower()
    assert app.requests == 3


async def test_websocket_echo_through_the_prefix(
    ported: tuple[dict[str, Any], DeviceHttp],
) -> None:
    instance, _ = ported
    ws_prefix = "ws" + instance["status"]["targetHttpPortUrlPrefix"].removeprefix("http")
    url = f"{ws_prefix}{WS_PORT}/echo?token={instance['status']['token']}"
    with trio.fail_after(20):
        async with open_websocket_url(url, subprotocols=["echo.v1", "other"]) as ws:
            assert ws.subprotocol == "echo.v1"
            await ws.send_message("hello ✓")
            assert await ws.get_message() == "hello ✓"
            big = bytes(range(256)) * 4096  # 1 MiB binary
            await ws.send_message(big)
            assert await ws.get_message() == big
            await ws.send_message("close-me")
            with pytest.raises(ConnectionClosed) as closed:
                await ws.get_message()
            # trio-websocket 0.12 leaves its socket to the GC after a close the server began
            # (it does so against the device's server directly too): close it here
            await ws._stream.aclose()
        assert closed.value.reason is not None
        assert (closed.value.reason.code, closed.value.reason.reason) == (4001, "asked to")

    status, body = await upgrade_refusal(f"{ws_prefix}9999/")
    assert status == 401, body
    status, body = await upgrade_refusal(f"{ws_prefix}9999/", _auth(instance))
    assert (status, body["reason"]) == (502, "port_closed")
    with pytest.raises(json.JSONDecodeError):  # not our APIError: the device's own answer
        await upgrade_refusal(f"{ws_prefix}{HTTP_PORT}/hello", _auth(instance))


async def test_the_per_instance_stream_cap_counts_port_streams(
    ported: tuple[dict[str, Any], DeviceHttp],
) -> None:
    instance, _ = ported
    ws_prefix = "ws" + instance["status"]["targetHttpPortUrlPrefix"].removeprefix("http")
    url = f"{ws_prefix}{WS_PORT}/?token={instance['status']['token']}"
    async with trio.open_nursery() as nursery:
        opened = 0
        done = trio.Event()

        async def hold() -> None:
            nonlocal opened
            async with open_websocket_url(url) as ws:
                await ws.send_message("x")
                await ws.get_message()
                opened += 1
                await done.wait()

        for _ in range(16):  # ServerConfig.max_streams_per_instance's default
            nursery.start_soon(hold)
        with trio.fail_after(30):
            while opened < 16:  # noqa: ASYNC110
                await trio.sleep(0.02)
        status, body = await upgrade_refusal(f"{ws_prefix}{WS_PORT}/", _auth(instance))
        assert (status, body["reason"]) == (429, "too_many_streams")
        done.set()


async def _raw_device_server(answer: bytes, stream: trio.SocketStream) -> None:
    """Reads a request head, sends *answer*, closes: a broken or non-HTTP app."""
    async with stream:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = await stream.receive_some()
            if not chunk:
                return
            data += chunk
        await stream.send_all(answer)


async def test_broken_answers_from_the_device(
    rig: Rig, nursery: trio.Nursery, ported: tuple[dict[str, Any], DeviceHttp],
    client: httpx.AsyncClient,
) -> None:  # fmt: skip
    instance, _ = ported
    device = rig.supervisor.device(instance["metadata"]["id"])
    assert isinstance(device, VirtualDevice)
    answers = {
        9001: b"SSH-2.0-not-http\r\n\r\n",
        9002: b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly ten b",
        9003: b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n",
    }
    for port, answer in answers.items():
        listeners = await nursery.start(trio.serve_tcp, partial(_raw_device_server, answer), 0)
        device.map_port(port, listeners[0].socket.getsockname()[1])
    garbage = await client.get("9001/")
    assert (garbage.status_code, garbage.json()["reason"]) == (502, "bad_gateway")
    for cut in ("9002/", "9003/"):  # a body cut off is never passed on as a whole one
        with pytest.raises(httpx.RemoteProtocolError):
            await client.get(cut)
    assert (await client.get(f"{HTTP_PORT}/hello")).status_code == 200


async def test_ios_instances_have_device_ports_too(rig: Rig, nursery: trio.Nursery) -> None:
    instance = await rig.create("ios")
    device = rig.supervisor.device(instance["metadata"]["id"])
    assert isinstance(device, VirtualDevice)
    app = DeviceHttp()
    device.map_port(8100, await nursery.start(serve_device_http, app))  # WebDriverAgent's port
    prefix = instance["status"]["targetHttpPortUrlPrefix"]
    async with httpx.AsyncClient(headers=_auth(instance), timeout=30) as http:
        hello = await http.get(f"{prefix}8100/hello")
    assert (hello.status_code, hello.text) == (200, "hello from the device")


async def _accept_then_drop(stream: trio.SocketStream) -> None:
    """A WebSocket server that accepts the upgrade and then drops the connection."""
    ws = WSConnection(ConnectionType.SERVER)
    async with stream:
        while True:
            ws.receive_data(await stream.receive_some())
            requests = [e for e in ws.events() if isinstance(e, Request)]
            if requests:
                await stream.send_all(ws.send(AcceptConnection()))
                return


async def test_a_device_that_drops_its_websocket_closes_the_callers_with_1011(
    rig: Rig, nursery: trio.Nursery, ported: tuple[dict[str, Any], DeviceHttp]
) -> None:
    instance, _ = ported
    device = rig.supervisor.device(instance["metadata"]["id"])
    assert isinstance(device, VirtualDevice)
    listeners = await nursery.start(trio.serve_tcp, _accept_then_drop, 0)
    device.map_port(9010, listeners[0].socket.getsockname()[1])
    ws_prefix = "ws" + instance["status"]["targetHttpPortUrlPrefix"].removeprefix("http")
    with trio.fail_after(20):
        async with open_websocket_url(
            f"{ws_prefix}9010/?token={instance['status']['token']}"
        ) as ws:
            with pytest.raises(ConnectionClosed) as closed:
                await ws.get_message()
            await ws._stream.aclose()  # trio-websocket 0.12 leaves it to the GC (see above)
    assert closed.value.reason is not None and closed.value.reason.code == 1011


async def test_head_answers_without_a_body(client: httpx.AsyncClient) -> None:
    head = await client.head(f"{HTTP_PORT}/hello")
    assert (head.status_code, head.content) == (200, b"")
    assert head.headers["content-length"] == "21"
