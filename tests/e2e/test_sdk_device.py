"""The commercial SDK's device clients (`@limrun/api` from npm, pinned in tests/node/sdkdevice)
against one real ``devyard up`` per module: the Android client over ``{apiUrl}/ws``, the iOS
client over ``{apiUrl}/signaling``, the ADB tunnel with the real ``adb``, the multiplexed port
tunnel and the HTTP proxy helper (docs/sdk-device.md). The Node script runs every call once
(tests/node/sdkdevice/devices.cjs); the tests here assert on what each call did, and on the
sockets' answers to bad messages, sent raw.
"""

from __future__ import annotations

import io
import json
import os
import plistlib
import shutil
import signal
import struct
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import IO, Any

import attrs
import httpx
import pytest
import trio
from trio_websocket import open_websocket_url

from tests.ports import free_port

from ._cli import clean_env

pytestmark = pytest.mark.slow

NODE_DIR = Path(__file__).parent.parent / "node" / "sdkdevice"
NODE = shutil.which("node")
ADB = shutil.which("adb")
APK_PACKAGE = "com.acme.sdkdemo"
IPA_BUNDLE = "com.acme.sdkios"
DEVICE_PORT = 8100  # WebDriverAgent's, the common case


@attrs.frozen
class Stack:
    url: str
    key: str
    android: Mapping[str, Any]
    ios: Mapping[str, Any]
    results: Mapping[str, Mapping[str, Any]]
    count_line: str
    ipa_url: str


def _apk() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        text = f"package={APK_PACKAGE}\nlabel=SDK Demo\nversion=1.0\n"
        archive.writestr("devyard-package.txt", text)
    return buffer.getvalue()


def _ipa() -> bytes:
    plist = plistlib.dumps(
        {
            "CFBundleIdentifier": IPA_BUNDLE,
            "CFBundleName": "SDK iOS",
            "CFBundleShortVersionString": "1.0",
        }
    )
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("Payload/SdkIos.app/Info.plist", plist)
    return buffer.getvalue()


def _asset(http: httpx.Client, name: str, data: bytes, os_name: str) -> str:
    created = http.put("/v1/assets", json={"name": name, "os": os_name})
    assert created.status_code == 200, created.text
    body = created.json()
    put = httpx.put(
        body["signedUploadUrl"], content=data,
        headers={"content-type": "application/octet-stream"}, timeout=30,
    )  # fmt: skip
    assert put.status_code < 300, put.text
    return str(body["signedDownloadUrl"])


def _create(http: httpx.Client, kind: str) -> dict[str, Any]:
    for _ in range(600):  # until the companion host daemon has registered: no capacity
        created = http.post(f"/v1/{kind}_instances", params={"wait": "true"}, json={"spec": {}})
        if created.status_code != 409:
            assert created.status_code == 200, created.text
            return dict(created.json())
        time.sleep(0.1)
    raise AssertionError(f"no {kind} capacity")


