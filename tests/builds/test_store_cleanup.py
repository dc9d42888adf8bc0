"""The organizations' stores on a build host over time: the build cache is shared by the
instances of one organization and by no other, bounded in size with the least recently used
entries evicted first; the sync blob store is swept of blobs no live instance refers to (a
blob in a live instance's tree or recent manifest, or equal to a kept artifact, stays; an
unreferenced one goes once its grace is over). `BuildHost`s in this process, each request
through the build API's HTTP boundary (`serve_build_api`), builds in the real sandbox."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import attrs
import pytest
import trio

from devyard.hostd.builds import BuildHost
from devyard.hostd.drivers.base import DeviceSpec, Platform
from devyard.hostd.drivers.gradle import GradleConfig

from .test_cas_sync import _Api, sha

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")

ENTRY = 4096  # one file system block: what an entry of this size costs on disk


@asynccontextmanager
async def _hosts(
    data: Path, *instances: tuple[str, str], cache_max_bytes: int = 1 << 30
) -> AsyncIterator[tuple[trio.Nursery, list[BuildHost]]]:
    """(name, organization) instances on one host's data directory."""
    async with trio.open_nursery() as nursery:
        hosts = []
        for name, org in instances:
            spec = DeviceSpec(Platform.GRADLE, name, data / "instances" / name, organization_id=org)
            config = GradleConfig().build_config(spec)
            config = attrs.evolve(config, cache_max_bytes=cache_max_bytes, blob_grace_s=60)
            host = BuildHost(spec.sandbox_dir / "build", config, nursery)
            await trio.to_thread.run_sync(host.create)
            hosts.append(host)
        yield nursery, hosts
        for host in hosts:
            host.close()


def _age(path: Path, seconds: float) -> None:
    """Make *path* look unused for *seconds* (what the sweep's grace measures)."""
    then = time.time() - seconds
    os.utime(path, (then, then))


async def test_the_build_cache_is_the_organizations_bounded_and_lru(tmp_path: Path) -> None:
    keys = [f"{n:032x}" for n in range(1, 6)]
    instances = (("a", "org-1"), ("b", "org-1"), ("c", "org-2"))
    async with _hosts(tmp_path, *instances, cache_max_bytes=3 * ENTRY) as (nursery, hosts):
        a, b, c = (_Api(h, nursery) for h in hosts)
        assert (await a.put(f"cache/{keys[0]}", b"1" * ENTRY)).status_code == 200
        # another instance of the organization hits; another organization's instance misses
        assert (await b.get(f"cache/{keys[0]}")).content == b"1" * ENTRY
        assert (await c.get(f"cache/{keys[0]}")).status_code == 404
        assert (await c.put(f"cache/{keys[4]}", b"c" * 10)).status_code == 200
        assert (await a.get(f"cache/{keys[4]}")).status_code == 404
        assert (await b.get(f"cache/{keys[4]}")).status_code == 404

        # bounded: three entries fit; the least recently used one goes first
        for key, fill in zip(keys[1:3], b"23", strict=True):
            assert (await a.put(f"cache/{key}", bytes([fill]) * ENTRY)).status_code == 200
        directory = hosts[0].cache.gradle_home / "caches" / "build-cache-1"
        for age, key in zip((300, 200, 100), keys[:3], strict=True):
            _age(directory / key, age)  # stored in the order 0, 1, 2
        assert (await b.get(f"cache/{keys[0]}")).status_code == 200  # 0 used again: now newest
        assert (await a.put(f"cache/{keys[3]}", b"4" * ENTRY)).status_code == 200
        assert (await a.get(f"cache/{keys[1]}")).status_code == 404  # the LRU one went
        for key in (keys[0], keys[2], keys[3]):
            assert (await b.get(f"cache/{key}")).status_code == 200, key
        assert (await c.get(f"cache/{keys[4]}")).status_code == 200  # org-2's own is untouched
        # too large for the whole cache: refused (413), nothing evicted for it
        too_big = await a.put(f"cache/{'f' * 32}", b"x" * (3 * ENTRY + 1))
        assert too_big.status_code == 413, too_big.text
        assert (await b.get(f"cache/{keys[3]}")).status_code == 200

        # the sweep drops entries no build used for a week
        _age(directory / keys[2], 8 * 24 * 3600)
        assert hosts[1].sweep() == (0, 1)
        assert (await a.get(f"cache/{keys[2]}")).status_code == 404
        nursery.cancel_scope.cancel()


async def _sync(api: _Api, tree: dict[str, bytes]) -> None:
    files = [{"path": p, "size": len(d), "sha256": sha(d), "mode": 0o644} for p, d in tree.items()]
    missing = await api.post("sync/missing", json={"files": files})
    assert missing.status_code == 200, missing.text
    by_sha = {sha(d): d for d in tree.values()}
    for digest in missing.json()["missing"]:
        assert (await api.put(f"blobs/{digest}", by_sha[digest])).status_code == 200
    committed = await api.post("sync/commit", json={"manifestId": missing.json()["manifestId"]})
    assert committed.status_code == 200 and committed.json()["ok"] is True, committed.text


async def test_the_sweep_removes_only_blobs_no_live_instance_refers_to(tmp_path: Path) -> None:
    instances = (("a", "org-1"), ("b", "org-1"))
    async with _hosts(tmp_path, *instances) as (nursery, hosts):
        first, second = hosts
        a, b = _Api(first, nursery), _Api(second, nursery)
        shared, only_a, only_b = b"shared\n" * 100, b"only in a\n", b"only in b\n"
        await _sync(a, {"shared.txt": shared, "a.txt": only_a})
        await _sync(b, {"shared.txt": shared, "b.txt": only_b})
        orphan, fresh, artifact = b"uploaded, never synced\n", b"just uploaded\n", b"artifact\n"
        for data in (orphan, fresh, artifact):
            assert (await a.put(f"blobs/{sha(data)}", data)).status_code == 200
        # b keeps an exec whose artifact has the bytes of a blob no tree holds
        run = second.start(
            {
                "command": "run",
                "commandLine": "printf 'artifact\\n' > art.txt",
                "artifacts": ["art.txt"],
            }
        )
        with trio.fail_after(60):
            await run.done.wait()
        assert run.artifacts and run.artifacts[0]["sha256"] == sha(artifact), run.describe()

        store = first.blobs
        blobs = {
            name: store.root / sha(data)[:2] / sha(data)
            for name, data in (
                ("shared", shared),
                ("a", only_a),
                ("b", only_b),
                ("orphan", orphan),
                ("fresh", fresh),
                ("artifact", artifact),
            )
        }
        for name, path in blobs.items():
            if name != "fresh":
                _age(path, 3600)  # past the 60 s grace
        assert first.sweep() == (1, 0)
        assert {n for n, p in blobs.items() if p.exists()} == set(blobs) - {"orphan"}

        # instance a is deleted: what only it referred to goes; b's tree and artifact stay
        first.close()
        assert second.sweep() == (1, 0)
        assert {n for n, p in blobs.items() if p.exists()} == {"shared", "b", "fresh", "artifact"}
        # and b's next sync of the same tree still uploads nothing
        files = [{"path": "shared.txt", "size": len(shared), "sha256": sha(shared)}]
        assert (await b.post("sync/missing", json={"files": files})).json()["missing"] == []
        nursery.cancel_scope.cancel()
