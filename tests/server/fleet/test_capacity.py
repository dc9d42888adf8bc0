"""Issue 14 finding 8: concurrent creates against one real host of capacity 2 never
over-commit it: exactly two are placed, the rest are the retryable 409, and no instance is
ended by the host for being "at capacity"."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import trio

from tests.polling import until

from .rig import fleet_config, make_org, open_fleet

CREATES = 12


async def test_concurrent_creates_never_over_commit_a_host(tmp_path: Path) -> None:
    config = fleet_config(tmp_path)
    org = await make_org(config, "acme")
    async with open_fleet(config, tmp_path) as fleet:
        await fleet.add_host("host", capacity=2)
        answers: list[httpx.Response] = []

        async def create() -> None:
            answers.append(
                await fleet.http.post(
                    f"{fleet.url}/v1/android_instances", json={}, headers=org.headers
                )
            )

        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                for _ in range(CREATES):
                    nursery.start_soon(create)
        created = [a.json() for a in answers if a.status_code == 200]
        refused = [a for a in answers if a.status_code != 200]
        assert len(created) == 2, [a.text for a in answers]
        assert {c["status"]["state"] for c in created} <= {"creating", "assigned", "ready"}
        for answer in refused:
            assert answer.status_code == 409, answer.text
            assert answer.json()["reason"] == "no_capacity"
            assert int(answer.headers["Retry-After"]) >= 1

        async def states() -> list[dict[str, Any]]:
            listed = await fleet.http.get(f"{fleet.url}/v1/android_instances", headers=org.headers)
            items: list[dict[str, Any]] = listed.json()["items"]
            return items

        async def both_ready() -> bool:
            return [i["status"]["state"] for i in await states()] == ["ready", "ready"]

        await until(both_ready)
        for item in await states():
            assert "capacity" not in str(item["status"].get("errorMessage", ""))
        (host,) = fleet.hosts()
        assert host.running == 2
