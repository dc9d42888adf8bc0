"""The server's organization build cache through `devyard up` and a real Gradle host
(docs/builds.md, "Gradle's build cache"): the entries a build wrote reach the server, a build
on the same host after its local cache was wiped gets ``FROM-CACHE`` from it, and a customer's
CI reads and writes ``{server}/v1/build_cache/{key}`` with an API key (Basic, as Gradle sends
it, and Bearer), the instance's ``{apiUrl}/cache/{key}`` reading through to it.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import httpx
import pytest
import trio

from ._stack import (
    Stack,
    exec_id_of,
    gradle_stack,
    instance_client,
    read_events,
    sync_tree,
    write_java_project,
)

_KEY = re.compile(r"[0-9a-f]{16,128}")


def _local_entries(stack: Stack, org_id: str) -> dict[str, Path]:
    directory = stack.host_data / "gradle-homes" / org_id / "caches" / "build-cache-1"
    if not directory.is_dir():
        return {}
    return {p.name: p for p in directory.iterdir() if _KEY.fullmatch(p.name) and p.is_file()}


async def _on_server(http: httpx.AsyncClient, keys: list[str], seconds: float = 60) -> None:
    """Wait until the server has every key (the host pushes them after the build)."""
    with trio.fail_after(seconds):
        while True:
            codes = [(await http.head(f"/v1/build_cache/{k}")).status_code for k in keys]
            if all(code == 200 for code in codes):
                return
            await trio.sleep(0.2)  # polling by design: the push runs in the host's background


async def _build(api: httpx.AsyncClient, tasks: list[str]) -> dict[str, str]:
    build = exec_id_of(await api.post("exec", json={"command": "gradlebuild", "tasks": tasks}))
    with trio.fail_after(240):
        _, events, _ = await read_events(api, build)
    assert events[-1].data == "0", [e.data for e in events]
    progress = [json.loads(e.data) for e in events if e.type == "progress"]
    return {p["task"]: p["outcome"] for p in progress if "outcome" in p}


@pytest.mark.filterwarnings("ignore::ResourceWarning")
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
async def test_a_wiped_host_cache_hits_the_servers(tmp_path: Path) -> None:
    project = tmp_path / "project"
    write_java_project(project)
    async with gradle_stack(tmp_path) as stack, stack.api() as http:
        instance = await stack.create_gradle(http)
        org_id = (await http.get("/whoami")).json()["organization"]["id"]
        async with instance_client(instance) as api:
            assert (await sync_tree(api, project))["ok"] is True
            first = await _build(api, ["build"])
            assert first[":lib:compileJava"] != "FROM-CACHE", first

            entries = _local_entries(stack, org_id)
            assert entries, "the build stored its outputs in the organization's local cache"
            await _on_server(http, sorted(entries))
            some_key, some_path = next(iter(sorted(entries.items())))
            served = await http.get(f"/v1/build_cache/{some_key}")
            assert served.status_code == 200
            assert (
                served.headers["content-type"] == "application/vnd.gradle.build-cache-artifact.v1"
            )
            assert served.content == some_path.read_bytes()

            for path in entries.values():  # the host's disk loses its cache
                path.unlink()
            assert not _local_entries(stack, org_id)
            again = await _build(api, ["clean", "build"])
            assert again[":lib:compileJava"] == "FROM-CACHE", again
            assert again[":app:compileJava"] == "FROM-CACHE", again

            # a customer's CI, with an API key: Basic as Gradle sends it, and Bearer
            key, entry = "feedc0de" * 5, os.urandom(4096)
            ci = httpx.BasicAuth("ci", stack.key)
            async with httpx.AsyncClient(base_url=stack.url, timeout=30) as customer:
                put = await customer.put(f"/v1/build_cache/{key}", content=entry, auth=ci)
                assert put.status_code == 200, put.text
                got = await customer.get(f"/v1/build_cache/{key}", auth=ci)
                assert got.status_code == 200 and got.content == entry
                missing = await customer.get(f"/v1/build_cache/{'0' * 40}", auth=ci)
                assert missing.status_code == 404
                refused = await customer.get(f"/v1/build_cache/{key}")
                assert refused.status_code == 401
            # the instance's own cache URL reads through to the server's on a local miss
            assert key not in _local_entries(stack, org_id)
            through = await api.get(f"cache/{key}")
            assert through.status_code == 200 and through.content == entry
            assert key in _local_entries(stack, org_id), "kept on the host"
