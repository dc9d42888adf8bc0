"""The `BlobStore` contract (blobs/base.py) on every backend: the local directory, S3 (a real
``moto_server``) and PostgreSQL large objects; the asset service over each; one 64 MiB blob
streamed in and out, checked by hash, with the test process's allocations bounded."""

from __future__ import annotations

import hashlib
import time
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing
from pathlib import Path

import pytest
import trio

from devyard.server.blobs import (
    AssetBlobs,
    BlobNotFound,
    BlobStore,
    BlobTooLarge,
    UrlSigner,
    load_signing_key,
)
from devyard.server.blobs.settings import sibling_store
from devyard.server.store import Store, open_store

from .conftest import Backend

MIB = 1024 * 1024


async def _chunks(*parts: bytes, fail_at: int | None = None) -> AsyncGenerator[bytes, None]:
    for i, part in enumerate(parts):
        if i == fail_at:
            raise ConnectionResetError("client went away")
        await trio.lowlevel.checkpoint()
        yield part


async def _read(blobs: BlobStore, key: str) -> bytes:
    async with aclosing(blobs.read(key)) as chunks:
        return b"".join([chunk async for chunk in chunks])


async def _keys(blobs: BlobStore) -> list[str]:
    return sorted(b.key for b in await blobs.list_blobs())


async def test_a_write_is_hashed_read_back_listed_and_deleted(blob_backend: Backend) -> None:
    blobs = blob_backend.store
    parts = [b"a" * 700_000, b"b" * 700_000, b"c"]
    before = time.time()
    written = await blobs.write("k1", _chunks(*parts), max_size=10**7)
    data = b"".join(parts)
    assert (written.key, written.md5, written.size) == (
        "k1",
        hashlib.md5(data).hexdigest(),
        len(data),
    )
    assert await _read(blobs, "k1") == data
    [listed] = await blobs.list_blobs()
    assert listed.key == "k1"
    assert before - 5 <= listed.modified <= time.time() + 5
    await blobs.delete("k1")
    await blobs.delete("k1")  # missing is fine
    assert await _keys(blobs) == []
    with pytest.raises(BlobNotFound):
        await _read(blobs, "k1")


async def test_an_empty_blob_is_a_blob(blob_backend: Backend) -> None:
    blobs = blob_backend.store
    written = await blobs.write("empty", _chunks(), max_size=10)
    assert (written.size, written.md5) == (0, hashlib.md5(b"").hexdigest())
    assert await _read(blobs, "empty") == b""
    assert await _keys(blobs) == ["empty"]


async def test_a_missing_key_fails_on_the_first_iteration(blob_backend: Backend) -> None:
    chunks = blob_backend.store.read("nothing-here")
    with pytest.raises(BlobNotFound):
        await anext(chunks)


async def test_failed_cancelled_and_too_large_writes_leave_nothing(blob_backend: Backend) -> None:
    blobs = blob_backend.store
    await blobs.write("old", _chunks(b"previous"), max_size=100)
    big = b"x" * (3 * MIB)
    with pytest.raises(ConnectionResetError):  # past the first part: a multipart upload on S3
        await blobs.write("new", _chunks(big, big, big, big, fail_at=3), max_size=10**8)
    async with aclosing(_chunks(big, big, big, big)) as chunks:
        with pytest.raises(BlobTooLarge):
            await blobs.write("new", chunks, max_size=10 * MIB)
    async with aclosing(_chunks(b"y" * 200)) as chunks:
        with pytest.raises(BlobTooLarge):
            await blobs.write("new", chunks, max_size=100)

    stuck = trio.Event()

    async def forever() -> AsyncGenerator[bytes, None]:
        for _ in range(4):
            yield big
        stuck.set()
        await trio.sleep_forever()

    async with aclosing(forever()) as chunks, trio.open_nursery() as nursery:
        nursery.start_soon(lambda: blobs.write("new", chunks, max_size=10**8))
        await stuck.wait()
        nursery.cancel_scope.cancel()
    assert await _keys(blobs) == ["old"]
    assert await _read(blobs, "old") == b"previous"
    # nothing half-written is left for the sweep either (it aborted or unlinked it at once)
    assert await blobs.sweep_temporary(older_than=time.time() + 3600) == 0


async def test_keys_are_checked(blob_backend: Backend) -> None:
    for key in ["../x", "a/b", "", ".hidden", "a\x00"]:
        with pytest.raises(ValueError, match="invalid blob key"):
            await blob_backend.store.write(key, _chunks(b"x"), max_size=10)


