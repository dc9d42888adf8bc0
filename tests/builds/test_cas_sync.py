"""The content-addressed sync mode (``/sync/missing``, ``PUT /blobs/{sha256}``,
``/sync/commit``) and the build cache endpoint (``GET/PUT /cache/{key}``): two `BuildHost`s
of one organization in this process (the driver's layout: one blob store for both), each
request through the build API's HTTP boundary (`serve_build_api` on the ``api`` stream's
framing), builds in the real sandbox. The edge's forwarding of these routes is the same as
``/sync``'s (tests/builds/test_sync_protocol.py)."""

from __future__ import annotations

import gzip
import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

from devyard.core import receive_message
from devyard.hostd.builds import BuildHost, serve_build_api
from devyard.hostd.drivers.base import DeviceSpec, Platform
from devyard.hostd.drivers.gradle import GradleConfig

from ._stack import tree_manifest


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@attrs.frozen
class _Response:
    status_code: int
    content: bytes

    @property
    def text(self) -> str:
        return self.content.decode(errors="replace")

    def json(self) -> Any:
        return json.loads(self.content)


@attrs.frozen
class _Api:
    """One request per ``api`` stream, as the edge opens it."""

    host: BuildHost
    nursery: trio.Nursery

    async def _call(
        self, method: str, path: str, content: bytes, headers: dict[str, str]
    ) -> _Response:
        ours, theirs = trio.socket.socketpair()
        client, server = trio.SocketStream(ours), trio.SocketStream(theirs)
        request = {
            "method": method,
            "path": path,
            "headers": {k.lower(): v for k, v in headers.items()},
        }
        self.nursery.start_soon(serve_build_api, server, self.host, request)
        async with client:
            with trio.fail_after(30):
                await client.send_all(content)
                await client.send_eof()
                head = await receive_message(client)
                body = b""
                while chunk := await client.receive_some(65536):
                    body += chunk
        return _Response(int(head["status"]), body)

    async def post(self, path: str, json: object) -> _Response:
        return await self._call("POST", path, _dumps(json), {})

    async def put(
        self, path: str, content: bytes, headers: dict[str, str] | None = None
    ) -> _Response:
        return await self._call("PUT", path, content, headers or {})

    async def get(self, path: str) -> _Response:
        return await self._call("GET", path, b"", {})


def _dumps(value: object) -> bytes:
    return json.dumps(value).encode()


def _project(root: Path) -> None:
    files = {
        "settings.gradle": b"rootProject.name = 'cas'\n",
        "src/main/java/Cas.java": b"class Cas {}\n" * 50,
        "src/main/java/Same.java": b"class Cas {}\n" * 50,  # the same bytes: one blob
        "docs/readme.txt": b"read me\n",
        ".gitignore": b"out/\n*.tmp\n",
        "out/generated.txt": b"ignored by .gitignore\n",
        "notes.tmp": b"ignored by .gitignore\n",
        "build/old.class": b"never synced\n",
        ".gradle/state.bin": b"never synced\n",
        "local.properties": b"sdk.dir=/nowhere\n",
    }
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    (root / "docs/link.txt").symlink_to("readme.txt")


async def _tree(host: BuildHost) -> dict[str, str]:
    root = host.workspace.root

    def walk() -> dict[str, str]:
        tree = {}
        for path in root.rglob("*"):
            rel = path.relative_to(root).as_posix()
            if path.is_symlink():
                tree[rel] = f"-> {path.readlink()}"
            elif path.is_file():
                tree[rel] = sha(path.read_bytes())
        return tree

    return await trio.to_thread.run_sync(walk)


async def run_line(host: BuildHost, line: str) -> tuple[str, list[str]]:
    run = host.start({"command": "run", "commandLine": line})
    with trio.fail_after(60):
        await run.done.wait()
    return run.events[-1].data, [e.data for e in run.events if e.type == "stdout"]


async def _missing(api: _Api, files: list[dict[str, Any]]) -> dict[str, Any]:
    answer = await api.post("sync/missing", json={"files": files})
    assert answer.status_code == 200, answer.text
    found = dict(answer.json())
    assert len(found.pop("manifestId")) == 64
    return found


