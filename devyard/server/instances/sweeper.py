"""`Sweeper`: ends the instances whose timeouts are due and adopts orphaned creates, from the
rows (`store.instance_runs`), so any server replica can do it (docs/scale-out.md).

Theory of operation. Each pass (1) writes the client traffic this process saw since the last
pass into the idle deadlines (`Activity` is per process: the edge's gateway records it where
the request landed), (2) finds the due timers and *claims* each with a conditional UPDATE
(exactly one replica wins an instance, and only it ends the instance; a claim whose claimer
died before the end runs out and is taken again), and (3) adopts the
instances in ``creating``/``assigned`` whose owner (the replica that created them) is gone:
a conditional UPDATE of the owner picks one adopter, which hands the stored order on (a
create) or waits for the host as the owner did (assigned: the host's ready or failure, or
its loss, ends the wait); and the ended instances whose rows are left (the replica that
ended one died before the rest of the end: the stop, the slot, the rows go last), which the
adopter finishes. Passes run at the earliest known deadline, at least every
``poll_s`` (another replica's instances and touches are learnt from the rows), and at once
when `wake` is called (a create or ready here; another replica's change on the cluster bus).

Deadlines are wall-clock times. The wall clock follows the service's trio clock from an
anchor taken at first use (so a test's mock clock moves it, and NTP steps do not make a
deadline jump); replicas agree to within their clocks' skew. Inactivity counts traffic a
replica saw only after that replica's next pass (at most ``poll_s`` later): an instance whose
only traffic goes through another replica may end up to ``poll_s`` before its true inactivity
deadline.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Final, NoReturn

import trio

from ..hosts import Activity
from ..store import errors as store_errors
from ..store.base import TerminationReason
from ..store.instance_runs import DueReason, InstanceRunStore, Orphan, Owner

log = logging.getLogger(__name__)

__all__ = ["POLL_S", "Sweeper", "WallClock"]

POLL_S: Final = 5.0  # the longest a pass waits for (other replicas' deadlines and orphans)
#: How long after an instance ended its rows may stay before a sweep finishes the end (the
#: replica that ended it does the rest at once: the stop, bounded by 10 s, then the slot and
#: the rows; one still at it then only sends a second stop, which hosts ignore)
UNFINISHED_S: Final = 15.0
BATCH: Final = 100  # due timers or orphans handled per pass (the next pass takes the rest)

_REASONS: Final = {
    DueReason.HARD: TerminationReason.HARD_TIMEOUT,
    DueReason.IDLE: TerminationReason.INACTIVITY_TIMEOUT,
}


class WallClock:
    """UTC wall time that follows a trio clock from an anchor taken at first use."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._anchor: tuple[datetime, float] | None = None

    def at(self, t: float) -> datetime:
        """The wall time of the trio time *t*."""
        if self._anchor is None:
            self._anchor = (datetime.now(UTC), self._clock())
        wall, base = self._anchor
        return wall + timedelta(seconds=t - base)

    def now(self) -> datetime:
        return self.at(self._clock())

    def trio_time(self, when: datetime) -> float:
        """The trio time of the wall time *when*."""
        now = self._clock()
        return now + (when - self.at(now)).total_seconds()


class Sweeper:
    def __init__(
        self,
        runs: InstanceRunStore,
        activity: Activity,
        *,
        owner: Owner,
        wall: WallClock,
        end: Callable[[str, TerminationReason, str | None], Awaitable[object]],
        adopt: Callable[[Orphan], Awaitable[None]],
        poll_s: float = POLL_S,
    ) -> None:
        """*end* ends an instance the normal way; *adopt* takes over an orphan this
        replica won."""
        self._runs = runs
        self._activity = activity
        self.owner = owner
        self._wall = wall
        self._end = end
        self._adopt = adopt
        self.poll_s = poll_s
        self._wakeup = trio.Event()
        self._flushed: dict[str, float] = {}  # instance id -> the touch last written

    def wake(self) -> None:
        """Run a pass now (a deadline may have moved)."""
        self._wakeup.set()

    def forget(self, instance_id: str) -> None:
        self._flushed.pop(instance_id, None)

    async def run(self) -> NoReturn:
        while True:
            self._wakeup = trio.Event()
            try:
                busy, earliest = await self.sweep()
            except store_errors.StoreError:  # the database may be away: the next pass retries
                log.exception("the timeout sweep failed; retrying")
                busy, earliest = False, None
            if busy:
                continue
            deadline = self._wall.trio_time(earliest) if earliest is not None else float("inf")
            with trio.move_on_at(min(deadline, trio.current_time() + self.poll_s)):
                await self._wakeup.wait()

    async def sweep(self) -> tuple[bool, datetime | None]:
        """One pass; (whether a batch was full, the earliest deadline after now)."""
        now = self._wall.now()  # with the traffic seen until now (no await between)
        await self._flush(self._unflushed())
        due, earliest = await self._runs.due_timers(now, BATCH)
        for item in due:
            reason = await self._runs.claim_due(item.instance_id, now)
            if reason is None:  # another replica took it, or traffic moved it
                continue
            try:
                await self._end(item.instance_id, _REASONS[reason], None)
            except store_errors.StoreError:
                log.exception("could not end %s after its %s timeout", item.instance_id, reason)
        ended_before = now - timedelta(seconds=UNFINISHED_S)
        orphans = await self._runs.orphans(self.owner, BATCH, ended_before=ended_before)
        for orphan in orphans:
            if not await self._runs.adopt(orphan.instance_id, orphan.owner, self.owner):
                continue  # another replica adopted it
            if orphan.state == "terminated":
                log.warning(
                    "instance %s: its end was not finished; finishing it", orphan.instance_id
                )
            else:
                log.warning(
                    "instance %s (%s): its replica %r (run %s) is gone; adopted",
                    orphan.instance_id,
                    orphan.state,
                    orphan.owner.replica_id,
                    orphan.owner.run,
                )
            try:
                await self._adopt(orphan)
            except store_errors.StoreError:
                log.exception("could not take over %s", orphan.instance_id)
        return len(due) >= BATCH or len(orphans) >= BATCH, earliest

    def _unflushed(self) -> dict[str, float]:
        return {i: t for i, t in self._activity.items() if self._flushed.get(i) != t}

    async def _flush(self, touches: dict[str, float]) -> None:
        """Write *touches* (the traffic seen here since the last pass) into the idle
        deadlines."""
        if not touches:
            await trio.lowlevel.checkpoint()
            return
        await self._runs.record_activity({i: self._wall.at(t) for i, t in touches.items()})
        self._flushed.update(touches)
