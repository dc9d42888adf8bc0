"""A real ``devyard server`` process on the S3 backend: an asset's bytes go up through its
signed upload URL and come back through its signed download URL (devyard proxies them: the
default, for an endpoint clients may not reach), and they live in the bucket, not the data
dir. The credentials arrive as the CLI's environment variables."""

from __future__ import annotations

import hashlib
import signal
from pathlib import Path

import httpx
import pytest
import trio

from devyard.server.bootstrap import bootstrap_organization
from devyard.server.config import load_server_config
from devyard.server.serve import open_configured_store
from tests.e2e._cli import clean_env, start

from .conftest import ACCESS_KEY, SECRET_KEY, S3Server

pytestmark = pytest.mark.slow

MIB = 1024 * 1024


async def test_an_asset_goes_up_and_down_through_devyard_on_s3(
    s3_server: S3Server, tmp_path: Path
) -> None:
    config = tmp_path / "devyard.toml"
    config.write_text(
        f'[blobs]\nbackend = "s3"\ns3_endpoint = "{s3_server.endpoint}"\n'
        f's3_bucket = "{s3_server.bucket}"\ns3_prefix = "e2e"\n'
    )
    env = clean_env(
        DEVYARD_CONFIG=str(config),
        DEVYARD_BLOBS_S3_ACCESS_KEY_ID=ACCESS_KEY,
        DEVYARD_BLOBS_S3_SECRET_ACCESS_KEY=SECRET_KEY,
    )
    data_dir = tmp_path / "data"
    # the admin key in-process (what `devyard admin bootstrap` does): one process less
    async with open_configured_store(
        load_server_config(flags={"data_dir": str(data_dir)})
    ) as store:
        key = (
            await bootstrap_organization(store, org_name="acme", user_name="admin")
        ).plaintext_key
    server = await start(
        ["server", "--data-dir", str(data_dir), "--listen", "127.0.0.1:0"], env, tmp_path
    )
    try:
        with trio.fail_after(30):
            url = (await server.read_until(r"serving at (http://\S+)")).group(1)
        data = bytes(range(256)) * (12 * MIB // 256)  # past one 8 MiB part: multipart
        async with httpx.AsyncClient(timeout=60) as http:
            asset = (
                await http.put(
                    f"{url}/v1/assets",
                    json={"name": "app.apk"},
                    headers={"Authorization": f"Bearer {key}"},
                )
            ).json()
            assert asset["signedUploadUrl"].startswith(f"{url}/blobs/")
            uploaded = await http.put(
                asset["signedUploadUrl"],
                content=data,
                headers={"Content-Type": "application/octet-stream"},
            )
            assert uploaded.status_code == 200, uploaded.text
            assert uploaded.json()["md5"] == hashlib.md5(data).hexdigest()
            assert asset["signedDownloadUrl"].startswith(f"{url}/blobs/")
            downloaded = await http.get(asset["signedDownloadUrl"])
            assert downloaded.status_code == 200
            assert downloaded.content == data
            listed = (
                await http.get(
                    f"{url}/v1/assets/{asset['id']}",
                    params={"includeDownloadUrl": "true"},
                    headers={"Authorization": f"Bearer {key}"},
                )
            ).json()
            # not presign_direct: still devyard's URL, whose bytes devyard proxies
            assert listed["signedDownloadUrl"].startswith(f"{url}/blobs/")
        objects = s3_server.client.list_objects_v2(Bucket=s3_server.bucket, Prefix="e2e/")
        [stored] = objects["Contents"]
        assert stored["Key"].startswith(f"e2e/blobs/{asset['id']}.")
        assert stored["Size"] == len(data)
        assert not any((data_dir / "blobs").glob("*"))
    finally:
        with trio.fail_after(30):
            await server.stop(signal.SIGINT)
