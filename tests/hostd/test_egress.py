"""The egress proxy of a tunnel-attached instance, and the device's curl/nc that use it.

Real sockets on loopback. "Public" destinations are servers on 127.0.0.3, opened by the
host's allow-list (loopback is refused by default); "the host's services" are servers on
127.0.0.1, as the control API and the raw link port are.
"""

from __future__ import annotations

import base64
import struct
from base64 import b64encode
from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import trio

from devyard.core import OpenError
from devyard.core.selectors import parse_selectors
from devyard.hostd.adb.interpreter import CommandIO, Interpreter
from devyard.hostd.drivers import DeviceSpec, Platform, open_device
from devyard.hostd.drivers.virtual import VirtualDevice
from devyard.hostd.egress import EgressProxy
from devyard.hostd.netdial import DeviceNetwork, assign
from devyard.hostd.netpolicy import NetPolicy, parse_networks
from tests.ports import free_port

PUBLIC = "127.0.0.3"
POLICY = NetPolicy(allow=parse_networks([f"{PUBLIC}/32"]))


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


async def _serve(nursery: trio.Nursery, body: bytes, host: str = "127.0.0.1") -> int:
    serve = partial(trio.serve_tcp, partial(_http_server, body), 0, host=host)
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
    public_port = await _serve(nursery, b"public", PUBLIC)
    proxy = EgressProxy("egress", parse_selectors(["private.corp:8080"]), tunnel, policy=POLICY)
    port = await nursery.start(proxy.serve)
    assign(device, DeviceNetwork(POLICY, proxy.endpoint))
    await device.settings_put("global", "http_proxy", f"127.0.0.1:{port}")

    status, out, _ = await _sh(device, "curl -s http://private.corp:8080/hello?x=1")
    assert status == 0
    assert out == b"private GET /hello?x=1 HTTP/1.1"
    assert tunnel.dials == [("private.corp", 8080)]

    status, out, _ = await _sh(device, f"curl -s http://{PUBLIC}:{public_port}/")
    assert (status, out) == (0, b"public GET / HTTP/1.1")  # not a selector: dialled directly
    assert len(tunnel.dials) == 1

    status, out, _ = await _sh(device, "nc private.corp 8080", b"GET /nc HTTP/1.0\r\n\r\n")
    assert status == 0
    assert out.endswith(b"private GET /nc HTTP/1.0")

    tunnel.refuse = True
    status, _, err = await _sh(device, "curl -sS http://private.corp:8080/")
    assert status == 56
    assert b"Received HTTP code 403 from proxy after CONNECT" in err


async def test_a_device_reads_only_its_own_proxy_and_the_credentials_open_it(
    device: VirtualDevice, nursery: trio.Nursery
) -> None:
    """``getprop devyard.proxy`` is how an app on the device (or the tunnel bench) finds its
    proxy: this device's proxy with this device's credentials, which open it; without them
    the proxy answers 407."""
    status, out, _ = await _sh(device, "getprop devyard.proxy")
    assert (status, out) == (0, b"\n")  # no tunnel, no proxy
    tunnel = Tunnel(await _serve(nursery, b"private"))
    proxy = EgressProxy("egress", parse_selectors(["private.corp:8080"]), tunnel, policy=POLICY)
    port = await nursery.start(proxy.serve)
    assign(device, DeviceNetwork(POLICY, proxy.endpoint))
    status, out, _ = await _sh(device, "getprop devyard.proxy")
    url = urlsplit(out.decode().strip())
    assert (status, url.hostname, url.port) == (0, "127.0.0.1", port)
    assert (url.username, url.password) == (
        proxy.endpoint.credentials.username,
        proxy.endpoint.credentials.password,
    )
    assert b"devyard.proxy" in (await _sh(device, "getprop"))[1]  # listed with the rest

    async def connect(auth: str | None) -> bytes:
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:
            head = "CONNECT private.corp:8080 HTTP/1.1\r\nHost: private.corp:8080\r\n"
            if auth is not None:
                head += f"Proxy-Authorization: Basic {b64encode(auth.encode()).decode()}\r\n"
            await stream.send_all((head + "\r\n").encode())
            with trio.fail_after(10):
                return await stream.receive_some(4096)

    assert (await connect(None)).startswith(b"HTTP/1.1 407")
    assert (await connect(f"{url.username}:wrong")).startswith(b"HTTP/1.1 407")
    assert (await connect(f"{url.username}:{url.password}")).startswith(b"HTTP/1.1 200")
    assert tunnel.dials == [("private.corp", 8080)]


