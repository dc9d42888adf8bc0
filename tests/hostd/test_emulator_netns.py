"""A launched emulator runs in a network namespace of its own: it reaches its proxy only.

No real emulator runs here (no KVM): a stand-in ``emulator`` (a Python script) is started by the
driver's real launch path (`open_emulator_device`, as hostd opens one) and, from where it runs,
probes what a guest would reach through 10.0.2.2 (the emulator process's 127.0.0.1): a server
on the host's loopback (as the control API and the raw link port are), another instance's
egress proxy, UDP to the host; and its own proxy, which it was launched with, fetching a
"public" server (127.0.0.3, opened by the host's allow-list as in test_egress.py) and refused a
loopback one. It serves a console and an adbd port, which hostd must still reach.

`test_without_a_namespace_the_probes_reach_the_host` runs the same stand-in with
``--emulator-netns off``: every isolation probe then succeeds, so the probes can fail.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio

from devyard.hostd import netns
from devyard.hostd.drivers import DeviceSpec, InvalidSpecError, Platform
from devyard.hostd.drivers.emulator import EmulatorConfig
from devyard.hostd.drivers.emulator.device import open_emulator_device
from devyard.hostd.drivers.emulator.isolation import inside_url, use_netns
from devyard.hostd.egress import EgressProxy
from devyard.hostd.netns import NetnsMode
from devyard.hostd.netpolicy import NetPolicy, parse_networks
from tests.e2e._cli import DEVYARD, clean_env
from tests.hostd.drivers.test_emulator import ADB, kill_server, tool_env
from tests.hostd.test_egress import _serve
from tests.polling import eventually
from tests.ports import free_port

PUBLIC = "127.0.0.3"
POLICY = NetPolicy(allow=parse_networks([f"{PUBLIC}/32"]))
IP = netns.find_ip(None)
_REASON = netns.unavailable(IP) or (None if ADB else "the adb client is not installed")
needs_netns = pytest.mark.skipif(_REASON is not None, reason=str(_REASON))

STAND_IN = r"""
import base64, json, os, socket, struct, sys, threading, time
from urllib.parse import urlsplit

port = int(sys.argv[sys.argv.index("-port") + 1])
probes = json.loads(os.environ["PROBES"])

def serve(p, banner):
    lsock = socket.socket()
    lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lsock.bind(("127.0.0.1", p))
    lsock.listen(8)
    def loop():
        while True:
            conn, _ = lsock.accept()
            try:
                conn.sendall(banner)
            except OSError:
                pass
            conn.close()
    threading.Thread(target=loop, daemon=True).start()

serve(port, b"console %d\n" % port)
serve(port + 1, b"adbd %d\n" % (port + 1))

def tcp(host, p):
    try:
        with socket.create_connection((host, p), timeout=5) as s:
            s.settimeout(5)
            return "connected"
    except OSError as exc:
        return type(exc).__name__ + ": " + str(exc)

def udp(host, p):
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.sendto(b"leak", (host, p))
            return "sent"
    except OSError as exc:
        return type(exc).__name__ + ": " + str(exc)

def via_proxy(host, p):
    url = urlsplit(os.environ.get("http_proxy", ""))
    if not url.hostname:
        return "no proxy"
    auth = base64.b64encode(f"{url.username}:{url.password}".encode()).decode()
    try:
        with socket.create_connection((url.hostname, url.port), timeout=10) as s:
            s.settimeout(10)
            s.sendall(f"CONNECT {host}:{p} HTTP/1.1\r\nHost: {host}:{p}\r\n"
                      f"Proxy-Authorization: Basic {auth}\r\n\r\n".encode())
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = s.recv(4096)
                if not chunk:
                    break
                head += chunk
            status = head.split(b"\r\n", 1)[0].decode()
            if " 200 " not in status + " ":
                return status
            s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            body = b""
            while True:
                chunk = s.recv(4096)
                if not chunk:
                    break
                body += chunk
            return status + " | " + body.decode(errors="replace").rsplit("\r\n", 1)[-1]
    except OSError as exc:
        return type(exc).__name__ + ": " + str(exc)

def dns(name):
    labels = b"".join(bytes([len(x)]) + x.encode() for x in name.split("."))
    query = struct.pack("!6H", 0x1234, 0x0100, 1, 0, 0, 0) + labels + b"\0\0\1\0\1"
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.settimeout(10)
            s.sendto(query, ("127.0.0.1", 53))
            reply = s.recv(512)
    except OSError as exc:
        return type(exc).__name__ + ": " + str(exc)
    offset, addresses = len(query), []
    for _ in range(struct.unpack("!H", reply[6:8])[0]):
        rdlen = struct.unpack("!H", reply[offset + 10 : offset + 12])[0]
        addresses.append(socket.inet_ntoa(reply[offset + 12 : offset + 12 + rdlen]))
        offset += 12 + rdlen
    return [reply[3] & 0xF, addresses]

