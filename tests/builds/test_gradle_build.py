"""A real Gradle build on a Gradle instance: `devyard up`, a host with the ``gradle`` driver,
Debian's Gradle and JDK in the bubblewrap sandbox. The one real Gradle run of the suite (it is
slow on two cores); the protocol tests use ``run``. Also through this stack: the second build
reuses the instance's warm Gradle daemon, which dies with the instance; the organization's
build cache at the documented URL (``{apiUrl}/cache/``, HTTP Basic as Gradle sends it) is
not readable from another organization's instance; the instance's blob pins go with it.
The server's organization build cache: the first build's entries reach it, the host's copies
are wiped, and the clean build still gets ``FROM-CACHE`` (from the server); a customer's CI
reads and writes ``{server}/v1/build_cache/{key}`` with an API key, and the instance's
``{apiUrl}/cache/{key}`` reads through to it.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import httpx
import pytest
import trio

from tests.e2e._cli import clean_env, run
from tests.polling import eventually

from ._stack import (
    REGION,
    Stack,
    exec_id_of,
    gradle_stack,
    instance_client,
    jar_classes,
    read_events,
    sync_tree,
    write_java_project,
)

_KEY = re.compile(r"[0-9a-f]{16,128}")


def _local_entries(stack: Stack, org_id: str) -> dict[str, Path]:
    """The host's copy of the organization's build cache (Gradle's local directory cache)."""
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


# Reading the first events and leaving the stream abandons httpcore's body iterator to the GC:
# its ResourceWarning is expected here (as in tests/server/gateway/test_streams.py).
@pytest.mark.filterwarnings("ignore::ResourceWarning")
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
async def test_sync_build_stream_and_collect_the_jar(tmp_path: Path) -> None:
    project = tmp_path / "project"
    write_java_project(project)
    (project / "build").mkdir()
    (project / "build" / "stale.txt").write_text("a local build output: never synced")
    async with gradle_stack(tmp_path) as stack, stack.api() as http:
        instance = await stack.create_gradle(http)
        instance_id = instance["metadata"]["id"]
        async with instance_client(instance) as api:
            synced = await sync_tree(api, project)
            assert synced["ok"] is True, synced
            assert "needFull" not in synced

            listing = exec_id_of(
                await api.post("exec", json={"command": "run", "commandLine": "find . | sort"})
            )
            _, events, _ = await read_events(api, listing)
            seen = {e.data for e in events if e.type == "stdout"}
            assert "./app/src/main/java/demo/app/Main.java" in seen
            assert "./local.properties" not in seen, "local.properties is never synced"
            assert "./build/stale.txt" not in seen, "build/ is never synced"

            upload = {"assetName": "demo-app.jar", "path": "app/build/libs/app.jar"}
            started = await api.post(
                "exec", json={"command": "gradlebuild", "tasks": ["build"], "upload": upload}
            )
            build = exec_id_of(started)
            live = False
            with trio.fail_after(240):
                # the first output line arrives while the build still runs: it streams live
                _, first, _ = await read_events(api, build, stop_after=2)
                assert first[0].type == "command", first
                assert first[1].type in ("stdout", "stderr"), first
                live = (await api.get(f"exec/{build}")).json()["status"] == "RUNNING"
                _, events, retries = await read_events(api, build)
            assert live, "output streamed before the build ended"
            assert retries, "the stream carries a retry: hint"
            assert [e.id for e in events] == list(range(1, len(events) + 1))
            kinds = [e.type for e in events]
            assert kinds.count("exitCode") == 1 and kinds[-1] == "exitCode"
            out = "\n".join(e.data for e in events if e.type in ("stdout", "stderr"))
            assert events[-1].data == "0", out
            assert "BUILD SUCCESSFUL" in out
            assert "Starting a Gradle Daemon" in out, "the instance's first build starts it"
            tasks = [json.loads(e.data)["task"] for e in events if e.type == "progress"]
            assert ":app:compileJava" in tasks and ":lib:jar" in tasks, tasks
            artifacts = [json.loads(e.data) for e in events if e.type == "artifact"]
            paths = sorted(a["path"] for a in artifacts)
            assert paths == ["app/build/libs/app.jar", "lib/build/libs/lib.jar"], artifacts

            jar = await api.get(f"exec/{build}/artifacts/app/build/libs/app.jar")
            assert jar.status_code == 200
            assert jar_classes(jar.content) == ["demo/app/Main.class"]
            status = (await api.get(f"exec/{build}")).json()
            assert status["status"] == "SUCCEEDED" and status["exitCode"] == 0
            log = (await api.get(f"exec/{build}/log")).text
            assert "BUILD SUCCESSFUL" in log

            owned = exec_id_of(
                await api.post(
                    "exec", json={"command": "run", "commandLine": "id -u; stat -c %U app/build"}
                )
            )
            _, events, _ = await read_events(api, owned)
            printed = [e.data for e in events if e.type == "stdout"]
            assert printed[0] != "0", "the build runs as an unprivileged user"

            # the build's cache entries reached the server's organization cache; the host loses
            # its copies, so the clean build below takes them from the server (two tiers)
            org_id = (await http.get("/whoami")).json()["organization"]["id"]
            entries = _local_entries(stack, org_id)
            assert entries, "the build stored its outputs in the organization's local cache"
            await _on_server(http, sorted(entries))
            some_key, some_path = min(entries.items())
            served = await http.get(f"/v1/build_cache/{some_key}")
            assert served.status_code == 200 and served.content == some_path.read_bytes()
            gradle_type = "application/vnd.gradle.build-cache-artifact.v1"
            assert served.headers["content-type"] == gradle_type
            for path in entries.values():
                path.unlink()

            # a clean build takes the compiled classes from the organization's build cache
            clean = exec_id_of(
                await api.post("exec", json={"command": "gradlebuild", "tasks": ["clean", "build"]})
            )
            with trio.fail_after(240):
                _, events, _ = await read_events(api, clean)
            assert events[-1].data == "0", [e.data for e in events]
            out = "\n".join(e.data for e in events if e.type in ("stdout", "stderr"))
            assert "Starting a Gradle Daemon" not in out, "the warm daemon builds again"
            daemons = _descendants(stack.hostd.process.pid, "GradleDaemon")
            assert len(daemons) == 1, daemons
            outcomes = {
                json.loads(e.data)["task"]: json.loads(e.data)["outcome"]
                for e in events
                if e.type == "progress"
            }
            assert outcomes[":lib:compileJava"] == "FROM-CACHE", outcomes
            assert outcomes[":app:compileJava"] == "FROM-CACHE", outcomes

            # a customer's CI, with an API key (Basic as Gradle sends it); the instance's own
            # cache URL reads through to the server's on a local miss
            ci_key, ci_entry = "feedc0de" * 5, os.urandom(4096)
            ci = httpx.BasicAuth("ci", stack.key)
            async with httpx.AsyncClient(base_url=stack.url, timeout=30) as customer:
                put = await customer.put(f"/v1/build_cache/{ci_key}", content=ci_entry, auth=ci)
                assert put.status_code == 200, put.text
                got = await customer.get(f"/v1/build_cache/{ci_key}", auth=ci)
                assert got.status_code == 200 and got.content == ci_entry
                missing = await customer.get(f"/v1/build_cache/{'0' * 40}", auth=ci)
                assert missing.status_code == 404
                assert (await customer.get(f"/v1/build_cache/{ci_key}")).status_code == 401
            assert ci_key not in _local_entries(stack, org_id)
            through = await api.get(f"cache/{ci_key}")
            assert through.status_code == 200 and through.content == ci_entry
            assert ci_key in _local_entries(stack, org_id), "kept on the host"

            # the documented cache URL, as Gradle's HttpBuildCache calls it (Basic)
            key, entry_bytes = "0123456789abcdef" * 2, b"an entry of the organization"
            basic = httpx.BasicAuth("devyard", instance["status"]["token"])
            cache_url = instance["status"]["apiUrl"] + f"/cache/{key}"
            async with httpx.AsyncClient(timeout=30) as gradle_client:
                put = await gradle_client.put(cache_url, content=entry_bytes, auth=basic)
                assert put.status_code == 200, put.text
                got = await gradle_client.get(cache_url, auth=basic)
                assert got.content == entry_bytes
            await _other_organization_misses(stack, tmp_path, key)

        logs_path = f"/v1/gradle_instances/{instance_id}/build_logs"
        with trio.fail_after(30):  # the host reports each exec when it ends
            while True:
                if len((await http.get(logs_path)).json()) >= 4:
                    break
                await trio.sleep(0.1)
        # an artifact not uploaded as an asset has a signed URL while the instance lives
        listed = {e["id"]: e for e in (await http.get(logs_path)).json()}[build]
        [lib] = [a for a in listed["artifacts"] if a["path"] == "lib/build/libs/lib.jar"]
        signed = lib["downloadUrl"]
        async with httpx.AsyncClient(timeout=30) as anonymous:  # the signature is the credential
            got = await anonymous.get(signed)
            assert got.status_code == 200, got.text
            assert jar_classes(got.content) == ["demo/lib/Greeting.class"]
            tampered = await anonymous.get(signed.replace("signature=", "signature=0"))
            assert tampered.status_code == 401, tampered.text
            elsewhere = signed.replace("lib/build/libs/lib.jar", "app/build/libs/app.jar")
            assert (await anonymous.get(elsewhere)).status_code == 401, "one path per signature"
            assert (await anonymous.delete(signed)).status_code == 405
            unsigned = await anonymous.get(signed.partition("?")[0])
            assert unsigned.status_code == 401
        # the jar became the organization's asset, and an Android instance installs it
        query = {"nameFilter": "demo-app.jar", "includeDownloadUrl": "true"}
        with trio.fail_after(30):  # reported after the exec's log
            while True:
                found = (await http.get("/v1/assets", params=query)).json()
                if found:
                    break
                await trio.sleep(0.1)
        [asset] = found
        assert asset["size"] == len(jar.content), asset
        async with httpx.AsyncClient(timeout=30) as anonymous:
            copy = await anonymous.get(asset["signedDownloadUrl"])
        assert copy.content == jar.content
        android = await http.post(
            "/v1/android_instances",
            params={"wait": "true"},
            json={
                "spec": {
                    "initialAssets": [
                        {"kind": "App", "source": "AssetName", "assetName": "demo-app.jar"}
                    ]
                }
            },
        )
        assert android.status_code == 200, android.text
        status = android.json()["status"]
        device = {"Authorization": f"Bearer {status['token']}"}
        apps = (await http.get(f"{status['apiUrl']}/apps", headers=device)).json()["items"]
        assert "demo.app" in [a["id"] for a in apps], apps

        [pins] = (stack.host_data / "build-blobs").glob("*/pins")
        assert len(list(pins.iterdir())) == 1, "the instance pins the blobs of its tree"
        assert (await http.delete(f"/v1/gradle_instances/{instance_id}")).status_code == 200
        sandbox = stack.host_data / "instances" / instance_id
        await eventually(lambda: not sandbox.exists(), 30)
        assert not list(pins.iterdir()), "a deleted instance pins nothing"
        # its warm daemon is gone with it
        await eventually(lambda: not any(os.path.exists(f"/proc/{p}") for p in daemons), 10)

        # the build logs outlive the instance
        logs = (await http.get(logs_path)).json()
        assert [entry["id"] for entry in logs] == [listing, build, owned, clean]
        entry = logs[1]
        assert entry["status"] == "SUCCEEDED" and entry["exitCode"] == 0, entry
        assert entry["command"] == "gradlebuild" and entry["buildDurationMs"] > 0
        assert entry["startedAt"] <= entry["finishedAt"]
        assert sorted(a["path"] for a in entry["artifacts"]) == paths
        [noted] = [a for a in entry["artifacts"] if a["path"] == "app/build/libs/app.jar"]
        assert noted["assetName"] == "demo-app.jar" and noted["assetId"] == asset["id"]
        assert not [a for a in entry["artifacts"] if "downloadUrl" in a], "gone with the instance"
        async with httpx.AsyncClient(timeout=30) as anonymous:
            assert (await anonymous.get(signed)).status_code == 410  # its signed URL too
        async with httpx.AsyncClient(timeout=30) as anonymous:  # the signature is the credential
            text = await anonymous.get(entry["downloadUrl"])
            assert text.status_code == 200, text.text
            assert text.headers["content-type"].startswith("text/plain")
            assert "BUILD SUCCESSFUL" in text.text and text.text == log
            forged = await anonymous.get(entry["downloadUrl"].replace("sig=", "sig=0"))
            assert forged.status_code == 403
            other = await anonymous.get(entry["downloadUrl"].replace(build, listing))
            assert other.status_code == 403, "a signature opens one log only"
        assert (
            await http.get("/v1/xcode_instances/" + instance_id + "/build_logs")
        ).status_code == 404
        homes = list((stack.host_data / "gradle-homes").iterdir())
        # one Gradle user home per organization (this one's and beta's), kept after the instances
        assert len(homes) == 2, homes


def _descendants(root: int, marker: str) -> set[int]:
    """The PIDs of *root*'s descendants whose command line holds *marker* (host /proc)."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as handle:
                    parents[int(entry)] = int(handle.read().rsplit(b")", 1)[1].split()[1])
            except (OSError, IndexError):
                continue
    found, todo = set(), [root]
    while todo:
        pid = todo.pop()
        for child in [c for c, parent in parents.items() if parent == pid]:
            todo.append(child)
            try:
                with open(f"/proc/{child}/cmdline", "rb") as handle:
                    if marker.encode() in handle.read():
                        found.add(child)
            except OSError:
                continue
    return found


async def _other_organization_misses(stack: Stack, tmp_path: Path, key: str) -> None:
    """An instance of another organization on the same host: the entry is not its."""
    made = await run(
        ["admin", "bootstrap", "--data-dir", str(stack.data), "--org", "beta"],
        clean_env(),
        tmp_path,
    )
    assert made.returncode == 0, made.stderr
    beta_key = made.stdout.decode().splitlines()[-1]
    headers = {"Authorization": f"Bearer {beta_key}"}
    async with httpx.AsyncClient(base_url=stack.url, headers=headers, timeout=120) as beta:
        created = await beta.post(
            "/v1/gradle_instances", params={"wait": "true"}, json={"spec": {"region": REGION}}
        )
        assert created.status_code == 200, created.text
        other = created.json()
        basic = httpx.BasicAuth("devyard", other["status"]["token"])
        async with httpx.AsyncClient(timeout=30) as gradle_client:
            miss = await gradle_client.get(other["status"]["apiUrl"] + f"/cache/{key}", auth=basic)
        assert miss.status_code == 404, miss.text
        deleted = await beta.delete(f"/v1/gradle_instances/{other['metadata']['id']}")
        assert deleted.status_code == 200
