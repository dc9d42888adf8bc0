"""The content-addressed sync mode (``/sync/missing``, ``PUT /blobs/{sha256}``,
``/sync/commit``) and the build cache endpoint (``GET/PUT /cache/{key}``), against two Gradle
instances of one organization on a gradle host of `devyard up`."""

from __future__ import annotations

import gzip
import hashlib
from pathlib import Path
from typing import Any

import httpx

from ._stack import gradle_stack, instance_client, run_line, tree_manifest, workspace_tree


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


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


async def _missing(api: httpx.AsyncClient, files: list[dict[str, Any]]) -> dict[str, Any]:
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
    async with gradle_stack(tmp_path) as stack, stack.api() as http:
        first, second = await stack.create_gradle(http), await stack.create_gradle(http)
        async with instance_client(first) as api:
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
            assert await workspace_tree(api) == {}, "refused commits write nothing"

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
            tree = await workspace_tree(api)
            expected_tree = {p: sha(contents[p]) for p in wanted} | {
                "docs/link.txt": "-> readme.txt"
            }
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
            assert (
                await api.put(f"blobs/{sha(b'changed')}", content=b"changed")
            ).status_code == 200
            assert (await api.post("sync/commit", json={"files": changed})).json()["ok"] is True
            tree = await workspace_tree(api)
            assert "settings.gradle" not in tree and tree["docs/readme.txt"] == sha(b"changed")

            # the build cache: Gradle's GET/PUT /cache/{key}, in the organization's Gradle home
            key = "0123456789abcdef0123456789abcdef"
            assert (await api.get(f"cache/{key}")).status_code == 404
            assert (await api.put(f"cache/{key}", content=b"entry bytes")).status_code == 200
            hit = await api.get(f"cache/{key}")
            assert hit.status_code == 200 and hit.content == b"entry bytes"
            assert (await api.get("cache/../../etc")).status_code in (400, 404)
            assert (await api.put("cache/NOT-HEX", content=b"x")).status_code == 400
            code, out = await run_line(api, f"cat /gradle-home/caches/build-cache-1/{key}")
            assert (code, out) == ("0", ["entry bytes"]), "the builds' local cache directory"

        async with instance_client(second) as api:
            # a second instance of the organization: the same tree uploads nothing
            lookup = await api.post("sync/missing", json={"files": files})
            assert lookup.json()["missing"] == [] and lookup.json()["complete"] is True
            unknown = await api.post("sync/commit", json={"manifestId": "0" * 64})
            assert unknown.status_code == 404, unknown.text
            manifest_id = lookup.json()["manifestId"]  # the commit names the manifest
            committed = await api.post("sync/commit", json={"manifestId": manifest_id})
            assert committed.json()["ok"] is True, committed.text
            assert await workspace_tree(api) == expected_tree
            assert (await api.get(f"cache/{key}")).content == b"entry bytes"

            # a build that swaps the cache directory for a link: refused, never followed
            cache_dir = "/gradle-home/caches/build-cache-1"
            swap = f"rm -rf {cache_dir} && ln -s /tmp {cache_dir}"
            assert (await run_line(api, swap))[0] == "0"
            other = "fedcba9876543210fedcba9876543210"
            refused = await api.put(f"cache/{other}", content=b"through a link")
            assert refused.status_code == 409, refused.text
            assert (await api.get(f"cache/{key}")).status_code == 409
            assert (await run_line(api, "rm /gradle-home/caches/build-cache-1"))[0] == "0"
        assert not list(stack.host_data.rglob(other))