async def test_namespaces_do_not_see_each_other(blob_backend: Backend) -> None:
    assets = blob_backend.store
    logs = sibling_store(assets, "build-logs")
    await assets.write("asset.1", _chunks(b"app"), max_size=10)
    await logs.write("inst.build-1.log", _chunks(b"log"), max_size=10)
    assert await _keys(assets) == ["asset.1"]
    assert await _keys(logs) == ["inst.build-1.log"]
    assert await _read(logs, "inst.build-1.log") == b"log"
    with pytest.raises(BlobNotFound):
        await _read(assets, "inst.build-1.log")


async def test_a_live_write_survives_a_sweep(blob_backend: Backend) -> None:
    blobs = blob_backend.store
    half = trio.Event()
    release = trio.Event()

    async def slow() -> AsyncGenerator[bytes, None]:
        for _ in range(3):
            yield b"z" * (3 * MIB)
        half.set()
        await release.wait()
        yield b"end"

    async with trio.open_nursery() as nursery:
        nursery.start_soon(lambda: blobs.write("slow", slow(), max_size=10**8))
        await half.wait()
        # however old its pieces look, a write this process runs is never swept
        assert await blobs.sweep_temporary(older_than=time.time() + 3600) == 0
        release.set()
    assert await _read(blobs, "slow") == b"z" * (9 * MIB) + b"end"


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    async with open_store(str(tmp_path / "db.sqlite3")) as opened:
        yield opened


async def test_asset_bytes_switch_keys_and_orphans_are_swept(
    blob_backend: Backend, store: Store, tmp_path: Path
) -> None:
    blobs = blob_backend.store
    assets = AssetBlobs(store, blobs, UrlSigner(load_signing_key(tmp_path)), orphan_grace=0)
    org = await store.create_organization("acme")
    asset = await store.upsert_asset(org_id=org.id, name="app.apk")
    first = await assets.upload(asset.id, _chunks(b"version 1"))
    second = await assets.upload(asset.id, _chunks(b"version 2"))
    assert first.blob_key != second.blob_key
    # the previous bytes went (local: unlinked, an open file stays readable), or are retired:
    # kept for downloads in progress until the orphan sweep (S3, PostgreSQL; docs/blobs.md)
    assert first.blob_key is not None and second.blob_key is not None
    retired = [] if blob_backend.name == "local" else [first.blob_key]
    assert await _keys(blobs) == sorted([second.blob_key, *retired])
    found, chunks = await assets.download(asset.id)
    async with aclosing(chunks):
        assert b"".join([c async for c in chunks]) == b"version 2"
    assert found.md5 == hashlib.md5(b"version 2").hexdigest()
    await blobs.write(f"{asset.id}.orphan", _chunks(b"no row names me"), max_size=100)
    assert await assets.sweep_orphans() == 1 + len(retired)
    assert await _keys(blobs) == [second.blob_key]
    await assets.delete(org.id, asset.id)
    assert await _keys(blobs) == []


def _peak_rss() -> int:
    status = Path("/proc/self/status").read_text()
    return int(next(line for line in status.splitlines() if line.startswith("VmHWM:")).split()[1])


def _reset_peak_rss() -> int:
    Path("/proc/self/clear_refs").write_text("5")  # the peak is now the current RSS
    return _peak_rss()


async def test_64_mib_stream_in_and_out_with_bounded_memory(blob_backend: Backend) -> None:
    """The process's peak RSS grows by far less than the blob (S3 holds ~3 parts of 5 MiB
    here, the others a 1 MiB buffer); sha256 of what was sent and what came back match."""
    blobs = blob_backend.store
    size = 64 * MIB
    block = bytes(range(256)) * (MIB // 256)
    sent = hashlib.sha256()

    async def source() -> AsyncGenerator[bytes, None]:
        for i in range(size // MIB):
            chunk = i.to_bytes(8, "big") + block[8:]
            sent.update(chunk)
            yield chunk

    baseline = _reset_peak_rss()
    written = await blobs.write("big", source(), max_size=size)
    write_growth = (_peak_rss() - baseline) * 1024
    baseline = _reset_peak_rss()
    received = hashlib.sha256()
    count = 0
    async with aclosing(blobs.read("big")) as chunks:
        async for chunk in chunks:
            received.update(chunk)
            count += len(chunk)
    read_growth = (_peak_rss() - baseline) * 1024
    assert written.size == count == size
    assert received.hexdigest() == sent.hexdigest()
    assert write_growth < 32 * MIB, write_growth
    assert read_growth < 24 * MIB, read_growth
