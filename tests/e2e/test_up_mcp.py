"""`devyard up` end to end (issue 15): ``status.mcpUrl`` with real MCP clients.

The official `mcp` Python SDK's Streamable HTTP client (and, in `test_typescript_sdk_...`, the
MCP TypeScript SDK run by node) against the real CLI as a subprocess: tools listed, `observe`
gives an image and the element tree in one coordinate space, tapping an element of the tree
changes the next observation, two clients at once, a session that survives its client's
reconnect, credentials (missing or wrong: 401; the instance token and the organization API
key: every tool; a read-only key and the stream token: only read-only tools) and a browser
``Origin`` refused.
"""

from __future__ import annotations

import base64
import io
import json
import shutil
import signal
import zipfile
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import httpx2
import mcp_types as types
import pytest
import trio
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from PIL import Image

from ._cli import clean_env, create_ready_android, start

pytestmark = [
    pytest.mark.slow,
    # The SDK's client (httpx2 under trio) leaves response iterators of its streams to the
    # garbage collector when a session ends; trio reports each as unraisable (not ours).
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]

NODE = shutil.which("node")
NODE_DIR = Path(__file__).parents[1] / "node" / "mcp"
ALLOWED_ORIGIN = "https://console.example.test"
READ_ONLY_TOOLS = {"observe", "list_apps", "device_logs"}


@asynccontextmanager
async def _client(url: str, token: str, *, mode: str = "legacy") -> AsyncIterator[Client]:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60)
    async with http, Client(streamable_http_client(url, http_client=http), mode=mode) as client:
        yield client


def _observation(result: types.CallToolResult) -> tuple[dict[str, Any], bytes | None]:
    assert not result.is_error, result
    images = [c for c in result.content if isinstance(c, types.ImageContent)]
    texts = [c for c in result.content if isinstance(c, types.TextContent)]
    meta = json.loads(texts[-1].text)
    return meta, base64.b64decode(images[0].data) if images else None


