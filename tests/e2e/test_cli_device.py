"""The real CLI as a subprocess against ONE `devyard up` for the module (issue 20): the device
verbs, the build verbs (with a second host running the gradle driver, where its tools are
installed), keys, usage, tunnels, ``--field``, completion; the typed client paging instances
under trio, under asyncio and blocking. JSON parsed, exit codes checked, ``| head -1`` clean.
"""

from __future__ import annotations

import asyncio
import json
import selectors
import shutil
import signal
import subprocess
import threading
import zipfile
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import IO, Any

import attrs
import httpx
import pytest
import trio

from devyard.client import AsyncClient, Client, Instance, Platform
from tests.client._cli import Cli
from tests.e2e._cli import DEVYARD, clean_env
from tests.polling import until

pytestmark = pytest.mark.slow

BUILD_REGION = "builds"
BUILD_TOOLS = ("bwrap", "gradle", "java", "xdelta3", "setpriv", "prlimit")


@attrs.frozen
class Up:
    url: str
    key: str = attrs.field(repr=False)
    data: Path
    cwd: Path


def _read_until(stream: IO[bytes], process: subprocess.Popen[bytes], marker: bytes) -> bytes:
    """Lines of *stream* until one holds *marker* (60 s at most); that line."""
    with selectors.DefaultSelector() as selector:
        selector.register(stream, selectors.EVENT_READ)
        for _ in range(10_000):
            if not selector.select(timeout=60):
                raise AssertionError(f"no {marker!r} within 60 s")
            line = stream.readline()
            if not line:
                raise AssertionError(f"the process exited ({process.poll()}) before {marker!r}")
            if marker in line:
                return line
    raise AssertionError(f"no {marker!r}")


def _drain(stream: IO[bytes]) -> threading.Thread:
    """Read what `devyard up` still prints, so its pipe never fills."""
    reader = threading.Thread(target=lambda: [None for _ in stream], daemon=True)
    reader.start()
    return reader


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Up]:
    cwd = tmp_path_factory.mktemp("up")
    data = cwd / "data"
    with (cwd / "up.log").open("wb") as log:
        process = subprocess.Popen(
            [*DEVYARD, "up", "--data-dir", str(data), "--port", "0"],
            stdout=subprocess.PIPE,
            stderr=log,
            env=clean_env(),
            cwd=cwd,
        )
    try:
        assert process.stdout is not None
        line = _read_until(process.stdout, process, b"serving at ")
        url = line.decode().split("serving at ", 1)[1].split()[0]
        reader = _drain(process.stdout)
        yield Up(url, (data / "admin-api-key").read_text().strip(), data, cwd)
    finally:
        _stop(process)
        if process.stdout is not None:
            if "reader" in locals():
                reader.join(10)
            process.stdout.close()


@pytest.fixture(scope="module")
def build_host(up: Up) -> Iterator[None]:
    """A second host daemon with the gradle driver (region ``builds``), or a skip."""
    missing = [tool for tool in BUILD_TOOLS if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"scripts/deps installs what the gradle driver needs: missing {missing}")
    made = subprocess.run(
        [*DEVYARD, "admin", "host-token", "--data-dir", str(up.data)],
        env=clean_env(),
        capture_output=True,
        check=True,
        timeout=60,
    )
    token_file = up.cwd / "build-host-token"
    token_file.write_text(made.stdout.decode().strip().splitlines()[-1])
    args = ["hostd", "--server", up.url, "--token-file", str(token_file)]
    args += ["--region", BUILD_REGION, "--drivers", "gradle", "--capacity", "1"]
    args += ["--data-dir", str(up.cwd / "build-host")]
    with (up.cwd / "hostd.log").open("wb") as log:
        process = subprocess.Popen(
            [*DEVYARD, *args], stdout=log, stderr=log, env=clean_env(), cwd=up.cwd
        )
    try:
        yield None
    finally:
        _stop(process)


def _cli(up: Up, tmp_path: Path) -> Cli:
    return Cli.of(tmp_path, DEVYARD_BASE_URL=up.url, DEVYARD_API_KEY=up.key)


