"""The commercial service's own tools, unmodified, against one real ``devyard up``
(docs/compatibility.md): its TypeScript SDK ``@limrun/api`` (control plane, by
tests/node/compat/control_plane.mjs), its Python SDK ``limrun-api``, and its ``lim`` CLI,
including ``lim login`` approved by this test over HTTP, and ``devyard login``'s same flow.

Every call is a named check with a result; the test asserts they all pass, the device verbs
of ``lim`` included (they speak the device protocol on apiUrl, docs/sdk-device.md), except the
SDK defects listed in ``KNOWN_FAILURES``. ``scripts/compat-count`` runs this module with
``DEVYARD_COMPAT_REPORT=<file>`` and counts the results per tool.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import plistlib
import re
import shutil
import signal
import subprocess
import zipfile
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Any, Final

import httpx
import pytest
import trio
from limrun_api import AsyncLimrun

from ._cli import DEVYARD, clean_env, start

# What `lim install-app` uploads: a package the virtual devices can read (an APK is a zip with
# devyard's package file, an .ipa a zip with the app's Info.plist: docs/devices.md).
_LIM_APK: Final = b"package=dev.devyard.limdemo\nlabel=Lim Demo\nversion=1.0\n"
_LIM_PLIST: Final = plistlib.dumps(
    {
        "CFBundleIdentifier": "dev.devyard.limdemo",
        "CFBundleName": "Lim Demo",
        "CFBundleShortVersionString": "1.0",
    }
)


def _zip(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    return buffer.getvalue()


pytestmark = pytest.mark.slow

NODE = shutil.which("node")
NODE_DIR = Path(__file__).parents[1] / "node" / "compat"
LIM = NODE_DIR / "node_modules" / "lim" / "bin" / "run.js"

Results = dict[str, str]


async def _check(results: Results, name: str, call: Callable[[], Awaitable[None]]) -> None:
    try:
        await call()
    except Exception as exc:
        results[name] = f"{type(exc).__name__}: {exc}"[:300]
    else:
        results[name] = "ok"


def _expect(condition: bool, what: str) -> None:
    if not condition:
        raise AssertionError(f"expected {what}")


async def _typescript(url: str, key: str, work: Path) -> Results:
    done = await trio.run_process(
        [NODE or "node", str(NODE_DIR / "control_plane.mjs"), url, key, str(work)],
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    results: Results = json.loads(done.stdout.decode().strip().splitlines()[-1])["results"]
    return {f"ts {name}": outcome for name, outcome in results.items()}


async def _python(url: str, key: str, work: Path) -> Results:
    results: Results = {}
    client = AsyncLimrun(api_key=key, base_url=url, max_retries=0)
    data = os.urandom(2048)
    md5 = hashlib.md5(data).hexdigest()
    async with client:
        ids: list[str] = []

        async def create() -> None:
            for n in range(3):
                made = await client.android_instances.create(
                    metadata={"labels": {"suite": "py", "n": str(n)}}
                )
                ids.append(made.metadata.id)

        async def paging() -> None:
            page = await client.android_instances.list(label_selector="suite=py", limit=2)
            _expect([i.metadata.id for i in page.items] == ids[:2], "the first page")
            rest = await client.android_instances.list(
                label_selector="suite=py", limit=2, starting_after=page.items[-1].metadata.id
            )
            _expect([i.metadata.id for i in rest.items] == ids[2:], "the second page")

        async def auto_paging() -> None:
            # The SDK's next-page test (``isinstance(item, ItemsItem)``, a runtime Protocol
            # checked with getattr_static) never sees ``id`` on its pydantic models: its
            # iteration stops after the first page (docs/compatibility.md).
            walked = [i.metadata.id async for i in client.android_instances.list(limit=2)]
            _expect(walked == ids, f"every instance, got {walked}")

        async def get_delete() -> None:
            for instance_id in ids:
                _expect(
                    (await client.android_instances.get(instance_id)).metadata.id == instance_id,
                    "get",
                )
                await client.android_instances.delete(instance_id)

        async def xcode_list() -> None:
            live = await client.xcode_instances.list(state="creating,assigned,ready")
            _expect(live.items == [], "no live xcode instances")

        async def ios_list() -> None:
            _expect(isinstance((await client.ios_instances.list(limit=1)).items, list), "a list")

        asset: dict[str, str] = {}

        async def upsert_upload() -> None:
            created = await client.assets.get_or_create(name="py-app.apk")
            async with httpx.AsyncClient() as http:
                put = await http.put(
                    created.signed_upload_url,
                    content=data,
                    headers={"Content-Type": "application/octet-stream"},
                )
            _expect(put.status_code == 200, f"the upload, got {put.status_code}")
            again = await client.assets.get_or_create(name="py-app.apk")
            _expect(again.md5 == md5, "the md5 of the bytes: an upload helper skips")
            asset["id"] = again.id

        async def asset_list_get_delete() -> None:
            found = await client.assets.list(name_filter="py-app.apk", include_download_url=True)
            _expect([a.id for a in found] == [asset["id"]], "the asset listed")
            got = await client.assets.get(asset["id"], include_download_url=True)
            _expect(got.signed_download_url is not None, "its download URL")
            await client.assets.delete(asset["id"])
            _expect(await client.assets.list(name_filter="py-app.apk") == [], "deleted")

        for name, call in [
            ("android.create", create),
            ("android.list.pages", paging),
            ("android.list.autoPaging", auto_paging),
            ("android.get.delete", get_delete),
            ("ios.list", ios_list),
            ("xcode.list", xcode_list),
            ("assets.getOrCreate.upload.md5", upsert_upload),
            ("assets.list.get.delete", asset_list_get_delete),
        ]:
            await _check(results, f"py {name}", call)
    return results


def _lim_env(url: str, home: Path, key: str | None) -> dict[str, str]:
    env = clean_env(HOME=str(home), LIM_API_ENDPOINT=url, LIM_CONSOLE_ENDPOINT=url)
    env.pop("DISPLAY", None)  # no browser: lim prints the URL
    env.pop("LIM_API_KEY", None)
    if key is not None:
        env["LIM_API_KEY"] = key
    return env


async def _lim(env: dict[str, str], *args: str) -> str:
    with trio.fail_after(90):
        done = await trio.run_process(
            [NODE or "node", str(LIM), *args],
            env=env,
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    # lim exits 0 after some failures of its device connection; it says so on stderr
    if done.returncode != 0 or re.search(rb"error", done.stderr, re.IGNORECASE):
        raise RuntimeError((done.stderr or done.stdout).decode().strip()[-300:])
    return done.stdout.decode()


async def _approve(url: str, key: str, session_id: str) -> None:
    async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {key}"}) as h:
        approved = await h.post(f"/authn/cli/sessions/{session_id}/approve", json={})
        assert approved.status_code == 200, approved.text


async def _whoami(url: str, key: str) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {key}"}) as h:
        me = await h.get("/whoami")
        assert me.status_code == 200, me.text
        result: dict[str, Any] = me.json()
        return result


async def _lim_login(url: str, key: str, home: Path) -> None:
    """``lim login``: the CLI prints the URL; the test approves it as the admin would."""
    process = await trio.lowlevel.open_process(
        [NODE or "node", str(LIM), "login"],
        env=_lim_env(url, home, None),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    assert process.stdout is not None
    seen = b""
    with trio.fail_after(60):
        while (found := re.search(rb"session=(clr_[A-Za-z0-9_-]+)", seen)) is None:
            chunk = await process.stdout.receive_some(4096)
            _expect(bool(chunk), f"lim to print the approval URL, it printed {seen!r}")
            seen += chunk
        await _approve(url, key, found.group(1).decode())
        while chunk := await process.stdout.receive_some(4096):
            seen += chunk
        _expect(await process.wait() == 0, f"lim login to succeed: {seen.decode()[-300:]}")
    config = (home / ".lim" / "config.yaml").read_text()
    new_key = re.search(r"api-key: (\S+)", config)
    _expect(new_key is not None and new_key.group(1) != key, "a new key in ~/.lim/config.yaml")
    assert new_key is not None
    await _whoami(url, new_key.group(1))
    # the key was handed out once: the request is gone now
    async with httpx.AsyncClient(base_url=url) as http:
        again = await http.get(
            f"/authn/cli/sessions/{found.group(1).decode()}/token", params={"secret": "x"}
        )
    _expect(again.status_code == 410, f"410 once collected, got {again.status_code}")


async def _devyard_login(url: str, key: str, home: Path) -> None:
    env = clean_env(HOME=str(home), DEVYARD_CONFIG_DIR=str(home / "devyard"))
    process = await trio.lowlevel.open_process(
        [*DEVYARD, "login", "--base-url", url, "--no-browser", "--json"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stderr is not None and process.stdout is not None
    seen = b""
    with trio.fail_after(60):
        while (found := re.search(rb"session=(clr_[A-Za-z0-9_-]+)", seen)) is None:
            chunk = await process.stderr.receive_some(4096)
            _expect(bool(chunk), f"devyard login to print the URL, it printed {seen!r}")
            seen += chunk
        await _approve(url, key, found.group(1).decode())
        out = b""
        while chunk := await process.stdout.receive_some(4096):
            out += chunk
        _expect(await process.wait() == 0, f"devyard login to succeed: {seen!r}")
    _expect(json.loads(out)["baseUrl"] == url, f"the profile saved, got {out!r}")


async def _lim_suite(url: str, key: str, home: Path) -> Results:
    """The commands at once where they are independent: each is a node process whose start
    costs about a second of CPU."""
    results: Results = {}
    env = _lim_env(url, home, key)
    apps = {"android": home / "lim-app.apk", "ios": home / "lim-app.ipa"}
    apps["android"].write_bytes(_zip({"devyard-package.txt": _LIM_APK}))
    apps["ios"].write_bytes(_zip({"Payload/LimDemo.app/Info.plist": _LIM_PLIST}))
    created: dict[str, str] = {}

    async def create(platform: str) -> None:
        extra = ["--no-connect"] if platform == "android" else []
        out = await _lim(env, platform, "create", "--json", *extra)
        created[platform] = json.loads(out)["metadata"]["id"]

    async def listed(platform: str) -> None:
        out = await _lim(env, platform, "list", "--json")
        _expect(created[platform] in out, "the instance listed")

    async def got(platform: str) -> None:
        out = await _lim(env, platform, "get", created[platform], "--json")
        _expect(json.loads(out)["metadata"]["id"] == created[platform], "the instance")

    async def deleted(platform: str) -> None:
        await _lim(env, platform, "delete", created[platform])

    async def screenshot(platform: str) -> None:
        shot = home / f"{platform}.png"
        await _lim(env, platform, "screenshot", str(shot), "--id", created[platform])
        # lim writes the bytes it gets: PNG from Android, JPEG from iOS (docs/sdk-device.md)
        head = shot.read_bytes()[:4] if shot.exists() else b""
        _expect(head == b"\x89PNG" or head[:3] == b"\xff\xd8\xff", "an image written")

    async def element_tree(platform: str) -> None:
        out = await _lim(env, platform, "element-tree", "--id", created[platform])
        _expect(bool(out.strip()), "an element tree printed")

    def verb(*args: str) -> Callable[[str], Awaitable[None]]:
        async def run(platform: str) -> None:
            await _lim(env, platform, *args, "--id", created[platform])

        return run

    async def install_app(platform: str) -> None:
        await _lim(env, platform, "install-app", str(apps[platform]), "--id", created[platform])

    verbs: dict[str, Callable[[str], Awaitable[None]]] = {
        "screenshot": screenshot,
        "element-tree": element_tree,
        "tap": verb("tap", "10", "10"),
        "type": verb("type", "hello"),
        "open-url": verb("open-url", "https://example.com"),
        "install-app": install_app,
    }
    platforms = ("android", "ios")
    steps: list[dict[str, Callable[[str], Awaitable[None]]]] = [
        {"create": create},
        {"list": listed, "get": got},
        verbs,
        {"delete": deleted},
    ]
    for step in steps:
        async with trio.open_nursery() as nursery:
            for platform in platforms:
                for name, call in step.items():
                    if name == "create" or platform in created:
                        check = partial(call, platform)
                        nursery.start_soon(_check, results, f"lim {platform} {name}", check)

    pushed = home / "pushed.apk"
    pushed.write_bytes(os.urandom(3000))

    async def push() -> None:
        out = await _lim(env, "asset", "push", str(pushed), "--ttl", "24h")
        _expect("ID: asset_" in out, f"the asset id, got {out!r}")

    async def pull() -> None:
        target = home / "pulled"
        target.mkdir(exist_ok=True)
        await _lim(env, "asset", "pull", "pushed.apk", "--output", str(target))
        pulled = [p for p in target.rglob("*") if p.is_file()]
        _expect(len(pulled) == 1 and pulled[0].read_bytes() == pushed.read_bytes(), "the bytes")

    async def asset_list() -> None:
        out = await _lim(env, "asset", "list", "--json")
        _expect("pushed.apk" in out, "the asset listed")

    async def asset_delete() -> None:
        listed = json.loads(await _lim(env, "asset", "list", "--name", "pushed.apk", "--json"))
        await _lim(env, "asset", "delete", listed[0]["id"])
        _expect("pushed.apk" not in await _lim(env, "asset", "list", "--json"), "deleted")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(
            _check, results, "lim login", partial(_lim_login, url, key, home / "login")
        )
        await _check(results, "lim asset push", push)
        nursery.start_soon(_check, results, "lim asset pull", pull)
        await _check(results, "lim asset list", asset_list)
    await _check(results, "lim asset delete", asset_delete)
    return results


@pytest.mark.skipif(
    NODE is None or not LIM.exists(),
    reason="node or tests/node/compat/node_modules is missing (scripts/node-deps)",
)
async def test_the_commercial_services_sdks_and_cli(tmp_path: Path) -> None:
    data = tmp_path / "data"
    (tmp_path / "login").mkdir()
    up = await start(["up", "--data-dir", str(data), "--port", "0"], clean_env(), tmp_path)
    results: Results = {}
    try:
        with trio.fail_after(60):
            url = (await up.read_until(r"serving at (http://127\.0\.0\.1:\d+)")).group(1)
        key = (data / "admin-api-key").read_text().strip()
        with trio.fail_after(300):
            results |= await _typescript(url, key, tmp_path)
            results |= await _python(url, key, tmp_path)
            results |= await _lim_suite(url, key, tmp_path)
            await _check(results, "devyard login", lambda: _devyard_login(url, key, tmp_path))
    finally:
        with trio.CancelScope(shield=True), trio.move_on_after(30):
            assert await up.stop(signal.SIGINT) == 0
    report = os.environ.get("DEVYARD_COMPAT_REPORT")
    if report:
        # merged: other compat modules (the device clients' "tsdev ...") add theirs
        path = trio.Path(report)
        text = await path.read_text() if await path.exists() else ""
        merged = {**(json.loads(text) if text.strip() else {}), **results}
        await path.write_text(json.dumps(merged, indent=2) + "\n")
    failed = {
        name: outcome
        for name, outcome in results.items()
        if outcome != "ok" and name not in KNOWN_FAILURES
    }
    assert not failed, json.dumps(failed, indent=2)
    assert len(results) >= 60, sorted(results)


# Control-plane checks that fail for a reason outside devyard (docs/compatibility.md).
# Defects of the SDKs themselves that no answer of devyard's gets around (docs/compatibility.md).
KNOWN_FAILURES: Final = frozenset(
    {
        "py android.list.autoPaging",  # limrun-api's paging never sees item.id (see above)
    }
)