record = {
    "pid": os.getpid(),
    "dns_server": "-dns-server 127.0.0.1" in " ".join(sys.argv),
    "dns_localhost": dns("localhost"),
    "dns_nosuch": dns("nosuch.invalid"),
    "port": port,
    "udp_host_loopback": udp("127.0.0.1", probes["udp"]),
    "udp_outside": udp("192.0.2.1", 9),
    "host_service": tcp("127.0.0.1", probes["host_service"]),
    "other_proxy": tcp("127.0.0.1", probes["other_proxy"]),
    "own_proxy_public": via_proxy(probes["public"][0], probes["public"][1]),
    "own_proxy_loopback": via_proxy("127.0.0.1", probes["host_service"]),
    "http_proxy_host": urlsplit(os.environ.get("http_proxy", "")).hostname,
}
tmp = os.environ["RECORD"] + ".tmp"
with open(tmp, "w") as f:
    json.dump(record, f)
os.rename(tmp, os.environ["RECORD"])
while True:
    time.sleep(3600)
"""


def _stand_in_sdk(tmp_path: Path) -> Path:
    sdk = tmp_path / "sdk"
    (sdk / "emulator").mkdir(parents=True)
    tool = sdk / "emulator" / "emulator"
    tool.write_text(f"#!{sys.executable}\n{STAND_IN}")
    tool.chmod(0o755)
    return sdk


def _namespaces(prefix: str) -> list[str]:
    assert IP is not None
    out = subprocess.run([IP, "netns", "list"], capture_output=True, check=True, timeout=10)
    return [n for n in netns.parse_list(out.stdout.decode()) if n.startswith(prefix)]


@pytest.fixture
def prefix() -> Iterator[str]:
    """A namespace prefix of this test's own; whatever the test leaves with it is removed."""
    value = f"dyt{secrets.token_hex(3)}-"
    yield value
    if IP is not None and netns.unavailable(IP) is None:
        netns.sweep(IP, value)


class Host:
    """What the stand-in probes for: services on the host that no device may reach."""

    def __init__(self) -> None:
        self.accepted = 0
        self.udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.udp.bind(("127.0.0.1", 0))
        self.udp.setblocking(False)
        self.service_port = 0
        self.other_proxy = EgressProxy("android_other", (), None, policy=POLICY)
        self.public = (PUBLIC, 0)

    async def start(self, nursery: trio.Nursery) -> None:
        async def count(stream: trio.SocketStream) -> None:
            self.accepted += 1
            await stream.aclose()

        listeners = await nursery.start(partial(trio.serve_tcp, count, 0, host="127.0.0.1"))
        self.service_port = int(listeners[0].socket.getsockname()[1])
        await nursery.start(self.other_proxy.serve)
        self.public = (PUBLIC, await _serve(nursery, b"public", PUBLIC))

    def probes(self) -> str:
        return json.dumps(
            {
                "udp": self.udp.getsockname()[1],
                "host_service": self.service_port,
                "other_proxy": self.other_proxy.port,
                "public": list(self.public),
            }
        )

    def udp_received(self) -> bool:
        try:
            self.udp.recv(64)
        except BlockingIOError:
            return False
        return True


async def _run_stand_in(
    tmp_path: Path, host: Host, mode: NetnsMode, prefix: str, http_proxy: str | None = None
) -> tuple[dict[str, Any], dict[str, bytes]]:
    """Open the stand-in through `open_emulator_device`, wait for its record, read the console
    and adbd banners through hostd's side, then end the instance (it never boots)."""
    home = tmp_path / "home"
    home.mkdir()
    record = tmp_path / "record.json"
    config = EmulatorConfig(
        sdk_root=_stand_in_sdk(tmp_path), adb_path=ADB, adb_server_port=free_port(),
        avd="pixel_8", env=tool_env(home) | {"RECORD": str(record), "PROBES": host.probes()},
        base_port=5900 + 2 * secrets.randbelow(40), netns=mode, netns_prefix=prefix,
        net_policy=POLICY, boot_timeout=120,
    )  # fmt: skip
    spec = DeviceSpec(Platform.ANDROID, "android_ns_1", tmp_path / "sandbox", http_proxy=http_proxy)
    banners: dict[str, bytes] = {}
    try:
        async with trio.open_nursery() as nursery:

            async def instance() -> None:
                async with open_emulator_device(spec, config):
                    pytest.fail("the stand-in never boots")

            nursery.start_soon(instance)
            await eventually(record.exists, seconds=60, poll=0.05)
            result: dict[str, Any] = json.loads(record.read_text())
            port = int(result["port"])
            for name, p in (("console", port), ("adbd", port + 1)):
                with trio.fail_after(10):
                    stream = await trio.open_tcp_stream("127.0.0.1", p)
                    async with stream:
                        banners[name] = await stream.receive_some()
            if mode is not NetnsMode.OFF:  # the adb server learnt of it from hostd
                with trio.fail_after(30):
                    while not await _adb_lists(config, f"emulator-{port}"):  # noqa: ASYNC110
                        await trio.sleep(0.1)
            nursery.cancel_scope.cancel()  # hostd ends the instance
    finally:
        await kill_server(config)
    return result, banners