async def test_curl_without_a_proxy_and_its_errors(
    device: VirtualDevice, nursery: trio.Nursery
) -> None:
    assign(device, DeviceNetwork(POLICY))
    port = await _serve(nursery, b"direct", PUBLIC)
    status, out, _ = await _sh(device, f"curl -i http://{PUBLIC}:{port}/x")
    assert status == 0
    assert out.startswith(b"HTTP/1.1 200 OK\r\n")
    assert out.endswith(b"direct GET /x HTTP/1.1")
    status, _, _ = await _sh(device, f"curl -s -o /sdcard/page http://{PUBLIC}:{port}/p")
    assert status == 0
    assert await device.pull("/sdcard/page") == b"direct GET /p HTTP/1.1"
    closed = free_port()  # nobody listens there
    status, _, err = await _sh(device, f"curl http://{PUBLIC}:{closed}/")
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
    user, password = (c.encode() for c in (proxy.credentials.username, proxy.credentials.password))
    with trio.fail_after(10):
        async with await trio.open_tcp_stream("127.0.0.1", port) as socks:
            await socks.send_all(b"\x05\x01\x02")
            assert await socks.receive_some(2) == b"\x05\x02"
            await socks.send_all(b"\x01%c%s%c%s" % (len(user), user, len(password), password))
            assert await socks.receive_some(2) == b"\x01\x00"
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
            auth = base64.b64encode(user + b":" + password)
            await plain.send_all(
                b"GET http://web.corp/page HTTP/1.1\r\nHost: web.corp\r\n"
                b"Proxy-Authorization: Basic %s\r\n\r\n" % auth
            )
            answer = b""
            while chunk := await plain.receive_some():
                answer += chunk
            assert answer.endswith(b"private GET /page HTTP/1.1")  # origin form upstream
    assert tunnel.dials == [("db.corp", 5432), ("web.corp", 80)]


async def _raw(port: int, data: bytes) -> bytes:
    """Send *data* to 127.0.0.1:port and read until the peer closes."""
    with trio.fail_after(10):
        async with await trio.open_tcp_stream("127.0.0.1", port) as stream:
            await stream.send_all(data)
            answer = b""
            while chunk := await stream.receive_some():
                answer += chunk
            return answer


