"""Blob store backends for the contract tests: the local directory, an S3-compatible server and
PostgreSQL large objects.

The S3 server is moto's standalone ``moto_server`` (PyPI ``moto[server]``, in ``dev``): a real
HTTP server speaking the S3 REST API (SigV4, multipart uploads, ranged GETs, presigned URLs) on
127.0.0.1 at a free port, one per test session, started here as a subprocess and stopped at the
end. No MinIO, Garage or SeaweedFS build is carried by the registries this project installs
from (docs/blobs.md). Sessions without ``moto_server`` or ``boto3`` skip with the reason.

``blob_backend`` is parametrized over the three backends; each test gets a fresh namespace
(a fresh bucket prefix, a fresh PostgreSQL schema, a fresh directory).
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Final, cast

import attrs
import pytest
import trio

from devyard.server.blobs import BlobStore, LocalBlobStore
from devyard.server.blobs.settings import BlobBackend, BlobSettings, open_blob_store
from tests.ports import free_port

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

ACCESS_KEY: Final = "devyard-test"
SECRET_KEY: Final = "devyard-test-secret"
BUCKET: Final = "devyard-blobs"
_START_TIMEOUT: Final = 30.0


@attrs.frozen
class S3Server:
    endpoint: str
    client: S3Client  # one per session: a client loads boto3's models (~1 s)
    bucket: str = BUCKET

    def settings(self, prefix: str = "", **extra: object) -> BlobSettings:
        values: dict[str, object] = {
            "backend": BlobBackend.S3,
            "s3_endpoint": self.endpoint,
            "s3_bucket": self.bucket,
            "s3_prefix": prefix,
            "s3_access_key_id": ACCESS_KEY,
            "s3_secret_access_key": SECRET_KEY,
            **extra,
        }
        return BlobSettings(**values)  # type: ignore[arg-type]


def _wait_listening(port: int, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + _START_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"moto_server exited with {process.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)  # a process we do not own starting: nothing to wait on but the port
    raise RuntimeError("moto_server did not listen within 30 s")


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    binary = shutil.which("moto_server")
    if binary is None:
        pytest.skip("no moto_server (pip install 'moto[server]'; the dev extra has it)")
    pytest.importorskip("boto3", reason="boto3 is the optional extra 's3'")
    from devyard.server.blobs.s3 import _client  # noqa: PLC0415

    port = free_port()
    process = subprocess.Popen(
        [binary, "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_listening(port, process)
        endpoint = f"http://127.0.0.1:{port}"
        client = _client(S3Server(endpoint, cast("S3Client", None)).settings())
        client.create_bucket(Bucket=BUCKET)
        yield S3Server(endpoint, client)
        client.close()
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


_counter = iter(range(1, 1_000_000))


@attrs.frozen
class Backend:
    name: str
    store: BlobStore


@pytest.fixture(
    params=[
        "local",
        "s3",
        pytest.param("postgres", marks=pytest.mark.postgres),
    ]
)
async def blob_backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Backend]:
    """A fresh, empty blob store of each backend."""
    name: str = request.param
    async with AsyncExitStack() as stack:
        if name == "local":
            store: BlobStore = LocalBlobStore(tmp_path / "blobs")
        elif name == "s3":
            from devyard.server.blobs.s3 import MIN_PART, S3BlobStore  # noqa: PLC0415

            server: S3Server = request.getfixturevalue("s3_server")
            store = S3BlobStore(
                server.client,
                server.bucket,
                namespace="blobs",
                prefix=f"t{next(_counter)}/",
                part_size=MIN_PART,  # the smallest S3 allows: multipart from 5 MiB on
                limiter=trio.CapacityLimiter(10),
            )
        else:
            url: str = request.getfixturevalue("postgres_url")
            settings = BlobSettings(backend=BlobBackend.POSTGRES)
            store = await stack.enter_async_context(
                open_blob_store(settings, data_dir=tmp_path, database_url=url)
            )
        yield Backend(name, store)
