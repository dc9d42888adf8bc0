"""`S3BlobStore`: blobs as objects of an S3-compatible bucket (AWS S3, MinIO, Garage, Ceph RGW,
SeaweedFS...), shared by every replica that names the same bucket (docs/blobs.md).

Theory of operation. boto3 is synchronous: every call runs in a worker thread admitted by a
`trio.CapacityLimiter` the size of the client's connection pool, so a thread never waits for a
connection and the number of threads is bounded. (aiobotocore, the async boto, runs on asyncio
only; devyard runs on trio.) Objects live at ``<prefix><namespace>/<key>``: the asset bytes
(namespace ``blobs``) and the build logs (``build-logs``) share a bucket without seeing each
other's keys, so the asset orphan sweep never touches a build log.

``write`` gathers the stream into parts of ``part_size`` bytes. A stream that ends within the
first part is one ``PutObject``; a longer one is a multipart upload whose parts a worker task
sends while the next part arrives (at most one part in flight, one being handed over and one
being filled: memory is ~3 parts per upload, whatever its size). The MD5 is computed in the
worker threads, in order. S3 makes an object visible only when ``PutObject`` or
``CompleteMultipartUpload`` returns, so until ``write`` returns nothing is under the key; a
failed, cancelled or too large write aborts its multipart upload (shielded). A process killed
mid-write leaves an incomplete multipart upload: `sweep_temporary` aborts those of the
namespace that this process is not writing and whose last part is older than the grace.

``read`` fetches ranges of `RANGE_BYTES` with one ``GetObject`` each and yields them in
`READ_CHUNK` slices: no connection is held while a slow client drains a chunk (a streamed
body would pin one of the pool's connections for the whole download), and since a key's bytes
never change (base.py) the ranges of one download are consistent. A re-upload does not delete
the bytes it replaced (that would cut a download between two ranges): `retire` writes an empty
marker object ``<prefix><namespace>/.retired/<key>``, whose date `list_blobs` reports as the
key's, so the orphan sweep removes the key (and its marker) only its grace after the
re-upload, and every range of a download that began before it reads the old object.

Errors are translated once, here: ``NoSuchKey``/404 is `BlobNotFound`, a full or over-quota
store (``EntityTooLarge``, ``QuotaExceeded``, 507...) `BlobStoreFull`, anything else,
unreachable endpoint included, `BlobStoreUnavailable`. Messages name the S3 error code,
never a credential.

``presigned_download_url`` is the endpoint's own presigned GET of a key, for
``presign_direct`` (the endpoint is reachable by clients); otherwise devyard proxies the
bytes through its own signed ``/blobs/`` URLs.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import AsyncGenerator, AsyncIterable, AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import datetime
from functools import partial
from typing import TYPE_CHECKING, Any, Final, TypeVar

import trio

from ...core._groups import collapse_single_group
from .base import (
    BlobNotFound,
    BlobStoreError,
    BlobStoreFull,
    BlobStoreUnavailable,
    BlobTooLarge,
    StoredBlob,
    WrittenBlob,
)

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

    from .settings import BlobSettings

__all__ = ["RANGE_BYTES", "READ_CHUNK", "S3BlobStore", "open_s3_store"]

log = logging.getLogger(__name__)

T = TypeVar("T")

RANGE_BYTES: Final = 8 * 1024 * 1024  # one GetObject of a download (AWS advises 8-16 MB)
READ_CHUNK: Final = 1024 * 1024  # what read() yields at a time
MIN_PART: Final = 5 * 1024 * 1024  # S3's smallest part but the last
_KEY_RE: Final = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]{0,199}")
_NAMESPACE_RE: Final = re.compile(r"[a-z0-9][a-z0-9-]{0,62}")
_RETIRED: Final = ".retired/"  # markers of retired keys, under the namespace's prefix
_MISSING: Final = frozenset({"NoSuchKey", "404", "NotFound"})
_FULL: Final = frozenset(
    {"EntityTooLarge", "QuotaExceeded", "XMinioStorageFull", "StorageFull", "InsufficientStorage"}
)


def translate(exc: Exception) -> Exception:
    """The blob store's error for a boto3 error (others are returned as they are)."""
    from botocore.exceptions import BotoCoreError, ClientError  # noqa: PLC0415

    if isinstance(exc, ClientError):
        error: Any = exc.response.get("Error", {})
        code = str(error.get("Code", ""))
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        if code in _MISSING:
            return BlobNotFound(code)
        if code in _FULL or status == 507:
            return BlobStoreFull(f"the S3 store is full: {code}")
        return BlobStoreUnavailable(f"the S3 store answered {code or status}")
    if isinstance(exc, BotoCoreError):
        return BlobStoreUnavailable(f"the S3 store failed: {type(exc).__name__}")
    return exc