async def _ready(cli: Cli, platform: str, *extra: str) -> str:
    """A ready instance's id; 409 (exit 5) until the host that serves it has linked."""
    created: Any = None

    async def made() -> bool:
        nonlocal created
        created = await cli(platform, "create", "--wait", "--json", *extra)
        assert created.code in (0, 5) or "region" in created.err, created.err
        return bool(created.code == 0)

    await until(made, seconds=90)
    instance = created.json()
    assert instance["status"]["state"] == "ready"
    return str(instance["metadata"]["id"])


def _host_linked(url: str) -> Callable[[], Awaitable[bool]]:
    async def linked() -> bool:
        async with httpx.AsyncClient(base_url=url) as http:  # /readyz is 503 until then
            return bool((await http.get("/readyz")).json()["checks"]["hosts"] != "none linked")

    return linked


def _apk(path: Path, package: str) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("devyard-package.txt", f"{package}\nlabel=Demo\nversion=1.0\n")
    return path


async def test_device_verbs_fields_and_pipes(up: Up, tmp_path: Path) -> None:
    cli = _cli(up, tmp_path)
    iid = await _ready(cli, "android", "--label", "suite=device")
    assert (await cli("android", "get", iid, "--field", "status.state")).out == "ready\n"
    lines = (await cli("android", "list", "--field", ".")).out.splitlines()
    assert iid in [json.loads(line)["metadata"]["id"] for line in lines]  # JSON lines

    swiped = await cli("android", "swipe", "--json", iid, "10", "10", "200", "300")
    assert swiped.json() == {"ok": True}
    assert (await cli("android", "key", iid, "home")).out == "pressed home\n"
    apk = _apk(tmp_path / "demo.apk", "com.acme.demo")
    installed = await cli("android", "install", "--json", iid, str(apk))
    assert installed.json()["id"] == "com.acme.demo"
    assert (await cli("android", "launch", iid, "com.acme.demo")).code == 0

    shell = await cli("android", "shell", iid, "--", "echo", "hi")
    assert (shell.code, shell.out) == (0, "hi\n"), shell.err
    failing = await cli("android", "shell", "--json", iid, "ls", "/no/such/dir")
    assert failing.code == json.loads(failing.out)["exitCode"] != 0, failing  # --json or not

    (tmp_path / "note.txt").write_bytes(b"hello device\n")
    pushed = await cli("android", "push", "--json", iid, "note.txt", "/sdcard/note.txt")
    assert pushed.json()["size"] == 13
    pulled = await cli("android", "pull", iid, "/sdcard/note.txt", "-")
    assert pulled.out == "hello device\n"
    into_dir = await cli("android", "pull", iid, "/sdcard")
    assert into_dir.code == 2 and "directory" in into_dir.err
    assert not (tmp_path / "sdcard").exists()  # no empty file left behind
    watch = await cli("android", "watch", "--no-browser", iid)
    assert watch.code == 0 and watch.out.startswith(("http://", "https://")), watch

    status, first, err = await cli.piped_to_head("android", "apps", iid)
    assert first.split()[:2] == ["APP", "LABEL"] and err == "" and status in (0, 141)

    with trio.fail_after(60):  # logs -f follows until Ctrl-C, which exits 130 quietly
        process = await trio.lowlevel.open_process(
            [*DEVYARD, "android", "logs", "-f", "--json", iid],
            env=cli.env,
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        assert process.stdout is not None and process.stderr is not None
        first_chunk = await process.stdout.receive_some(65536)  # the install logged lines
        assert json.loads(first_chunk.decode().splitlines()[0])["seq"] >= 1
        process.send_signal(signal.SIGINT)
        assert await process.wait() == 130
        assert b"Traceback" not in await process.stderr.receive_some(65536)

    assert (await cli("android", "delete", iid)).code == 0
    gone = await cli("android", "tap", iid, "1", "1")
    assert gone.code == 5 and "not ready" in gone.err


async def test_keys_usage_and_completion(up: Up, tmp_path: Path) -> None:
    cli = _cli(up, tmp_path)
    created = (await cli("keys", "create", "ci", "--read-only", "--json")).json()
    assert created["key"].startswith("dy_") and created["readOnly"] is True
    assert created["id"] in (await cli("keys", "list", "--field", "id")).out.split()
    revoked = await cli("keys", "revoke", created["id"], "--field", "revokedAt")
    assert revoked.code == 0 and revoked.out.strip()
    refused = await cli.but(DEVYARD_API_KEY=created["key"])("whoami")
    assert refused.code == 4 and refused.err.count("\n") == 1

    totals = (await cli("usage", "--since", "30d", "--json")).json()
    assert totals["bucket"] == "day" and len(totals["buckets"]) >= 1
    chart = await cli("usage", "--since", "2d", "--bucket", "hour")
    assert chart.code == 0 and chart.out.splitlines()[-1].startswith("total: ")

    script = (await cli("completion", "bash")).out
    probe = 'COMP_WORDS=(devyard gradle e); COMP_CWORD=2; _devyard; echo "${COMPREPLY[*]}"'
    with trio.fail_after(30):
        done = await trio.run_process(
            ["bash", "-c", f"{script}\n{probe}"], capture_stdout=True, check=True
        )
    assert done.stdout.decode().split() == ["exec"]


async def test_the_client_pages_instances_every_way(up: Up) -> None:
    async with AsyncClient(up.url, up.key) as client:

        async def make() -> str:
            made = await client.create_instance("android", labels={"suite": "paging"}, wait=True)
            return made.id

        await until(_host_linked(up.url), seconds=90)
        made = {await make() for _ in range(3)}
        selector = "suite=paging"
        first = await client.list_instances("android", label_selector=selector, limit=2)
        assert len(first.items) == 2 and first.has_more
        under_trio = {
            i.id
            async for i in client.iter_instances("android", label_selector=selector, page_size=1)
        }
        one: Instance = await client.get_instance(next(iter(made)))
        assert one.platform is Platform.ANDROID and one.status.api_url and one.region

    async def on_asyncio() -> set[str]:
        async with AsyncClient(up.url, up.key) as client:
            pages = client.iter_instances("android", label_selector=selector, page_size=2)
            return {i.id async for i in pages}

    def blocking() -> set[str]:
        with Client(up.url, up.key) as client:
            ids = {i.id for i in client.iter_instances("android", label_selector=selector)}
            for instance_id in ids:
                client.delete_instance(instance_id)
            return ids

    assert under_trio == made
    assert await trio.to_thread.run_sync(asyncio.run, on_asyncio()) == made
    assert await trio.to_thread.run_sync(blocking) == made


async def test_build_verbs_sync_exec_and_logs(up: Up, build_host: None, tmp_path: Path) -> None:
    cli = _cli(up, tmp_path)
    iid = await _ready(cli, "gradle", "--region", BUILD_REGION)
    tree = tmp_path / "project"
    (tree / "src").mkdir(parents=True)
    (tree / "src" / "hello.txt").write_text("hello build\n")
    (tree / ".git").mkdir()
    (tree / ".git" / "HEAD").write_text("ref: main\n")
    synced = (await cli("gradle", "sync", iid, str(tree), "--json")).json()
    assert synced["ok"] is True and synced["files"] == 1

    ran = await cli(
        "gradle", "exec", iid, "--", "sh", "-c", "cat src/hello.txt; echo oops >&2; exit 3"
    )
    assert (ran.code, ran.out) == (3, "hello build\n"), ran.err
    assert "oops" in ran.err and "Traceback" not in ran.err
    events = await cli("gradle", "exec", "--json", iid, "--", "echo", "one")
    kinds = [json.loads(line)["type"] for line in events.out.splitlines()]
    assert events.code == 0 and kinds[-1] == "exitCode" and "stdout" in kinds

    async def logged() -> bool:
        found = await cli("gradle", "logs", iid, "--json")
        return found.code == 0 and len(found.json()) >= 2

    await until(logged, seconds=60)  # build logs reach the server when each exec ends
    logs = (await cli("gradle", "logs", iid, "--json")).json()
    failed = next(log for log in logs if log.get("exitCode") == 3)
    text = await cli("gradle", "logs", iid, "--exec", failed["id"])
    assert "hello build" in text.out
    assert (await cli("gradle", "delete", iid)).code == 0


def test_usage_rejects_nonsense_without_a_server(tmp_path: Path) -> None:
    done = subprocess.run(
        [*DEVYARD, "usage", "--field", "a..b"],
        env=clean_env(DEVYARD_API_KEY="dy_x", DEVYARD_BASE_URL="http://127.0.0.1:9"),
        capture_output=True,
        cwd=tmp_path,
        check=False,
        timeout=60,
    )
    assert done.returncode == 2 and b"empty segment" in done.stderr
    assert b"Traceback" not in done.stderr
