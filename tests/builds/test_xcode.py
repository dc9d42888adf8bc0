"""The ``xcode`` driver and the iOS Xcode sandbox, with `devyard up` and a host running
``--drivers xcode,virtual`` (real processes) and the fake ``xcodebuild``/``xcodegen`` of
tests/builds/fakes (a recorded log replayed, an ``.app`` written: the code paths are a Mac's).
One stack for the module's flow: sync, ``xcodebuild`` with signing material (0600, redacted,
removed), ``xcodegen``, refusals, ``/simulator``, and an iOS instance whose
``status.sandbox.xcode.url`` builds and installs onto its simulator; plus the spec checks."""

from __future__ import annotations

import base64
import json
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from devyard.hostd.builds.commands import plan_exec
from devyard.hostd.builds.errors import BuildError
from devyard.hostd.drivers.xcode.plan import Secrets, XcodeTools, plan_xcodebuild
from tests.e2e._cli import clean_env, run, start
from tests.ports import free_port

from ._stack import Stack, exec_id_of, read_events, require_tools, sync_tree

FAKES = Path(__file__).with_name("fakes")
REGION = "xcode-builds"
PASSWORD = "hunter2-p12-password"


@asynccontextmanager
async def xcode_stack(tmp_path: Path) -> AsyncIterator[Stack]:
    require_tools()
    data, host_data = tmp_path / "data", tmp_path / "xcode-host"
    env = clean_env()
    with trio.fail_after(60):
        up = await start(["up", "--data-dir", str(data), "--port", "0"], env, tmp_path)
    try:
        with trio.fail_after(60):
            url = (await up.read_until(r"serving at (http://127\.0\.0\.1:\d+)")).group(1)
            made = await run(["admin", "host-token", "--data-dir", str(data)], env, tmp_path)
        assert made.returncode == 0, made.stderr
        token_file = tmp_path / "host-token"
        token_file.write_text(made.stdout.decode().strip().splitlines()[-1])
        host_env = clean_env(DEVYARD_XCODE_TOOLS=str(FAKES), DEVYARD_XCODE_ALLOW_NON_MACOS="1")
        args = ["hostd", "--server", url, "--token-file", str(token_file), "--region", REGION]
        args += ["--drivers", "xcode,virtual,gradle", "--data-dir", str(host_data)]
        args += ["--capacity", "6", "--allow-network", "127.0.0.0/8"]  # the allowlist's server
        hostd = await start(args, host_env, tmp_path)
        try:
            key = (data / "admin-api-key").read_text().strip()
            yield Stack(url, key, data, host_data, up, hostd)
        finally:
            with trio.move_on_after(30, shield=True):
                await hostd.stop(signal.SIGINT)
    finally:
        with trio.move_on_after(30, shield=True):
            await up.stop(signal.SIGINT)


async def _create(http: httpx.AsyncClient, kind: str, spec: dict[str, Any]) -> dict[str, Any]:
    with trio.fail_after(60):
        while True:  # 409 / unknown_region until the host has registered
            created = await http.post(
                f"/v1/{kind}", params={"wait": "true"}, json={"spec": {"region": REGION, **spec}}
            )
            if created.status_code != 409 and "unknown_region" not in created.text:
                break
            await trio.sleep(0.2)
    assert created.status_code == 200, created.text
    body: dict[str, Any] = created.json()
    assert body["status"]["state"] == "ready", body
    return body


def _client(url: str, token: str) -> httpx.AsyncClient:
    headers = {"Authorization": f"Bearer {token}"}
    return httpx.AsyncClient(base_url=url + "/", headers=headers, timeout=120)


def _write_project(root: Path) -> None:
    (root / "Demo.xcodeproj").mkdir(parents=True)
    (root / "Demo.xcodeproj/project.pbxproj").write_text("// !$*UTF8*$!\n{}\n")
    (root / "Demo").mkdir()
    (root / "Demo/DemoApp.swift").write_text("import SwiftUI\n@main struct DemoApp: App {}\n")
    (root / "project.yml").write_text("name: Generated\ntargets: {}\n")


async def _build(api: httpx.AsyncClient, body: dict[str, Any]) -> tuple[str, list[Any]]:
    exec_id = exec_id_of(await api.post("exec", json=body))
    with trio.fail_after(60):
        status, events, _ = await read_events(api, exec_id)
    assert status == 200
    return exec_id, events


