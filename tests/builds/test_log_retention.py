"""Build logs outlive their instance but not their organization: deleting the organization
drops its rows (the store's cascade) and the sweep then removes their log files, never a log
a row still names nor one written moments ago. The real SQL store (SQLite) and blob store."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

from devyard.server.blobs import LocalBlobStore
from devyard.server.blobs.signing import UrlSigner
from devyard.server.builds import BuildLogs
from devyard.server.store.build_logs import BuildLogRecord, SqlBuildLogs
from devyard.server.store.factory import open_store


async def _once(data: bytes) -> AsyncIterator[bytes]:
    yield data


async def test_an_organizations_deletion_removes_its_log_files(tmp_path: Path) -> None:
    async with open_store(str(tmp_path / "devyard.db")) as store:
        assert isinstance(store, SqlBuildLogs)
        kept_org = await store.create_organization("kept")
        gone_org = await store.create_organization("gone")
        blobs = LocalBlobStore(tmp_path / "build-logs")
        now = [1_000_000.0]
        logs = BuildLogs(
            store, store, blobs, UrlSigner(b"k" * 32), orphan_grace=60, wall_clock=lambda: now[0]
        )
        for org, instance in ((kept_org, "inst-kept"), (gone_org, "inst-gone")):
            written = await blobs.write(f"{instance}.build-1.log", _once(b"log\n"), max_size=64)
            await logs.logs.put_build_log(
                BuildLogRecord(
                    instance_id=instance,
                    exec_id="build-1",
                    org_id=org.id,
                    command="run",
                    status="SUCCEEDED",
                    exit_code=0,
                    started_at=None,
                    finished_at=None,
                    duration_ms=None,
                    error=None,
                    blob_key=written.key,
                    log_size=written.size,
                    artifacts=(),
                    created_at=datetime.now(UTC),
                )
            )
        fresh = await blobs.write("inst-new.build-2.log", _once(b"x"), max_size=64)
        names = sorted(b.key for b in await blobs.list_blobs())

        assert await logs.sweep_orphans() == 0, "within the grace nothing goes"
        now[0] = 4_000_000_000.0  # well past the grace for what exists now
        assert await logs.sweep_orphans() == 1, "only the unnamed log goes"
        assert fresh.key not in [b.key for b in await blobs.list_blobs()]
        await store.delete_organization(gone_org.id)
        assert await logs.sweep_orphans() == 1
        left = sorted(b.key for b in await blobs.list_blobs())
        assert left == ["inst-kept.build-1.log"], (names, left)
        assert (await logs.logs.get_build_log("inst-kept", "build-1")).blob_key == left[0]
