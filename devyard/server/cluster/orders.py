"""`OrderDesk`: start orders for a host linked to another replica, handed over in their row.

Theory of operation (docs/scale-out.md "Orders in a burst"). The order is a row from the create
transaction on (`store.order_delivery`); its delivery is three conditional updates:

- **The creator addresses it** (`order`): the row becomes ``pending`` for the host under a new
  attempt token, and an ``order`` event tells the host's holder to look. Then it waits for the
  row to leave ``pending``: ``sent`` is done, ``failed`` is the holder's reason. A creator that
  waited ``order_timeout_s`` *withdraws* the row; when that wins no holder will ever send it,
  so the create may safely go to the next host. When it loses, a holder took the order just
  then, and its answer is awaited as usual.
- **A holder claims it** (`serve`): every replica looks for pending rows addressed to hosts
  linked to it when an ``order`` event arrives and at least every ``poll_s``, claims each with
  one conditional update (``taken``: of two replicas linked to one host, one sends it), sends
  it on its link, marks it ``sent`` (or ``failed``, and why), and sends ``order_done`` to
  wake the creator.
- **Stops are rows as well** (`stop`): inserted for the host, deleted by the replica linked to
  it that sends them, so a stop dropped with an event in a burst of deletions does not leave
  an instance running on a host whose slot the store already gave away.
- **Events only hurry things**: the creator also rereads its waiting rows every ``poll_s``
  (`watch`, one query for all of them). A NOTIFY dropped in a burst (a full subscriber
  buffer) or lost in a bus reconnect costs up to ``poll_s``, never the order, and never a
  second copy of an instance.

The single-server path never comes here: its one edge holds every host's link.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Final

import attrs
import trio

from ..edge.links import Edge
from ..hosts import HostUnavailableError, InstanceOrder
from ..store.errors import StoreError
from ..store.order_delivery import Addressed, Delivery, SqlOrderDelivery, Stop, Where
from . import metrics
from .bus import Bus, PayloadTooLarge, Topic

log = logging.getLogger(__name__)

__all__ = ["OrderDesk", "OrderUnsettled"]

POLL_S: Final = 1.0  # each side rereads the rows at least this often
_SENDS: Final = 64  # orders being sent on local links at once
_BATCH: Final = 256  # pending rows read per pass
_STATES: Final = 500  # waiting rows read per query
_STOPS_KEPT: Final = timedelta(days=1)  # a stop for a host that never links again goes then


class OrderUnsettled(HostUnavailableError):
    """No answer and no withdrawal: the order's fate is unknown (the database was away).
    The caller takes it back with a stop, in case it arrives late."""


@attrs.define
class _Wait:
    host_id: str
    done: trio.Event = attrs.field(factory=trio.Event)
    state: Delivery = Delivery.PENDING
    error: str | None = None

    def settle(self, state: Delivery, error: str | None) -> None:
        self.state, self.error = state, error
        self.done.set()


_FINAL: Final = (Delivery.SENT, Delivery.FAILED, Delivery.WITHDRAWN)


def _settle(wait: _Wait, attempt: str, row: Where | None) -> None:
    """Settle *wait* (for *attempt*) from its order's *row*, if the row says how."""
    if row is None or row.delivery is None:
        wait.settle(Delivery.FAILED, "the instance ended before its order went")
    elif row.attempt == attempt:
        if row.delivery in _FINAL:
            wait.settle(row.delivery, row.error)
    elif row.host_id == wait.host_id:
        # another attempt for the same host carries it on (an adopter's, or the host's
        # registration asking again): that one delivers it; no other host may get it
        wait.settle(Delivery.SENT, None)
    else:
        wait.settle(Delivery.FAILED, f"the order was readdressed to {row.host_id}")


