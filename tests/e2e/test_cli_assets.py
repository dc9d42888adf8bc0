"""``devyard asset push|pull|list|delete``: the real CLI as a subprocess against a real server."""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path

import attrs
import pytest
import trio

from devyard.server.api.app import api_state
from devyard.server.api.serve import BoundServer, serve_api
from devyard.server.bootstrap import bootstrap_organization
from devyard.server.config import ListenAddress, ServerConfig
from devyard.server.store import open_store

from ._cli import clean_env, run

pytestmark = pytest.mark.slow


@attrs.frozen
class Server:
    url: str
    key: str = attrs.field(repr=False)
    data_dir: Path


@pytest.fixture
async def server(nursery: trio.Nursery, tmp_path: Path) -> AsyncIterator[Server]:
    data_dir = tmp_path / "data"
    config = ServerConfig(data_dir=data_dir, listen=ListenAddress("127.0.0.1", 0))
    async with open_store(str(tmp_path / "store.db")) as store:
        boot = await bootstrap_organization(store, org_name="acme", user_name="alice")
        shutdown = trio.Event()
        bound: BoundServer = await nursery.start(
            partial(serve_api, api_state(store, config), shutdown_trigger=shutdown.wait)
        )
        yield Server(url=bound.base_url, key=boot.plaintext_key, data_dir=data_dir)
        shutdown.set()


def _blob_count(server: Server) -> int:
    return sum(1 for p in (server.data_dir / "blobs").iterdir() if p.is_file())


async def test_push_uploads_only_when_the_md5_differs_then_pull_list_delete(
    server: Server, tmp_path: Path
) -> None:
    env = clean_env(DEVYARD_BASE_URL=server.url, DEVYARD_API_KEY=server.key)
    work = tmp_path / "work"
    work.mkdir()
    app = work / "app.apk"
    app.write_bytes(b"first version " * 300_000)  # ~4 MiB: several chunks

    with trio.fail_after(120):
        first = await run(["asset", "push", str(app), "--os", "android", "--json"], env, work)
        assert first.returncode == 0, first.stderr
        pushed = json.loads(first.stdout)
        assert pushed["name"] == "app.apk" and pushed["os"] == "android"
        assert pushed["md5"] == hashlib.md5(app.read_bytes()).hexdigest()
        assert b"uploading app.apk" in first.stderr

        same = await run(["asset", "push", str(app)], env, work)
        assert same.returncode == 0, same.stderr
        assert b"up to date" in same.stderr and b"uploading" not in same.stderr

        app.write_bytes(b"second version")
        changed = await run(["asset", "push", str(app), "--name", "app.apk", "--json"], env, work)
        assert changed.returncode == 0, changed.stderr
        assert json.loads(changed.stdout)["md5"] == hashlib.md5(b"second version").hexdigest()
        assert b"uploading" in changed.stderr
        assert _blob_count(server) == 1

        other = work / "other.ipa"
        other.write_bytes(b"ipa")
        assert (
            await run(["asset", "push", str(other), "--name", "zz.ipa"], env, work)
        ).returncode == 0

        listed = await run(["asset", "list"], env, work)
        rows = [line.split() for line in listed.stdout.decode().splitlines()]
        assert rows[0][:3] == ["NAME", "ID", "OS"]
        assert [r[0] for r in rows[1:]] == ["app.apk", "zz.ipa"]
        prefixed = await run(["asset", "list", "--prefix", "zz", "--json"], env, work)
        assert [a["name"] for a in json.loads(prefixed.stdout)] == ["zz.ipa"]

        out = tmp_path / "pulled.apk"
        pulled = await run(["asset", "pull", "app.apk", "-o", str(out)], env, work)
        assert pulled.returncode == 0, pulled.stderr
        assert out.read_bytes() == b"second version"
        by_id = await run(["asset", "pull", pushed["id"], "-o", str(out)], env, work)
        assert by_id.returncode == 0, by_id.stderr

        deleted = await run(["asset", "delete", "app.apk"], env, work)
        assert deleted.returncode == 0, deleted.stderr
        missing = await run(["asset", "pull", "app.apk", "-o", str(out)], env, work)
        assert missing.returncode == 3  # not found (docs/cli.md exit codes)
        assert b"no asset named 'app.apk'" in missing.stderr
        unreadable = await run(["asset", "push", str(work / "nope")], env, work)
        assert unreadable.returncode == 1 and b"cannot read" in unreadable.stderr
    assert _blob_count(server) == 1  # zz.ipa
