"""Usage rows in the store (both backends): written by the termination itself, once."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from devyard.server.store import Conflict, Role, Store
from devyard.server.store.base import BucketSize, InstanceState, UsageFilter
from devyard.server.store.usage import billed_minutes
from tests.server.tokens.conftest import SetClock, run_instance

_READY = datetime(2030, 3, 1, 10, tzinfo=UTC)


@pytest.mark.parametrize(
    ("ready", "seconds", "minutes"),
    [(None, 600, 0), (_READY, 0, 0), (_READY, 0.000001, 1), (_READY, 60, 1), (_READY, 61, 2),
     (_READY, 3600, 60), (_READY, -5, 0)],
)  # fmt: skip
def test_billed_minutes_round_up_from_ready(
    ready: datetime | None, seconds: float, minutes: int
) -> None:
    assert billed_minutes(ready, _READY + timedelta(seconds=seconds)) == minutes


async def test_termination_records_usage_once(store: Store, store_clock: SetClock) -> None:
    org = await store.create_organization("acme")
    everything = UsageFilter(started_from=datetime(2000, 1, 1, tzinfo=UTC))
    live = await run_instance(
        store, store_clock, org.id, labels={"k": "v"}, created="2030-03-01T10:00:00Z",
        ready="2030-03-01T10:00:30Z",
    )  # fmt: skip
    assert await store.list_usage(org.id, everything) == []  # not billed while it runs

    store_clock.set("2030-03-01T10:02:31Z")
    ended = await store.transition_instance(
        live.id, InstanceState.TERMINATED, expected=frozenset({InstanceState.READY})
    )
    [row] = await store.list_usage(org.id, everything)
    assert (row.instance_id, row.stopped_at, row.billed_minutes) == (
        live.id,
        ended.terminated_at,
        3,
    )
    assert (row.started_at, row.ready_at, row.labels) == (
        live.created_at,
        live.ready_at,
        {"k": "v"},
    )

    # A second termination loses the compare-and-set and records nothing.
    with pytest.raises(Conflict):
        await store.transition_instance(
            live.id, InstanceState.TERMINATED, expected=frozenset({InstanceState.READY})
        )
    assert len(await store.list_usage(org.id, everything)) == 1
    [bucket] = await store.usage_buckets(org.id, everything, BucketSize.HOUR)
    assert (bucket.start, bucket.instances, bucket.billed_minutes) == (
        datetime(2030, 3, 1, 10, tzinfo=UTC), 1, 3,
    )  # fmt: skip


async def test_usage_survives_as_history_and_goes_with_its_organization(
    store: Store, store_clock: SetClock
) -> None:
    org = await store.create_organization("acme")
    user = await store.create_user("ann")
    await store.add_membership(org.id, user.id, Role.ADMIN)
    await run_instance(
        store, store_clock, org.id, created="2030-03-01T10:00:00Z", terminated="2030-03-01T10:01Z"
    )
    everything = UsageFilter(stopped_until=datetime(2031, 1, 1, tzinfo=UTC))
    assert len(await store.list_usage(org.id, everything)) == 1
    await store.delete_organization(org.id)
    assert await store.list_usage(org.id, everything) == []