def _error_code(exc: BaseException | None) -> str:
    response: Any = getattr(exc, "response", {})
    return str(response.get("Error", {}).get("Code", ""))


class S3BlobStore:
    """A `BlobStore` of the objects under ``<prefix><namespace>/`` in *bucket*."""

    def __init__(
        self,
        client: S3Client,
        bucket: str,
        *,
        namespace: str,
        prefix: str = "",
        part_size: int = 8 * 1024 * 1024,
        limiter: trio.CapacityLimiter,
        range_bytes: int = RANGE_BYTES,
    ) -> None:
        if _NAMESPACE_RE.fullmatch(namespace) is None:
            raise ValueError(f"invalid namespace {namespace!r}")
        if part_size < MIN_PART:
            raise ValueError(f"parts are at least {MIN_PART} bytes")
        self.client = client
        self.bucket = bucket
        self.namespace = namespace
        self.prefix = f"{prefix}{namespace}/"
        self._root_prefix = prefix
        self.part_size = part_size
        self.range_bytes = range_bytes  # one GetObject of a download
        self._limiter = limiter
        self._probe_limiter = trio.CapacityLimiter(1)  # readiness probes, beside the pool's
        self._writing: set[str] = set()  # upload ids of this process's multipart writes

    def __repr__(self) -> str:
        return f"S3BlobStore(bucket={self.bucket!r}, prefix={self.prefix!r})"

    def sibling(self, namespace: str) -> S3BlobStore:
        """The *namespace* of the same bucket and client."""
        return S3BlobStore(
            self.client,
            self.bucket,
            namespace=namespace,
            prefix=self._root_prefix,
            part_size=self.part_size,
            limiter=self._limiter,
            range_bytes=self.range_bytes,
        )

    def _name(self, key: str) -> str:
        if _KEY_RE.fullmatch(key) is None:
            raise ValueError(f"invalid blob key {key!r}")
        return self.prefix + key

    def _marker(self, key: str) -> str:
        """The name of *key*'s retirement marker (not a key: keys have no ``/``)."""
        self._name(key)  # checks the key
        return f"{self.prefix}{_RETIRED}{key}"

    async def _call(self, fn: Callable[[], T]) -> T:
        """*fn* in a worker thread of the pool's size, its errors translated."""
        try:
            return await trio.to_thread.run_sync(fn, limiter=self._limiter)
        except Exception as exc:
            translated = translate(exc)
            if translated is exc:
                raise
            raise translated from exc

    # ---- write -------------------------------------------------------------------------------

    async def write(self, key: str, chunks: AsyncIterable[bytes], *, max_size: int) -> WrittenBlob:
        name = self._name(key)
        digest = hashlib.md5(usedforsecurity=False)
        size = 0
        buffer = bytearray()
        iterator = aiter(chunks)
        ended = False
        # The first part decides: a small blob is one PutObject.
        while len(buffer) <= self.part_size:
            chunk = await anext(iterator, None)
            if chunk is None:
                ended = True
                break
            size += len(chunk)
            if size > max_size:
                raise BlobTooLarge(max_size)
            buffer += chunk
        if ended:
            data = bytes(buffer)

            def put() -> None:
                digest.update(data)
                self.client.put_object(
                    Bucket=self.bucket,
                    Key=name,
                    Body=data,
                    ContentType="application/octet-stream",
                )

            await self._call(put)
            return WrittenBlob(key=key, md5=digest.hexdigest(), size=size)
        size = await self._multipart(
            name, buffer, iterator, size=size, digest=digest, max_size=max_size
        )
        return WrittenBlob(key=key, md5=digest.hexdigest(), size=size)

    async def _multipart(
        self,
        name: str,
        buffer: bytearray,
        iterator: AsyncIterator[bytes],
        *,
        size: int,
        digest: Any,
        max_size: int,
    ) -> int:
        """The rest of a write past its first part, as a multipart upload; the size."""
        created = await self._call(
            partial(
                self.client.create_multipart_upload,
                Bucket=self.bucket,
                Key=name,
                ContentType="application/octet-stream",
            )
        )
        upload_id = created["UploadId"]
        self._writing.add(upload_id)
        done = False
        try:
            etags: list[tuple[int, str]] = []
            send, receive = trio.open_memory_channel[bytes](0)
            with collapse_single_group():  # our error, or the part worker's, unwrapped
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._send_parts, name, upload_id, receive, digest, etags)
                    async with send:
                        while True:
                            while len(buffer) >= self.part_size:
                                part = bytes(memoryview(buffer)[: self.part_size])
                                del buffer[: self.part_size]
                                await send.send(part)
                            chunk = await anext(iterator, None)
                            if chunk is None:
                                break
                            size += len(chunk)
                            if size > max_size:
                                raise BlobTooLarge(max_size)
                            buffer += chunk
                        if buffer:
                            await send.send(bytes(buffer))
                            buffer = bytearray()
            parts: Any = [{"PartNumber": n, "ETag": e} for n, e in etags]
            await self._call(
                partial(
                    self.client.complete_multipart_upload,
                    Bucket=self.bucket,
                    Key=name,
                    UploadId=upload_id,
                    MultipartUpload={"Parts": parts},
                )
            )
            done = True
        finally:
            self._writing.discard(upload_id)
            if not done:
                with trio.CancelScope(shield=True):
                    await self._abort(name, upload_id)
        return size

    async def _send_parts(
        self,
        name: str,
        upload_id: str,
        receive: trio.MemoryReceiveChannel[bytes],
        digest: Any,
        etags: list[tuple[int, str]],
    ) -> None:
        async with receive:
            async for data in receive:
                number = len(etags) + 1

                def upload(data: bytes = data, number: int = number) -> str:
                    digest.update(data)
                    answer = self.client.upload_part(
                        Bucket=self.bucket,
                        Key=name,
                        UploadId=upload_id,
                        PartNumber=number,
                        Body=data,
                    )
                    return answer["ETag"]

                etags.append((number, await self._call(upload)))

    async def _abort(self, name: str, upload_id: str) -> None:
        try:
            await self._call(
                partial(
                    self.client.abort_multipart_upload,
                    Bucket=self.bucket,
                    Key=name,
                    UploadId=upload_id,
                )
            )
        except (BlobStoreError, BlobNotFound) as exc:  # the sweep retries
            log.warning("could not abort the upload of %s, the sweep will: %s", name, exc)

    # ---- read --------------------------------------------------------------------------------

    def _get_range(self, name: str, start: int) -> tuple[bytes, int]:
        answer = self.client.get_object(
            Bucket=self.bucket, Key=name, Range=f"bytes={start}-{start + self.range_bytes - 1}"
        )
        with answer["Body"] as body:
            data = body.read()
        content_range = answer.get("ContentRange")  # "bytes 0-99/1234"
        total = int(content_range.rpartition("/")[2]) if content_range else len(data)
        return data, total

    async def read(self, key: str) -> AsyncGenerator[bytes, None]:
        name = self._name(key)
        offset = 0
        total: int | None = None
        while total is None or offset < total:
            try:
                data, total = await self._call(partial(self._get_range, name, offset))
            except BlobStoreUnavailable as exc:
                if offset == 0 and _error_code(exc.__cause__) == "InvalidRange":
                    return  # an empty object: it exists, and no range of it does
                raise
            except BlobNotFound:
                raise BlobNotFound(key) from None
            if not data:
                return
            offset += len(data)
            for start in range(0, len(data), READ_CHUNK):
                yield data[start : start + READ_CHUNK]

    async def size(self, key: str) -> int:
        """The size of the blob under *key*; `BlobNotFound` if none."""
        name = self._name(key)
        try:
            answer = await self._call(
                partial(self.client.head_object, Bucket=self.bucket, Key=name)
            )
        except BlobNotFound:
            raise BlobNotFound(key) from None
        return int(answer["ContentLength"])

    def presigned_download_url(self, key: str, ttl: int) -> str:
        """The endpoint's own presigned GET of *key*, valid *ttl* seconds (no request made)."""
        return self.client.generate_presigned_url(
            "get_object", Params={"Bucket": self.bucket, "Key": self._name(key)}, ExpiresIn=ttl
        )

    # ---- delete, list, sweep -----------------------------------------------------------------

    async def delete(self, key: str) -> None:
        """The object, then its retirement marker if any (missing is fine for both)."""
        for name in (self._name(key), self._marker(key)):
            try:
                await self._call(partial(self.client.delete_object, Bucket=self.bucket, Key=name))
            except BlobNotFound:
                continue

    async def probe(self) -> None:
        """``HeadBucket``: the endpoint answers and the credentials may use the bucket. Its
        own thread, abandoned if the caller gives up (boto3's retries could take a minute),
        at most one at a time (a probe still stuck makes the next wait: bounded threads)."""
        try:
            await trio.to_thread.run_sync(
                partial(self.client.head_bucket, Bucket=self.bucket),
                limiter=self._probe_limiter,
                abandon_on_cancel=True,
            )
        except Exception as exc:
            translated = translate(exc)
            if isinstance(translated, BlobNotFound):
                raise BlobStoreUnavailable(f"no bucket {self.bucket!r}") from exc
            if translated is exc:
                raise
            raise translated from exc

    async def retire(self, key: str) -> None:
        """Dates *key* retired now (an empty marker object); the object stays until the
        orphan sweep's grace has passed since (module docstring)."""
        marker = self._marker(key)
        await self._call(partial(self.client.put_object, Bucket=self.bucket, Key=marker, Body=b""))

    async def list_blobs(self) -> list[StoredBlob]:
        """Every key, dated by its write or by its retirement marker, whichever is later; a
        marker whose object is gone is listed too (its key's delete removes it)."""

        def scan() -> list[StoredBlob]:
            written: dict[str, float] = {}
            retired: dict[str, float] = {}
            pages = self.client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=self.prefix
            )
            for page in pages:
                for item in page.get("Contents", []):
                    key = item["Key"].removeprefix(self.prefix)
                    into = written
                    if key.startswith(_RETIRED):
                        key, into = key.removeprefix(_RETIRED), retired
                    if _KEY_RE.fullmatch(key) is not None:
                        into[key] = item["LastModified"].timestamp()
            return [
                StoredBlob(key, max(written.get(key, 0.0), retired.get(key, 0.0)))
                for key in written.keys() | retired.keys()
            ]

        return await self._call(scan)

    async def sweep_temporary(self, *, older_than: float) -> int:
        """Abort the multipart uploads of the namespace that no write of this process runs
        and whose last part (or start) is older than *older_than*; how many."""
        writing = frozenset(self._writing)

        def stale() -> list[tuple[str, str]]:
            found: list[tuple[str, str]] = []
            pages = self.client.get_paginator("list_multipart_uploads").paginate(
                Bucket=self.bucket, Prefix=self.prefix
            )
            for page in pages:
                for upload in page.get("Uploads", []):
                    upload_id, name = upload["UploadId"], upload["Key"]
                    if upload_id in writing:
                        continue
                    last: datetime = upload["Initiated"]
                    parts = self.client.list_parts(Bucket=self.bucket, Key=name, UploadId=upload_id)
                    for part in parts.get("Parts", []):
                        last = max(last, part["LastModified"])
                    if last.timestamp() < older_than:
                        found.append((name, upload_id))
            return found

        removed = 0
        for name, upload_id in await self._call(stale):
            try:
                await self._call(
                    partial(
                        self.client.abort_multipart_upload,
                        Bucket=self.bucket,
                        Key=name,
                        UploadId=upload_id,
                    )
                )
            except BlobNotFound:
                continue  # finished or aborted meanwhile
            removed += 1
        return removed


