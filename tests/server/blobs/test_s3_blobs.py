"""The S3 backend's own behaviour against a real ``moto_server``: the ``[blobs]`` config and its
errors, presigned downloads, the sweep of abandoned multipart uploads, an unreachable endpoint
and a missing bucket."""

from __future__ import annotations

import hashlib
import time
from collections.abc import AsyncGenerator
from contextlib import aclosing
from pathlib import Path

import attrs
import httpx
import pytest
import trio

from devyard.server.blobs import BlobStoreUnavailable, Operation
from devyard.server.blobs.s3 import MIN_PART, S3BlobStore, open_s3_store
from devyard.server.blobs.settings import BlobBackend, open_asset_blobs
from devyard.server.config import ConfigError, ServerConfig, load_server_config
from devyard.server.store import open_store
from tests.ports import free_port

from .conftest import ACCESS_KEY, SECRET_KEY, S3Server

_prefixes = iter(range(1, 1_000_000))


@pytest.fixture
def s3_store(s3_server: S3Server) -> S3BlobStore:
    return S3BlobStore(
        s3_server.client,
        s3_server.bucket,
        namespace="blobs",
        prefix=f"s{next(_prefixes)}/",
        part_size=MIN_PART,
        limiter=trio.CapacityLimiter(4),
    )


async def _chunks(*parts: bytes) -> AsyncGenerator[bytes, None]:
    for part in parts:
        await trio.lowlevel.checkpoint()
        yield part


def _config(tmp_path: Path, text: str, **env: str) -> ServerConfig:
    path = tmp_path / "devyard.toml"
    path.write_text(text)
    return load_server_config(flags={"data_dir": str(tmp_path / "data")}, env=env, file=path)


@pytest.mark.parametrize(
    ("text", "env", "message"),
    [
        ('[blobs]\nbackend = "s4"\n', {}, "expected 'local' | 's3' | 'postgres'"),
        ('[blobs]\nbackend = "s3"\n', {}, 'backend = "s3" needs blobs.s3_bucket'),
        ('[blobs]\nbackend = "s3"\ns3_bucket = "b-1"\n', {}, "needs credentials"),
        (
            '[blobs]\nbackend = "s3"\ns3_bucket = "b-1"\ns3_access_key_id = "k"\n',
            {},
            "go together",
        ),
        ('[blobs]\ns3_bucket = "b-1"\n', {}, 'need backend = "s3", not local'),
        ('[blobs]\nbackend = "postgres"\n', {}, "needs database_url"),
        ('[blobs]\nbackend = "s3"\ns3_endpoint = "ftp://x"\n', {}, "expected an http(s)://"),
        ('[blobs]\nbackend = "s3"\ns3_bucket = "b"\n', {}, "bucket name"),
        ("[blobs]\ns3_part_size_mib = 1\n", {}, "from 5 to 512"),
        ('[blobs]\nbackend = "s3"\ndirectory = "/x"\n', {}, "blobs."),
        ("[blobs]\nbogus = 1\n", {}, "unknown key 'blobs.bogus'"),
    ],
)
def test_config_errors_name_the_key(
    tmp_path: Path, text: str, env: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigError, match=None) as caught:
        _config(tmp_path, text, **env)
    assert message in str(caught.value), caught.value


def test_credentials_come_from_a_file_or_the_environment_and_are_never_shown(
    tmp_path: Path,
) -> None:
    secrets = tmp_path / "s3-credentials"
    secrets.write_text("[ops]\naws_access_key_id = AKID\naws_secret_access_key = from-file\n")
    config = _config(
        tmp_path,
        f'[blobs]\nbackend = "s3"\ns3_bucket = "b-1"\ns3_prefix = "prod"\n'
        f's3_credentials_file = "{secrets}"\ns3_profile = "ops"\n',
    )
    blobs = config.blobs
    assert (blobs.backend, blobs.s3_prefix) == (BlobBackend.S3, "prod/")
    assert (blobs.s3_access_key_id, blobs.s3_secret_access_key) == ("AKID", "from-file")
    assert "from-file" not in repr(config)
    config = _config(
        tmp_path,
        '[blobs]\nbackend = "s3"\ns3_bucket = "b-1"\n',
        DEVYARD_BLOBS_S3_ACCESS_KEY_ID="AKENV",
        DEVYARD_BLOBS_S3_SECRET_ACCESS_KEY="from-env",
    )
    assert config.blobs.s3_secret_access_key == "from-env"
    assert "from-env" not in repr(config)
    with pytest.raises(ConfigError, match=r"has no \[default\] section"):
        _config(
            tmp_path,
            f'[blobs]\nbackend = "s3"\ns3_bucket = "b-1"\ns3_credentials_file = "{secrets}"',
        )


