"""The raw link port (docs/edge.md): host links over bare TCP and TLS, with the WebSocket
route's authentication, refusals and instance traffic; what the port does with strangers."""

from __future__ import annotations

import datetime
import ipaddress
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import TypedDict

import attrs
import pytest
import trio
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from devyard.core import UpgradeRejected, open_transport
from devyard.core.link import HOST_PATH
from devyard.hostd.daemon import HostdConfig, PermanentLinkError, serve_hostd
from devyard.hostd.supervisor import Supervisor
from devyard.server.api.serve import BoundServer
from devyard.server.config import ListenAddress, ServerConfig
from devyard.server.edge import HOST_TOKENS_FILE, Edge, create_host_token
from devyard.server.hosts import InstancePhase
from devyard.server.serve import advertised_raw_link, serve_server

from .test_host_links import Recorder, Rig, _order, _wait_registered


class LinkTls(TypedDict, total=False):
    """The raw link's TLS files, as keyword arguments of ServerConfig (both or neither)."""

    link_tls_cert: Path
    link_tls_key: Path


def _self_signed(directory: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and its key, as PEM files."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "devyard test edge")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = directory / "edge.pem", directory / "edge.key"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_file, key_file


@attrs.define
class RawRig:
    rig: Rig
    link: str  # tcp://127.0.0.1:PORT or tls://...


@asynccontextmanager
async def open_raw_server(
    tmp_path: Path, scheme: str, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[RawRig]:
    server_dir = tmp_path / "server"
    host_id, token = create_host_token(server_dir / HOST_TOKENS_FILE)
    tls: LinkTls = {}
    if scheme == "tls":
        cert, key = _self_signed(tmp_path)
        tls = {"link_tls_cert": cert, "link_tls_key": key}
        monkeypatch.setenv("SSL_CERT_FILE", str(cert))  # the client's default context trusts it
    config = ServerConfig(
        data_dir=server_dir,
        listen=ListenAddress("127.0.0.1", 0),
        link_listen=ListenAddress("127.0.0.1", 0),
        **tls,
    )
    recorder = Recorder()
    async with trio.open_nursery() as nursery:
        bound: BoundServer = await nursery.start(
            partial(serve_server, config, host_events=recorder.start(nursery))
        )
        assert isinstance(bound.hosts, Edge) and bound.link_port
        rig = Rig(bound, bound.hosts, recorder, host_id, token, tmp_path / "host")
        yield RawRig(rig, f"{scheme}://127.0.0.1:{bound.link_port}")
        nursery.cancel_scope.cancel()


def _config(raw: RawRig, token: str | None = None) -> HostdConfig:
    return HostdConfig(
        server_url=raw.rig.bound.local_url,
        token=token or raw.rig.token,
        region="local",
        data_dir=raw.rig.host_dir,
        capacity=2,
        backoff_base=0.05,
        link=raw.link,
    )


@pytest.mark.parametrize("scheme", ["tcp", "tls"])
async def test_a_host_links_over_the_raw_port_and_runs_an_instance(
    tmp_path: Path, scheme: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with open_raw_server(tmp_path, scheme, monkeypatch) as raw:
        rig = raw.rig
        assert _config(raw).link_url == f"{raw.link}{HOST_PATH}"
        with trio.fail_after(20):
            async with trio.open_nursery() as nursery:
                shutdown = trio.Event()
                supervisor: Supervisor = await nursery.start(
                    partial(serve_hostd, _config(raw), shutdown=shutdown)
                )
                await _wait_registered(rig.edge, rig.host_id)
                await rig.edge.start_instance(rig.host_id, _order("android_local_1"))
                await rig.recorder.wait_for("android_local_1", InstancePhase.READY)
                # A data stream over the raw link: the device API's screenshot, end to end.
                stream = await rig.edge.open_instance_stream(
                    rig.host_id, "api", "android_local_1", method="GET", path="/screenshot"
                )
                await stream.send_eof()
                answer = b""
                while chunk := await stream.receive_some(65536):
                    answer += chunk
                await stream.aclose()
                assert b"image/png" in answer[:200] and b"\x89PNG" in answer[:300]
                assert supervisor.running() == ["android_local_1"]
                shutdown.set()


@pytest.mark.parametrize("scheme", ["tcp", "tls"])
async def test_a_bad_token_is_refused_with_401_and_the_host_stops_for_good(
    tmp_path: Path, scheme: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with open_raw_server(tmp_path, scheme, monkeypatch) as raw:
        config = _config(raw, token="dyh_nope_wrong")
        with trio.fail_after(10), pytest.raises(UpgradeRejected) as rejected:
            headers = [(b"authorization", b"Bearer dyh_nope_wrong")]
            async with open_transport(config.link_url, extra_headers=headers):
                pass
        assert rejected.value.status_code == 401
        assert json.loads(rejected.value.body)["reason"] == "unauthorized"
        with trio.fail_after(10), pytest.raises(PermanentLinkError, match="401"):
            await serve_hostd(config)


async def _exchange(port: int, request: bytes) -> bytes:
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    await stream.send_all(request)
    answer = b""
    while chunk := await stream.receive_some(65536):
        answer += chunk
    await stream.aclose()
    return answer


async def test_the_raw_port_answers_strangers_with_http_errors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with open_raw_server(tmp_path, "tcp", monkeypatch) as raw:
        port = raw.rig.bound.link_port
        assert port is not None
        with trio.fail_after(10):
            plain = await _exchange(port, b"GET /v1/host_connections HTTP/1.1\r\nHost: x\r\n\r\n")
            assert plain.startswith(b"HTTP/1.1 426 ")
            assert b"devyard-mux/1" in plain
            unknown = await _exchange(
                port,
                b"GET /v1/nope HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\n"
                b"Upgrade: devyard-mux/1\r\n\r\n",
            )
            assert unknown.startswith(b"HTTP/1.1 404 ")
            assert await _exchange(port, b"\x16\x03\x01 not http at all\r\n\r\n") == b""


@pytest.mark.parametrize(
    ("link_listen", "public_url", "tls", "advertised"),
    [
        ("127.0.0.1", None, False, "tcp://127.0.0.1:7443"),  # clients on this machine too
        ("127.0.0.1", "https://devyard.example.com", False, None),  # up --host: not for them
        ("0.0.0.0", "https://devyard.example.com", False, "tcp://devyard.example.com:7443"),
        ("10.0.0.5", "https://devyard.example.com", True, "tls://10.0.0.5:7443"),
    ],
)
def test_which_raw_link_the_adb_websocket_names(
    link_listen: str, public_url: str | None, tls: bool, advertised: str | None
) -> None:
    files: LinkTls = {"link_tls_cert": Path("c.pem"), "link_tls_key": Path("k.pem")} if tls else {}
    config = ServerConfig(
        data_dir=Path("/d"),
        public_url=public_url,
        link_listen=ListenAddress(link_listen, 7443),
        **files,
    )
    assert advertised_raw_link(config, 7443) == advertised


async def _misbehave_then_link_a_real_host(raw: RawRig, garbage: bytes) -> None:
    """A host link that sends *garbage* (or nothing) after a good upgrade, read until the edge
    hangs up; then a real host links, so the port and the server still serve."""
    url = f"{raw.link}{HOST_PATH}"
    headers = [(b"authorization", f"Bearer {raw.rig.token}".encode())]
    with trio.fail_after(20):
        async with open_transport(url, extra_headers=headers) as stream:
            if garbage:
                await stream.send_all(garbage)
            while await stream.receive_some(65536):  # the edge hangs up on it
                pass
        async with trio.open_nursery() as nursery:
            shutdown = trio.Event()
            await nursery.start(partial(serve_hostd, _config(raw), shutdown=shutdown))
            await _wait_registered(raw.rig.edge, raw.rig.host_id)
            shutdown.set()


async def test_a_link_that_breaks_the_protocol_ends_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Garbage after a good upgrade ends that connection, not the listener or the server."""
    async with open_raw_server(tmp_path, "tcp", monkeypatch) as raw:
        await _misbehave_then_link_a_real_host(raw, b"\xff" * 64)  # yamux version 255


async def test_a_link_that_never_says_hello_ends_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An error inside a route (here the hello timeout) ends that connection only, as Hypercorn
    does for the WebSocket route: the listener and the server go on."""
    monkeypatch.setattr("devyard.server.edge._route.HELLO_TIMEOUT", 0.2)
    async with open_raw_server(tmp_path, "tcp", monkeypatch) as raw:
        await _misbehave_then_link_a_real_host(raw, b"")  # silent: the edge gives up on it
