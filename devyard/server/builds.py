"""Build logs on the server: what hosts report when an exec of a build instance ends, kept
after the instance (docs/builds.md).

A host opens a ``build_log`` stream on its link (docs/protocol.md 6) with ``{instance_id,
record}``; `BuildLogs.serve_build_log` checks that the instance is a build instance placed on
that host, accepts, stores the log's bytes (until EOF) as a blob in the build-log blob store,
then the row (`store.build_logs`), and answers ``{"ok": true}``. The API lists the rows with a
signed download URL (`view`), whose signature is the asset signer's over ``buildlog/<instance
id>/<exec id>`` (no asset id has a ``/``, so neither kind of URL opens the other).
"""

from __future__ import annotations

import hashlib
import logging
import re
import time
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from typing import Any, Final

import attrs
import trio

from ..core import accept_open, reject_open, send_message
from .blobs import BlobStore, BlobStoreError, BlobTooLarge, Operation, UrlSigner
from .blobs.base import BlobNotFound
from .blobs.service import AssetBlobs
from .store import errors as store_errors
from .store.base import Instance, Store
from .store.build_logs import BuildLogRecord, BuildLogStore

log = logging.getLogger(__name__)

__all__ = ["BUILD_LOGS_DIR", "LOG_PATH", "BuildLogs", "host_build_instance"]

BUILD_LOGS_DIR: Final = "build-logs"  # under the server's data dir
#: The signed download: ``/v1/build_logs/{instance id}/{exec id}/log?op&expires&sig``.
LOG_PATH: Final = "/v1/build_logs/{instance_id}/{exec_id}/log"
MAX_LOG_BYTES: Final = 128 * 1024 * 1024
URL_TTL: Final = 3600
ORPHAN_GRACE: Final = 600.0
SWEEP_INTERVAL: Final = 3600.0
_BUILD_PLATFORMS: Final = frozenset({"xcode", "gradle"})
_EXEC_ID: Final = re.compile(r"build-\d{1,24}")
_STATUSES: Final = frozenset({"SUCCEEDED", "FAILED", "CANCELLED"})
_CHUNK: Final = 256 * 1024
_CONTROL: Final = re.compile(r"[\x00-\x1f\x7f]")


def _when(value: object) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).astimezone(UTC)
    except ValueError:
        return None


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


async def host_build_instance(store: Store, host_id: str, instance_id: str) -> Instance | None:
    """The build instance *instance_id* if it runs on *host_id*, else None: what a host may
    open ``build_log`` and ``build_cache`` streams for (its word names the instance; the
    organization comes from the store)."""
    try:
        instance = await store.get_instance(instance_id)
    except store_errors.NotFound:
        return None
    if instance.host_id != host_id or instance.platform not in _BUILD_PLATFORMS:
        return None
    return instance


