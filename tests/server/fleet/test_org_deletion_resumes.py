"""An organization's deletion that fails halfway (a real blob-store failure: the asset's file
is a directory the server cannot unlink) leaves it ``deleting``, with what was done done; a
retry of DELETE finishes it, and so does the next server start."""

from __future__ import annotations

import gc
import shutil
from pathlib import Path

import pytest
import trio

from .rig import Fleet, Org, fleet_config, make_org, open_fleet
from .test_org_deletion import _asset, _blob_files, _ready_instance


async def _break_blob(fleet: Fleet, org: Org) -> Path:
    """The asset's bytes become a directory: unlinking it fails (as a broken disk would)."""
    asset = await _asset(fleet, org, "app.apk")
    (blob,) = _blob_files(fleet, asset["id"])
    blob.unlink()
    (blob / "stuck").mkdir(parents=True)
    return blob


async def _fails_halfway(fleet: Fleet, org: Org) -> Path:
    instance = await _ready_instance(fleet, org)
    blob = await _break_blob(fleet, org)
    failed = await fleet.http.delete(f"{fleet.url}/organizations/{org.id}", headers=org.headers)
    assert failed.status_code in (503, 507), failed.text
    assert failed.json()["reason"]
    # what was done stays done: the instance ended; the organization is half-deleted
    got = await fleet.http.get(
        f"{fleet.url}/v1/android_instances/{instance['metadata']['id']}", headers=org.headers
    )
    assert got.json()["status"]["state"] == "terminated"
    assert got.json()["status"]["terminationReason"] == "UserRequested"
    refused = await fleet.http.post(
        f"{fleet.url}/v1/android_instances", json={}, headers=org.headers
    )
    assert refused.status_code == 409, "no new instance in an organization being deleted"
    assert refused.json()["reason"] == "organization_deleting"
    still = await fleet.http.get(f"{fleet.url}/organizations/{org.id}", headers=org.headers)
    assert still.status_code == 200, "its key works until the deletion finishes (a retry)"
    return blob


async def test_a_retry_finishes_a_deletion_that_failed_halfway(tmp_path: Path) -> None:
    config = fleet_config(tmp_path)
    org = await make_org(config, "acme")
    async with open_fleet(config, tmp_path) as fleet:
        await fleet.add_host("host", capacity=2)
        blob = await _fails_halfway(fleet, org)
        shutil.rmtree(blob)  # the disk is fixed
        retried = await fleet.http.delete(
            f"{fleet.url}/organizations/{org.id}", headers=org.headers
        )
        assert retried.status_code == 200, retried.text
        gone = await fleet.http.get(f"{fleet.url}/whoami", headers=org.headers)
        assert gone.status_code == 401


# The first server stops under a linked host: trio-websocket 0.12 leaves that client socket to
# the GC (docs/edge.md, open points); collect it here, where it is expected.
@pytest.mark.filterwarnings("ignore::ResourceWarning")
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
async def test_the_next_server_start_finishes_an_interrupted_deletion(tmp_path: Path) -> None:
    try:
        await _resumed(tmp_path)
    finally:
        gc.collect()


async def _resumed(tmp_path: Path) -> None:
    config = fleet_config(tmp_path)
    org, other = await make_org(config, "acme"), await make_org(config, "other")
    async with open_fleet(config, tmp_path) as fleet:
        await fleet.add_host("host", capacity=2)
        blob = await _fails_halfway(fleet, org)
    shutil.rmtree(blob)
    async with open_fleet(config, tmp_path) as fleet:
        with trio.fail_after(15):
            while True:
                gone = await fleet.http.get(f"{fleet.url}/whoami", headers=org.headers)
                if gone.status_code == 401:
                    break
                await trio.sleep(0.05)
        kept = await fleet.http.get(f"{fleet.url}/whoami", headers=other.headers)
        assert kept.status_code == 200