def _walk(elements: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for element in elements:
        yield element
        yield from _walk(element.get("children", []))


async def _with_up(tmp_path: Path, scenario: Callable[[str, str], Awaitable[None]]) -> None:
    data = tmp_path / "data"
    env = clean_env(DEVYARD_MCP_ALLOWED_ORIGINS=ALLOWED_ORIGIN)
    up = await start(["up", "--data-dir", str(data), "--port", "0"], env, tmp_path)
    try:
        with trio.fail_after(240):
            url = (await up.read_until(r"serving at (http://127\.0\.0\.1:\d+)")).group(1)
            await scenario(url, (data / "admin-api-key").read_text().strip())
    finally:  # a failed check must not leave `devyard up` and its host running
        with trio.CancelScope(shield=True), trio.move_on_after(30):
            assert await up.stop(signal.SIGINT) == 0


async def test_mcp_clients_observe_and_drive_the_device(tmp_path: Path) -> None:
    await _with_up(tmp_path, _scenario)


async def test_the_typescript_sdk_observes_and_taps(tmp_path: Path) -> None:
    if NODE is None or not (NODE_DIR / "node_modules").is_dir():
        pytest.skip("node or tests/node/mcp/node_modules is missing (scripts/node-deps)")

    async def scenario(base: str, key: str) -> None:
        async with httpx.AsyncClient(
            base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=60
        ) as http:
            instance = await create_ready_android(http)
            await _typescript_round_trip(instance["status"]["mcpUrl"], key)

    await _with_up(tmp_path, scenario)


async def _scenario(base: str, key: str) -> None:
    async with httpx.AsyncClient(
        base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=60
    ) as http:
        instance = await create_ready_android(http)
        status = instance["status"]
        mcp_url = status["mcpUrl"]
        assert mcp_url == f"{status['apiUrl'].removesuffix('/api')}/mcp"

        await _refusals(mcp_url, key)

        async with _client(mcp_url, key) as agent:
            names = {tool.name for tool in (await agent.list_tools()).tools}
            assert names >= READ_ONLY_TOOLS | {"tap", "act", "type_text", "shell", "swipe"}
            annotated = {t.name: t.annotations for t in (await agent.list_tools()).tools}
            assert annotated["observe"] is not None and annotated["observe"].read_only_hint
            assert annotated["shell"] is not None and annotated["shell"].destructive_hint

            meta, image = _observation(await agent.call_tool("observe", {}))
            space = meta["coordinates"]
            assert image is not None
            assert Image.open(io.BytesIO(image)).size == (space["width"], space["height"])
            assert len(image) < 1_000_000
            icons = [e for e in _walk(meta["elements"]) if e.get("label") == "Settings"]
            assert len(icons) == 1, meta["elements"]
            assert meta["foreground"] == "com.android.launcher3"

            # a second client at once: the instance token, its own session
            async with _client(mcp_url, status["token"]) as second:
                tapped = await second.call_tool("tap", {"element": icons[0]["id"]})
                assert not tapped.is_error, tapped
                after, _ = _observation(await agent.call_tool("observe", {"format": "none"}))
                assert after["foreground"] == "com.android.settings"
                assert "elements" in after and "Settings item 1" in json.dumps(after)

            # act: a batch that settles, Unicode typed, then the new observation
            acted, image = _observation(
                await agent.call_tool(
                    "act",
                    {
                        "actions": [
                            {"type": "type", "text": "héllo שלום 你好"},
                            {"type": "key", "key": "home"},
                        ],
                        "observe": {"format": "jpeg"},
                    },
                )
            )
            assert acted["settled"] and [a["ok"] for a in acted["actions"]] == [True, True]
            assert acted["foreground"] == "com.android.launcher3" and image is not None
            logs = await http.get(
                f"{status['apiUrl']}/logs",
                headers={"Authorization": f"Bearer {status['token']}"},
            )
            assert any(i["tag"] == "Input" for i in logs.json()["items"])

            bad = await agent.call_tool("tap", {"element": "e000000"})
            assert bad.is_error and "observe" in bad.content[0].text  # type: ignore[union-attr]
            shell = await agent.call_tool("shell", {"command": "uiautomator dump /dev/tty"})
            assert "UI hierchary dumped to" in shell.content[0].text  # type: ignore[union-attr]

            # install_app: an asset of the organization by name; a URL the host may not fetch
            created = await http.put("/v1/assets", json={"name": "notes.apk"})
            assert created.status_code == 200, created.text
            apk = io.BytesIO()
            with zipfile.ZipFile(apk, "w") as archive:
                archive.writestr("devyard-package.txt", "package=com.acme.notes\nlabel=Notes\n")
            put = await http.put(
                created.json()["signedUploadUrl"],
                content=apk.getvalue(),
                headers={"Content-Type": "application/octet-stream"},
            )
            assert put.status_code in (200, 201, 204), put.text
            installed = await agent.call_tool("install_app", {"asset": "notes.apk"})
            assert not installed.is_error and "com.acme.notes" in installed.content[0].text  # type: ignore[union-attr]
            # a private address that is not the server's own origin (which hosts trust for
            # installs from its signed asset URLs, docs/sdk-device.md)
            private = await agent.call_tool("install_app", {"url": "http://127.0.0.1:9/x.apk"})
            assert private.is_error and "not-allowed" in private.content[0].text  # type: ignore[union-attr]
            missing = await agent.call_tool("install_app", {"asset": "nope.apk"})
            assert missing.is_error and "GET /v1/assets" in missing.content[0].text  # type: ignore[union-attr]

        await _read_only(http, mcp_url, instance, key)
        await _reconnect(mcp_url, key)


async def _refusals(mcp_url: str, key: str) -> None:
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"},
        },
    }
    accept = {"Accept": "application/json, text/event-stream"}
    async with httpx.AsyncClient(timeout=30) as raw:
        for headers in ({}, {"Authorization": "Bearer dy_wrong"}, {"Authorization": "Basic x"}):
            refused = await raw.post(mcp_url, json=init, headers={**accept, **headers})
            assert refused.status_code == 401, refused.text
            assert set(refused.json()) == {"message", "reason"}
        browser = await raw.post(
            mcp_url,
            json=init,
            headers={**accept, "Authorization": f"Bearer {key}", "Origin": "https://evil.test"},
        )
        assert browser.status_code == 403 and browser.json()["reason"] == "forbidden"
        configured = await raw.post(
            mcp_url,
            json=init,
            headers={**accept, "Authorization": f"Bearer {key}", "Origin": ALLOWED_ORIGIN},
        )
        assert configured.status_code == 200 and "mcp-session-id" in configured.headers
        elsewhere = mcp_url.replace("/v1/instances/", "/v1/instances/nope")
        missing = await raw.post(
            elsewhere, json=init, headers={**accept, "Authorization": f"Bearer {key}"}
        )
        assert missing.status_code == 404, missing.text