async def _adb_lists(config: EmulatorConfig, serial: str) -> bool:
    assert ADB is not None
    out = await trio.run_process(
        [ADB, "-P", str(config.adb_server_port), "devices"],
        capture_stdout=True, capture_stderr=True, env=dict(config.env), check=False,
    )  # fmt: skip
    return serial in out.stdout.decode()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"


@pytest.fixture
async def host(nursery: trio.Nursery) -> AsyncIterator[Host]:
    value = Host()
    with value.udp:
        await value.start(nursery)
        yield value


@needs_netns
async def test_the_emulator_reaches_only_its_own_proxy(
    tmp_path: Path, host: Host, prefix: str
) -> None:
    result, banners = await _run_stand_in(tmp_path, host, NetnsMode.REQUIRED, prefix)
    port = int(result["port"])
    # The host's loopback services and another instance's proxy: not reachable at all.
    assert result["host_service"].startswith("ConnectionRefusedError"), result
    assert result["other_proxy"].startswith("ConnectionRefusedError"), result
    assert host.accepted == 0
    # UDP: nothing delivered to the host (loopback inside is the namespace's), no route out.
    assert not host.udp_received()
    assert "Network is unreachable" in result["udp_outside"], result
    # Its own proxy (one the driver started: no tunnel): public allowed, loopback refused.
    assert result["http_proxy_host"] == "127.0.0.1"
    assert result["own_proxy_public"].startswith("HTTP/1.1 200"), result
    assert result["own_proxy_public"].endswith("public GET / HTTP/1.1"), result
    assert result["own_proxy_loopback"].startswith("HTTP/1.1 403"), result
    # Names resolve: hostd answers the emulator's DNS inside (no datagram leaves).
    assert result["dns_server"] is True
    assert result["dns_localhost"] == [0, ["127.0.0.1"]], result
    assert result["dns_nosuch"] == [3, []], result
    # hostd still reaches the console and adbd (the adb server too: _run_stand_in waited).
    assert banners == {"console": b"console %d\n" % port, "adbd": b"adbd %d\n" % (port + 1)}
    # The instance ended: no namespace, no process, no relay left.
    assert _namespaces(prefix) == []
    assert not _alive(int(result["pid"]))
    for p in (port, port + 1):
        with pytest.raises(OSError):
            await trio.open_tcp_stream("127.0.0.1", p)


@needs_netns
async def test_a_tunnel_attached_emulator_gets_its_tunnels_proxy_inside(
    tmp_path: Path, nursery: trio.Nursery, host: Host, prefix: str
) -> None:
    """With a tunnel the supervisor's proxy (given in the spec) is the one relayed inside."""
    tunnel_proxy = EgressProxy("android_ns_1", (), None, policy=NetPolicy())  # no allow-list
    await nursery.start(tunnel_proxy.serve)
    result, _ = await _run_stand_in(
        tmp_path, host, NetnsMode.REQUIRED, prefix, tunnel_proxy.endpoint.url
    )
    # The tunnel's proxy has no allow-list: the "public" 127.0.0.3 is refused by it, which
    # the driver's own proxy (POLICY) would have allowed.
    assert result["own_proxy_public"].startswith("HTTP/1.1 403"), result
    assert result["host_service"].startswith("ConnectionRefusedError"), result
    assert _namespaces(prefix) == []


@needs_netns
async def test_without_a_namespace_the_probes_reach_the_host(
    tmp_path: Path, host: Host, prefix: str
) -> None:
    """The control: ``--emulator-netns off`` and the same stand-in reaches the host's
    loopback service, another instance's proxy and delivers UDP: each assertion above fails
    without the namespace."""
    result, banners = await _run_stand_in(tmp_path, host, NetnsMode.OFF, prefix)
    assert result["host_service"] == "connected"
    assert result["other_proxy"] == "connected"
    assert host.accepted == 1
    assert host.udp_received()
    assert set(banners) == {"console", "adbd"}


