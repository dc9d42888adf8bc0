"""Fixtures of the leaked-token callback tests: a real key endpoint on loopback (a stdlib
HTTP server in a thread, serving whatever key document the test sets), signing keys generated
in the test, and the control API's fixtures over a config that points at that endpoint."""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import attrs
import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from devyard.server.config import RateLimitConfig, ServerConfig
from devyard.server.secret_scanning import KEY_ID_HEADER, SIGNATURE_HEADER
from tests.server.api.conftest import (  # fixtures, used by name
    Caller,
    Callers,
    app,
    callers,
    client,
    manual_clock,
    store,
)

__all__ = [
    "Caller",
    "Callers",
    "KeyServer",
    "Signer",
    "app",
    "callers",
    "client",
    "config",
    "key_server",
    "manual_clock",
    "signer",
    "store",
]


@attrs.define
class Signer:
    """A P-256 key of the code host's, made in the test."""

    key_id: str
    private: ec.EllipticCurvePrivateKey = attrs.field(
        factory=lambda: ec.generate_private_key(ec.SECP256R1())
    )

    def pem(self) -> str:
        return (
            self.private.public_key()
            .public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
            .decode()
        )

    def entry(self, *, current: bool = True) -> dict[str, Any]:
        return {"key_identifier": self.key_id, "key": self.pem(), "is_current": current}

    def sign(self, body: bytes) -> str:
        return base64.b64encode(self.private.sign(body, ec.ECDSA(hashes.SHA256()))).decode()

    def headers(self, body: bytes) -> dict[str, str]:
        return {KEY_ID_HEADER: self.key_id, SIGNATURE_HEADER: self.sign(body)}


class KeyServer:
    """``GET /keys`` answers ``document`` (or ``status``); counts requests; ``hold`` makes it
    answer only when the test releases it."""

    def __init__(self) -> None:
        self.document: bytes = b'{"public_keys": []}'
        self.status = 200
        self.requests = 0
        self.hold = threading.Event()
        self.hold.set()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                server.requests += 1
                server.hold.wait(30)
                self.send_response(server.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(server.document)))
                self.end_headers()
                self.wfile.write(server.document)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}/keys"
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    def publish(self, *entries: dict[str, Any]) -> None:
        self.document = json.dumps({"public_keys": list(entries)}).encode()

    def __enter__(self) -> KeyServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.hold.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(10)


@pytest.fixture
def key_server() -> Iterator[KeyServer]:
    with KeyServer() as server:
        yield server


@pytest.fixture
def signer(key_server: KeyServer) -> Signer:
    made = Signer(key_id="ab" * 32)
    key_server.publish(made.entry())
    return made


@pytest.fixture
def config(tmp_path: Path, key_server: KeyServer) -> ServerConfig:
    return ServerConfig(
        data_dir=tmp_path,
        rate_limit=RateLimitConfig(enabled=True, rate=1000.0, burst=1000),
        max_body_bytes=64 * 1024,
        secret_scanning_keys_url=key_server.url,
    )
