"""TLS and HTTP/2 on the API port (issue 24), with real clients against ``devyard up --tls``:
curl, httpx over HTTP/2, the official ``limrun-api`` SDK, Debian's Chromium, a WebSocket
that outlives a certificate swap, and a connector linking over ``wss://`` with ``--ca-file``.
"""

from __future__ import annotations

import base64
import hashlib
import signal
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import attrs
import httpx
import pytest
import trio
import trio_websocket
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from limrun_api import AsyncLimrun

from devyard.core.tls import client_context
from devyard.server.tls import ensure_local_ca
from tests.browser import CHROMIUM, HAVE_PLAYWRIGHT, BrowserThread
from tests.polling import eventually, until

from ._cli import Running, clean_env, create_ready_android, start

pytestmark = pytest.mark.slow


@attrs.frozen
class TlsUp:
    process: Running
    url: str
    key: str
    data: Path

    @property
    def ca(self) -> Path:
        return self.data / "tls" / "ca.pem"

    def context(self) -> ssl.SSLContext:
        return client_context(self.ca)

    def http(self, *, http2: bool = True) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            base_url=self.url,
            http2=http2,
            verify=self.context(),
            headers={"Authorization": f"Bearer {self.key}"},
            timeout=30,
        )


@pytest.fixture
async def up(tmp_path: Path) -> AsyncIterator[TlsUp]:
    data = tmp_path / "data"
    with trio.fail_after(60):
        running = await start(
            ["up", "--tls", "--data-dir", str(data), "--port", "0"], clean_env(), tmp_path
        )
        url = (await running.read_until(r"serving at (https://127\.0\.0\.1:\d+)")).group(1)
        await running.read_until(r"trust it with .*ca\.pem")
    yield TlsUp(running, url, (data / "admin-api-key").read_text().strip(), data)
    with trio.fail_after(30):
        assert await running.stop(signal.SIGINT) == 0


async def _curl(*args: str) -> str:
    done = await trio.run_process(["curl", "-sS", *args], capture_stdout=True, check=False)
    return bytes(done.stdout).decode()


async def test_curl_gets_http2_and_http11_with_hsts_and_refuses_an_untrusted_server(
    up: TlsUp,
) -> None:
    with trio.fail_after(30):
        head = await _curl("--http2", "--cacert", str(up.ca), "-D", "-", "-o", "/dev/null",
                           f"{up.url}/livez")  # fmt: skip
        assert head.startswith("HTTP/2 200"), head
        assert "strict-transport-security: max-age=31536000" in head.lower()
        old = await _curl("--http1.1", "--cacert", str(up.ca), "-D", "-", "-o", "/dev/null",
                          f"{up.url}/livez")  # fmt: skip
        assert old.startswith("HTTP/1.1 200"), old
        # by name too: the certificate is for localhost as well as the loopback addresses
        by_name = up.url.replace("127.0.0.1", "localhost")
        assert (await _curl("--cacert", str(up.ca), f"{by_name}/livez")).strip() != ""
        # no CA given: curl's own store does not know ours, so the handshake fails
        refused = await trio.run_process(
            ["curl", "-sS", f"{up.url}/livez"], capture_stderr=True, check=False
        )
        assert refused.returncode == 60, refused.stderr  # "peer certificate cannot be verified"
        # plain HTTP on the TLS port gets no API answer
        plain = await trio.run_process(
            ["curl", "-sS", "--max-time", "5", up.url.replace("https", "http") + "/livez"],
            capture_stdout=True, capture_stderr=True, check=False,
        )  # fmt: skip
        assert b'"ok"' not in plain.stdout


async def test_httpx_over_http2_creates_an_instance_whose_urls_are_https(up: TlsUp) -> None:
    async with up.http() as http:
        with trio.fail_after(60):
            instance = await create_ready_android(http)
            whoami = await http.get("/whoami")
        assert whoami.http_version == "HTTP/2"
        status = instance["status"]
        assert status["apiUrl"].startswith("https://")
        assert status["endpointWebSocketUrl"].startswith("wss://")
        assert status["signedStreamUrl"].startswith("https://")
        with trio.fail_after(30):
            device = await http.get(
                status["apiUrl"] + "/", headers={"Authorization": f"Bearer {status['token']}"}
            )
        assert device.status_code == 200, device.text
        assert device.http_version == "HTTP/2"