class OrderDesk:
    """Both sides of the hand-over; run `watch` and `serve` in the replica's nursery."""

    def __init__(
        self,
        rows: SqlOrderDelivery,
        bus: Bus,
        edge: Edge,
        *,
        replica_id: str,
        timeout: float,
        on_sent: Callable[[str], None] = lambda _: None,
        poll_s: float = POLL_S,
    ) -> None:
        """*timeout*: how long a creator waits for a holder to take its order
        (``order_timeout_s``); *on_sent*: called with the instance id of each order this
        replica sent for another."""
        self._rows = rows
        self._bus = bus
        self._edge = edge
        self.replica_id = replica_id
        self._timeout = timeout
        self._on_sent = on_sent
        self._poll_s = poll_s
        self._waiting: dict[tuple[str, str], _Wait] = {}
        self._answered = trio.Event()
        self._arrived = trio.Event()
        self._sending: set[tuple[str, str]] = set()
        self._next_forget = 0.0

    # ---- the creator's side --------------------------------------------------------------

    async def order(self, holder: str, host_id: str, order: InstanceOrder) -> None:
        """Have *holder* send *order* to *host_id*: returns once it was sent; raises
        `HostUnavailableError` when it was not and never will be (failed, withdrawn, ended),
        `OrderUnsettled` when that cannot be known."""
        attempt = secrets.token_hex(8)
        key = (order.instance_id, attempt)
        try:
            addressed = await self._rows.address(
                order.instance_id, host_id, attempt, self.replica_id
            )
        except StoreError as exc:
            raise HostUnavailableError(f"host {host_id}: could not address: {exc}") from exc
        if not addressed:
            raise HostUnavailableError(f"no stored order for {order.instance_id} (it ended)")
        # waiting from here on: before the row is addressed, `watch` would find another attempt
        wait = self._waiting[key] = _Wait(host_id)
        started = trio.current_time()
        outcome = "unsettled"
        try:
            await self._hurry(Topic.ORDER, holder, host_id=host_id, instance_id=order.instance_id)
            with trio.move_on_after(self._timeout):
                await wait.done.wait()
            if not wait.done.is_set():
                try:
                    withdrawn = await self._rows.withdraw(*key)
                except StoreError as exc:
                    raise OrderUnsettled(f"host {host_id}: no answer, {exc}") from exc
                if withdrawn:
                    outcome = "withdrawn"
                    raise HostUnavailableError(
                        f"host {host_id} (on replica {holder}) did not take the order"
                        f" within {self._timeout:g} s"
                    )
                self._answered.set()  # a holder took it just now: its answer is in the row
                with trio.move_on_after(self._timeout):
                    await wait.done.wait()
            if not wait.done.is_set():
                raise OrderUnsettled(f"host {host_id} (on replica {holder}): no answer")
            outcome = wait.state.value
            metrics.ORDER_SECONDS.observe(trio.current_time() - started)
            if wait.state is not Delivery.SENT:
                raise HostUnavailableError(f"host {host_id} (on replica {holder}): {wait.error}")
        finally:
            del self._waiting[key]
            metrics.ORDERS.labels(outcome).inc()

    async def stop(self, holder: str | None, host_id: str, instance_id: str) -> None:
        """Have a replica linked to *host_id* stop *instance_id* there (not awaited: the row
        waits for the host). Raises `StoreError` when it could not be recorded."""
        await self._rows.add_stop(instance_id, host_id, datetime.now(UTC))
        metrics.ORDERS.labels("stop").inc()
        if holder is not None:
            await self._hurry(Topic.ORDER, holder, op="stop", host_id=host_id)

    def answered(self) -> None:
        """An ``order_done`` (or lost events): reread the waiting rows now."""
        self._answered.set()

    async def watch(self) -> None:
        """Settle the waiting orders from their rows, at least every ``poll_s``."""
        while True:
            with trio.move_on_after(self._poll_s):
                await self._answered.wait()
            self._answered = trio.Event()
            keys = list(self._waiting)
            for start in range(0, len(keys), _STATES):
                chunk = keys[start : start + _STATES]
                try:
                    rows = await self._rows.where([instance_id for instance_id, _ in chunk])
                except StoreError as exc:
                    log.warning("cluster: reading orders' answers failed: %s", exc)
                    break
                for key in chunk:
                    wait = self._waiting.get(key)
                    if wait is not None and not wait.done.is_set():
                        _settle(wait, key[1], rows.get(key[0]))

    # ---- the holder's side ---------------------------------------------------------------

    def arrived(self) -> None:
        """An ``order`` event for this replica (or lost events): look for pending rows now."""
        self._arrived.set()

    async def serve(self) -> None:
        """Send the pending orders and stops for hosts linked here, at least every
        ``poll_s``."""
        slots = trio.Semaphore(_SENDS)
        async with trio.open_nursery() as nursery:
            while True:
                with trio.move_on_after(self._poll_s):
                    await self._arrived.wait()
                self._arrived = trio.Event()
                linked = [h.id for h in self._edge.hosts()]
                try:
                    found, stops = await self._rows.work(linked, _BATCH)
                except StoreError as exc:
                    log.warning("cluster: reading pending orders failed: %s", exc)
                    continue
                for addressed in found:
                    key = (addressed.instance_id, addressed.attempt)
                    if key in self._sending:
                        continue
                    await slots.acquire()
                    self._sending.add(key)
                    nursery.start_soon(self._send, addressed, slots)
                for stop in stops:
                    await self._send_stop(stop)
                if len(found) == _BATCH or len(stops) == _BATCH:
                    self._arrived.set()  # more wait than one pass reads
                if trio.current_time() >= self._next_forget:
                    self._next_forget = trio.current_time() + 3600
                    await self._forget_stops()

    async def _send_stop(self, stop: Stop) -> None:
        try:
            if await self._rows.take_stop(stop):
                await self._edge.stop_instance(stop.host_id, stop.instance_id)
        except StoreError as exc:
            log.warning("cluster: the stop of %s: %s", stop.instance_id, exc)

    async def _forget_stops(self) -> None:
        try:
            forgotten = await self._rows.forget_stops(datetime.now(UTC) - _STOPS_KEPT)
        except StoreError as exc:
            log.warning("cluster: forgetting old stops failed: %s", exc)
            return
        if forgotten:
            log.info("cluster: forgot %d stops for hosts that did not link again", forgotten)

    async def _send(self, addressed: Addressed, slots: trio.Semaphore) -> None:
        key = (addressed.instance_id, addressed.attempt)
        try:
            body = await self._rows.claim(*key)
            if body is None:
                return  # withdrawn, taken by another replica linked to the host, or ended
            error: str | None = None
            try:
                order = InstanceOrder.from_fields(addressed.instance_id, body)
                await self._edge.start_instance(addressed.host_id, order)
                self._on_sent(order.instance_id)
            except HostUnavailableError as exc:
                error = str(exc)
            except (KeyError, TypeError, ValueError) as exc:
                error = f"malformed order: {exc}"
            await self._rows.settle(*key, error)
            await self._hurry(
                Topic.ORDER_DONE, addressed.orderer, instance_id=addressed.instance_id
            )
        except StoreError as exc:
            log.warning("cluster: the order of %s: %s", addressed.instance_id, exc)
        finally:
            self._sending.discard(key)
            slots.release()

    async def _hurry(self, topic: str, to: str, **fields: str) -> None:
        """Wake *to* early; the rows are the truth, so a failed publish only costs a poll."""
        try:
            await self._bus.publish(topic, to=to, **fields)
        except (StoreError, PayloadTooLarge) as exc:  # the bus may be away: the other side polls
            log.info("cluster: could not publish %s to %s: %s", topic, to, exc)
