"""The egress proxy of a tunnel-attached instance, and the device's curl/nc that use it."""

from __future__ import annotations

import struct
from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path

import pytest
import trio

from devyard.core import OpenError
from devyard.core.selectors import parse_selectors
from devyard.hostd.adb.interpreter import CommandIO, Interpreter
from devyard.hostd.drivers import DeviceSpec, Platform, open_device
from devyard.hostd.drivers.virtual import VirtualDevice
from devyard.hostd.egress import EgressProxy
from tests.ports import free_port


async def _http_server(body: bytes, stream: trio.SocketStream) -> None:
    async with stream:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = await stream.receive_some()
            if not chunk:
                return
            data += chunk
        line = data.split(b"\r\n", 1)[0]
        payload = body + b" " + line
        await stream.send_all(
            b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s"
            % (len(payload), payload)
        )


class Tunnel:
    """Stands in for the edge + connector: dials a loopback server for the private name."""

    def __init__(self, private_port: int) -> None:
        self.private_port = private_port
        self.dials: list[tuple[str, int]] = []
        self.refuse = False

    async def __call__(self, host: str, port: int) -> trio.abc.Stream:
        self.dials.append((host, port))
        if self.refuse:
            raise OpenError("forbidden", f"{host}:{port} is not in the tunnel's selectors")
        return await trio.open_tcp_stream("127.0.0.1", self.private_port)


async def _serve(nursery: trio.Nursery, body: bytes) -> int:
    serve = partial(trio.serve_tcp, partial(_http_server, body), 0, host="127.0.0.1")
    listeners = await nursery.start(serve)
    return int(listeners[0].socket.getsockname()[1])


@pytest.fixture
async def device(tmp_path: Path) -> AsyncIterator[VirtualDevice]:
    async with open_device(DeviceSpec(Platform.ANDROID, "egress", tmp_path / "dev")) as dev:
        assert isinstance(dev, VirtualDevice)
        yield dev


async def _sh(device: VirtualDevice, line: str, stdin: bytes = b"") -> tuple[int, bytes, bytes]:
    out, err = bytearray(), bytearray()

    async def o(data: bytes) -> None:
        out.extend(data)

    async def e(data: bytes) -> None:
        err.extend(data)

    class Stdin:
        sent = False

        async def read(self) -> bytes:
            await trio.lowlevel.checkpoint()
            if self.sent:
                return b""
            self.sent = True
            return stdin

    with trio.fail_after(20):
        status = await Interpreter(device).run_line(line, CommandIO(o, e, Stdin()))
    return status, bytes(out), bytes(err)


async def test_matching_destinations_go_through_the_tunnel(
    device: VirtualDevice, nursery: trio.Nursery
) -> None:
    tunnel = Tunnel(await _serve(nursery, b"private"))
    public_port = await _serve(nursery, b"public")
    proxy = EgressProxy("egress", parse_selectors(["private.corp:8080"]), tunnel)
    port = await nursery.start(proxy.serve)
    await device.settings_put("global", "http_proxy", f"127.0.0.1:{port}")

    status, out, _ = await _sh(device, "curl -s http://private.corp:8080/hello?x=1")
    assert status == 0
    assert out == b"private GET /hello?x=1 HTTP/1.1"
    assert tunnel.dials == [("private.corp", 8080)]

    status, out, _ = await _sh(device, f"curl -s http://127.0.0.1:{public_port}/")
    assert (status, out) == (0, b"public GET / HTTP/1.1")  # not a selector: dialled directly
    assert len(tunnel.dials) == 1

    status, out, _ = await _sh(device, "nc private.corp 8080", b"GET /nc HTTP/1.0\r\n\r\n")
    assert status == 0
    assert out.endswith(b"private GET /nc HTTP/1.0")

    tunnel.refuse = True
    status, _, err = await _sh(device, "curl -sS http://private.corp:8080/")
    assert status == 56
    assert b"Received HTTP code 403 from proxy after CONNECT" in err


async def test_curl_without_a_proxy_and_its_errors(
    device: VirtualDevice, nursery: trio.Nursery
) -> None:
    port = await _serve(nursery, b"direct")
    status, out, _ = await _sh(device, f"curl -i http://127.0.0.1:{port}/x")
    assert status == 0
    assert out.startswith(b"HTTP/1.1 200 OK\r\n")
    assert out.endswith(b"direct GET /x HTTP/1.1")
    status, _, _ = await _sh(device, f"curl -s -o /sdcard/page http://127.0.0.1:{port}/p")
    assert status == 0
    assert await device.pull("/sdcard/page") == b"direct GET /p HTTP/1.1"
    closed = free_port()  # nobody listens there
    status, _, err = await _sh(device, f"curl http://127.0.0.1:{closed}/")
    assert status == 7
    assert b"Failed to connect" in err
    status, _, err = await _sh(device, "curl ftp://example/")
    assert (status, err) == (3, b"curl: (3) URL rejected: ftp://example/\n")
    status, _, err = await _sh(device, "curl -Z http://x/")
    assert status == 1
    assert b"is unknown" in err


async def test_socks5_and_plain_http_proxy_clients(nursery: trio.Nursery) -> None:
    tunnel = Tunnel(await _serve(nursery, b"private"))
    proxy = EgressProxy("egress", parse_selectors(["*.corp"]), tunnel)
    port = await nursery.start(proxy.serve)
    with trio.fail_after(10):
        async with await trio.open_tcp_stream("127.0.0.1", port) as socks:
            await socks.send_all(b"\x05\x01\x00")
            assert await socks.receive_some(2) == b"\x05\x00"
            name = b"db.corp"
            await socks.send_all(
                b"\x05\x01\x00\x03" + bytes([len(name)]) + name + struct.pack(">H", 5432)
            )
            reply = await socks.receive_some(10)
            assert reply[:2] == b"\x05\x00"
            await socks.send_all(b"GET /s HTTP/1.0\r\n\r\n")
            answer = b""
            while chunk := await socks.receive_some():
                answer += chunk
            assert answer.endswith(b"private GET /s HTTP/1.0")
        async with await trio.open_tcp_stream("127.0.0.1", port) as plain:
            await plain.send_all(b"GET http://web.corp/page HTTP/1.1\r\nHost: web.corp\r\n\r\n")
            answer = b""
            while chunk := await plain.receive_some():
                answer += chunk
            assert answer.endswith(b"private GET /page HTTP/1.1")  # origin form upstream
    assert tunnel.dials == [("db.corp", 5432), ("web.corp", 80)]