async def test_presigned_downloads_are_the_endpoints_own_urls(
    s3_server: S3Server, tmp_path: Path
) -> None:
    async with open_store(str(tmp_path / "db.sqlite3")) as store:
        settings = s3_server.settings(prefix="presign/", presign_direct=True)
        async with open_asset_blobs(
            store,
            settings,
            data_dir=tmp_path,
            database_url=None,
            orphan_grace=3600,
            sweep_interval=60,
        ) as assets:
            org = await store.create_organization("acme")
            asset = await store.upsert_asset(org_id=org.id, name="app.apk")
            # no bytes yet: devyard's own URL, which works whenever they arrive
            own = assets.signed_url("http://devyard", Operation.DOWNLOAD, asset.id)
            assert own.startswith("http://devyard/blobs/")
            uploaded = await assets.upload(asset.id, _chunks(b"the app"))
            url = assets.signed_url(
                "http://devyard", Operation.DOWNLOAD, asset.id, blob_key=uploaded.blob_key
            )
            assert url.startswith(f"{s3_server.endpoint}/{s3_server.bucket}/presign/blobs/")
            assert "X-Amz-Signature=" in url
            async with httpx.AsyncClient() as http:
                answer = await http.get(url)
                assert (answer.status_code, answer.content) == (200, b"the app")
                # (moto does not check signatures; a real endpoint refuses a tampered URL)
            # uploads always go through devyard (the row's md5 and size are ours)
            upload = assets.signed_url(
                "http://devyard", Operation.UPLOAD, asset.id, blob_key=uploaded.blob_key
            )
            assert upload.startswith("http://devyard/blobs/")


async def test_an_abandoned_multipart_upload_is_aborted_by_the_sweep(
    s3_store: S3BlobStore, s3_server: S3Server
) -> None:
    store = s3_store
    client = s3_server.client
    # what a replica killed mid-upload leaves: an upload with a part, never completed
    started = client.create_multipart_upload(Bucket=store.bucket, Key=f"{store.prefix}dead.1")
    client.upload_part(
        Bucket=store.bucket,
        Key=f"{store.prefix}dead.1",
        UploadId=started["UploadId"],
        PartNumber=1,
        Body=b"x" * 1024,
    )
    other = client.create_multipart_upload(Bucket=store.bucket, Key="elsewhere/dead.2")
    assert await store.sweep_temporary(older_than=time.time() - 3600) == 0  # too young
    assert await store.sweep_temporary(older_than=time.time() + 3600) == 1
    left = client.list_multipart_uploads(Bucket=store.bucket).get("Uploads", [])
    assert [u["UploadId"] for u in left] == [other["UploadId"]]  # another prefix's: untouched
    client.abort_multipart_upload(
        Bucket=store.bucket, Key="elsewhere/dead.2", UploadId=other["UploadId"]
    )


async def test_an_unreachable_endpoint_or_a_missing_bucket_is_unavailable(
    s3_server: S3Server,
) -> None:
    nowhere = attrs.evolve(s3_server.settings(), s3_endpoint=f"http://127.0.0.1:{free_port()}")
    missing = attrs.evolve(s3_server.settings(), s3_bucket="no-such-bucket")
    for settings in (nowhere, missing):
        async with open_s3_store(settings, "blobs") as store:  # a warning, not a failure
            with pytest.raises(BlobStoreUnavailable) as caught:
                await store.write("k", _chunks(b"data"), max_size=10)
            assert SECRET_KEY not in str(caught.value)
            assert ACCESS_KEY not in str(caught.value)
            with pytest.raises(BlobStoreUnavailable):
                async with aclosing(store.read("k")) as chunks:
                    await anext(chunks)


async def test_a_multipart_blob_reads_back_in_ranges(s3_store: S3BlobStore) -> None:
    store = s3_store
    data = bytes(range(256)) * (13 * 1024 * 1024 // 256 + 7)  # 2 parts + a bit, 4 ranges
    written = await store.write(
        "multi", _chunks(data[: 7 * 2**20], data[7 * 2**20 :]), max_size=2**30
    )
    assert written.md5 == hashlib.md5(data).hexdigest()
    assert await store.size("multi") == len(data)
    async with aclosing(store.read("multi")) as chunks:
        assert b"".join([c async for c in chunks]) == data


async def test_replicas_with_their_own_data_dirs_share_the_signing_key_file(
    s3_server: S3Server, tmp_path: Path
) -> None:
    """A URL one replica signs works on another: both read blobs.signing_key_file."""
    settings = attrs.evolve(s3_server.settings(), signing_key_file=tmp_path / "shared" / "key")
    async with open_store(str(tmp_path / "db.sqlite3")) as store:
        signed = []
        for replica in ("a", "b"):
            async with open_asset_blobs(
                store,
                settings,
                data_dir=tmp_path / replica,
                database_url=None,
                orphan_grace=3600,
                sweep_interval=60,
            ) as assets:
                url = assets.signed_url("http://lb", Operation.UPLOAD, "asset_1")
                signed.append(url)
                query = dict(p.split("=", 1) for p in signed[0].split("?", 1)[1].split("&"))
                assets.verify(Operation.UPLOAD, "asset_1", query)  # a's URL, checked by both
        assert not (tmp_path / "a" / "asset-signing-key").exists()