async def test_the_limrun_sdk_works_over_https(up: TlsUp) -> None:
    async with (
        httpx.AsyncClient(verify=up.context(), timeout=30) as transport,
        AsyncLimrun(api_key=up.key, base_url=up.url, max_retries=0, http_client=transport) as sdk,
    ):
        with trio.fail_after(60):
            page = await sdk.android_instances.list()
        assert page.items == []


def _spki_pin(cert_file: Path) -> str:
    """Chromium's ``--ignore-certificate-errors-spki-list`` form of *cert_file*'s key."""
    cert = x509.load_pem_x509_certificate(cert_file.read_bytes())
    spki = cert.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return base64.b64encode(hashlib.sha256(spki).digest()).decode()


@pytest.mark.skipif(not (HAVE_PLAYWRIGHT and CHROMIUM.exists()), reason="needs Chromium")
async def test_chromium_watches_the_stream_over_http2(up: TlsUp) -> None:
    async with up.http() as http:
        with trio.fail_after(60):
            instance = await create_ready_android(http)
    pin = _spki_pin(up.data / "tls" / "server.pem")  # Chromium's way to trust one server key
    browser = await trio.to_thread.run_sync(
        lambda: BrowserThread(f"--ignore-certificate-errors-spki-list={pin}")
    )
    try:
        assert browser.browser is not None
        page = await browser.call(browser.browser.new_page)
        with trio.fail_after(30):
            response = await browser.call(page.goto, instance["status"]["signedStreamUrl"])
            assert response is not None and response.status == 200
            protocol = await browser.call(
                page.evaluate, "() => performance.getEntriesByType('navigation')[0].nextHopProtocol"
            )
            assert protocol == "h2"
            await browser.call(
                page.wait_for_function, "() => window.devyard && window.devyard.decoded > 0"
            )
    finally:
        await trio.to_thread.run_sync(browser.close)


