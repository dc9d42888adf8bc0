"""What an instance needs while it lives, as rows (`store.instance_runs`), on both backends:
a due timer is claimed by exactly one caller, traffic moves only a started idle deadline,
and orphans are the creates of a replica that is gone or of an earlier run of this one."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from devyard.server.store import Store
from devyard.server.store.base import Instance, InstanceState, Platform
from devyard.server.store.instance_runs import CLAIM_S, DueReason, Owner, SqlInstanceRuns

T0 = datetime(2030, 1, 1, tzinfo=UTC)
ME = Owner("local", "run-2")


async def _create(
    store: Store, org_id: str, owner: Owner, *, hard_s: int | None, idle_s: int = 0
) -> Instance:
    assert isinstance(store, SqlInstanceRuns)
    return await store.create_instance(
        org_id=org_id,
        platform=Platform.ANDROID,
        region="local",
        labels={},
        spec={},
        display_name=None,
        token=f"dyi_{owner.run}_{hard_s}_{idle_s}",
        stream_token=f"dys_{owner.run}_{hard_s}_{idle_s}",
        with_rows=store.rows_for_create(
            owner=owner,
            inactivity_s=idle_s,
            hard_at=None if hard_s is None else T0 + timedelta(seconds=hard_s),
            order={"platform": "android", "spec": {"big": "x" * 9000}},
        ),
    )


async def test_timers_are_claimed_once_and_traffic_moves_only_started_idle_deadlines(
    store: Store,
) -> None:
    assert isinstance(store, SqlInstanceRuns)
    org = await store.create_organization("acme")
    hard = await _create(store, org.id, ME, hard_s=60, idle_s=600)
    idle = await _create(store, org.id, ME, hard_s=None, idle_s=30)
    assert await store.stored_order(hard.id) == {
        "platform": "android",
        "spec": {"big": "x" * 9000},
    }
    # not ready yet: traffic does not start the idle period
    await store.record_activity({idle.id: T0 + timedelta(seconds=100)})
    due, earliest = await store.due_timers(T0 + timedelta(seconds=59), 10)
    assert due == [] and earliest == T0 + timedelta(seconds=60)
    await store.start_idle([idle.id], T0)  # ready: idle at +30 s
    await store.record_activity({idle.id: T0 + timedelta(seconds=20)})  # moves it to +50 s
    await store.record_activity({idle.id: T0 + timedelta(seconds=5)})  # older: no effect
    due, earliest = await store.due_timers(T0 + timedelta(seconds=49), 10)
    assert due == [] and earliest == T0 + timedelta(seconds=50)
    now = T0 + timedelta(seconds=61)
    due, _ = await store.due_timers(now, 10)
    assert sorted((d.instance_id, d.reason) for d in due) == sorted(
        [(hard.id, DueReason.HARD), (idle.id, DueReason.IDLE)]
    )
    assert await store.claim_due(hard.id, now) is DueReason.HARD
    assert await store.claim_due(hard.id, now) is None, "a second claimer gets nothing"
    await store.record_activity({idle.id: T0 + timedelta(seconds=60)})  # traffic came first
    assert await store.claim_due(idle.id, now) is None, "no longer due"
    await store.forget_run(idle.id)
    assert await store.stored_order(idle.id) is None
    later = now + timedelta(seconds=CLAIM_S)  # the claimer died before ending it
    assert [d.instance_id for d in (await store.due_timers(later, 10))[0]] == [hard.id]
    assert await store.claim_due(hard.id, later) is DueReason.HARD
    await store.forget_run(hard.id)  # ended: the row goes
    assert await store.due_timers(T0 + timedelta(days=1), 10) == ([], None)


async def test_orphans_are_creates_of_gone_replicas_and_earlier_runs(store: Store) -> None:
    assert isinstance(store, SqlInstanceRuns)
    org = await store.create_organization("acme")
    mine = await _create(store, org.id, ME, hard_s=None)
    earlier = await _create(store, org.id, Owner("local", "run-1"), hard_s=None)
    gone = await _create(store, org.id, Owner("replica-gone", "run-9"), hard_s=None)
    ready = await _create(store, org.id, Owner("replica-gone", "run-8"), hard_s=None, idle_s=1)
    for to in (InstanceState.ASSIGNED, InstanceState.READY):
        await store.transition_instance(ready.id, to, expected=frozenset(InstanceState))
    orphans = await store.orphans(ME, 10, ended_before=T0)
    assert sorted(o.instance_id for o in orphans) == sorted([earlier.id, gone.id])
    assert mine.id not in {o.instance_id for o in orphans}
    found = next(o for o in orphans if o.instance_id == gone.id)
    assert found.owner == Owner("replica-gone", "run-9") and found.state == "creating"
    other = Owner("replica-b", "run-1")
    assert await store.adopt(gone.id, found.owner, ME)
    assert not await store.adopt(gone.id, found.owner, other), "exactly one adopter wins"
    assert [o.instance_id for o in await store.orphans(ME, 10, ended_before=T0)] == [earlier.id]


async def test_an_end_left_half_done_is_listed_for_any_replica_until_its_rows_go(
    store: Store,
) -> None:
    """An end deletes the rows last: rows of an ended instance mean its replica died before
    the rest of the end (the stop, the slot); any replica, its owner's live one too, finishes
    it."""
    assert isinstance(store, SqlInstanceRuns)
    org = await store.create_organization("acme")
    ended = await _create(store, org.id, ME, hard_s=None)
    done = await store.transition_instance(
        ended.id, InstanceState.TERMINATED, expected=frozenset(InstanceState)
    )
    assert done.terminated_at is not None
    before, after = done.terminated_at - timedelta(seconds=1), done.terminated_at
    assert await store.orphans(ME, 10, ended_before=before) == []  # its replica is still at it
    [orphan] = await store.orphans(ME, 10, ended_before=after)
    assert (orphan.instance_id, orphan.state) == (ended.id, "terminated")
    other = Owner("replica-b", "run-1")
    assert [o.instance_id for o in await store.orphans(other, 10, ended_before=after)] == [ended.id]
    await store.forget_run(ended.id)  # the end finished
    assert await store.orphans(ME, 10, ended_before=after) == []