async def _read_only(
    http: httpx.AsyncClient, mcp_url: str, instance: dict[str, Any], key: str
) -> None:
    org = instance["metadata"]["organizationId"]
    made = await http.post(f"/organizations/{org}/apiKeys", json={"name": "ro", "readOnly": True})
    assert made.status_code == 200, made.text
    for credential in (made.json()["key"], instance["status"]["streamToken"]):
        async with _client(mcp_url, credential) as reader:
            names = {tool.name for tool in (await reader.list_tools()).tools}
            assert names == READ_ONLY_TOOLS
            meta, image = _observation(await reader.call_tool("observe", {}))
            assert image is not None and meta["elements"]
            refused = await reader.call_tool("tap", {"x": 1, "y": 1})
            assert refused.is_error and "read-only" in refused.content[0].text  # type: ignore[union-attr]


async def _reconnect(mcp_url: str, key: str) -> None:
    """A session lives on across connections: a new HTTP client with the session id goes on."""
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=60)
    async with http:
        transport = streamable_http_client(mcp_url, http_client=http, terminate_on_close=False)
        async with Client(transport, mode="legacy") as first:
            await first.list_tools()
    init = {
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "t", "version": "1"}},
    }  # fmt: skip
    headers = {"Authorization": f"Bearer {key}", "Accept": "application/json, text/event-stream"}
    async with httpx.AsyncClient(timeout=30) as one:
        opened = await one.post(mcp_url, json=init, headers=headers)
        session = opened.headers["mcp-session-id"]
    async with httpx.AsyncClient(timeout=30) as other:  # a new connection, the same session
        headers |= {"Mcp-Session-Id": session, "Mcp-Protocol-Version": "2025-06-18"}
        done = await other.post(
            mcp_url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=headers
        )
        assert done.status_code == 202, done.text
        listed = await other.post(
            mcp_url, json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, headers=headers
        )
        assert listed.status_code == 200 and "observe" in listed.text
        stolen = await other.post(
            mcp_url.replace(mcp_url.split("/")[-2], "other"),
            json={"jsonrpc": "2.0", "id": 3, "method": "tools/list"},
            headers=headers,
        )
        assert stolen.status_code in (401, 404)


async def _typescript_round_trip(mcp_url: str, key: str) -> None:
    assert NODE is not None
    done = await trio.run_process(
        [NODE, str(NODE_DIR / "roundtrip.mjs"), mcp_url, key],
        capture_stdout=True,
        capture_stderr=True,
        check=False,
        cwd=NODE_DIR,
    )
    assert done.returncode == 0, done.stderr.decode()
    report = json.loads(done.stdout.decode().strip().splitlines()[-1])
    assert report["tools"] >= 10 and report["image"] and report["tapped"] == "com.android.settings"
