"""Readiness probes the blob store (docs/operations.md, Health): the local directory writable,
the S3 bucket (``moto_server``) or PostgreSQL reachable; bounded, and cached for a few seconds
so ``/readyz`` under load does not become a request to S3 per check."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

import attrs
import trio

from devyard.server.blobs import AssetBlobs, BlobStore, LocalBlobStore, UrlSigner, load_signing_key
from devyard.server.blobs.service import PROBE_TIMEOUT
from devyard.server.store import open_store
from tests.ports import free_port

from .conftest import Backend

if TYPE_CHECKING:
    from .conftest import S3Server


async def _readiness(blobs: BlobStore, tmp_path: Path, *, probe_ttl: float = 3.0) -> AssetBlobs:
    async with open_store(str(tmp_path / "db.sqlite3")) as store:
        pass  # AssetBlobs keeps the store for uploads; readiness never touches it
    return AssetBlobs(store, blobs, UrlSigner(load_signing_key(tmp_path)), probe_ttl=probe_ttl)


async def test_each_backend_is_ready(blob_backend: Backend, tmp_path: Path) -> None:
    assets = await _readiness(blob_backend.store, tmp_path)
    assert await assets.readiness() == "ok"


async def test_a_local_directory_that_cannot_be_written_is_not_ready(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a directory")
    assets = await _readiness(LocalBlobStore(tmp_path / "file" / "blobs"), tmp_path)
    assert await assets.readiness() == "not writable"


async def test_s3_answers_are_cached_and_a_dead_endpoint_is_bounded(
    s3_server: S3Server, tmp_path: Path
) -> None:
    from devyard.server.blobs.s3 import S3BlobStore, _client  # noqa: PLC0415

    # a bucket that does not exist (yet): not ready, and the answer is kept for the ttl
    store = S3BlobStore(
        s3_server.client,
        "devyard-readiness",
        namespace="blobs",
        limiter=trio.CapacityLimiter(2),
    )
    assets = await _readiness(store, tmp_path, probe_ttl=3600)
    assert await assets.readiness() == "no bucket 'devyard-readiness'"
    await trio.to_thread.run_sync(lambda: s3_server.client.create_bucket(Bucket=store.bucket))
    assert await assets.readiness() == "no bucket 'devyard-readiness'"  # cached: no request
    assets.probe_ttl = 0
    assert await assets.readiness() == "ok"

    # nothing listens there: boto3 would retry for seconds; readiness answers in time
    dead = attrs.evolve(s3_server.settings(), s3_endpoint=f"http://127.0.0.1:{free_port()}")
    client = await trio.to_thread.run_sync(_client, dead)
    try:
        unreachable = S3BlobStore(
            client, "devyard-blobs", namespace="blobs", limiter=trio.CapacityLimiter(2)
        )
        assets = await _readiness(unreachable, tmp_path)
        started = time.monotonic()
        answer = await assets.readiness()
        assert answer != "ok"
        assert time.monotonic() - started < PROBE_TIMEOUT + 2, answer
    finally:
        client.close()
