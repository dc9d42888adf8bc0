"""Spec 2.6 and 5: a scoped token with ``device:<instance>:install`` opens the install
operation of that instance's device API (``POST {apiUrl}/apps``), so a browser installs an app
without the organization key, and nothing else of it: not another instance, not another
operation, not another organization's instance, not after its revocation."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path
from typing import Any

import httpx

from devyard.server.bootstrap import bootstrap_organization
from devyard.server.config import ListenAddress, ServerConfig
from devyard.server.serve import open_configured_store

from .conftest import Rig, upgrade_refusal

APK = {"Content-Type": "application/vnd.android.package-archive"}


def _apk(package: str) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as apk:
        apk.writestr("AndroidManifest.xml", f'<manifest package="{package}"/>')
        apk.writestr("classes.dex", b"dex\n035\0" + bytes(4000))
    return buffer.getvalue()


async def _mint(client: httpx.AsyncClient, *scopes: str) -> dict[str, Any]:
    made = await client.post("/v1/scoped_tokens", json={"scopes": list(scopes)})
    assert made.status_code == 200, made.text
    body: dict[str, Any] = made.json()
    return body


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def _apps(http: httpx.AsyncClient, instance: dict[str, Any]) -> set[str]:
    status = instance["status"]
    listed = await http.get(status["apiUrl"] + "/apps", headers=_bearer(status["token"]))
    assert listed.status_code == 200, listed.text
    return {app["id"] for app in listed.json()["items"]}


async def _other_org(rig: Rig, tmp_path: Path) -> httpx.AsyncClient:
    config = ServerConfig(data_dir=tmp_path / "server", listen=ListenAddress("127.0.0.1", 0))
    async with open_configured_store(config) as store:
        made = await bootstrap_organization(store, org_name="other", user_name="other-admin")
    return httpx.AsyncClient(base_url=rig.url, headers=_bearer(made.plaintext_key))


async def test_an_install_scope_opens_that_instances_install_and_nothing_else(
    rig: Rig, tmp_path: Path
) -> None:
    mine, neighbour = await rig.create("android"), await rig.create("android")
    mine_id = mine["metadata"]["id"]
    api = mine["status"]["apiUrl"]
    scoped = await _mint(rig.client, f"device:{mine_id}:install")
    auth = _bearer(scoped["token"])
    async with httpx.AsyncClient(timeout=30) as http:
        # allowed: the install, with no organization key and no instance token
        installed = await http.post(
            api + "/apps", content=_apk("com.example.one"), headers=APK | auth
        )
        assert installed.status_code == 201, installed.text
        assert "com.example.one" in await _apps(http, mine)

        # refused: every other operation of the same device API, and the stream URLs
        for method, path in (
            ("GET", "/apps"),
            ("GET", "/"),
            ("GET", "/screenshot"),
            ("POST", "/shell"),
            ("DELETE", "/apps/com.example.one"),
        ):
            answer = await http.request(method, api + path, headers=auth, json={"command": "id"})
            assert answer.status_code == 403, (method, path, answer.text)
            assert answer.json()["reason"] == "insufficient_scope", answer.text
        assert "com.example.one" in await _apps(http, mine)  # the DELETE did nothing
        watch = await http.get(
            mine["status"]["signedStreamUrl"].split("?")[0], params={"token": scoped["token"]}
        )
        assert watch.status_code in (403, 404), watch.text
        status, body = await upgrade_refusal(mine["status"]["adbWebSocketUrl"], headers=auth)
        assert (status, body["reason"]) == (403, "insufficient_scope"), body

        # refused: another instance of the same organization
        other_api = neighbour["status"]["apiUrl"]
        refused = await http.post(other_api + "/apps", content=_apk("com.x"), headers=APK | auth)
        assert refused.status_code == 401, refused.text
        assert "com.x" not in await _apps(http, neighbour)

        # the wildcard opens every instance of the organization, still only the install
        every = _bearer((await _mint(rig.client, "device:*:install"))["token"])
        wide = await http.post(
            other_api + "/apps", content=_apk("com.example.two"), headers=APK | every
        )
        assert wide.status_code == 201, wide.text
        assert (await http.get(other_api + "/apps", headers=every)).status_code == 403

        # another scope (asset read) opens no install
        reader = _bearer((await _mint(rig.client, "asset:*:read"))["token"])
        nope = await http.post(api + "/apps", content=_apk("com.example.r"), headers=APK | reader)
        assert nope.status_code == 401, nope.text

        # another organization: its tokens open none of ours, ours none of its
        async with await _other_org(rig, tmp_path) as other:
            made = await other.post("/v1/android_instances", params={"wait": "true"}, json={})
            assert made.status_code == 200, made.text
            theirs = made.json()
            minted = await other.post("/v1/scoped_tokens", json={"scopes": ["device:*:install"]})
            foreign = _bearer(minted.json()["token"])
            crossed = await http.post(
                api + "/apps", content=_apk("com.evil"), headers=APK | foreign
            )
            assert crossed.status_code == 401, crossed.text
            inward = await http.post(
                theirs["status"]["apiUrl"] + "/apps", content=_apk("com.evil"), headers=APK | every
            )
            assert inward.status_code == 401, inward.text
            aimed = _bearer(
                (await _mint(rig.client, f"device:{theirs['metadata']['id']}:install"))["token"]
            )
            aimed_answer = await http.post(
                theirs["status"]["apiUrl"] + "/apps", content=_apk("com.evil"), headers=APK | aimed
            )
            assert aimed_answer.status_code == 401, aimed_answer.text
        assert "com.evil" not in await _apps(http, mine)

        # revoked: refused from the next request on
        revoked = await rig.client.delete(f"/v1/scoped_tokens/{scoped['id']}")
        assert revoked.status_code == 200, revoked.text
        late = await http.post(api + "/apps", content=_apk("com.example.late"), headers=APK | auth)
        assert late.status_code == 401, late.text
