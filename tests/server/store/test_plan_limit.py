"""A plan's concurrency limit in the store (issue 19): creates racing for the last slots of an
organization get exactly the limit, on both backends; other platforms, other organizations and
ended instances do not count."""

from __future__ import annotations

import pytest
import trio

from devyard.server.store import Store
from devyard.server.store.base import InstanceState, Platform
from devyard.server.store.errors import LimitReached

from .test_memberships_keys import org_with_admin

RACERS = 8
LIMIT = 3


async def _create(store: Store, org_id: str, n: int, platform: Platform = Platform.ANDROID) -> str:
    made = await store.create_instance(
        org_id=org_id, platform=platform, region="local", labels={"n": str(n)}, spec={},
        display_name=None, token=f"tok-{org_id}-{n}", stream_token=f"st-{org_id}-{n}",
        max_live=LIMIT,
    )  # fmt: skip
    return made.id


async def test_racing_creates_get_exactly_the_limit(store: Store) -> None:
    acme, _ = await org_with_admin(store)
    made: list[str] = []
    refused: list[LimitReached] = []

    async def one(n: int) -> None:
        try:
            made.append(await _create(store, acme.id, n))
        except LimitReached as exc:
            refused.append(exc)

    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            for n in range(RACERS):
                nursery.start_soon(one, n)
    assert len(made) == LIMIT and len(refused) == RACERS - LIMIT
    assert refused[0].limit == LIMIT and refused[0].platform == "android"
    # another platform and another organization have their own counts
    assert await _create(store, acme.id, 100, Platform.IOS)
    other = await store.create_organization("other-org")
    assert await _create(store, other.id, 101)
    # an ended instance frees its slot
    await store.transition_instance(
        made[0], InstanceState.TERMINATED, expected=frozenset({InstanceState.CREATING})
    )
    assert await _create(store, acme.id, 102)
    with pytest.raises(LimitReached):
        await _create(store, acme.id, 103)
