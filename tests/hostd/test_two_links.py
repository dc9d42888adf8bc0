"""Where a host's or a connector's two links dial (`core.replica_links.LinkSlots`, docs/protocol.md
12): the entry URL until the server names a set, then two different replicas, never one
replica twice, a wait while there is nowhere to go, and the replica that comes back again.
The links themselves run for real in tests/server/cluster/test_two_links.py."""

from __future__ import annotations

from typing import Any, cast

import trio
import trio.testing

from devyard.core.link import HOST_PATH
from devyard.core.replica_links import LinkSlots

ENTRY = "ws://lb.test/v1/host_connections"
SET = [{"id": "ra", "url": "http://ra.test"}, {"id": "rb", "url": "https://rb.test"}]
URL = {"ra": "ws://ra.test" + HOST_PATH, "rb": "wss://rb.test" + HOST_PATH}


class Link:
    """One slot's registered link, held until `end`."""

    def __init__(self, slots: LinkSlots, slot: int) -> None:
        self.ended = trio.Event()
        self.body = slots.serve(slot, self._serve)

    async def _serve(self, *_: Any) -> None:
        await self.ended.wait()


async def _register(
    nursery: trio.Nursery, slots: LinkSlots, slot: int, registered: dict[str, Any]
) -> Link:
    link = Link(slots, slot)
    nursery.start_soon(link.body, cast(Any, None), cast(Any, None), registered)
    await trio.testing.wait_all_tasks_blocked()
    return link


async def _waits(target: Any) -> bool:
    """Whether *target* has nowhere to go now (it blocks until a change)."""
    with trio.move_on_after(1):
        await target()
        return False
    return True


async def test_the_slots_spread_over_the_set_and_never_share_a_replica(
    autojump_clock: trio.testing.MockClock,
) -> None:
    slots = LinkSlots(ENTRY, HOST_PATH)
    shutdown = trio.Event()
    first, second = slots.target(0, shutdown), slots.target(1, shutdown)
    async with trio.open_nursery() as nursery:
        assert await first() == ENTRY  # nothing known: the load balancer
        assert await _waits(second)  # one link while the server names no set
        assert slots.links_wanted() == 1
        on_a = await _register(nursery, slots, 0, {"replica": "ra", "replicas": SET})
        assert slots.links_wanted() == 2
        assert await second() == URL["rb"]  # the other replica, directly
        on_b = await _register(nursery, slots, 1, {"replica": "rb", "replicas": SET})
        assert set(slots.linked()) == {"ra", "rb"}

        on_a.ended.set()  # ra goes away; rb's link stays
        await trio.testing.wait_all_tasks_blocked()
        assert slots.linked() == ["rb"]
        assert await first() == URL["ra"]  # never rb (taken): ra again, with the backoff
        slots.learn({"replicas": SET[1:]})  # ra left the set: nowhere to go
        assert await _waits(first)
        slots.learn({"replicas": SET})  # ra is back: rebalance
        assert await first() == URL["ra"]
        on_a = await _register(nursery, slots, 0, {"replica": "ra", "replicas": SET})

        slots.moving(1)  # rb drains: its slot avoids it and waits (ra is taken)
        assert await _waits(second)
        on_b.ended.set()
        on_a.ended.set()  # no link left, the last attempt failed: the entry again
        await trio.testing.wait_all_tasks_blocked()
        assert await first() == ENTRY
        shutdown.set()
        assert await second() is None  # a stop ends a waiting slot


async def test_one_replica_or_an_older_server_means_one_link(
    autojump_clock: trio.testing.MockClock,
) -> None:
    slots = LinkSlots(ENTRY, HOST_PATH)
    shutdown = trio.Event()
    async with trio.open_nursery() as nursery:
        assert await slots.target(0, shutdown)() == ENTRY
        old = await _register(nursery, slots, 0, {"type": "registered", "host_id": "h"})
        assert await _waits(slots.target(1, shutdown))
        old.ended.set()
        await trio.testing.wait_all_tasks_blocked()
        assert await slots.target(0, shutdown)() == ENTRY
        lone = await _register(nursery, slots, 0, {"replica": "ra", "replicas": SET[:1]})
        assert await _waits(slots.target(1, shutdown))
        assert slots.links_wanted() == 1
        lone.ended.set()
        shutdown.set()
