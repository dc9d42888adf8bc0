"""Start orders handed from one server replica to another through their row (migration 21).

A create on a replica that does not hold the chosen host's link cannot send the order itself:
the replica holding the link (the *holder*) must. The order is already a row
(``instance_orders``, written in the create transaction); this module adds its *delivery* to
that row, so the hand-over is a sequence of conditional updates and never depends on an event
arriving (docs/scale-out.md "Orders in a burst"):

- the creator *addresses* the row to a host with a fresh ``attempt`` token: ``pending``;
- the holder *claims* it (``pending`` -> ``taken``, returning the order) and only then sends
  it on its link, then marks it ``sent``, or ``failed`` with the reason;
- a creator that waited ``order_timeout_s`` in vain *withdraws* it (``pending`` ->
  ``withdrawn``).

Claim and withdrawal are each one ``UPDATE ... WHERE delivery = 'pending'``, so exactly one of
them wins: an order the creator gave up on is never sent late (it would start a second copy
next to the one the next host runs), and one the holder sent is never given up on. NOTIFY
events only wake the two sides early; each polls the rows as well, so a dropped event costs a
poll interval, not the order.

Stops for a host linked elsewhere are rows too (``instance_stops``): the replica ending the
instance inserts one, a replica linked to the host deletes it (one wins) and sends the stop.
A stop for a host linked nowhere waits for it (the host's registration also reconciles) and is
forgotten after a day.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any, Final

import attrs

from .database import Database, Tx, in_list

__all__ = ["DELIVERY_STATEMENTS", "Addressed", "Delivery", "SqlOrderDelivery", "Stop", "Where"]

DELIVERY_STATEMENTS: Final[tuple[str, ...]] = (
    "ALTER TABLE instance_orders ADD COLUMN host_id TEXT",
    "ALTER TABLE instance_orders ADD COLUMN attempt TEXT",
    "ALTER TABLE instance_orders ADD COLUMN orderer TEXT",
    "ALTER TABLE instance_orders ADD COLUMN delivery TEXT",
    "ALTER TABLE instance_orders ADD COLUMN error TEXT",
    "CREATE INDEX instance_orders_pending ON instance_orders (host_id) WHERE delivery = 'pending'",
    """
    CREATE TABLE instance_stops (
        instance_id TEXT PRIMARY KEY,
        host_id     TEXT NOT NULL,
        made_at     {timestamp} NOT NULL
    )
    """,
    "CREATE INDEX instance_stops_by_host ON instance_stops (host_id)",
)


class Delivery(enum.StrEnum):
    PENDING = "pending"  # addressed to a host; its holder has not taken it yet
    TAKEN = "taken"  # a holder took it and is sending it on the host's link
    SENT = "sent"  # the holder sent it on the host's link
    FAILED = "failed"  # the holder took it and could not send it (``error`` says why)
    WITHDRAWN = "withdrawn"  # the creator gave up waiting before any holder took it


@attrs.frozen
class Addressed:
    """A pending order: the instance, the host it is for, which attempt, and who waits."""

    instance_id: str
    host_id: str
    attempt: str
    orderer: str


@attrs.frozen
class Where:
    """An order's row as it stands: its latest attempt, host, delivery and failure."""

    attempt: str | None
    host_id: str | None
    delivery: Delivery | None
    error: str | None


@attrs.frozen
class Stop:
    instance_id: str
    host_id: str


