"""Issue 14 finding 4, what remained: creates racing an organization's deletion leave no live
instance and no held capacity (SQLite and PostgreSQL), and while an organization is being
deleted every create (instances, tunnels, assets, API keys, scoped tokens) is a 409 that says
so."""

from __future__ import annotations

from pathlib import Path

import attrs
import httpx
import trio

from devyard.server.serve import open_configured_store
from tests.polling import until

from .rig import Fleet, Org, fleet_config, make_org, open_fleet
from .test_org_deletion_resumes import _fails_halfway

CAPACITY = 8
CREATORS = 4
DELETING = "organization_deleting"


async def test_creates_racing_a_delete_leave_no_live_instance_and_no_held_capacity(
    tmp_path: Path, database_target: str
) -> None:
    config = fleet_config(tmp_path)
    if database_target.startswith("postgres"):
        config = attrs.evolve(config, database_url=database_target)
    doomed, kept = await make_org(config, "doomed"), await make_org(config, "kept")
    async with open_fleet(config, tmp_path) as fleet:
        await fleet.add_host("host", capacity=CAPACITY)
        answers: list[httpx.Response] = []
        some_created = trio.Event()

        async def creator() -> None:
            # creates back to back until the organization refuses (deleting, then gone)
            while True:
                answer = await fleet.http.post(
                    f"{fleet.url}/v1/android_instances", json={}, headers=doomed.headers
                )
                answers.append(answer)
                if sum(a.status_code == 200 for a in answers) >= 2:
                    some_created.set()
                if answer.status_code in (401, 409):
                    return

        async def delete() -> None:
            await some_created.wait()
            deleted = await fleet.http.delete(
                f"{fleet.url}/organizations/{doomed.id}", headers=doomed.headers
            )
            assert deleted.status_code == 200, deleted.text

        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:
                for _ in range(CREATORS):
                    nursery.start_soon(creator)
                nursery.start_soon(delete)

        for answer in answers:
            assert answer.status_code in (200, 401, 409), answer.text
            if answer.status_code == 409:
                assert answer.json()["reason"] in (DELETING, "no_capacity"), answer.text
        assert any(a.status_code == 200 for a in answers)

        # nothing of the organization is live, in the store or on the host
        async with open_configured_store(config) as store:
            live = await store.list_live_instances()
        assert [i.id for i in live if i.org_id == doomed.id] == []
        await until(lambda: _async(fleet.hosts()[0].running == 0))
        # and no capacity is held: another organization fills the whole host
        await _fill(fleet, kept)


async def _fill(fleet: Fleet, org: Org) -> None:
    for _ in range(CAPACITY):
        made = await fleet.http.post(
            f"{fleet.url}/v1/android_instances", json={}, headers=org.headers
        )
        assert made.status_code == 200, made.text
    full = await fleet.http.post(f"{fleet.url}/v1/android_instances", json={}, headers=org.headers)
    assert full.status_code == 409 and full.json()["reason"] == "no_capacity", full.text


async def test_every_create_in_an_organization_being_deleted_is_a_409(tmp_path: Path) -> None:
    config = fleet_config(tmp_path)
    org, other = await make_org(config, "acme"), await make_org(config, "other")
    async with open_fleet(config, tmp_path) as fleet:
        await fleet.add_host("host", capacity=2)
        await _fails_halfway(fleet, org)  # acme stays ``deleting``; its key still works
        url = fleet.url
        creates = {
            "instance": ("POST", f"{url}/v1/android_instances", {}),
            "tunnel": (
                "POST",
                f"{url}/v1/tunnels",
                {"name": "intranet", "selectors": ["intranet.example:8080"]},
            ),
            "asset": ("PUT", f"{url}/v1/assets", {"name": "new.apk"}),
            "api key": ("POST", f"{url}/organizations/{org.id}/apiKeys", {"name": "ci"}),
            "scoped token": ("POST", f"{url}/v1/scoped_tokens", {"scopes": ["asset:*:read"]}),
        }
        for what, (method, target, body) in creates.items():
            answer = await fleet.http.request(method, target, json=body, headers=org.headers)
            assert answer.status_code == 409, (what, answer.text)
            assert answer.json()["reason"] == DELETING, (what, answer.text)
            assert "being deleted" in answer.json()["message"], (what, answer.text)
            # the same create in another organization works
            elsewhere = target.replace(org.id, other.id)
            fine = await fleet.http.request(method, elsewhere, json=body, headers=other.headers)
            assert fine.status_code == 200, (what, fine.text)


async def _async(value: bool) -> bool:
    await trio.lowlevel.checkpoint()
    return value