async def test_xcode_instances_and_the_ios_xcode_sandbox(tmp_path: Path) -> None:
    project = tmp_path / "project"
    _write_project(project)
    async with xcode_stack(tmp_path) as stack, stack.api() as http:
        instance = await _create(http, "xcode_instances", {})
        status = instance["status"]
        async with _client(status["apiUrl"], status["token"]) as api:
            assert (await sync_tree(api, project))["ok"] is True
            signing = {
                "certificateP12Base64": base64.b64encode(b"p12 bytes").decode(),
                "certificatePassword": PASSWORD,
                "provisioningProfileBase64": base64.b64encode(b"profile").decode(),
            }
            settings = {"project": "Demo.xcodeproj", "scheme": "Demo", "sdk": "iphonesimulator"}
            body = {"command": "xcodebuild", "xcodebuild": settings, "signing": signing}
            exec_id, events = await _build(api, body)
            text = "\n".join(e.data for e in events)
            assert events[0].type == "command" and "-scheme Demo" in events[0].data
            assert "** BUILD SUCCEEDED **" in text and "(mode 600)" in text, text
            assert PASSWORD not in text and "Certificate password: ***" in text, text
            assert [e.data for e in events if e.type == "exitCode"] == ["0"]
            artifacts = [json.loads(e.data) for e in events if e.type == "artifact"]
            assert [a["path"] for a in artifacts] == ["build/Artifacts/Demo.app.tar.gz"]
            log = (await api.get(f"exec/{exec_id}/log")).text
            assert "BUILD SUCCEEDED" in log and PASSWORD not in log
            secrets = stack.host_data / "instances" / instance["metadata"]["id"] / "build/secrets"
            left = secrets.exists() and any(secrets.iterdir())
            assert not left, "signing material is removed when the exec ends"
            # -- xcodegen when asked, then the generated project builds ---------------------
            generated = {"project": "Generated.xcodeproj", "scheme": "Generated"}
            body = {"command": "xcodebuild", "xcodebuild": generated, "xcodegen": {}}
            text = "\n".join(e.data for e in (await _build(api, body))[1])
            assert "Created project at Generated.xcodeproj" in text and "SUCCEEDED" in text
            # -- refusals: 400 with a reason, nothing runs ----------------------------------
            for bad in (
                {"xcodebuild": {"sdk": "macosx"}},
                {"xcodebuild": {"project": "../elsewhere.xcodeproj"}},
                {"xcodebuild": {"scheme": "Demo; rm -rf /"}},
                {"signing": {"certificateP12Base64": "not base64!"}},
                {"buildSettings": {"lower": "x"}},
            ):
                refused = await api.post("exec", json={"command": "xcodebuild", **bad})
                assert refused.status_code == 400, (bad, refused.text)
                assert refused.json()["reason"] == "bad_request"
            assert (await api.get("simulator")).json() == {"attached": False}
            attach = await api.post("simulator", json={"apiUrl": "x", "token": "y"})
            assert attach.status_code == 400 and "sandbox.xcode" in attach.json()["message"]

        # -- an iOS instance with an Xcode sandbox: build there, installed on its simulator --
        ios = await _create(http, "ios_instances", {"sandbox": {"xcode": {"enabled": True}}})
        url, token = ios["status"]["sandbox"]["xcode"]["url"], ios["status"]["token"]
        assert url == ios["status"]["apiUrl"] + "/xcode"
        async with _client(url, token) as sandbox, _client(ios["status"]["apiUrl"], token) as dev:
            before = (await sandbox.get("simulator")).json()
            assert before["attached"] is True and "latestBuild" not in before
            await sync_tree(sandbox, project)
            settings = {"project": "Demo.xcodeproj", "scheme": "Demo"}
            body = {
                "command": "xcodebuild",
                "xcodebuild": settings,
                "buildSettings": {"PRODUCT_BUNDLE_IDENTIFIER": "dev.devyard.sandboxdemo"},
            }
            _, events = await _build(sandbox, body)
            assert [e.data for e in events if e.type == "exitCode"] == ["0"]

            async def latest() -> dict[str, Any]:
                answer: dict[str, Any] = (await sandbox.get("simulator")).json()
                return answer.get("latestBuild") or {}

            with trio.fail_after(20):
                while (await latest()).get("installState") != "installedOnAttachedSimulator":  # noqa: ASYNC110 - polling the API
                    await trio.sleep(0.05)
            assert (await latest())["bundleId"] == "dev.devyard.sandboxdemo"
            apps = (await dev.get("apps")).json()
            listed = apps.get("apps", apps) if isinstance(apps, dict) else apps
            assert "dev.devyard.sandboxdemo" in json.dumps(listed), apps
            attached = (await sandbox.post("simulator", json={"apiUrl": "a", "token": "b"})).json()
            assert attached["alreadyAttached"] and attached["installedLastBuild"]
            missing = await sandbox.get("nothing-here")
            assert missing.status_code == 404

        # -- the spec: sandbox.xcode is iOS's; buildNetwork is checked (400) ----------------
        for kind, spec, code in (
            ("android_instances", {"sandbox": {"xcode": {"enabled": True}}}, 422),
            ("xcode_instances", {"buildNetwork": {"allow": ["example.com:99999"]}}, 400),
            ("xcode_instances", {"buildNetwork": {"allow": ["exa mple.com:80"]}}, 400),
            ("xcode_instances", {"buildNetwork": {"allow": ["*.com:443"]}}, 400),
            ("ios_instances", {"buildNetwork": {"allow": ["example.com:443"]}}, 422),
        ):
            answer = await http.post(f"/v1/{kind}", json={"spec": {"region": REGION, **spec}})
            assert answer.status_code == code, (spec, answer.text)
        ok = await _create(http, "xcode_instances", {"buildNetwork": {"allow": ["*.x.org:*"]}})
        assert ok["spec"]["buildNetwork"] == {"allow": ["*.x.org:*"]}

        # -- a gradle instance's allowlist, end to end: order -> hostd -> proxy -> server ---
        port, other = free_port(), free_port()
        listeners = await trio.open_tcp_listeners(port, host="127.0.0.1")
        async with trio.open_nursery() as servers:
            servers.start_soon(trio.serve_listeners, _hello, listeners)
            allow = {"buildNetwork": {"allow": [f"127.0.0.1:{port}"]}}
            gradle = await _create(http, "gradle_instances", allow)
            async with _client(gradle["status"]["apiUrl"], gradle["status"]["token"]) as api:
                line = f"curl -sS http://127.0.0.1:{port}/; curl -sS http://127.0.0.1:{other}/"
                _, events = await _build(api, {"command": "run", "commandLine": line})
            text = "\n".join(e.data for e in events)
            assert "hello through the allowlist" in text, text
            assert f"127.0.0.1:{other} is not in this instance's spec.buildNetwork.allow" in text
            servers.cancel_scope.cancel()


