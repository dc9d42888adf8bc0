"""Events between replicas by PostgreSQL LISTEN/NOTIFY only (no second broker).

Theory of operation. One dedicated psycopg connection per replica LISTENs on the deployment's
channel (`channel_name`: one per schema, so deployments sharing a database do not hear each
other). Connecting and the LISTEN run in a worker thread (``abandon_on_cancel``: a cancelled
connect is left to finish and be closed by its thread); after that the connection is idle and
the bus waits for its socket to become readable in trio itself
(``trio.lowlevel.wait_readable``), then drains libpq's queue without blocking
(``consume_input`` + ``notifies``). So cancellation is immediate and no thread sits in a
blocking read. A connection that breaks (the server restarted, the socket closed) is
re-established with full-jitter backoff; TCP keepalives find a peer that vanished silently.
Events that were sent while the bus was reconnecting are lost: every subscriber is told to
resynchronize (`Subscription.resync`), as after a buffer overflow.

An event is a small JSON object ``{"t": topic, "from": replica, "ts": unix time, ...}``.
PostgreSQL limits a payload to 8000 bytes; `encode` refuses more (`PayloadTooLarge`).
Events are published inside the transaction of the change they describe (`Notice`s handed to
`SqlCluster`), or alone with `Bus.publish`; PostgreSQL delivers them at commit, in commit
order, to every listener including the sender.

Each subscriber has a bounded buffer: when it is full the event is dropped, counted
(``devyard_cluster_notify_dropped_total``) and the subscriber's ``resync`` flag is set, so it
rereads the state from the tables instead of trusting a gap-free stream.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from functools import partial
from typing import Any, Final

import attrs
import psycopg
import trio
from psycopg import sql

from ...core.backoff import Backoff
from ..store.sql_cluster import Notice, SqlCluster
from . import metrics

log = logging.getLogger(__name__)

__all__ = [
    "MAX_PAYLOAD",
    "Bus",
    "Event",
    "PayloadTooLarge",
    "Subscription",
    "Topic",
    "channel_name",
    "connect_in_thread",
    "open_bus",
]

MAX_PAYLOAD: Final = 7900  # bytes; PostgreSQL's limit is 8000 (a little room for the channel)
DEFAULT_BUFFER: Final = 256
_CONNECT_TIMEOUT_S: Final = 10


class Topic:
    """The topics replicas exchange (plain strings on the wire)."""

    INSTANCE = "instance"  # an instance's state changed: {instance_id, state}
    HOST = "host"  # a host attached/detached/changed capacity: {host_id, change}
    CONNECTOR = "connector"  # a connector link attached/detached: {key, change}
    TUNNEL = (
        "tunnel"  # a tunnel was rotated, deleted or its selectors edited: {org_id, name, change}
    )
    ORDER = "order"  # a start/stop order for the holder of a host: {to, host_id, op, ...}
    ORDER_DONE = "order_done"  # the holder's answer to a start order: {to, order_id, ok, error}


class PayloadTooLarge(ValueError):
    """An event would not fit in one NOTIFY (8000 bytes)."""


@attrs.frozen
class Event:
    topic: str
    sender: str
    sent_at: float  # the sender's unix time
    fields: dict[str, Any]


def channel_name(schema: str) -> str:
    """The deployment's NOTIFY channel: one per schema (at most 63 bytes, PostgreSQL's limit)."""
    return f"devyard_cluster_{schema}"[:63]


def encode(channel: str, topic: str, sender: str, fields: dict[str, Any]) -> Notice:
    payload = json.dumps(
        {"t": topic, "from": sender, "ts": time.time(), **fields}, separators=(",", ":")
    )
    if len(payload.encode()) > MAX_PAYLOAD:
        raise PayloadTooLarge(f"a {topic} event of {len(payload)} bytes does not fit in a NOTIFY")
    return channel, payload


def decode(payload: str) -> Event | None:
    try:
        data = json.loads(payload)
        topic = str(data.pop("t"))
        sender = str(data.pop("from"))
        sent_at = float(data.pop("ts"))
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
    return Event(topic, sender, sent_at, data)


@attrs.define(eq=False)
class Subscription:
    topics: frozenset[str]
    send: trio.MemorySendChannel[Event]
    receive: trio.MemoryReceiveChannel[Event]
    resync: bool = False  # events were dropped or missed: reread the state

    def __aiter__(self) -> AsyncIterator[Event]:
        return self.receive.__aiter__()


class Bus:
    """The replica's end of the NOTIFY channel (made by `open_bus`)."""

    def __init__(self, url: str, channel: str, replica_id: str, cluster: SqlCluster) -> None:
        self._url = url
        self.channel = channel
        self.replica_id = replica_id
        self._cluster = cluster
        self._subscribers: list[Subscription] = []
        self.listening = trio.Event()  # set once the first LISTEN is in place
        self.backend_pid: int | None = None  # the LISTEN connection's server process

    def notice(self, topic: str, **fields: Any) -> Notice:
        """An event to publish inside a `SqlCluster` transaction."""
        return encode(self.channel, topic, self.replica_id, fields)

    async def publish(self, topic: str, **fields: Any) -> None:
        await self._cluster.notify([self.notice(topic, **fields)])

    @asynccontextmanager
    async def subscribe(
        self, topics: Iterable[str], *, buffer: int = DEFAULT_BUFFER
    ) -> AsyncIterator[Subscription]:
        send, receive = trio.open_memory_channel[Event](buffer)
        subscription = Subscription(frozenset(topics), send, receive)
        self._subscribers.append(subscription)
        try:
            yield subscription
        finally:
            self._subscribers.remove(subscription)
            send.close()
            receive.close()

    def _dispatch(self, payload: str) -> None:
        event = decode(payload)
        if event is None:
            log.warning("cluster bus: an undecodable event on %s", self.channel)
            return
        metrics.NOTIFY_LAG.observe(max(0.0, time.time() - event.sent_at))
        for subscription in self._subscribers:
            if event.topic not in subscription.topics:
                continue
            try:
                subscription.send.send_nowait(event)
            except trio.WouldBlock:
                subscription.resync = True
                metrics.NOTIFY_DROPPED.inc()

    def _resync_all(self) -> None:
        for subscription in self._subscribers:
            subscription.resync = True

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """LISTEN until cancelled, reconnecting with backoff; started once the first LISTEN
        is in place (or after the first failed attempt, which is logged)."""
        backoff = Backoff(base=0.2, cap=10.0)
        started = False
        while True:
            conn: psycopg.Connection[Any] | None = None
            try:
                conn = await connect_in_thread(partial(_listen, self._url, self.channel))
                backoff.succeeded(trio.current_time())
                self.backend_pid = conn.info.backend_pid
                if started:
                    metrics.NOTIFY_RECONNECTS.inc()
                    self._resync_all()  # what was sent while we were away is lost
                self.listening.set()
                if not started:
                    started = True
                    task_status.started()
                await self._drain_forever(conn)
            except psycopg.Error as exc:
                log.warning("cluster bus: LISTEN connection failed: %s", exc)
                backoff.failed(trio.current_time())
                if not started:
                    started = True
                    task_status.started()
            finally:
                if conn is not None:
                    conn.close()  # an idle connection: closing does not block
            await trio.sleep(backoff.next_delay())

    async def _drain_forever(self, conn: psycopg.Connection[Any]) -> None:
        pgconn = conn.pgconn
        while True:
            await trio.lowlevel.wait_readable(conn.fileno())
            pgconn.consume_input()
            if pgconn.status != psycopg.pq.ConnStatus.OK:
                raise psycopg.OperationalError("the LISTEN connection broke")
            while (notify := pgconn.notifies()) is not None:
                self._dispatch(notify.extra.decode())


