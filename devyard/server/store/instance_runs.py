"""What an instance needs while it lives, in SQL (migration 20): its timers
and owner (``instance_timers``) and the order its host is to take (``instance_orders``).

So nothing an instance needs lives only in one server replica's memory (docs/scale-out.md):

- **Timers are rows.** ``hard_at`` (creation + hardTimeout) and ``idle_at`` (ready or the last
  client traffic + inactivityTimeout) are absolute UTC deadlines. Any replica's sweeper finds
  the due ones and *claims* each with a conditional UPDATE (``claimed_until``, set only while
  the timer is due and unclaimed): exactly one claimer wins, and only the winner ends the
  instance, which deletes the row. A claimer that died (or failed to end it) leaves a claim
  that runs out after ``CLAIM_S``, and the next sweep claims it again.
- **The owner** is the replica that created (or adopted) the instance, and the run of its
  process. An instance in ``creating``/``assigned`` is an orphan when its owner's replica is
  not a live row of ``cluster_replicas``, or is the asking replica in an earlier run (restarted
  under the same id); a replica adopts it with a conditional UPDATE of the owner (exactly one
  wins). On the single-process path the table of replicas is empty, so every row of an
  earlier run of the server is an orphan of the next one.
- **Orders are rows**, written in the create transaction (`rows_for_create`), so a replica that
  holds the host's link reads the order by the instance id (a NOTIFY carries no more), and an
  adopter can hand the order on after its creator died.

Times are the replicas' wall clocks (given by the caller), not the database's: the sweeper's
deadlines are minutes, where the skew of NTP-synchronized clocks does not matter, and one code
path serves SQLite (single process) and PostgreSQL alike.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Final, Protocol, runtime_checkable

import attrs

from .database import Database, Tx, as_datetime

__all__ = [
    "CLAIM_S",
    "RUN_STATEMENTS",
    "Due",
    "DueReason",
    "InstanceRunStore",
    "Orphan",
    "Owner",
    "RunRows",
    "SqlInstanceRuns",
]

RUN_STATEMENTS: Final[tuple[str, ...]] = (
    """
    CREATE TABLE instance_timers (
        instance_id  TEXT PRIMARY KEY REFERENCES instances (id) ON DELETE CASCADE,
        owner        TEXT NOT NULL,
        owner_run    TEXT NOT NULL,
        inactivity_s INTEGER NOT NULL CHECK (inactivity_s >= 0),
        hard_at      {timestamp},
        idle_at      {timestamp},
        claimed_until {timestamp}
    )
    """,
    "CREATE INDEX instance_timers_by_hard ON instance_timers (hard_at)",
    "CREATE INDEX instance_timers_by_idle ON instance_timers (idle_at)",
    "CREATE INDEX instance_timers_by_owner ON instance_timers (owner)",
    """
    CREATE TABLE instance_orders (
        instance_id TEXT PRIMARY KEY REFERENCES instances (id) ON DELETE CASCADE,
        body        TEXT NOT NULL
    )
    """,
)

#: what `create_instance` runs in its transaction after the insert: (tx, the new id) -> None
RunRows = Callable[[Tx, str], None]

CLAIM_S: Final = 60  # seconds a claim on a due timer holds before another replica may retry
_DUE: Final = (
    "(hard_at <= :now OR idle_at <= :now) AND (claimed_until IS NULL OR claimed_until <= :now)"
)


class DueReason(enum.StrEnum):
    HARD = "hard"
    IDLE = "idle"


@attrs.frozen
class Due:
    instance_id: str
    reason: DueReason


@attrs.frozen
class Owner:
    """Who created (or adopted) an instance: a replica, and which run of its process (a
    replica restarted under the same id is another run: what its memory held is lost)."""

    replica_id: str
    run: str


@attrs.frozen
class Orphan:
    instance_id: str
    owner: Owner
    state: str


@runtime_checkable
class InstanceRunStore(Protocol):
    def rows_for_create(
        self,
        *,
        owner: Owner,
        inactivity_s: int,
        hard_at: datetime | None,
        order: Mapping[str, Any],
    ) -> RunRows:
        """The statements that give a new instance its timers and its order (run them in
        the create transaction: `Store.create_instance(..., with_rows=...)`)."""
        ...

    async def backfill_runs(
        self, owner: Owner, instances: Iterable[tuple[str, int, datetime | None]]
    ) -> int:
        """Timers for live instances that have none (made before migration 20, or by a
        create whose rows were not written): (id, inactivity_s, hard_at); how many."""
        ...

    async def start_idle(self, instance_ids: Sequence[str], at: datetime) -> None:
        """The instances are ready at *at*: their inactivity periods start (unless started)."""
        ...

    async def record_activity(self, touches: Mapping[str, datetime]) -> None:
        """Client traffic reached each instance at the given time: a later idle deadline
        (only for instances whose period has started, i.e. ready)."""
        ...

    async def due_timers(self, now: datetime, limit: int) -> tuple[list[Due], datetime | None]:
        """Up to *limit* timers due at *now*, and the earliest deadline after *now*."""
        ...

    async def claim_due(self, instance_id: str, now: datetime) -> DueReason | None:
        """Claim the due timer of *instance_id* (for ``CLAIM_S``) if it is still due and
        unclaimed: the reason to the one caller that won, else None. Ending the instance
        deletes the row (`forget_run`)."""
        ...

    async def orphans(self, me: Owner, limit: int, *, ended_before: datetime) -> list[Orphan]:
        """Instances in creating/assigned owned by an earlier run of *me*, or by a replica
        that is not live; and instances ended before *ended_before* whose rows are still
        there, whoever owns them (an end deletes them last: the replica that ended it
        stopped before it finished)."""
        ...

    async def adopt(self, instance_id: str, old_owner: Owner, me: Owner) -> bool:
        """Become the owner if *old_owner* still is (exactly one adopter wins)."""
        ...

    async def stored_order(self, instance_id: str) -> dict[str, Any] | None: ...

    async def forget_run(self, instance_id: str) -> None:
        """The instance ended: its timers and order go (idempotent)."""
        ...


class SqlInstanceRuns:
    """`InstanceRunStore` over the store's `Database` (a mixin of `SqlStore`)."""

    _db: Database

    def rows_for_create(
        self,
        *,
        owner: Owner,
        inactivity_s: int,
        hard_at: datetime | None,
        order: Mapping[str, Any],
    ) -> RunRows:
        body = json.dumps(dict(order), separators=(",", ":"))

        def write(tx: Tx, instance_id: str) -> None:
            _insert_timers(tx, instance_id, owner, inactivity_s, hard_at)
            tx.execute(
                "INSERT INTO instance_orders (instance_id, body) VALUES (:id, :body)",
                {"id": instance_id, "body": body},
            )

        return write

    async def backfill_runs(
        self, owner: Owner, instances: Iterable[tuple[str, int, datetime | None]]
    ) -> int:
        wanted = list(instances)

        def backfill(tx: Tx) -> int:
            made = 0
            for instance_id, inactivity_s, hard_at in wanted:
                if tx.fetchone(
                    "SELECT instance_id FROM instance_timers WHERE instance_id = :id",
                    {"id": instance_id},
                ):
                    continue
                _insert_timers(tx, instance_id, owner, inactivity_s, hard_at)
                made += 1
            return made

        return await self._db.write(backfill) if wanted else 0

    async def start_idle(self, instance_ids: Sequence[str], at: datetime) -> None:
        if not instance_ids:
            return
        ids = sorted(instance_ids)

        def start(tx: Tx) -> None:
            for instance_id in ids:
                row = tx.fetchone(
                    "SELECT inactivity_s FROM instance_timers WHERE instance_id = :id"
                    " AND idle_at IS NULL",
                    {"id": instance_id},
                )
                if row is None or int(row["inactivity_s"]) == 0:
                    continue
                tx.execute(
                    "UPDATE instance_timers SET idle_at = :at WHERE instance_id = :id"
                    " AND idle_at IS NULL",
                    {"id": instance_id, "at": at + timedelta(seconds=int(row["inactivity_s"]))},
                )

        await self._db.write(start)

    async def record_activity(self, touches: Mapping[str, datetime]) -> None:
        if not touches:
            return
        items = sorted(touches.items())

        def record(tx: Tx) -> None:
            for instance_id, at in items:
                row = tx.fetchone(
                    "SELECT inactivity_s, idle_at FROM instance_timers WHERE instance_id = :id",
                    {"id": instance_id},
                )
                if row is None or row["idle_at"] is None:
                    continue  # ended, or not ready yet
                idle_at = at + timedelta(seconds=int(row["inactivity_s"]))
                if idle_at > as_datetime(row["idle_at"]):
                    tx.execute(
                        "UPDATE instance_timers SET idle_at = :at WHERE instance_id = :id",
                        {"id": instance_id, "at": idle_at},
                    )

        await self._db.write(record)

    async def due_timers(self, now: datetime, limit: int) -> tuple[list[Due], datetime | None]:
        def read(tx: Tx) -> tuple[list[Due], datetime | None]:
            rows = tx.fetchall(
                "SELECT instance_id, hard_at, idle_at FROM instance_timers WHERE "  # noqa: S608
                + _DUE
                + " ORDER BY instance_id LIMIT :limit",
                {"now": now, "limit": limit},
            )
            nxt = tx.fetchone(
                "SELECT min(hard_at) AS hard, (SELECT min(idle_at) FROM instance_timers"
                " WHERE idle_at > :now) AS idle FROM instance_timers WHERE hard_at > :now",
                {"now": now},
            )
            due = [Due(r["instance_id"], _reason(r, now)) for r in rows]
            later = [] if nxt is None else [nxt["hard"], nxt["idle"]]
            times = [as_datetime(t) for t in later if t is not None]
            return due, min(times, default=None)

        return await self._db.read(read)

    async def claim_due(self, instance_id: str, now: datetime) -> DueReason | None:
        def claim(tx: Tx) -> DueReason | None:
            row = tx.fetchone(
                "SELECT hard_at, idle_at FROM instance_timers"  # noqa: S608
                " WHERE instance_id = :id AND " + _DUE,
                {"id": instance_id, "now": now},
            )
            if row is None:
                return None
            won = tx.execute(
                "UPDATE instance_timers SET claimed_until = :until"  # noqa: S608
                " WHERE instance_id = :id AND " + _DUE,
                {"id": instance_id, "now": now, "until": now + timedelta(seconds=CLAIM_S)},
            )
            return _reason(row, now) if won == 1 else None

        return await self._db.write(claim)

    async def orphans(self, me: Owner, limit: int, *, ended_before: datetime) -> list[Orphan]:
        rows = await self._db.read(
            lambda tx: tx.fetchall(
                "SELECT t.instance_id, t.owner, t.owner_run, i.state FROM instance_timers t"
                " JOIN instances i ON i.id = t.instance_id"
                " WHERE (i.state = 'terminated' AND i.terminated_at <= :ended)"
                " OR (i.state IN ('creating', 'assigned')"
                " AND NOT (t.owner = :me AND t.owner_run = :run)"
                " AND (t.owner = :me OR NOT EXISTS (SELECT 1 FROM cluster_replicas r"
                " WHERE r.replica_id = t.owner AND r.expires_at > CURRENT_TIMESTAMP)))"
                " ORDER BY t.instance_id LIMIT :limit",
                {"me": me.replica_id, "run": me.run, "limit": limit, "ended": ended_before},
            )
        )
        return [
            Orphan(r["instance_id"], Owner(r["owner"], r["owner_run"]), r["state"]) for r in rows
        ]

    async def adopt(self, instance_id: str, old_owner: Owner, me: Owner) -> bool:
        changed = await self._db.write(
            lambda tx: tx.execute(
                "UPDATE instance_timers SET owner = :me, owner_run = :run"
                " WHERE instance_id = :id AND owner = :old AND owner_run = :old_run",
                {
                    "id": instance_id,
                    "old": old_owner.replica_id,
                    "old_run": old_owner.run,
                    "me": me.replica_id,
                    "run": me.run,
                },
            )
        )
        return changed == 1

    async def stored_order(self, instance_id: str) -> dict[str, Any] | None:
        row = await self._db.read(
            lambda tx: tx.fetchone(
                "SELECT body FROM instance_orders WHERE instance_id = :id", {"id": instance_id}
            )
        )
        if row is None:
            return None
        body: dict[str, Any] = json.loads(row["body"])
        return body

    async def forget_run(self, instance_id: str) -> None:
        def forget(tx: Tx) -> None:
            tx.execute("DELETE FROM instance_timers WHERE instance_id = :id", {"id": instance_id})
            tx.execute("DELETE FROM instance_orders WHERE instance_id = :id", {"id": instance_id})

        await self._db.write(forget)


def _insert_timers(
    tx: Tx, instance_id: str, owner: Owner, inactivity_s: int, hard_at: datetime | None
) -> None:
    tx.execute(
        "INSERT INTO instance_timers"
        " (instance_id, owner, owner_run, inactivity_s, hard_at, idle_at)"
        " VALUES (:id, :owner, :run, :inactivity, :hard, NULL)",
        {
            "id": instance_id,
            "owner": owner.replica_id,
            "run": owner.run,
            "inactivity": inactivity_s,
            "hard": hard_at,
        },
    )


def _reason(row: Mapping[str, Any], now: datetime) -> DueReason:
    """The earlier of the due deadlines (the hard one on a tie)."""
    hard = None if row["hard_at"] is None else as_datetime(row["hard_at"])
    idle = None if row["idle_at"] is None else as_datetime(row["idle_at"])
    if hard is not None and hard <= now and (idle is None or hard <= idle):
        return DueReason.HARD
    return DueReason.IDLE
