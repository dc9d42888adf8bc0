"""`devyard up` plus a second host running the ``gradle`` driver (region ``builds``), as real
processes, and the client side of a build instance: the SDK's sync framing and an SSE reader.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import re
import shutil
import signal
import struct
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import httpx
import pytest
import trio

from tests.e2e._cli import Running, clean_env, run, start

REGION = "builds"
NEEDS = ("bwrap", "gradle", "java", "xdelta3", "setpriv", "prlimit")


def require_tools() -> None:
    missing = [tool for tool in NEEDS if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"scripts/deps installs what the gradle driver needs: missing {missing}")


@attrs.define
class Stack:
    url: str
    key: str
    data: Path
    host_data: Path
    up: Running
    hostd: Running

    def api(self) -> httpx.AsyncClient:
        headers = {"Authorization": f"Bearer {self.key}"}
        return httpx.AsyncClient(base_url=self.url, headers=headers, timeout=120)

    async def create_gradle(self, http: httpx.AsyncClient, seconds: float = 60) -> dict[str, Any]:
        with trio.fail_after(seconds):
            while True:  # 409 until the gradle host has registered
                created = await http.post(
                    "/v1/gradle_instances",
                    params={"wait": "true"},
                    json={"spec": {"region": REGION}},
                )
                waiting = created.status_code == 409 or (
                    created.status_code < 500 and "unknown_region" in created.text
                )  # the region is known once its host is linked
                if not waiting:
                    break
                await trio.sleep(0.2)
        assert created.status_code == 200, created.text
        body: dict[str, Any] = created.json()
        assert body["status"]["state"] == "ready", body
        return body


@asynccontextmanager
async def gradle_stack(tmp_path: Path) -> AsyncIterator[Stack]:
    require_tools()
    data, host_data = tmp_path / "data", tmp_path / "gradle-host"
    env = clean_env()
    with trio.fail_after(60):
        up = await start(["up", "--data-dir", str(data), "--port", "0"], env, tmp_path)
    try:
        with trio.fail_after(60):
            url = (await up.read_until(r"serving at (http://127\.0\.0\.1:\d+)")).group(1)
            made = await run(["admin", "host-token", "--data-dir", str(data)], env, tmp_path)
        assert made.returncode == 0, made.stderr
        token = made.stdout.decode().strip().splitlines()[-1]
        token_file = tmp_path / "gradle-host-token"
        token_file.write_text(token)
        args = ["hostd", "--server", url, "--token-file", str(token_file), "--region", REGION]
        args += ["--drivers", "gradle", "--data-dir", str(host_data), "--capacity", "2"]
        hostd = await start(args, env, tmp_path)
        try:
            key = (data / "admin-api-key").read_text().strip()
            yield Stack(url, key, data, host_data, up, hostd)
        finally:
            with trio.move_on_after(30, shield=True):
                await hostd.stop(signal.SIGINT)
    finally:
        with trio.move_on_after(30, shield=True):
            await up.stop(signal.SIGINT)


# ---- the build instance's client side ---------------------------------------------------------


def instance_client(instance: Mapping[str, Any]) -> httpx.AsyncClient:
    status = instance["status"]
    headers = {"Authorization": f"Bearer {status['token']}"}
    return httpx.AsyncClient(base_url=status["apiUrl"] + "/", headers=headers, timeout=120)


def tree_manifest(root: Path) -> tuple[list[dict[str, Any]], dict[str, bytes]]:
    """The SDK's ``files`` list of *root* and each file's bytes (links not followed)."""
    files, contents = [], {}
    for path in sorted(p for p in root.rglob("*") if p.is_file() or p.is_symlink()):
        rel = path.relative_to(root).as_posix()
        if path.is_symlink():
            target = os.readlink(path)
            digest = hashlib.sha256(target.encode()).hexdigest()
            files.append({"path": rel, "size": len(target), "sha256": digest, "link": target})
            continue
        data = path.read_bytes()
        contents[rel] = data
        digest = hashlib.sha256(data).hexdigest()
        files.append({"path": rel, "size": len(data), "sha256": digest, "mode": 0o644})
    return files, contents


def sync_body(
    files: list[dict[str, Any]],
    payloads: list[tuple[dict[str, Any], bytes]],
    *,
    encoding: str = "identity",
) -> tuple[bytes, dict[str, str]]:
    """A ``POST /sync`` body as ``folder-sync.ts`` frames it, and its headers."""
    meta = {"id": "sync-test", "rootName": "demo", "files": files}
    meta["payloads"] = [p for p, _ in payloads]
    head = json.dumps(meta).encode()
    raw = struct.pack(">I", len(head)) + head + b"".join(data for _, data in payloads)
    headers = {"Content-Type": "application/octet-stream"}
    if encoding == "gzip":
        raw = gzip.compress(raw)
        headers["Content-Encoding"] = "gzip"
    elif encoding == "zstd":
        import zstandard  # noqa: PLC0415

        raw = zstandard.ZstdCompressor(level=3).compress(raw)
        headers["Content-Encoding"] = "zstd"
    return raw, headers


def full(entry: Mapping[str, Any], data: bytes) -> tuple[dict[str, Any], bytes]:
    payload = {"kind": "full", "path": entry["path"], "targetSha256": entry["sha256"]}
    return {**payload, "length": len(data)}, data


async def sync_tree(client: httpx.AsyncClient, root: Path, *, encoding: str = "zstd") -> Any:
    files, contents = tree_manifest(root)
    payloads = [full(f, contents[f["path"]]) for f in files if "link" not in f]
    body, headers = sync_body(files, payloads, encoding=encoding)
    answer = await client.post("sync", content=body, headers=headers)
    assert answer.status_code == 200, answer.text
    return answer.json()


@attrs.frozen
class SseEvent:
    id: int | None
    type: str
    data: str


async def read_events(
    client: httpx.AsyncClient,
    exec_id: str,
    *,
    last_event_id: int | None = None,
    stop_after: int | None = None,
    comments: list[str] | None = None,
) -> tuple[int, list[SseEvent], list[int]]:
    """(status, events, retry hints) of one connection to the event stream; *stop_after*
    events and the connection is cut."""
    headers = {} if last_event_id is None else {"Last-Event-ID": str(last_event_id)}
    events: list[SseEvent] = []
    retries: list[int] = []
    async with client.stream("GET", f"exec/{exec_id}/events", headers=headers) as response:
        if response.status_code != 200:
            return response.status_code, events, retries
        assert response.headers["content-type"].startswith("text/event-stream")
        fields: dict[str, list[str]] = {}
        async for line in response.aiter_lines():
            if line.startswith(":"):
                if comments is not None:
                    comments.append(line)
                continue
            if line:
                name, _, value = line.partition(":")
                fields.setdefault(name, []).append(value.removeprefix(" "))
                continue
            if "retry" in fields:
                retries.append(int(fields["retry"][0]))
            if "event" in fields:
                event_id = int(fields["id"][0]) if "id" in fields else None
                events.append(SseEvent(event_id, fields["event"][0], "\n".join(fields["data"])))
                if stop_after is not None and len(events) >= stop_after:
                    break
            fields = {}
    return 200, events, retries


def jar_classes(data: bytes) -> list[str]:
    import io  # noqa: PLC0415
    import zipfile  # noqa: PLC0415

    with zipfile.ZipFile(io.BytesIO(data)) as jar:
        return sorted(n for n in jar.namelist() if n.endswith(".class"))


def write_java_project(root: Path) -> None:
    """Two modules, ``lib`` and ``app`` (which uses lib), and no external dependency: there is
    no Maven Central here."""
    (root / "settings.gradle").parent.mkdir(parents=True, exist_ok=True)
    (root / "settings.gradle").write_text("rootProject.name = 'demo'\ninclude 'lib', 'app'\n")
    (root / "build.gradle").write_text(
        "subprojects { apply plugin: 'java' }\n"
        "project(':app') { dependencies { compile project(':lib') } }\n"
    )
    lib = root / "lib/src/main/java/demo/lib"
    lib.mkdir(parents=True)
    (lib / "Greeting.java").write_text(
        "package demo.lib;\npublic class Greeting {\n"
        '  public static String hello() { return "hello from lib"; }\n}\n'
    )
    app = root / "app/src/main/java/demo/app"
    app.mkdir(parents=True)
    (app / "Main.java").write_text(
        "package demo.app;\npublic class Main {\n  public static void main(String[] a) {\n"
        "    System.out.println(demo.lib.Greeting.hello());\n  }\n}\n"
    )
    resources = root / "app/src/main/resources"
    resources.mkdir(parents=True)  # what the virtual Android driver reads from an app's zip
    (resources / "devyard-package.txt").write_text("package=demo.app\nlabel=Demo\nversion=1.0\n")
    (root / ".gitignore").write_text("*.log\nout/\n")
    (root / "local.properties").write_text("sdk.dir=/nowhere\n")


def exec_id_of(answer: httpx.Response) -> str:
    assert answer.status_code == 200, answer.text
    exec_id = answer.json()["execId"]
    assert re.fullmatch(r"build-\d+", exec_id), exec_id
    return str(exec_id)