@attrs.define
class _Handoff:
    """A connection made in a worker thread that the trio side may have stopped waiting for:
    whichever side comes second closes it, so a cancelled connect leaks nothing."""

    lock: threading.Lock = attrs.field(factory=threading.Lock)
    abandoned: bool = False
    conn: psycopg.Connection[Any] | None = None

    def deliver(self, conn: psycopg.Connection[Any]) -> None:
        with self.lock:
            if self.abandoned:
                conn.close()
            else:
                self.conn = conn

    def abandon(self) -> None:
        with self.lock:
            self.abandoned = True
            if self.conn is not None:
                self.conn.close()


async def connect_in_thread(
    make: Callable[[], psycopg.Connection[Any]],
) -> psycopg.Connection[Any]:
    """``make()`` in a worker thread, cancellable: a connection it delivers after the caller
    was cancelled is closed (`_Handoff`), never leaked. The bus's LISTEN connection and the
    election's lock connection are both made this way."""
    handoff = _Handoff()

    def work() -> psycopg.Connection[Any]:
        conn = make()
        handoff.deliver(conn)
        return conn

    try:
        return await trio.to_thread.run_sync(work, abandon_on_cancel=True)
    except trio.Cancelled:
        handoff.abandon()
        raise


def _listen(url: str, channel: str) -> psycopg.Connection[Any]:
    """Worker thread: a fresh autocommit connection that LISTENs on *channel*."""
    conn = psycopg.connect(
        url,
        autocommit=True,
        connect_timeout=_CONNECT_TIMEOUT_S,
        keepalives=1,
        keepalives_idle=10,
        keepalives_interval=5,
        keepalives_count=3,
    )
    try:
        conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
    except BaseException:
        conn.close()
        raise
    return conn


@asynccontextmanager
async def open_bus(
    url: str, channel: str, replica_id: str, cluster: SqlCluster
) -> AsyncIterator[Bus]:
    """The bus, listening, for the duration of the block."""
    bus = Bus(url, channel, replica_id, cluster)
    async with trio.open_nursery() as nursery:
        await nursery.start(bus.run)
        yield bus
        nursery.cancel_scope.cancel()