class SqlOrderDelivery:
    """The delivery columns of ``instance_orders`` (both dialects; the cluster uses them)."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def address(self, instance_id: str, host_id: str, attempt: str, orderer: str) -> bool:
        """Make the order of *instance_id* pending for *host_id* under a new *attempt*
        (whatever an earlier attempt left is replaced). False: no stored order (it ended)."""

        def address(tx: Tx) -> bool:
            return (
                tx.execute(
                    "UPDATE instance_orders SET host_id = :host, attempt = :attempt,"
                    " orderer = :orderer, delivery = :pending, error = NULL"
                    " WHERE instance_id = :id",
                    {
                        "id": instance_id,
                        "host": host_id,
                        "attempt": attempt,
                        "orderer": orderer,
                        "pending": Delivery.PENDING.value,
                    },
                )
                > 0
            )

        return await self._db.write(address)

    async def work(self, host_ids: Sequence[str], limit: int) -> tuple[list[Addressed], list[Stop]]:
        """The pending orders and the stops for any of *host_ids* (up to *limit* of each),
        read in one transaction."""
        if not host_ids:
            return [], []
        params: dict[str, Any] = {"pending": Delivery.PENDING.value, "limit": limit}
        hosts = in_list("h", sorted(set(host_ids)), params)

        def read(tx: Tx) -> tuple[list[Addressed], list[Stop]]:
            orders = tx.fetchall(
                "SELECT instance_id, host_id, attempt, orderer FROM instance_orders"  # noqa: S608
                f" WHERE delivery = :pending AND host_id IN ({hosts})"
                " ORDER BY instance_id LIMIT :limit",
                params,
            )
            stops = tx.fetchall(
                "SELECT instance_id, host_id FROM instance_stops"  # noqa: S608
                f" WHERE host_id IN ({hosts}) ORDER BY instance_id LIMIT :limit",
                params,
            )
            return (
                [
                    Addressed(r["instance_id"], r["host_id"], r["attempt"], r["orderer"])
                    for r in orders
                ],
                [Stop(r["instance_id"], r["host_id"]) for r in stops],
            )

        return await self._db.read(read)

    async def claim(self, instance_id: str, attempt: str) -> dict[str, Any] | None:
        """Take a pending order to send it: its body, or None when it is not (any more)
        pending under *attempt* (withdrawn, taken, readdressed or ended)."""

        def claim(tx: Tx) -> dict[str, Any] | None:
            row = tx.fetchone(
                "UPDATE instance_orders SET delivery = :taken"
                " WHERE instance_id = :id AND attempt = :attempt AND delivery = :pending"
                " RETURNING body",
                {
                    "id": instance_id,
                    "attempt": attempt,
                    "taken": Delivery.TAKEN.value,
                    "pending": Delivery.PENDING.value,
                },
            )
            if row is None:
                return None
            body: dict[str, Any] = json.loads(row["body"])
            return body

        return await self._db.write(claim)

    async def settle(self, instance_id: str, attempt: str, error: str | None) -> None:
        """The claimed order went out on the link (*error* None: ``sent``) or could not
        (``failed``, and why), for the creator."""
        state = Delivery.SENT if error is None else Delivery.FAILED

        def settle(tx: Tx) -> None:
            tx.execute(
                "UPDATE instance_orders SET delivery = :state, error = :error"
                " WHERE instance_id = :id AND attempt = :attempt AND delivery = :taken",
                {
                    "id": instance_id,
                    "attempt": attempt,
                    "state": state.value,
                    "error": None if error is None else error[:500],
                    "taken": Delivery.TAKEN.value,
                },
            )

        await self._db.write(settle)

    async def withdraw(self, instance_id: str, attempt: str) -> bool:
        """Give up on a pending order; False when a holder took it first (or it is gone)."""

        def withdraw(tx: Tx) -> bool:
            return (
                tx.execute(
                    "UPDATE instance_orders SET delivery = :withdrawn"
                    " WHERE instance_id = :id AND attempt = :attempt AND delivery = :pending",
                    {
                        "id": instance_id,
                        "attempt": attempt,
                        "withdrawn": Delivery.WITHDRAWN.value,
                        "pending": Delivery.PENDING.value,
                    },
                )
                > 0
            )

        return await self._db.write(withdraw)

    async def where(self, instance_ids: Sequence[str]) -> dict[str, Where]:
        """Where the order of each of *instance_ids* stands (one missing: it ended)."""
        if not instance_ids:
            return {}
        params: dict[str, Any] = {}
        ids = in_list("i", sorted(set(instance_ids)), params)

        def read(tx: Tx) -> dict[str, Where]:
            rows = tx.fetchall(
                "SELECT instance_id, attempt, host_id, delivery, error"  # noqa: S608
                f" FROM instance_orders WHERE instance_id IN ({ids})",
                params,
            )
            return {
                r["instance_id"]: Where(
                    r["attempt"],
                    r["host_id"],
                    None if r["delivery"] is None else Delivery(r["delivery"]),
                    r["error"],
                )
                for r in rows
            }

        return await self._db.read(read)

    # ---- stops -----------------------------------------------------------------------------

    async def add_stop(self, instance_id: str, host_id: str, at: datetime) -> None:
        """A stop of *instance_id* for *host_id*, for whichever replica is linked to it."""

        def add(tx: Tx) -> None:
            tx.execute("DELETE FROM instance_stops WHERE instance_id = :id", {"id": instance_id})
            tx.execute(
                "INSERT INTO instance_stops (instance_id, host_id, made_at)"
                " VALUES (:id, :host, :at)",
                {"id": instance_id, "host": host_id, "at": at},
            )

        await self._db.write(add)

    async def take_stop(self, stop: Stop) -> bool:
        """Take *stop* to send it; False when another replica took it (or it changed)."""

        def take(tx: Tx) -> bool:
            return (
                tx.execute(
                    "DELETE FROM instance_stops WHERE instance_id = :id AND host_id = :host",
                    {"id": stop.instance_id, "host": stop.host_id},
                )
                > 0
            )

        return await self._db.write(take)

    async def forget_stops(self, before: datetime) -> int:
        """Drop stops made before *before* (for hosts that never linked again)."""

        def forget(tx: Tx) -> int:
            return tx.execute("DELETE FROM instance_stops WHERE made_at < :at", {"at": before})

        return await self._db.write(forget)