def _start_up(work: Path, log: IO[str]) -> tuple[subprocess.Popen[str], str, str]:
    data = work / "data"
    up = subprocess.Popen(
        [sys.executable, "-m", "devyard", "up", "--data-dir", str(data), "--port", "0"],
        stdout=subprocess.PIPE, stderr=log, text=True, env=clean_env(), cwd=work,
    )  # fmt: skip
    assert up.stdout is not None
    for line in up.stdout:
        if "serving at http://127.0.0.1:" in line:
            url = line.split("serving at ", 1)[1].split()[0]
            return up, url, (data / "admin-api-key").read_text().strip()
    raise AssertionError("devyard up exited before serving")


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    if NODE is None or not (NODE_DIR / "node_modules" / "@limrun" / "api").is_dir():
        pytest.skip("node or tests/node/sdkdevice/node_modules is missing (scripts/node-deps)")
    if ADB is None:
        pytest.skip("the adb client is not installed (apt install adb)")
    work = tmp_path_factory.mktemp("sdkdevice")
    log = (work / "up.log").open("w")  # the server's and host's log, for a failure's reader
    up, url, key = _start_up(work, log)
    adb_home = work / "adb-home"
    adb_home.mkdir()
    adb_env = {k: v for k, v in os.environ.items() if not k.startswith(("ADB_", "ANDROID_"))}
    adb_env.update(HOME=str(adb_home), ANDROID_ADB_SERVER_PORT=str(free_port()))
    try:
        with httpx.Client(
            base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=120
        ) as http:
            apk_url = _asset(http, "sdkdemo.apk", _apk(), "android")
            ipa_url = _asset(http, "sdkios.ipa", _ipa(), "ios")
            android, ios = _create(http, "android"), _create(http, "ios")
        config = {
            "devicePort": DEVICE_PORT,
            "android": {
                "apiUrl": android["status"]["apiUrl"],
                "token": android["status"]["token"],
                "adbUrl": android["status"]["adbWebSocketUrl"],
                "portPrefix": android["status"]["targetHttpPortUrlPrefix"],
                "apkUrl": apk_url,
                "apkPackage": APK_PACKAGE,
            },
            "ios": {
                "apiUrl": ios["status"]["apiUrl"],
                "token": ios["status"]["token"],
                "ipaUrl": ipa_url,
                "ipaBundle": IPA_BUNDLE,
            },
        }
        (work / "config.json").write_text(json.dumps(config))
        assert NODE is not None
        done = subprocess.run(
            [NODE, "devices.cjs", str(work / "config.json")],
            cwd=NODE_DIR, env=adb_env, capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        lines = done.stdout.strip().splitlines()
        count = lines[-1]
        print(count)  # the machine-readable count (docs/sdk-device.md)
        results = json.loads(lines[-2])["results"]
        yield Stack(url, key, android, ios, results, count, ipa_url)
    finally:
        subprocess.run(
            [ADB, "kill-server"], env=adb_env, capture_output=True, timeout=30, check=False
        )
        up.send_signal(signal.SIGINT)
        try:
            up.wait(timeout=30)
        except subprocess.TimeoutExpired:
            up.kill()
            up.wait()
        finally:
            assert up.stdout is not None
            up.stdout.close()
            log.close()


def _value(stack: Stack, call: str) -> Any:
    result = stack.results[call]
    assert result["ok"], f"{call}: {result.get('error')}"
    return result["value"]


def test_every_device_call_passes_and_the_count_says_so(stack: Stack) -> None:
    failed = {name: r["error"] for name, r in stack.results.items() if not r["ok"]}
    assert failed == {}
    passed = len(stack.results)
    assert stack.count_line == f"SDK_DEVICE_CALLS passed={passed} failed=0 total={passed}"


def test_android_observes_taps_types_and_opens(stack: Stack) -> None:
    assert _value(stack, "android.screenshot")["prefix"].startswith("data:image/png;base64")
    tree = _value(stack, "android.getElementTree")
    assert tree["xmlStart"] == "<?xml" and "Settings" in tree["texts"]
    assert _value(stack, "android.findElement")["count"] == 1
    tapped = _value(stack, "android.tap")
    assert tapped["x"] > 0 and tapped["y"] > 0
    assert "Settings item 1" in _value(stack, "android.treeAfterTap"), "the tap opened Settings"
    assert _value(stack, "android.pressKey") == {"key": "HOME"}
    assert _value(stack, "android.setText") == {"textLength": len("hello sdk")}
    assert "hello sdk" in _value(stack, "android.treeAfterText")
    assert _value(stack, "android.openUrl") == {"url": "https://example.com/from-sdk"}
    assert "https://example.com/from-sdk" in _value(stack, "android.treeAfterOpenUrl")
    assert _value(stack, "android.scrollScreen")["direction"] == "down"
    assert "not supported" in _value(stack, "android.startRecording")["refused"]


def test_android_installs_then_lists_and_launches_over_adb(stack: Stack) -> None:
    _value(stack, "android.installApp")
    assert _value(stack, "android.adbShell") == "hi"
    assert APK_PACKAGE in _value(stack, "android.listApps")
    assert "SDK Demo" in json.dumps(_value(stack, "android.launchApp"))


def test_ports_through_the_multiplexed_tunnel_and_the_http_proxy(stack: Stack) -> None:
    _value(stack, "android.adbReverse")  # device port 8100 -> the script's HTTP server
    answers = _value(stack, "android.portTunnelRequests")
    assert [a["status"] for a in answers] == [200, 200, 200]
    assert [a["body"] for a in answers] == [
        f"hello from the device /hello?n={i}" for i in (1, 2, 3)
    ]
    assert _value(stack, "android.httpProxyRequest") == {
        "status": 200,
        "body": "hello from the device /hello?via=proxy",
    }


def test_ios_observes_taps_installs_and_launches(stack: Stack) -> None:
    info = _value(stack, "ios.connect")
    assert info["udid"] == stack.ios["metadata"]["id"] and info["screenWidth"] > 0
    shot = _value(stack, "ios.screenshot")
    assert (shot["width"], shot["height"]) == (info["screenWidth"], info["screenHeight"])
    assert any(e["AXLabel"] == "Settings" for e in _value(stack, "ios.elementTree"))
    assert "Settings item 1" in _value(stack, "ios.treeAfterTap")
    assert _value(stack, "ios.tapElement")["elementLabel"] == "Settings"
    assert "hello ios" in _value(stack, "ios.treeAfterType")
    assert _value(stack, "ios.installApp") == {"url": stack.ipa_url, "bundleId": IPA_BUNDLE}
    apps = _value(stack, "ios.listApps")
    assert {"bundleId": IPA_BUNDLE, "name": "SDK iOS", "installType": "User"} in apps
    assert "SDK iOS" in _value(stack, "ios.treeAfterLaunch")
    assert _value(stack, "ios.performActions")["results"][1]["elementLabel"] == "Settings"
    assert "not supported" in _value(stack, "ios.xcrun")["refused"]
    assert "reverse tunnels are not supported" in _value(stack, "ios.reverseTunnel")["refused"]
    simctl = _value(stack, "ios.simctl")
    assert simctl["code"] == 1 and "simctl is not available" in simctl["stderr"]


def _ws_url(api_url: str, path: str, token: str) -> str:
    return api_url.replace("http://", "ws://", 1) + f"/{path}?token={token}"


async def test_bad_messages_get_error_answers_and_the_socket_lives_on(stack: Stack) -> None:
    status = stack.android["status"]
    url = _ws_url(status["apiUrl"], "ws", status["token"])
    with trio.fail_after(30):
        async with open_websocket_url(url) as ws:
            for bad, expected in [
                ("not json", {"type": "error", "message": "the message is not JSON"}),
                ("[1, 2]", {"type": "error", "message": "the message must be a JSON object"}),
                ('{"id": "x"}', {"type": "error", "message": "the message has no 'type'"}),
            ]:
                await ws.send_message(bad)
                assert json.loads(await ws.get_message()) == expected
            await ws.send_message(json.dumps({"type": "fly", "id": "1"}))
            answer = json.loads(await ws.get_message())
            assert answer["type"] == "flyResult" and answer["id"] == "1"
            assert answer["error"]["code"] == "unknown_type"
            await ws.send_message(json.dumps({"type": "tap", "id": "2", "x": "left"}))
            answer = json.loads(await ws.get_message())
            assert answer["error"]["code"] == "bad_request", answer
            await ws.send_message(json.dumps({"type": "tap", "id": "3", "x": 1e9, "y": 1}))
            answer = json.loads(await ws.get_message())
            assert "outside" in answer["error"]["message"], answer
            await ws.send_message(json.dumps({"type": "getElementTree", "id": "4"}))
            answer = json.loads(await ws.get_message())
            assert answer["id"] == "4" and answer["payload"]["nodes"], "still answering"
    ios = stack.ios["status"]
    with trio.fail_after(30):
        async with open_websocket_url(_ws_url(ios["apiUrl"], "signaling", ios["token"])) as ws:
            nowhere = {"type": "tapElement", "id": "5", "selector": {"AXLabel": "Nowhere"}}
            await ws.send_message(json.dumps(nowhere))
            answer = json.loads(await ws.get_message())
            assert answer == {"type": "tapElementResult", "id": "5", "error": answer["error"]}
            assert answer["error"] == "no element matches {'AXLabel': 'Nowhere'}"


def test_the_multiplexed_tunnel_ends_one_bad_connection_only(stack: Stack) -> None:
    """Frames without an id and text are dropped; a connection the device closes ends alone
    (its header-only message); the next id on the same socket goes on (raw frames, sent by
    tests/node/sdkdevice)."""
    raw = _value(stack, "android.muxRaw")
    assert raw["first"].startswith("HTTP/1.1 200") and "device /hello?raw=1\r\n" in raw["first"]
    assert raw["second"].startswith("HTTP/1.1 200") and "device /hello?raw=2\r\n" in raw["second"]
    assert raw["closes"] == [1, 2]


async def test_a_closed_device_port_closes_its_id_and_the_socket_goes_on(stack: Stack) -> None:
    status = stack.android["status"]
    prefix = status["targetHttpPortUrlPrefix"].replace("http://", "ws://", 1)
    headers = [(b"authorization", f"Bearer {status['token']}".encode())]
    request = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"
    with trio.fail_after(30):
        async with open_websocket_url(f"{prefix}?port=9", extra_headers=headers) as ws:
            for conn_id in (7, 8):  # nothing listens on 9: each id is closed, the socket stays
                await ws.send_message(struct.pack(">I", conn_id) + request)
                assert await ws.get_message() == struct.pack(">I", conn_id)


@pytest.mark.parametrize("path", ["ws", "signaling"])
async def test_the_sockets_refuse_a_wrong_token(stack: Stack, path: str) -> None:
    status = stack.android["status"]
    upgrade = {
        "connection": "Upgrade",
        "upgrade": "websocket",
        "sec-websocket-version": "13",
        "sec-websocket-key": "dGhlIHNhbXBsZSBub25jZQ==",
    }
    url = _ws_url(status["apiUrl"], path, "wrong").replace("ws://", "http://", 1)
    async with httpx.AsyncClient(timeout=30) as http:
        refused = await http.get(url, headers=upgrade)
    assert refused.status_code == 401, refused.text
    assert refused.json()["reason"] == "unauthorized"