async def test_missing_upload_commit_dedup_and_the_build_cache(tmp_path: Path) -> None:
    project = tmp_path / "project"
    _project(project)
    files, contents = tree_manifest(project)
    by_sha = {sha(data): data for data in contents.values()}
    wanted = {
        "settings.gradle",
        "src/main/java/Cas.java",
        "src/main/java/Same.java",
        "docs/readme.txt",
        ".gitignore",
    }
    if shutil.which("bwrap") is None:
        pytest.skip("scripts/deps installs bubblewrap")
    host_data = tmp_path / "host-data"
    async with trio.open_nursery() as nursery:
        first, second = [
            BuildHost(host_data / "instances" / name / "build", config, nursery)
            for name, config in (
                (
                    name,
                    GradleConfig().build_config(
                        DeviceSpec(
                            Platform.GRADLE,
                            name,
                            host_data / "instances" / name,
                            organization_id="org-1",
                        )
                    ),
                )
                for name in ("inst-1", "inst-2")
            )
        ]
        for host in (first, second):
            await trio.to_thread.run_sync(host.create)
        api = _Api(first, nursery)
        # the .gitignore's blob first: what it ignores is not asked for
        asked = await _missing(api, files)
        assert asked == {"missing": [sha(b"out/\n*.tmp\n")], "complete": False}
        put = await api.put(f"blobs/{asked['missing'][0]}", content=b"out/\n*.tmp\n")
        assert put.status_code == 200 and put.json()["stored"] is True, put.text
        asked = await _missing(api, files)
        expected = sorted({sha(contents[p]) for p in wanted - {".gitignore"}})
        assert asked == {"missing": expected, "complete": True}
        assert len(expected) == 3, "two files with the same bytes are one blob"

        # refusals: nothing stored, nothing written
        lie = await api.put(f"blobs/{expected[0]}", content=b"other bytes")
        assert lie.status_code == 400 and lie.json()["reason"] == "bad_request"
        assert (await api.put("blobs/not-a-sha", content=b"x")).status_code == 400
        early = await api.post("sync/commit", json={"files": files})
        assert early.status_code == 200, early.text
        assert early.json()["ok"] is False and early.json()["missing"] == expected
        for bad in ("../escape.txt", "/etc/escape.txt", "a/../../b", "a//b"):
            entry = {"path": bad, "size": 1, "sha256": sha(b"x")}
            for route in ("sync/missing", "sync/commit"):
                refused = await api.post(route, json={"files": [*files, entry]})
                assert refused.status_code == 400, (bad, route, refused.text)
        link = {"path": "out-link", "size": 4, "sha256": sha(b"../x"), "link": "../x"}
        refused = await api.post("sync/commit", json={"files": [*files, link]})
        assert refused.status_code == 400 and "outside the root" in refused.json()["message"]
        assert await _tree(first) == {}, "refused commits write nothing"

        # upload what is missing (one gzip-encoded), then commit
        for number, digest in enumerate(expected):
            data, headers = by_sha[digest], {}
            if number == 0:
                data, headers = gzip.compress(data), {"Content-Encoding": "gzip"}
            stored = await api.put(f"blobs/{digest}", content=data, headers=headers)
            assert stored.status_code == 200, stored.text
        assert await _missing(api, files) == {"missing": [], "complete": True}
        committed = await api.post("sync/commit", json={"files": files})
        assert committed.json()["ok"] is True, committed.text
        tree = await _tree(first)
        expected_tree = {p: sha(contents[p]) for p in wanted} | {"docs/link.txt": "-> readme.txt"}
        assert tree == expected_tree

        # one file changed: exactly its blob is missing; a deleted file goes
        changed = [
            {**f, "sha256": sha(b"changed"), "size": 7} if f["path"] == "docs/readme.txt" else f
            for f in files
            if f["path"] != "settings.gradle"
        ]
        assert await _missing(api, changed) == {
            "missing": [sha(b"changed")],
            "complete": True,
        }
        assert (await api.put(f"blobs/{sha(b'changed')}", content=b"changed")).status_code == 200
        assert (await api.post("sync/commit", json={"files": changed})).json()["ok"] is True
        tree = await _tree(first)
        assert "settings.gradle" not in tree and tree["docs/readme.txt"] == sha(b"changed")

        # the build cache: Gradle's GET/PUT /cache/{key}, in the organization's Gradle home
        key = "0123456789abcdef0123456789abcdef"
        assert (await api.get(f"cache/{key}")).status_code == 404
        assert (await api.put(f"cache/{key}", content=b"entry bytes")).status_code == 200
        hit = await api.get(f"cache/{key}")
        assert hit.status_code == 200 and hit.content == b"entry bytes"
        assert (await api.get("cache/../../etc")).status_code in (400, 404)
        assert (await api.put("cache/NOT-HEX", content=b"x")).status_code == 400
        code, out = await run_line(first, f"cat /gradle-home/caches/build-cache-1/{key}")
        assert (code, out) == ("0", ["entry bytes"]), "the builds' local cache directory"

        api = _Api(second, nursery)
        # a second instance of the organization: the same tree uploads nothing
        lookup = await api.post("sync/missing", json={"files": files})
        assert lookup.json()["missing"] == [] and lookup.json()["complete"] is True
        unknown = await api.post("sync/commit", json={"manifestId": "0" * 64})
        assert unknown.status_code == 404, unknown.text
        manifest_id = lookup.json()["manifestId"]  # the commit names the manifest
        committed = await api.post("sync/commit", json={"manifestId": manifest_id})
        assert committed.json()["ok"] is True, committed.text
        assert await _tree(second) == expected_tree
        assert (await api.get(f"cache/{key}")).content == b"entry bytes"

        # a build that swaps the cache directory for a link: refused, never followed
        cache_dir = "/gradle-home/caches/build-cache-1"
        swap = f"rm -rf {cache_dir} && ln -s /tmp {cache_dir}"
        assert (await run_line(second, swap))[0] == "0"
        other = "fedcba9876543210fedcba9876543210"
        refused = await api.put(f"cache/{other}", content=b"through a link")
        assert refused.status_code == 409, refused.text
        assert (await api.get(f"cache/{key}")).status_code == 409
        assert (await run_line(second, "rm /gradle-home/caches/build-cache-1"))[0] == "0"
        nursery.cancel_scope.cancel()
    # the host's /tmp is where the link pointed
    assert not await trio.Path("/tmp", other).exists()
    assert not list(host_data.rglob(other))
