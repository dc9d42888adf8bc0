"""Releasing a reservation takes its locks in the reaper's order (docs/scale-out.md "Lock
order"): a reaper that deleted a host's lease and is about to delete its reservations never
deadlocks with a release of one of them; a real second connection plays the reaper's
transaction, one statement at a time."""

from __future__ import annotations

from functools import partial
from typing import Any

import psycopg
import pytest
import trio

from tests.polling import until
from tests.server.cluster.conftest import host_info, open_replica

pytestmark = pytest.mark.postgres


def _waiting_on_a_lock(url: str) -> bool:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND wait_event_type = 'Lock'"
        ).fetchone()
    return row is not None and row[0] > 0


async def test_a_release_never_deadlocks_with_the_reaper_of_its_host(cluster_url: str) -> None:
    async with open_replica(cluster_url, "r0") as r0:
        await r0.hosts.host_linked(host_info("host_x", 2))
        assert await r0.hosts.reserve("inst_1", ["host_x"]) == "host_x"
        reaper: psycopg.Connection[Any] = await trio.to_thread.run_sync(
            partial(psycopg.connect, cluster_url)
        )
        try:
            # the reaper's transaction, first half: the expired lease is deleted (locked)
            await trio.to_thread.run_sync(
                reaper.execute, "DELETE FROM host_leases WHERE host_id = 'host_x'"
            )
            released: list[str | None] = []

            async def release() -> None:
                released.append(await r0.cluster.release("inst_1"))

            async with trio.open_nursery() as nursery:
                nursery.start_soon(release)
                # the release waits for the reaper's lock, before it locks anything itself
                await until(lambda: trio.to_thread.run_sync(_waiting_on_a_lock, cluster_url), 20)
                # second half: the host's reservations (the old order held one: a deadlock)
                deleted = await trio.to_thread.run_sync(
                    reaper.execute, "DELETE FROM capacity_reservations WHERE host_id = 'host_x'"
                )
                assert deleted.rowcount == 1
                await trio.to_thread.run_sync(reaper.commit)
        finally:
            await trio.to_thread.run_sync(reaper.close)
        assert released == [None], "reaped meanwhile: nothing left to release"
        assert await r0.cluster.reservations("host_x") == 0