def _client(settings: BlobSettings) -> S3Client:
    """A boto3 S3 client given everything explicitly (blocking: boto3 loads its models)."""
    import boto3.session  # noqa: PLC0415 - the optional extra "s3"
    from botocore.config import Config  # noqa: PLC0415

    session = boto3.session.Session(
        aws_access_key_id=settings.s3_access_key_id,
        aws_secret_access_key=settings.s3_secret_access_key,
        region_name=settings.s3_region,
    )
    config = Config(
        max_pool_connections=settings.s3_max_connections,
        connect_timeout=10,
        read_timeout=60,
        retries={"max_attempts": 3, "mode": "standard"},
        signature_version="s3v4",
        s3={"addressing_style": settings.s3_addressing.value},
        # S3-compatible servers that predate the default CRC32 checksums refuse them
        request_checksum_calculation="when_required",
        response_checksum_validation="when_required",
    )
    return session.client("s3", endpoint_url=settings.s3_endpoint, config=config)


@asynccontextmanager
async def open_s3_store(settings: BlobSettings, namespace: str) -> AsyncIterator[S3BlobStore]:
    """The *namespace* of the configured bucket; checks the bucket once (a warning, not a
    failure: the store may come back) and closes the client's connections at the end."""
    assert settings.s3_bucket is not None
    client = await trio.to_thread.run_sync(_client, settings)
    limiter = trio.CapacityLimiter(settings.s3_max_connections)
    store = S3BlobStore(
        client,
        settings.s3_bucket,
        namespace=namespace,
        prefix=settings.s3_prefix,
        part_size=settings.s3_part_size_mib * 1024 * 1024,
        limiter=limiter,
    )
    try:
        await store._call(partial(client.head_bucket, Bucket=settings.s3_bucket))
    except (BlobStoreError, BlobNotFound) as exc:
        log.warning("the S3 bucket %s is not usable now: %s", settings.s3_bucket, exc)
    try:
        yield store
    finally:
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(client.close)