async def _hello(stream: trio.SocketStream) -> None:
    async with stream:
        await stream.receive_some(65536)
        body = b"hello through the allowlist"
        await stream.send_all(b"HTTP/1.0 200 OK\r\nContent-Length: 27\r\n\r\n" + body)


def _tools(tmp_path: Path) -> tuple[XcodeTools, Secrets]:
    return XcodeTools(str(FAKES / "xcodebuild"), None), Secrets(tmp_path / "secrets")


@pytest.mark.parametrize(
    "body",
    [
        {"xcodebuild": "Demo"},
        {"xcodebuild": {"workspace": "a/../../abs.xcworkspace"}},
        {"xcodebuild": {"configuration": "-quiet"}},
        {"xcodebuild": {"destination": "x"}},
        {"xcodegen": {"spec": "project.yml"}},  # this host has no xcodegen
        {"signing": {"certificatePassword": 7}},
        {"signing": {"keystore": "x"}},
        {"buildSettings": {"A": "two\nlines"}},
    ],
)
def test_bad_xcodebuild_bodies_are_refused(tmp_path: Path, body: dict[str, Any]) -> None:
    tools, secrets = _tools(tmp_path)
    full = {"command": "xcodebuild", **body}
    base = plan_exec({**full, "command": "run", "commandLine": "x"})
    with pytest.raises(BuildError):
        plan_xcodebuild(
            full, tools=tools, workspace=tmp_path, home=tmp_path, secrets=secrets, base=base
        )
    assert not (tmp_path / "secrets").exists() or not any((tmp_path / "secrets").iterdir())