async def test_a_device_reaches_neither_the_hosts_services_nor_another_instances_proxy(
    device: VirtualDevice, nursery: trio.Nursery
) -> None:
    """Issue 14 finding 1, on one host: org A's device against org B's proxy and the host."""
    service = await _serve(nursery, b"control api")  # a host service on loopback
    closed = free_port()
    tunnel_a = Tunnel(await _serve(nursery, b"a-private"))
    tunnel_b = Tunnel(await _serve(nursery, b"b-private"))
    proxy_a = EgressProxy("a", parse_selectors(["a.corp:8080"]), tunnel_a, policy=POLICY)
    proxy_b = EgressProxy("b", parse_selectors(["b.corp:9000"]), tunnel_b, policy=POLICY)
    port_a = await nursery.start(proxy_a.serve)
    port_b = await nursery.start(proxy_b.serve)
    assign(device, DeviceNetwork(POLICY, proxy_a.endpoint))
    await device.settings_put("global", "http_proxy", f"127.0.0.1:{port_a}")

    # Through its own proxy: the host's addresses are refused, the same for an open and a
    # closed port and for every spelling of the host, so scanning learns nothing.
    other = await _serve(nursery, b"host service on another loopback address", "127.0.0.5")
    answers = set()
    for target in [
        f"127.0.0.5:{other}", f"127.0.0.5:{closed}", f"0.0.0.0:{service}",
        f"[::ffff:127.0.0.1]:{service}", f"[::ffff:127.0.0.1]:{closed}",
        f"[::ffff:127.0.0.1]:{port_b}", "169.254.169.254:80", f"[::ffff:127.0.0.5]:{other}",
    ]:  # fmt: skip
        status, out, err = await _sh(device, f"curl -sS http://{target}/")
        assert (status, out) == (56, b""), target
        answers.add(err)
    assert answers == {b"curl: (56) Received HTTP code 403 from proxy after CONNECT: not allowed\n"}

    # Without the proxy setting: the device's own loopback is its own (nothing listens there),
    # and the host's other loopback addresses are refused before connecting, uniformly.
    await device.settings_delete("global", "http_proxy")
    for port in (service, closed, port_b):
        status, out, err = await _sh(device, f"curl -sS http://127.0.0.1:{port}/")
        assert (status, out) == (7, b"")
        message = f"curl: (7) Failed to connect to 127.0.0.1 port {port}: Connection refused\n"
        assert err == message.encode()
    for target in (f"127.0.0.5:{other}", f"127.0.0.5:{closed}", f"0.0.0.0:{service}"):
        status, out, err = await _sh(device, f"curl -sS http://{target}/")
        assert (status, out) == (7, b"")
        host, port = target.split(":")
        message = (
            f"curl: (7) Failed to connect to {host} port {port}: "
            "not allowed by the host's network policy\n"
        )
        assert err == message.encode()
    status, _, err = await _sh(device, f"nc 127.0.0.5 {other}", b"GET / HTTP/1.0\r\n\r\n")
    assert status == 1
    assert b"not allowed" in err
    # Pointing the device at org B's proxy: a loopback dial like any other, refused.
    await device.settings_put("global", "http_proxy", f"127.0.0.1:{port_b}")
    status, _, err = await _sh(device, "curl -sS http://b.corp:9000/")
    assert status == 7
    assert f"Failed to connect to proxy 127.0.0.1 port {port_b}: not allowed".encode() in err

    # A device that reaches B's port anyway (an emulator's guest at 10.0.2.2) holds only A's
    # credentials: HTTP 407, SOCKS authentication refused; B's tunnel never dials.
    a_user, a_password = proxy_a.credentials.username, proxy_a.credentials.password
    basic = base64.b64encode(f"{a_user}:{a_password}".encode())
    for auth in (b"", b"Proxy-Authorization: Basic %s\r\n" % basic):
        answer = await _raw(port_b, b"CONNECT b.corp:9000 HTTP/1.1\r\nHost: b\r\n%s\r\n" % auth)
        assert answer.startswith(b"HTTP/1.1 407 Proxy Authentication Required\r\n")
    assert await _raw(port_b, b"\x05\x01\x00") == b"\x05\xff"
    user, password = a_user.encode(), a_password.encode()
    socks_auth = b"\x01%c%s%c%s" % (len(user), user, len(password), password)
    assert await _raw(port_b, b"\x05\x01\x02" + socks_auth) == b"\x05\x02\x01\x01"
    assert tunnel_b.dials == []

    # A's own tunnel still works.
    await device.settings_put("global", "http_proxy", f"127.0.0.1:{port_a}")
    status, out, _ = await _sh(device, "curl -sS http://a.corp:8080/ok")
    assert (status, out) == (0, b"a-private GET /ok HTTP/1.1")
    assert tunnel_a.dials == [("a.corp", 8080)]

    # And its own loopback is its own: an app's server on the device, not proxied.
    await nursery.start(partial(device.serve_port, 8080, partial(_http_server, b"on-device")))
    status, out, _ = await _sh(device, "curl -sS http://localhost:8080/x")
    assert (status, out) == (0, b"on-device GET /x HTTP/1.1")


async def test_one_bad_client_ends_only_its_own_connection(nursery: trio.Nursery) -> None:
    tunnel = Tunnel(await _serve(nursery, b"private"))
    proxy = EgressProxy("egress", parse_selectors(["*.corp"]), tunnel)
    port = await nursery.start(proxy.serve)
    auth = base64.b64encode(f"{proxy.credentials.username}:{proxy.credentials.password}".encode())
    good = (
        b"GET http://web.corp/after HTTP/1.1\r\nHost: web.corp\r\n"
        b"Proxy-Authorization: Basic %s\r\n\r\n" % auth
    )
    async with await trio.open_tcp_stream("127.0.0.1", port) as pending:
        await pending.send_all(b"\x05\x02")  # a SOCKS greeting that never finishes
        assert (await _raw(port, b"\x00" * 64)).startswith(b"HTTP/1.1 400 ")
        assert (await _raw(port, b"GET http://a/ HTTP/1.1\r\nX: " + b"a" * 40000)).startswith(
            b"HTTP/1.1 431 "
        )
        assert await _raw(port, b"\x05\x01\x02\x01\x00\x00") == b"\x05\x02\x01\x01"
        assert (await _raw(port, b"\x05\x01\x02\x02\x00\x00\xff\xff")).startswith(b"\x05\x02")
        assert (await _raw(port, good)).endswith(b"private GET /after HTTP/1.1")