@needs_netns
def test_a_leftover_namespace_is_swept(prefix: str) -> None:
    """What a crashed hostd left (a namespace with its prefix and a process inside) goes;
    another prefix's namespace stays."""
    assert IP is not None
    other = f"dyt{secrets.token_hex(3)}-keep"
    for name in (f"{prefix}5554", other):
        subprocess.run([IP, "netns", "add", name], check=True, timeout=10)
    sleeper = subprocess.Popen([*netns.exec_argv(IP, f"{prefix}5554", ["sleep", "600"])])
    try:
        assert netns.sweep(IP, prefix) == [f"{prefix}5554"]
        assert sleeper.wait(timeout=10) == -9
        assert _namespaces(prefix) == []
        assert _namespaces(other) == [other]
    finally:
        sleeper.kill()
        netns.sweep(IP, other)


def test_required_refuses_without_namespaces_and_auto_warns_once(
    caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    """Without `ip` (an empty PATH; no /usr/sbin/ip is assumed missing only if absent) or
    without root, ``required`` refuses and ``auto`` runs without, saying so once."""
    assert netns.unavailable("/x/ip", platform="darwin") is not None
    assert netns.unavailable("/x/ip", platform="linux", euid=1000) == (
        "creating a network namespace needs root"
    )
    assert netns.unavailable(None, platform="linux", euid=0) is not None
    assert netns.unavailable("/x/ip", platform="linux", euid=0) is None
    assert EmulatorConfig(netns="off").netns is NetnsMode.OFF
    if _REASON is None:  # root with `ip` here: only the pure parts above apply
        assert use_netns(EmulatorConfig(netns="auto"))
        assert not use_netns(EmulatorConfig(netns="off"))
        return
    with pytest.raises(InvalidSpecError, match="--emulator-netns required"):
        use_netns(EmulatorConfig(netns="required"))
    assert not use_netns(EmulatorConfig(netns="auto"))
    assert not use_netns(EmulatorConfig(netns="auto"))
    assert sum("10.0.2.2" in r.getMessage() for r in caplog.records) <= 1


def test_pure_parts() -> None:
    assert netns.parse_list("dyab12cd-5554 (id: 3)\nother\n\n") == ["dyab12cd-5554", "other"]
    assert netns.owner_prefix(Path("/a")) != netns.owner_prefix(Path("/b"))
    assert netns.owner_prefix(Path("/a")).startswith("dy")
    assert netns.exec_argv("/sbin/ip", "n", ["emulator", "-avd", "x"]) == [
        "/sbin/ip", "netns", "exec", "n", "emulator", "-avd", "x",
    ]  # fmt: skip
    assert inside_url("http://dy-1:p%2Fw@127.0.0.1:4100", 39000) == (
        "http://dy-1:p%2Fw@127.0.0.1:39000"
    )
    with pytest.raises(ValueError, match="bad namespace name"):
        netns._check_name("../etc")
    assert shutil.which("ip") is None or IP is not None


@needs_netns
async def test_hostd_sweeps_its_leftover_namespaces_at_start(tmp_path: Path) -> None:
    """The real ``devyard hostd --drivers android-emulator``: a namespace with its prefix (a
    crashed run's, a process still inside) is gone before it links (its server is down)."""
    assert IP is not None
    data_dir = tmp_path / "host"
    leftover = f"{netns.owner_prefix(data_dir)}5554"
    await trio.run_process([IP, "netns", "add", leftover])
    sleeper = await trio.lowlevel.open_process(netns.exec_argv(IP, leftover, ["sleep", "600"]))
    (tmp_path / "token").write_text("dyh_whatever\n")
    argv = [
        *DEVYARD, "hostd", "--server", f"http://127.0.0.1:{free_port()}", "--token-file",
        str(tmp_path / "token"), "--region", "eu", "--drivers", "android-emulator",
        "--data-dir", str(data_dir), "--emulator-netns", "required",
    ]  # fmt: skip
    process = await trio.lowlevel.open_process(
        argv, env=clean_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        await eventually(lambda: not _namespaces(leftover), seconds=60, poll=0.1)
        with trio.fail_after(10):
            assert await sleeper.wait() == -9
        assert process.returncode is None  # swept, then running (retrying its link)
    finally:
        process.kill()
        sleeper.kill()
        with trio.move_on_after(10):
            await process.wait()
            await sleeper.wait()
        netns.sweep(IP, leftover)


async def test_required_refuses_an_attached_emulator(tmp_path: Path) -> None:
    """An attached emulator runs outside any namespace of ours: ``required`` ends the instance
    with the reason, before any adb command."""
    config = EmulatorConfig(adb_path="/nonexistent/adb", attach="127.0.0.1:9", netns="required")
    spec = DeviceSpec(Platform.ANDROID, "android_ns_2", tmp_path / "sandbox")
    with pytest.raises(InvalidSpecError, match="an attached emulator"):
        async with open_emulator_device(spec, config):
            pytest.fail("refused before attaching")
