"""Spec 2.1, Android split APKs: an ``initialAssets`` entry with plural ``sources`` installs
ONE app from all its splits (``pm install-multiple`` semantics) on the virtual device; a set
that is not one app's splits ends the instance with pm's failure; the form is Android's."""

from __future__ import annotations

import io
import zipfile
from typing import Any

import httpx
import trio

from .conftest import Rig

OCTET = {"Content-Type": "application/octet-stream"}


def _apk(package: str, split: str | None = None, version_code: str = "7") -> bytes:
    lines = [f"package={package}", f"versionCode={version_code}", "label=Split Demo"]
    if split is not None:
        lines.append(f"split={split}")
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("devyard-package.txt", "\n".join(lines) + "\n")
    return buffer.getvalue()


async def _upload(rig: Rig, name: str, data: bytes) -> None:
    asset = await rig.client.put("/v1/assets", json={"name": name})
    assert asset.status_code == 200, asset.text
    put = await rig.client.put(asset.json()["signedUploadUrl"], content=data, headers=OCTET)
    assert put.status_code == 200, put.text


def _split_entry(base: str, *splits: str) -> dict[str, Any]:
    return {
        "kind": "App",
        "sources": [
            {"source": "AssetName", "assetName": base},
            {"source": "AssetNames", "assetNames": list(splits)},
        ],
        "launchMode": "ForegroundIfRunning",
    }


async def _create(rig: Rig, kind: str, entry: dict[str, Any]) -> httpx.Response:
    return await rig.client.post(
        f"/v1/{kind}_instances",
        params={"wait": "true"},
        json={"spec": {"initialAssets": [entry]}},
        timeout=60,
    )


async def test_sources_install_one_app_from_all_its_splits(rig: Rig) -> None:
    await _upload(rig, "base.apk", _apk("com.example.split"))
    await _upload(rig, "split_config.arm64.apk", _apk("com.example.split", "config.arm64"))
    await _upload(rig, "split_config.en.apk", _apk("com.example.split", "config.en"))
    created = await _create(
        rig, "android", _split_entry("base.apk", "split_config.arm64.apk", "split_config.en.apk")
    )
    assert created.status_code == 200, created.text
    status = created.json()["status"]
    assert status["state"] == "ready", status
    auth = {"Authorization": f"Bearer {status['token']}"}
    async with httpx.AsyncClient(headers=auth) as http:
        listed = await http.get(status["apiUrl"] + "/apps")
    installed = [a for a in listed.json()["items"] if not a["system"]]
    assert [(a["id"], a["label"], a["running"]) for a in installed] == [
        ("com.example.split", "Split Demo", True)
    ], "one app, not three, launched as asked"


async def test_a_set_that_is_not_one_apps_splits_fails_the_instance(rig: Rig) -> None:
    await _upload(rig, "base.apk", _apk("com.example.split"))
    await _upload(rig, "other.apk", _apk("com.example.other", "config.en"))
    await _upload(rig, "base2.apk", _apk("com.example.split"))
    await _upload(rig, "old.apk", _apk("com.example.split", "config.xx", version_code="6"))
    for splits, failure in (
        (("other.apk",), "package"),
        (("base2.apk",), "two base APKs"),
        (("old.apk",), "versionCode"),
    ):
        created = await _create(rig, "android", _split_entry("base.apk", *splits))
        assert created.status_code == 200, created.text
        iid = created.json()["metadata"]["id"]

        async def ended(iid: str = iid) -> dict[str, Any]:
            got = await rig.client.get(f"/v1/android_instances/{iid}")
            body: dict[str, Any] = got.json()["status"]
            return body

        status = created.json()["status"]
        with trio.fail_after(30):
            while status["state"] != "terminated":
                await trio.sleep(0.05)
                status = await ended()
        assert "INSTALL_FAILED_INVALID_APK" in status["errorMessage"], status
        assert failure in status["errorMessage"], status


async def test_sources_are_android_only_and_exclusive_with_source(rig: Rig) -> None:
    await _upload(rig, "base.apk", _apk("com.example.split"))
    ios = await _create(rig, "ios", _split_entry("base.apk", "base.apk"))
    assert ios.status_code == 422, ios.text
    assert "sources" in ios.json()["message"]
    both = {**_split_entry("base.apk", "base.apk"), "source": "AssetName", "assetName": "base.apk"}
    refused = await _create(rig, "android", both)
    assert refused.status_code == 400, refused.text
    missing = await _create(rig, "android", {"kind": "App", "sources": [{"source": "AssetNames"}]})
    assert missing.status_code == 400, missing.text
    assert "assetNames" in missing.json()["message"], missing.text
