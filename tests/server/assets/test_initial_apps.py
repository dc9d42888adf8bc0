"""``spec.initialAssets``: the API's resolution (errors naming the asset) and the host's
download-and-install step, against a real server and a virtual device."""

from __future__ import annotations

import hashlib
import io
import zipfile
from pathlib import Path
from typing import Any

import pytest

from devyard.hostd.drivers import DeviceSpec, Platform
from devyard.hostd.drivers.virtual import open_virtual_device
from devyard.hostd.initial_assets import InitialAssetError, install_initial_assets

from .conftest import Callers, Served

OCTET = {"Content-Type": "application/octet-stream"}


def _apk(package: str) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("devyard-package.txt", f"package={package}\n")
    return buffer.getvalue()


async def _uploaded(
    served: Served, callers: Callers, name: str, data: bytes, **kw: object
) -> dict[str, Any]:
    asset = await served.upsert(callers.member, name, **kw)
    put = await served.http.put(str(asset["signedUploadUrl"]), content=data, headers=OCTET)
    assert put.status_code == 200, put.text
    return asset


async def _create(
    served: Served, callers: Callers, platform: str, entries: list[dict[str, Any]]
) -> Any:
    return await served.http.post(
        f"{served.url}/v1/{platform}_instances",
        json={"spec": {"initialAssets": entries}},
        headers=callers.member.headers,
    )


async def test_create_fails_naming_a_missing_empty_or_foreign_asset(
    served: Served, callers: Callers
) -> None:
    await served.upsert(callers.member, "empty.apk")
    await _uploaded(served, callers, "ios-only.ipa", b"ipa", os="ios")
    theirs = await served.upsert(callers.other_admin, "theirs.apk")
    app: dict[str, Any] = {"kind": "App"}
    cases: list[tuple[dict[str, Any], str, int, str]] = [
        (
            {**app, "source": "AssetName", "assetName": "missing.apk"},
            "android",
            404,
            "'missing.apk'",
        ),
        (
            {**app, "source": "AssetIDs", "assetIds": [theirs["id"]]},
            "android",
            404,
            str(theirs["id"]),
        ),
        (
            {**app, "source": "AssetNames", "assetNames": ["empty.apk"]},
            "android",
            422,
            "'empty.apk'",
        ),
        ({**app, "source": "AssetName", "assetName": "ios-only.ipa"}, "android", 422, "is for ios"),
        ({**app, "source": "URL", "url": "http://x/a.apk"}, "xcode", 422, "only ios and android"),
        ({**app, "source": "AssetNames"}, "android", 400, "assetNames"),
        ({**app, "source": "URL", "url": "ftp://x"}, "android", 400, "url"),
    ]
    for entry, platform, status, words in cases:
        response = await _create(served, callers, platform, [entry])
        assert response.status_code == status, (entry, response.text)
        assert words in response.json()["message"], (entry, response.text)


async def test_the_host_downloads_checks_installs_and_launches(
    served: Served, callers: Callers, tmp_path: Path
) -> None:
    first = await _uploaded(served, callers, "first.apk", _apk("com.acme.first"))
    await _uploaded(served, callers, "second.apk", _apk("com.acme.second"))
    get = await served.http.get(
        f"{served.url}/v1/assets",
        params={"includeDownloadUrl": "true"},
        headers=callers.viewer.headers,
    )
    urls = {a["name"]: (a["signedDownloadUrl"], a["md5"]) for a in get.json()}
    entries = [
        {"name": "first.apk", "url": urls["first.apk"][0], "md5": urls["first.apk"][1]},
        {
            "name": "second.apk",
            "url": urls["second.apk"][0],
            "md5": urls["second.apk"][1],
            "launchMode": "ForegroundIfRunning",
        },
    ]
    spec = DeviceSpec(
        platform=Platform.ANDROID, instance_id="android_t_1", sandbox_dir=tmp_path / "sb"
    )
    async with open_virtual_device(spec) as device:
        # the server that signs the URLs is on loopback: the host trusts its origin
        trusted = [served.url]
        await install_initial_assets(
            device, entries, tmp_path / "sb" / "initial-assets", trusted=trusted
        )
        apps = {a.app_id: a for a in await device.list_apps()}
        assert not apps["com.acme.first"].running
        assert apps["com.acme.second"].running

        wrong_md5 = [{**entries[0], "md5": hashlib.md5(b"other").hexdigest()}]
        with pytest.raises(InitialAssetError, match="checksum-mismatch"):
            await install_initial_assets(device, wrong_md5, tmp_path / "w", trusted=trusted)
        await served.http.delete(
            f"{served.url}/v1/assets/{first['id']}", headers=callers.member.headers
        )
        with pytest.raises(InitialAssetError, match=r"'first\.apk' \(unavailable\)"):
            await install_initial_assets(device, entries[:1], tmp_path / "w", trusted=trusted)
        await _uploaded(served, callers, "notes.txt", b"not a zip")
        get = await served.http.get(
            f"{served.url}/v1/assets",
            params={"nameFilter": "notes.txt", "includeDownloadUrl": "true"},
            headers=callers.viewer.headers,
        )
        [notes] = get.json()
        with pytest.raises(InitialAssetError, match=r"installing 'notes\.txt'"):
            await install_initial_assets(
                device,
                [{"name": "notes.txt", "url": notes["signedDownloadUrl"], "md5": notes["md5"]}],
                tmp_path / "w",
                trusted=trusted,
            )
