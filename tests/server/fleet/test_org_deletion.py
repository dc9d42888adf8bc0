"""Issue 14 finding 4: deleting an organization ends its devices on their real host, closes
its connectors for good, removes its blobs and revokes its keys, and touches nothing of
another organization."""

from __future__ import annotations

import signal
from functools import partial
from pathlib import Path
from typing import Any

import trio

from tests.e2e._cli import Running, clean_env, start
from tests.polling import until

from .rig import Fleet, Org, fleet_config, make_org, open_fleet

TUNNEL_DELETED_EXIT = 12  # devyard connector's exit code: the tunnel was deleted


async def _ready_instance(fleet: Fleet, org: Org) -> dict[str, Any]:
    created = await fleet.http.post(
        f"{fleet.url}/v1/android_instances",
        params={"wait": "true"},
        json={},
        headers=org.headers,
    )
    assert created.status_code == 200, created.text
    assert created.json()["status"]["state"] == "ready"
    body: dict[str, Any] = created.json()
    return body


async def _tunnel_token(fleet: Fleet, org: Org, name: str) -> str:
    made = await fleet.http.post(
        f"{fleet.url}/v1/tunnels",
        json={"name": name, "selectors": ["intranet.example:8080"]},
        headers=org.headers,
    )
    assert made.status_code == 200, made.text
    token: str = made.json()["token"]
    return token


async def _tunnel_online(fleet: Fleet, org: Org, name: str) -> bool:
    got = await fleet.http.get(f"{fleet.url}/v1/tunnels/{name}", headers=org.headers)
    return got.status_code == 200 and got.json()["status"] == "online"


async def _asset(fleet: Fleet, org: Org, name: str) -> dict[str, Any]:
    asset = await fleet.http.put(f"{fleet.url}/v1/assets", json={"name": name}, headers=org.headers)
    assert asset.status_code == 200, asset.text
    put = await fleet.http.put(
        asset.json()["signedUploadUrl"],
        content=b"bytes of " + name.encode(),
        headers={"Content-Type": "application/octet-stream"},
    )
    assert put.status_code == 200, put.text
    body: dict[str, Any] = asset.json()
    return body


def _blob_files(fleet: Fleet, asset_id: str) -> list[Path]:
    return [p for p in fleet.config.data_dir.rglob(f"{asset_id}*") if p.is_file()]


async def test_deleting_an_organization_ends_everything_of_it_and_nothing_else(
    tmp_path: Path,
) -> None:
    await _deletion(tmp_path)


async def _deletion(tmp_path: Path) -> None:
    config = fleet_config(tmp_path)
    doomed, kept = await make_org(config, "doomed"), await make_org(config, "kept")
    async with open_fleet(config, tmp_path) as fleet:
        host_id = await fleet.add_host("host", capacity=4)
        supervisor = fleet.supervisors[host_id]
        connectors: dict[str, Running] = {}
        for org, name in ((doomed, "intranet"), (kept, "intranet"), (kept, "other")):
            token_file = tmp_path / f"{org.id}-{name}.token"
            token_file.write_text(await _tunnel_token(fleet, org, name))
            args = ["connector", "run", "--server", fleet.url, "--token-file", str(token_file)]
            connectors[f"{org.id}/{name}"] = await start(args, clean_env(), tmp_path)
        try:
            # all three online first: "other" is checked after the deletion
            for org, name in ((doomed, "intranet"), (kept, "intranet"), (kept, "other")):
                await until(partial(_tunnel_online, fleet, org, name))
            gone = await _ready_instance(fleet, doomed)
            stays = await _ready_instance(fleet, kept)
            doomed_asset = await _asset(fleet, doomed, "app.apk")
            kept_asset = await _asset(fleet, kept, "app.apk")
            assert _blob_files(fleet, doomed_asset["id"])
            gone_id, stays_id = gone["metadata"]["id"], stays["metadata"]["id"]
            assert supervisor.sandbox_of(gone_id).is_dir()

            deleted = await fleet.http.delete(
                f"{fleet.url}/organizations/{doomed.id}", headers=doomed.headers
            )
            assert deleted.status_code == 200, deleted.text

            # the device is gone from its host and its slot is free
            await until(lambda: _async(not supervisor.sandbox_of(gone_id).exists()))
            await until(lambda: _async(fleet.hosts()[0].running == 1))
            # its connector was told for good and stopped; the key is dead; the blob is gone
            with trio.fail_after(15):
                code = await connectors[f"{doomed.id}/intranet"].process.wait()
            assert code == TUNNEL_DELETED_EXIT
            again = await fleet.http.get(f"{fleet.url}/whoami", headers=doomed.headers)
            assert again.status_code == 401
            assert _blob_files(fleet, doomed_asset["id"]) == []

            # the other organization's instance, tunnels and asset are untouched
            got = await fleet.http.get(
                f"{fleet.url}/v1/android_instances/{stays_id}", headers=kept.headers
            )
            assert got.json()["status"]["state"] == "ready"
            assert supervisor.sandbox_of(stays_id).is_dir()
            assert await _tunnel_online(fleet, kept, "intranet")
            assert await _tunnel_online(fleet, kept, "other")
            for name in ("intranet", "other"):
                assert connectors[f"{kept.id}/{name}"].process.returncode is None
            assert _blob_files(fleet, kept_asset["id"])
        finally:
            for running in connectors.values():
                if running.process.returncode is None:
                    await running.stop(signal.SIGTERM)


async def _async(value: bool) -> bool:
    await trio.lowlevel.checkpoint()
    return value