def _peer_names(url: str, context: ssl.SSLContext) -> set[str]:
    """The DNS names in the certificate *url*'s server presents to a new connection."""
    parts = httpx.URL(url)
    import socket  # noqa: PLC0415 - blocking, for a worker thread

    with (
        socket.create_connection((parts.host, parts.port), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname=parts.host) as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    san = x509.load_der_x509_certificate(der).extensions.get_extension_for_class(
        x509.SubjectAlternativeName
    )
    return set(san.value.get_values_for_type(x509.DNSName))


async def test_sighup_swaps_the_certificate_and_an_open_stream_lives_on(up: TlsUp) -> None:
    async with up.http() as http:
        with trio.fail_after(60):
            instance = await create_ready_android(http)
    status: dict[str, Any] = instance["status"]
    assert "swapped.test" not in await trio.to_thread.run_sync(_peer_names, up.url, up.context())
    async with trio_websocket.open_websocket_url(
        status["endpointWebSocketUrl"],
        ssl_context=up.context(),
        extra_headers=[(b"authorization", f"Bearer {status['token']}".encode())],
    ) as ws:
        with trio.fail_after(10):
            await ws.ping()
        # a new leaf from the same CA, for one more name; then SIGHUP
        names = ("localhost", "127.0.0.1", "::1", "swapped.test")
        await trio.to_thread.run_sync(ensure_local_ca, up.data / "tls", names)
        up.process.process.send_signal(signal.SIGHUP)

        async def swapped() -> bool:
            names = await trio.to_thread.run_sync(_peer_names, up.url, up.context())
            return "swapped.test" in names

        await until(swapped, seconds=20)
        with trio.fail_after(10):
            await ws.ping()  # the connection made before the swap still answers
    assert up.process.process.returncode is None  # SIGHUP did not stop the server


async def test_a_connector_links_over_wss_with_its_ca_file(up: TlsUp, tmp_path: Path) -> None:
    async with up.http() as http:
        with trio.fail_after(30):
            made = await http.post(
                "/v1/tunnels", json={"name": "tls-corp", "selectors": ["intranet.example:8080"]}
            )
        assert made.status_code in (200, 201), made.text
        tunnel = made.json()
        (tmp_path / "tunnel-token").write_text(tunnel["token"] + "\n")
        args = ["connector", "run", "--server", up.url, "--token-file",
                str(tmp_path / "tunnel-token"), "--ca-file", str(up.ca)]  # fmt: skip
        connector = await start(args, clean_env(), tmp_path)
        try:

            async def online() -> bool:
                got = await http.get("/v1/tunnels/tls-corp")
                return bool(got.json()["status"] == "online")

            await until(online, seconds=30)
        finally:
            with trio.fail_after(30):
                await connector.stop(signal.SIGINT)


async def test_a_link_without_the_ca_is_refused_by_verification(up: TlsUp) -> None:
    from devyard.core.transports import open_transport  # noqa: PLC0415

    wss = up.url.replace("https://", "wss://") + "/v1/host_connections"
    with trio.fail_after(30), pytest.raises(ssl.SSLCertVerificationError):
        async with open_transport(wss, ssl_context=client_context(None)):
            pass  # pragma: no cover - the handshake fails first


async def test_hosts_and_a_connector_link_over_wss_and_raw_tls_with_their_ca_file(
    tmp_path: Path,
) -> None:
    from devyard.server.api.serve import BoundServer  # noqa: PLC0415
    from devyard.server.bootstrap import bootstrap_organization  # noqa: PLC0415
    from devyard.server.config import ListenAddress, ServerConfig  # noqa: PLC0415
    from devyard.server.edge import HOST_TOKENS_FILE, Edge, create_host_token  # noqa: PLC0415
    from devyard.server.serve import open_configured_store, serve_server  # noqa: PLC0415

    from ._cli import DEVYARD  # noqa: PLC0415

    files = ensure_local_ca(tmp_path / "pki", ("localhost", "127.0.0.1"))
    server_dir = tmp_path / "server"
    config = ServerConfig(
        data_dir=server_dir,
        listen=ListenAddress("127.0.0.1", 0),
        tls_cert=files.cert,
        tls_key=files.key,
        link_listen=ListenAddress("127.0.0.1", 0),
        link_tls_cert=files.cert,
        link_tls_key=files.key,
    )
    server_dir.mkdir(mode=0o700)
    async with open_configured_store(config) as store:
        org = await bootstrap_organization(store, org_name="tls-org", user_name="tls-admin")
    tokens = []
    for name in ("wss", "tls"):
        _, token = create_host_token(server_dir / HOST_TOKENS_FILE)
        (tmp_path / f"{name}.token").write_text(token + "\n")
        tokens.append(token)
    async with trio.open_nursery() as nursery:
        bound: BoundServer = await nursery.start(serve_server, config)
        assert bound.local_url.startswith("https://")
        edge = bound.hosts
        assert isinstance(edge, Edge)
        processes = []
        for name, link in (("wss", []), ("tls", ["--link", f"tls://127.0.0.1:{bound.link_port}"])):
            argv = [*DEVYARD, "hostd", "--server", bound.local_url, *link, "--ca-file",
                    str(files.ca_cert), "--token-file", str(tmp_path / f"{name}.token"),
                    "--region", name, "--data-dir", str(tmp_path / f"host-{name}")]  # fmt: skip
            processes.append(await trio.lowlevel.open_process(argv, env=clean_env()))
        try:
            await eventually(lambda: len(edge.hosts()) == 2, seconds=60)
            assert sorted(h.region for h in edge.hosts()) == ["tls", "wss"]
            # a connector holds a tunnel over the raw TLS link port too
            async with httpx.AsyncClient(
                base_url=bound.local_url, verify=client_context(files.ca_cert), timeout=30,
                headers={"Authorization": f"Bearer {org.plaintext_key}"},
            ) as http:  # fmt: skip
                made = await http.post(
                    "/v1/tunnels", json={"name": "raw-tls", "selectors": ["intranet.example:80"]}
                )
                assert made.status_code == 200, made.text
                (tmp_path / "tunnel.token").write_text(made.json()["token"] + "\n")
                argv = [*DEVYARD, "connector", "run", "--server", bound.local_url, "--link",
                        f"tls://127.0.0.1:{bound.link_port}", "--ca-file", str(files.ca_cert),
                        "--token-file", str(tmp_path / "tunnel.token")]  # fmt: skip
                processes.append(await trio.lowlevel.open_process(argv, env=clean_env()))

                async def online() -> bool:
                    got = await http.get("/v1/tunnels/raw-tls")
                    return bool(got.json()["status"] == "online")

                await until(online, seconds=60)
        finally:
            for process in processes:
                process.send_signal(signal.SIGINT)
            with trio.fail_after(30):
                for process in processes:
                    await process.wait()
        nursery.cancel_scope.cancel()


def test_config_refuses_plain_http_on_a_public_address_and_half_a_key_pair(tmp_path: Path) -> None:
    from devyard.server.config import ConfigError, load_server_config  # noqa: PLC0415

    data = {"data_dir": str(tmp_path)}
    with pytest.raises(ConfigError, match="refusing plain HTTP on the non-loopback address"):
        load_server_config(flags={**data, "listen": "0.0.0.0:8080"})
    assert load_server_config(
        flags={**data, "listen": "0.0.0.0:8080", "allow_plain_http": "true"}
    ).allow_plain_http
    assert load_server_config(flags={**data, "listen": "127.0.0.1:8080"}).base_url.startswith(
        "http://"
    )
    public = load_server_config(flags={**data, "listen": "0.0.0.0:8443", "tls_self_signed": "1"})
    assert public.base_url == "https://127.0.0.1:8443"
    with pytest.raises(ConfigError, match="tls_cert and tls_key go together"):
        load_server_config(flags={**data, "tls_cert": "/c.pem"})


async def test_a_bad_certificate_file_is_one_line_and_exit_1(tmp_path: Path) -> None:
    from ._cli import run  # noqa: PLC0415

    (tmp_path / "cert.pem").write_text("not a certificate\n")
    (tmp_path / "key.pem").write_text("not a key\n")
    cert, key = str(tmp_path / "cert.pem"), str(tmp_path / "key.pem")
    args = ["server", "--data-dir", str(tmp_path / "d"), "--listen", "127.0.0.1:0",
            "--tls-cert", cert, "--tls-key", key]  # fmt: skip
    with trio.fail_after(60):
        done = await run(args, clean_env(), tmp_path)
    assert done.returncode == 1
    lines = done.stderr.decode().strip().splitlines()
    assert lines[-1].startswith("devyard: error: cannot use the TLS certificate"), lines
    assert "Traceback" not in done.stderr.decode()


async def test_the_cli_pushes_an_app_over_https_and_the_host_installs_it_from_there(
    up: TlsUp, tmp_path: Path
) -> None:
    """The CLI trusts the CA by SSL_CERT_FILE; up's own host daemon fetches the signed asset
    URL from the https server with up's CA (``ca_file``) and installs it."""
    import io  # noqa: PLC0415
    import zipfile  # noqa: PLC0415

    from ._cli import run  # noqa: PLC0415

    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("devyard-package.txt", "package=com.acme.tls\nlabel=T\nversion=1\n")
    (tmp_path / "tls.apk").write_bytes(buffer.getvalue())
    env = clean_env(DEVYARD_BASE_URL=up.url, DEVYARD_API_KEY=up.key, SSL_CERT_FILE=str(up.ca))
    with trio.fail_after(60):
        pushed = await run(["asset", "push", str(tmp_path / "tls.apk"), "--os", "android"], env,
                           tmp_path)  # fmt: skip
    assert pushed.returncode == 0, pushed.stderr
    spec = {"initialAssets": [{"kind": "App", "source": "AssetName", "assetName": "tls.apk"}]}
    async with up.http() as http:
        with trio.fail_after(90):
            while True:
                created = await http.post(
                    "/v1/android_instances", params={"wait": "true"}, json={"spec": spec}
                )
                if created.status_code != 409:
                    break
                await trio.sleep(0.1)
        assert created.status_code == 200, created.text
        status = created.json()["status"]
        assert status["state"] == "ready", status
        with trio.fail_after(30):
            apps = await http.get(
                status["apiUrl"] + "/apps", headers={"Authorization": f"Bearer {status['token']}"}
            )
        assert "com.acme.tls" in apps.text, apps.text


def _frames(data: bytes) -> list[tuple[int, bytes]]:
    """The complete (opcode, payload) WebSocket frames at the start of *data* (server frames:
    unmasked)."""
    frames = []
    while len(data) >= 2:
        length, at = data[1] & 0x7F, 2
        if length == 126:
            length, at = int.from_bytes(data[2:4], "big"), 4
        elif length == 127:
            length, at = int.from_bytes(data[2:10], "big"), 10
        if len(data) < at + length:
            break
        frames.append((data[0] & 0x0F, data[at : at + length]))
        data = data[at + length :]
    return frames


def _has_pong(data: bytes) -> bool:
    return any(opcode == 0xA for opcode, _ in _frames(data))


def _websocket_ping_over_h2(url: str, token: str, context: ssl.SSLContext) -> tuple[int, bytes]:
    """RFC 8441 by hand with the ``h2`` package: an extended CONNECT for *url*'s WebSocket on
    an HTTP/2 connection, then one masked ping frame; the response status and what came back.
    Blocking, for a worker thread."""
    import os  # noqa: PLC0415
    import socket  # noqa: PLC0415

    import h2.config  # noqa: PLC0415
    import h2.connection  # noqa: PLC0415
    import h2.events  # noqa: PLC0415
    import h2.settings  # noqa: PLC0415

    parts = httpx.URL(url)
    context.set_alpn_protocols(["h2"])
    with (
        socket.create_connection((parts.host, parts.port), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname=parts.host) as tls,
    ):
        assert tls.selected_alpn_protocol() == "h2"
        conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        conn.initiate_connection()
        tls.sendall(conn.data_to_send())
        enabled = False
        while not enabled:  # the server must announce SETTINGS_ENABLE_CONNECT_PROTOCOL first
            for event in conn.receive_data(tls.recv(65536)):
                if isinstance(event, h2.events.RemoteSettingsChanged):
                    setting = h2.settings.SettingCodes.ENABLE_CONNECT_PROTOCOL
                    enabled = event.changed_settings.get(setting) is not None
            tls.sendall(conn.data_to_send())
        stream = conn.get_next_available_stream_id()
        conn.send_headers(
            stream,
            [
                (":method", "CONNECT"),
                (":protocol", "websocket"),
                (":scheme", "https"),
                (":path", parts.raw_path.decode()),
                (":authority", f"{parts.host}:{parts.port}"),
                ("sec-websocket-version", "13"),
                ("authorization", f"Bearer {token}"),
            ],
        )
        mask = os.urandom(4)
        payload = b"devyard"
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        status = 0
        received = b""
        tls.sendall(conn.data_to_send())
        while not _has_pong(received):
            for event in conn.receive_data(tls.recv(65536)):
                if isinstance(event, h2.events.ResponseReceived):
                    status = int(dict(event.headers)[b":status"])
                    if status == 200:  # the tunnel is open: a ping
                        conn.send_data(stream, bytes([0x89, 0x80 | len(payload)]) + mask + masked)
                    else:
                        return status, b""
                elif isinstance(event, h2.events.DataReceived):
                    conn.acknowledge_received_data(event.flow_controlled_length, stream)
                    received += event.data
            tls.sendall(conn.data_to_send())
        return status, received


async def test_a_websocket_runs_over_http2_extended_connect(up: TlsUp) -> None:
    async with up.http() as http:
        with trio.fail_after(60):
            instance = await create_ready_android(http)
    status = instance["status"]
    url = status["endpointWebSocketUrl"].replace("wss://", "https://")
    with trio.fail_after(30):
        code, frame = await trio.to_thread.run_sync(
            _websocket_ping_over_h2, url, status["token"], up.context()
        )
    assert code == 200
    # the endpoint may speak first (its hello); then the pong carries the ping's payload
    assert (0xA, b"devyard") in _frames(frame)


async def test_the_python_client_speaks_http2_and_the_cli_trusts_devyard_ca_file(
    up: TlsUp, tmp_path: Path
) -> None:
    from devyard.client import AsyncClient  # noqa: PLC0415

    from ._cli import run  # noqa: PLC0415

    async with AsyncClient(up.url, up.key, ca_file=up.ca) as client:
        with trio.fail_after(30):
            await client.request("GET", "/whoami")
        pool = client._http._transport._pool  # type: ignore[attr-defined]  # httpcore's pool
        assert any("HTTP/2" in connection.info() for connection in pool.connections)
    env = clean_env(DEVYARD_BASE_URL=up.url, DEVYARD_API_KEY=up.key)
    with trio.fail_after(60):
        untrusted = await run(["whoami"], env, tmp_path)
        trusted = await run(["whoami"], {**env, "DEVYARD_CA_FILE": str(up.ca)}, tmp_path)
    assert untrusted.returncode != 0 and b"Traceback" not in untrusted.stderr
    assert trusted.returncode == 0, trusted.stderr
