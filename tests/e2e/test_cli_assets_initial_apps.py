"""``spec.initialAssets`` end to end: ``devyard up`` (server, host daemon, virtual device), an
app pushed with the real CLI, an Android instance that is ready only with the app installed
and in the foreground; a missing asset fails the create, naming it."""

from __future__ import annotations

import io
import signal
import zipfile
from pathlib import Path

import httpx
import pytest
import trio

from ._cli import clean_env, run, start

pytestmark = pytest.mark.slow


def _apk(path: Path, package: str) -> Path:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("devyard-package.txt", f"package={package}\nlabel=Demo\nversion=1.0\n")
    path.write_bytes(buffer.getvalue())
    return path


async def _create(http: httpx.AsyncClient, spec: dict[str, object]) -> httpx.Response:
    while True:  # until the companion host daemon has registered, there is no capacity
        created = await http.post(
            "/v1/android_instances", params={"wait": "true"}, json={"spec": spec}
        )
        if created.status_code != 409:
            return created
        await trio.sleep(0.1)


async def test_an_instance_becomes_ready_with_its_initial_app_installed(tmp_path: Path) -> None:
    data = tmp_path / "data"
    apk = _apk(tmp_path / "demo.apk", "com.acme.demo")
    with trio.fail_after(120):
        up = await start(["up", "--data-dir", str(data), "--port", "0"], clean_env(), tmp_path)
        url = (await up.read_until(r"serving at (http://127\.0\.0\.1:\d+)")).group(1)
        key = (data / "admin-api-key").read_text().strip()
        env = clean_env(DEVYARD_BASE_URL=url, DEVYARD_API_KEY=key)
        pushed = await run(["asset", "push", str(apk), "--os", "android"], env, tmp_path)
        assert pushed.returncode == 0, pushed.stderr
        auth = {"Authorization": f"Bearer {key}"}
        async with httpx.AsyncClient(base_url=url, headers=auth, timeout=60) as http:
            missing = await _create(
                http,
                {
                    "initialAssets": [
                        {"kind": "App", "source": "AssetName", "assetName": "nope.apk"}
                    ]
                },
            )
            assert missing.status_code == 404, missing.text
            assert "'nope.apk'" in missing.json()["message"]
            no_field = await _create(
                http, {"initialAssets": [{"kind": "App", "source": "AssetNames"}]}
            )
            assert no_field.status_code == 400 and "assetNames" in no_field.json()["message"]

            created = await _create(
                http,
                {
                    "initialAssets": [
                        {
                            "kind": "App",
                            "source": "AssetName",
                            "assetName": "demo.apk",
                            "launchMode": "ForegroundIfRunning",
                        }
                    ]
                },
            )
            assert created.status_code == 200, created.text
            status = created.json()["status"]
            assert status["state"] == "ready"
            device = {"Authorization": f"Bearer {status['token']}"}
            apps = await http.get(f"{status['apiUrl']}/apps", headers=device)
            assert apps.status_code == 200, apps.text
            [demo] = [a for a in apps.json()["items"] if a["id"] == "com.acme.demo"]
            assert demo["running"] is True
            assert created.json()["spec"]["initialAssets"][0]["assetName"] == "demo.apk"
            assert "url" not in str(created.json()["spec"]), "signed URLs are not echoed"
        assert await up.stop(signal.SIGINT) == 0