class BuildLogs:
    def __init__(
        self,
        store: Store,
        logs: BuildLogStore,
        blobs: BlobStore,
        signer: UrlSigner,
        *,
        assets: AssetBlobs | None = None,
        url_ttl: int = URL_TTL,
        orphan_grace: float = ORPHAN_GRACE,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.logs = logs
        self.blobs = blobs
        self.signer = signer
        self.assets = assets  # where an exec's ``upload`` goes (None: refused)
        self.url_ttl = url_ttl
        self.orphan_grace = orphan_grace
        self.wall_clock = wall_clock

    def __repr__(self) -> str:
        return f"BuildLogs({self.blobs!r})"

    # ---- the host's side --------------------------------------------------------------------

    async def serve_build_log(
        self, host_id: str, request: dict[str, Any], stream: trio.abc.HalfCloseableStream
    ) -> None:
        instance_id = str(request.get("instance_id", ""))
        record = request.get("record")
        exec_id = record.get("execId") if isinstance(record, dict) else None
        if not isinstance(record, dict) or not isinstance(exec_id, str):
            await reject_open(stream, "bad-request", "a build_log needs a record with execId")
            return
        if not _EXEC_ID.fullmatch(exec_id) or record.get("status") not in _STATUSES:
            await reject_open(stream, "bad-request", "bad execId or status")
            return
        instance = await host_build_instance(self.store, host_id, instance_id)
        if instance is None:
            await reject_open(stream, "not-found", f"no build instance {instance_id} on this host")
            return
        await accept_open(stream)
        upload = record.get("upload")
        if isinstance(upload, dict):
            answer = await self._upload(instance.org_id, instance_id, exec_id, upload, stream)
            await send_message(stream, answer)
            return
        key = f"{instance_id}.{exec_id}.log"
        try:
            written = await self.blobs.write(key, _chunks(stream), max_size=MAX_LOG_BYTES)
        except (BlobTooLarge, BlobStoreError) as exc:
            log.warning("build log %s/%s not kept: %s", instance_id, exec_id, exc)
            await send_message(stream, {"ok": False, "message": str(exc)})
            return
        artifacts = record.get("artifacts")
        await self.logs.put_build_log(
            BuildLogRecord(
                instance_id=instance_id,
                exec_id=exec_id,
                org_id=instance.org_id,
                command=str(record.get("command", ""))[:64],
                status=str(record["status"]),
                exit_code=_int(record.get("exitCode")),
                started_at=_when(record.get("startedAt")),
                finished_at=_when(record.get("finishedAt")),
                duration_ms=_int(record.get("buildDurationMs")),
                error=str(record["error"])[:4096] if record.get("error") else None,
                blob_key=written.key,
                log_size=written.size,
                artifacts=tuple(a for a in artifacts if isinstance(a, dict))[:64]
                if isinstance(artifacts, list)
                else (),
                created_at=datetime.now(UTC),
            )
        )
        await send_message(stream, {"ok": True})

    async def _upload(
        self,
        org_id: str,
        instance_id: str,
        exec_id: str,
        upload: dict[str, Any],
        stream: trio.abc.HalfCloseableStream,
    ) -> dict[str, Any]:
        """An artifact's bytes as the organization's asset ``upload.assetName`` (created if
        missing, its bytes replaced), noted on the exec's build-log row."""
        name, path = upload.get("assetName"), upload.get("path")
        if self.assets is None:
            return {"ok": False, "message": "this server keeps no assets"}
        if not isinstance(name, str) or not 0 < len(name) <= 255 or _CONTROL.search(name):
            return {"ok": False, "message": "bad assetName"}
        digest = hashlib.sha256()

        async def hashed() -> AsyncIterator[bytes]:
            async for chunk in _chunks(stream):
                digest.update(chunk)
                yield chunk

        try:
            asset = await self.store.upsert_asset(org_id=org_id, name=name)
            asset = await self.assets.upload(asset.id, hashed())
        except (BlobTooLarge, BlobStoreError, store_errors.NotFound) as exc:
            log.warning("artifact of %s/%s not uploaded: %s", instance_id, exec_id, exc)
            return {"ok": False, "message": str(exc)}
        if digest.hexdigest() != upload.get("sha256"):
            log.warning("artifact of %s/%s: the bytes differ from its sha256", instance_id, exec_id)
        try:
            record = await self.logs.get_build_log(instance_id, exec_id)
        except store_errors.NotFound:
            return {"ok": True, "assetId": asset.id}
        noted = tuple(
            {**a, "assetId": asset.id, "assetName": name} if a.get("path") == path else a
            for a in record.artifacts
        )
        await self.logs.put_build_log(attrs.evolve(record, artifacts=noted))
        return {"ok": True, "assetId": asset.id}

    # ---- retention ------------------------------------------------------------------------

    async def sweep_orphans(self) -> int:
        """Delete the log blobs no row names (their organization was deleted: its rows go
        with it), untouched for ``orphan_grace`` (a row follows its blob within moments);
        how many."""
        cutoff = self.wall_clock() - self.orphan_grace
        removed = 0
        for blob in await self.blobs.list_blobs():
            if blob.modified > cutoff:
                continue
            instance_id, _, rest = blob.key.partition(".")  # "<instance>.<exec>.log"
            try:
                record = await self.logs.get_build_log(instance_id, rest.removesuffix(".log"))
                named = record.blob_key == blob.key
            except store_errors.NotFound:
                named = False
            if not named:
                await self.blobs.delete(blob.key)
                removed += 1
        if removed:
            log.info("removed %d build log(s) no row names", removed)
        return removed

    async def run_sweeper(self, *, interval: float = SWEEP_INTERVAL) -> None:
        """`sweep_orphans` now and every *interval* seconds, until cancelled."""
        while True:
            try:
                await self.sweep_orphans()
            except (store_errors.StoreUnavailable, BlobStoreError) as exc:
                log.warning("sweeping build logs failed, retrying later: %r", exc)
            await trio.sleep(interval)

    # ---- the API's side ---------------------------------------------------------------------

    def _subject(self, instance_id: str, exec_id: str) -> str:
        return f"buildlog/{instance_id}/{exec_id}"

    def download_url(self, base_url: str, record: BuildLogRecord) -> str:
        expires = int(self.wall_clock()) + self.url_ttl
        subject = self._subject(record.instance_id, record.exec_id)
        query = self.signer.url("", Operation.DOWNLOAD, subject, expires).partition("?")[2]
        path = LOG_PATH.format(instance_id=record.instance_id, exec_id=record.exec_id)
        return f"{base_url.rstrip('/')}{path}?{query}"

    def verify(self, instance_id: str, exec_id: str, query: dict[str, str]) -> None:
        """Raises `signing.BadSignature` / `signing.ExpiredSignature`."""
        subject = self._subject(instance_id, exec_id)
        self.signer.verify(Operation.DOWNLOAD, subject, query, self.wall_clock())

    def view(self, base_url: str, record: BuildLogRecord) -> dict[str, Any]:
        """The commercial service's ``BuildLog``, plus ``command`` and ``artifacts``."""
        out: dict[str, Any] = {
            "id": record.exec_id,
            "status": record.status,
            "command": record.command,
            "downloadUrl": self.download_url(base_url, record),
            "artifacts": [dict(a) for a in record.artifacts],
        }
        for name, value in (
            ("exitCode", record.exit_code),
            ("startedAt", _iso(record.started_at)),
            ("finishedAt", _iso(record.finished_at)),
            ("buildDurationMs", record.duration_ms),
            ("error", record.error),
        ):
            if value is not None:
                out[name] = value
        return out

    async def read(self, instance_id: str, exec_id: str) -> AsyncIterator[bytes]:
        """The log's bytes; store ``NotFound`` (or `BlobNotFound`) when there are none."""
        record = await self.logs.get_build_log(instance_id, exec_id)
        if record.blob_key is None:
            raise BlobNotFound(f"{instance_id}/{exec_id}")
        return self.blobs.read(record.blob_key)


async def _chunks(stream: trio.abc.ReceiveStream) -> AsyncIterator[bytes]:
    while data := await stream.receive_some(_CHUNK):
        yield bytes(data)
