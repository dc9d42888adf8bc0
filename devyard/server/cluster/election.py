"""`ConnectorElection`: exactly one active connector per tunnel in the whole cluster.

Theory of operation (docs/scale-out.md, "Active connector election").

- **The lock.** A tunnel's active connector is linked to the replica that holds the tunnel's
  PostgreSQL session-level advisory lock (`lock_key`: 64 bits of a keyed hash of the
  deployment's channel, i.e. its schema, and the tunnel id, so deployments sharing a database
  do not collide). Each replica holds its locks on one dedicated connection (`LockSession`),
  which it never uses for anything else. When the replica dies (kill -9, power loss) the
  kernel closes the socket, PostgreSQL ends the session and drops its locks at once: there is
  no lease to wait out.
- **Taking it.** The hub asks `acquire` when a connector registers on a tunnel with no active
  connector here: ``pg_try_advisory_lock`` (never waits). Won: the connector is active. Lost:
  it is a standby here, and the tunnel is *waiting*. A waiting tunnel's lock is tried again
  when another replica publishes that it released it (``election`` event, `Topic`), and on a
  short poll (``poll_s``, 0.25 s) that catches the holder's death, which sends nothing. The
  winner promotes its oldest standby (`ConnectorHub.take_over`); the hub's change of active
  connectors makes `ClusterHosts` record the replica in ``link_holders``, where forwarding
  finds it.
- **Giving it up.** When a tunnel has no active connector here any more and no standby to
  promote (a local standby is promoted without releasing anything), the lock is released and
  an ``election`` event names the tunnel, in the same statement: the unlock happens first, the
  event goes out at its commit, so a replica woken by it finds the lock free.
- **``--replace``.** A replacing connector that registers where the lock is not held asks
  the holder (``election`` event ``replace``): it ends its active connector (``replaced``),
  promotes nobody for `HANDOVER_S`, and releases the lock naming the requester, which tries
  at once while the other replicas hold off for `HANDOVER_S`; the requester promotes the
  replacing connector before older standbys.
- **Never two.** A replica makes a connector active only while it holds the lock (the hub asks
  `acquire`, or is told by `take_over` after a win). If the lock connection breaks, every local
  active connector is demoted at once (`ConnectorHub.demote_all`) before anything else runs:
  the connection's socket is watched whenever it is idle, so PostgreSQL ending the session
  (and dropping its locks) is seen as soon as the end arrives. A silent network partition is
  found by a ping every ``ping_s`` (1 s) with a ``query_timeout`` (2 s), sooner than
  PostgreSQL's own side gives the locks up (the session sets ``tcp_keepalives_*`` so the
  server notices a vanished replica within about 11 s). The connection is then made again
  with backoff, and this replica's waiting tunnels compete again after two polls (so a
  replica whose session did not break takes over first). A demoted connector is not told (there
  is no ``demote`` message in the protocol): it stays linked, the hub routes nothing to it,
  and it gets ``promote`` when this replica wins again.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from functools import partial
from typing import Any, Final, Protocol

import psycopg
import trio
from prometheus_client import Counter
from psycopg import pq

from ...core.backoff import Backoff
from ..metrics import REGISTRY
from .bus import Bus, Event, connect_in_thread

log = logging.getLogger(__name__)

__all__ = [
    "ELECTION",
    "ConnectorElection",
    "ElectedHub",
    "LockLost",
    "LockSession",
    "lock_key",
    "open_lock_session",
]

#: the bus topic of lock releases: {change: "released", keys: [tunnel id, ...]}
ELECTION: Final = "election"
DEFAULT_POLL_S: Final = 0.25
DEFAULT_PING_S: Final = 1.0
DEFAULT_QUERY_TIMEOUT_S: Final = 2.0
_CONNECT_TIMEOUT_S: Final = 10
_CHUNK: Final = 50  # tunnels per statement (and per event: 50 ids and targets fit a NOTIFY)
#: a lock handed to a ``--replace`` connector's replica: others hold off this long
HANDOVER_S: Final = 2.0


ELECTIONS: Final = Counter(
    "devyard_cluster_connector_locks_total",
    "Tunnel locks (active connector elections) this replica won, released, or lost with its"
    " lock connection, by outcome (won, released, lost).",
    ["outcome"],
    registry=REGISTRY,
)


class LockLost(Exception):
    """The lock connection broke (or did not answer in time): every lock on it is gone."""


def lock_key(namespace: str, tunnel_id: str) -> int:
    """The advisory lock key of *tunnel_id* in the deployment *namespace* (a signed 64-bit
    integer; the migration runner's key is a different constant, two-int keys another space)."""
    digest = hashlib.blake2b(
        f"{namespace}\0{tunnel_id}".encode(), digest_size=8, person=b"devyard-elect"
    ).digest()
    return int.from_bytes(digest, "big", signed=True)


class ElectedHub(Protocol):
    """What the election asks of the connector hub (`ConnectorHub`)."""

    def active_tunnels(self) -> Mapping[str, object]: ...

    def waiting_tunnels(self) -> set[str]: ...

    def take_over(self, tunnel_id: str) -> bool: ...

    def demote_all(self) -> list[str]: ...

    async def hand_over(self, tunnel_id: str, within: float) -> bool: ...


class LockSession:
    """One PostgreSQL session driven through libpq's non-blocking calls in trio (no thread
    sits in a read). Queries are serialized; between them `watch` waits for the socket, so
    the end of the session is seen while it is idle."""

    def __init__(self, conn: psycopg.Connection[Any], query_timeout: float) -> None:
        self._conn = conn
        self._pg = conn.pgconn
        self._fd = conn.fileno()
        self._query_timeout = query_timeout
        self._lock = trio.Lock()
        self._idle: trio.CancelScope | None = None
        self._queued = 0
        self.broken = False
        self.backend_pid = self._pg.backend_pid
        self._pg.nonblocking = 1

    async def query(self, sql: str, params: Sequence[object] = ()) -> list[list[bytes | None]]:
        """The rows of one statement (text values). Shielded from the caller's cancellation
        (a query cut in half leaves the session unusable) but bounded by ``query_timeout``;
        any failure is `LockLost` and leaves the session broken."""
        self._queued += 1
        if self._idle is not None:
            self._idle.cancel()
        try:
            await self._lock.acquire()
        finally:
            self._queued -= 1
        try:
            if self.broken:
                raise LockLost("the lock connection is closed")
            with trio.CancelScope(shield=True), trio.move_on_after(self._query_timeout):
                return await self._run(sql, params)
            self.broken = True
            raise LockLost(f"no answer within {self._query_timeout:.1f} s")
        except psycopg.Error as exc:
            self.broken = True
            raise LockLost(str(exc).strip()) from exc
        finally:
            self._lock.release()

    async def _run(self, sql: str, params: Sequence[object]) -> list[list[bytes | None]]:
        pg = self._pg
        pg.send_query_params(sql.encode(), [_text(p) for p in params])
        while pg.flush():
            await trio.lowlevel.wait_writable(self._fd)
        result: pq.abc.PGresult | None = None
        while True:
            while pg.is_busy():
                await trio.lowlevel.wait_readable(self._fd)
                pg.consume_input()
            res = pg.get_result()
            if res is None:
                break
            result = res
        if result is None or result.status != pq.ExecStatus.TUPLES_OK:
            message = "no result" if result is None else result.get_error_message()
            raise psycopg.OperationalError(f"lock query failed: {message}")
        return [
            [result.get_value(row, col) for col in range(result.nfields)]
            for row in range(result.ntuples)
        ]

    async def watch(self) -> None:
        """Return never; raise `LockLost` when the session ends while idle."""
        while True:
            async with self._lock:
                with trio.CancelScope() as idle:
                    self._idle = idle
                    if self._queued:  # a query is waiting: let it in
                        idle.cancel()
                    await trio.lowlevel.wait_readable(self._fd)
                    try:
                        self._pg.consume_input()
                    except psycopg.Error as exc:
                        self.broken = True
                        raise LockLost(str(exc).strip()) from exc
                    if self._pg.status != pq.ConnStatus.OK:
                        self.broken = True
                        raise LockLost("the lock connection ended")
                self._idle = None
            await trio.lowlevel.checkpoint()

    def close(self) -> None:
        self.broken = True
        self._conn.close()


def _text(value: object) -> bytes | None:
    if value is None:
        return None
    if isinstance(value, list | tuple):
        return ("{" + ",".join(str(v) for v in value) + "}").encode()
    return str(value).encode()


@asynccontextmanager
async def open_lock_session(
    url: str, *, query_timeout: float = DEFAULT_QUERY_TIMEOUT_S
) -> AsyncIterator[LockSession]:
    """A fresh dedicated session (connected in a worker thread), closed on exit."""
    conn = await _connect(url)
    session = LockSession(conn, query_timeout)
    try:
        yield session
    finally:
        session.close()


def _lock_connection(url: str) -> psycopg.Connection[Any]:
    """Worker thread: the replica's lock connection, with keepalives on both sides."""
    conn = psycopg.connect(
        url,
        autocommit=True,
        connect_timeout=_CONNECT_TIMEOUT_S,
        keepalives=1,
        keepalives_idle=5,
        keepalives_interval=2,
        keepalives_count=3,
    )
    try:  # the server's side notices a vanished replica in ~5 + 2 * 3 s
        conn.execute("SET tcp_keepalives_idle = 5")
        conn.execute("SET tcp_keepalives_interval = 2")
        conn.execute("SET tcp_keepalives_count = 3")
    except BaseException:
        conn.close()
        raise
    return conn


async def _connect(url: str) -> psycopg.Connection[Any]:
    return await connect_in_thread(partial(_lock_connection, url))


class ConnectorElection:
    """The hub's `Election` in cluster mode. Run `run` in the replica's nursery; set it as
    the hub's ``election`` (`ClusterTunnels.run` does both)."""

    def __init__(
        self,
        url: str,
        bus: Bus,
        hub: ElectedHub,
        *,
        poll_s: float = DEFAULT_POLL_S,
        ping_s: float = DEFAULT_PING_S,
        query_timeout: float = DEFAULT_QUERY_TIMEOUT_S,
    ) -> None:
        self._url = url
        self._bus = bus
        self._hub = hub
        self._namespace = bus.channel
        self.poll_s = poll_s
        self.ping_s = ping_s
        self._query_timeout = query_timeout
        self._session: LockSession | None = None
        self._mutex = trio.Lock()  # decisions about `held` and the queries that make them
        self.held: set[str] = set()  # tunnels whose lock this replica holds
        self._wake = trio.Event()
        self._last_query = 0.0
        self._lost_scope: trio.CancelScope | None = None
        self._quiet_until = 0.0  # after a lost session, others get the first try
        self._handover_to: dict[str, str] = {}  # tunnel id -> the replica of its replacer
        self._paused: dict[str, float] = {}  # tunnel id -> until when another replica's turn
        self.connected = trio.Event()  # set while a lock session is up
        self.wins = 0  # locks won (metrics, tests)

    def __repr__(self) -> str:
        return f"ConnectorElection({self._bus.replica_id}, held={len(self.held)})"

    @property
    def backend_pid(self) -> int | None:
        """The lock session's server process (tests end it to play a lost connection)."""
        session = self._session
        return None if session is None else session.backend_pid

    # ---- the hub's `Election` ------------------------------------------------------------------

    async def acquire(self, tunnel_id: str) -> bool:
        """Whether this replica holds *tunnel_id*'s lock (already, or won now)."""
        async with self._mutex:
            if tunnel_id in self.held:
                return True
            if trio.current_time() < self._quiet_until:
                return False
            won = await self._try([tunnel_id])
            return tunnel_id in won

    def changed(self) -> None:
        """The hub's active or waiting connectors changed: reconcile soon."""
        self._wake.set()

    async def replace(self, tunnel_id: str) -> None:
        """A connector here was started with ``--replace`` while the lock is held elsewhere:
        ask the holder to end its active connector and hand the lock to this replica."""
        try:
            await self._bus.publish(ELECTION, change="replace", keys=[tunnel_id])
        except Exception:  # the database may be away: the connector stays a standby
            log.exception("tunnel %s: asking for a hand-over failed", tunnel_id)

    # ---- the locks -----------------------------------------------------------------------------

    async def _query(self, sql: str, params: Sequence[object]) -> list[list[bytes | None]]:
        session = self._session
        if session is None:
            raise LockLost("no lock connection")
        try:
            rows = await session.query(sql, params)
        except LockLost:
            self._lost(session)
            raise
        self._last_query = trio.current_time()
        return rows

    async def _try(self, tunnel_ids: Sequence[str]) -> set[str]:
        """Try the locks of *tunnel_ids* not held yet (caller holds the mutex); the won ones."""
        wanted = sorted(set(tunnel_ids) - self.held)
        won: set[str] = set()
        if self._session is None:
            await trio.lowlevel.checkpoint()
            return won
        for start in range(0, len(wanted), _CHUNK):
            chunk = wanted[start : start + _CHUNK]
            keys = {lock_key(self._namespace, t): t for t in chunk}
            try:
                rows = await self._query(
                    "SELECT k::text, pg_try_advisory_lock(k) FROM unnest($1::bigint[]) AS k",
                    [list(keys)],
                )
            except LockLost:
                return set()
            for key, taken in rows:
                if taken == b"t" and key is not None:
                    won.add(keys[int(key)])
        self.held |= won
        self.wins += len(won)
        ELECTIONS.labels("won").inc(len(won))
        for tunnel_id in sorted(won):
            log.info("tunnel %s: this replica won the active connector's lock", tunnel_id)
        return won

    async def _release(self, tunnel_ids: Sequence[str]) -> None:
        """Unlock, and publish the release in the same statement (caller holds the mutex)."""
        for start in range(0, len(tunnel_ids), _CHUNK):
            chunk = list(tunnel_ids[start : start + _CHUNK])
            to = {t: self._handover_to.pop(t) for t in chunk if t in self._handover_to}
            channel, payload = self._bus.notice(ELECTION, change="released", keys=chunk, to=to)
            keys = [lock_key(self._namespace, t) for t in chunk]
            try:
                await self._query(
                    "WITH u AS (SELECT pg_advisory_unlock(k) AS ok FROM unnest($1::bigint[]) k)"
                    " SELECT (SELECT count(*) FROM u WHERE ok)::text, pg_notify($2, $3)",
                    [keys, channel, payload],
                )
            except LockLost:
                return
            self.held -= set(chunk)
            ELECTIONS.labels("released").inc(len(chunk))
            log.info("tunnel(s) %s: this replica released the lock", ", ".join(chunk))

    async def reconcile(self) -> None:
        """One pass: promote standbys of held tunnels, try the locks of waiting tunnels,
        release the locks nobody here needs, ping when idle and holding."""
        async with self._mutex:
            if self._session is None:
                await trio.lowlevel.checkpoint()
                return
            waiting = self._hub.waiting_tunnels()
            for tunnel_id in sorted(waiting & self.held):  # a lock kept: promote here
                self._hub.take_over(tunnel_id)
            acquired = False
            now = trio.current_time()
            self._paused = {t: until for t, until in self._paused.items() if until > now}
            contested = sorted(t for t in waiting - self.held if self._paused.get(t, 0) <= now)
            if contested and now >= self._quiet_until:
                acquired = True
                for tunnel_id in sorted(await self._try(contested)):
                    self._hub.take_over(tunnel_id)
            active = set(self._hub.active_tunnels())
            unneeded = sorted(self.held - active)
            if unneeded:
                await self._release(unneeded)
            elif (
                not acquired and self.held and trio.current_time() - self._last_query >= self.ping_s
            ):
                await self._query("SELECT 1", [])

    def _lost(self, session: LockSession) -> None:
        """The lock session broke: its locks are gone, so demote every active connector here
        now (synchronously: no stream is routed to them after this returns)."""
        if self._session is not session:
            return
        self._session = None
        self.connected = trio.Event()
        # the replicas whose sessions did not break take over first (they poll meanwhile)
        self._quiet_until = trio.current_time() + 2 * self.poll_s
        session.close()
        held, self.held = self.held, set()
        ELECTIONS.labels("lost").inc(len(held))
        demoted = self._hub.demote_all()
        if held or demoted:
            log.warning(
                "cluster: the connector lock connection broke; %d tunnel(s) demoted here",
                len(demoted),
            )
        if self._lost_scope is not None:
            self._lost_scope.cancel()

    # ---- running -------------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Hold a lock session (again and again, with backoff) and reconcile on every change,
        release event and poll, until cancelled. Started once the first session is up (or
        the first attempt failed)."""
        backoff = Backoff(base=0.2, cap=5.0)
        started = False
        async with self._bus.subscribe([ELECTION]) as events, trio.open_nursery() as nursery:
            nursery.start_soon(self._listen, events, nursery)
            while True:
                try:
                    async with open_lock_session(
                        self._url, query_timeout=self._query_timeout
                    ) as session:
                        backoff.succeeded(trio.current_time())
                        self._session = session
                        self.connected.set()
                        if not started:
                            started = True
                            task_status.started()
                        await self._hold(session)
                except (psycopg.Error, LockLost) as exc:
                    log.warning("cluster: connector lock connection: %s", exc)
                    if not started:
                        started = True
                        task_status.started()
                finally:
                    if self._session is not None:
                        self._lost(self._session)
                backoff.failed(trio.current_time())
                await trio.sleep(backoff.next_delay())

    async def _hold(self, session: LockSession) -> None:
        with trio.CancelScope() as self._lost_scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._watch, session)
                while not session.broken:
                    await self.reconcile()
                    period = self.poll_s if self._hub.waiting_tunnels() else self.ping_s
                    with trio.move_on_after(period):
                        await self._wake.wait()
                    self._wake = trio.Event()
        self._lost_scope = None

    async def _watch(self, session: LockSession) -> None:
        try:
            await session.watch()
        except LockLost as exc:
            log.warning("cluster: connector lock connection ended: %s", exc)
            self._lost(session)

    async def _listen(self, events: Any, nursery: trio.Nursery) -> None:
        event: Event
        async for event in events:
            me = self._bus.replica_id
            if event.sender == me:
                continue
            keys = {str(k) for k in event.fields.get("keys") or ()}
            if event.fields.get("change") == "replace":
                for tunnel_id in sorted(keys & self.held):
                    self._handover_to[tunnel_id] = event.sender
                    nursery.start_soon(self._hub.hand_over, tunnel_id, HANDOVER_S)
                continue
            to = event.fields.get("to") or {}
            now = trio.current_time()
            for tunnel_id in keys:
                target = to.get(tunnel_id) if isinstance(to, dict) else None
                if target not in (None, me):  # handed to a replacer elsewhere: its turn first
                    self._paused[tunnel_id] = now + HANDOVER_S
                else:
                    self._paused.pop(tunnel_id, None)
            if keys & self._hub.waiting_tunnels():
                self._wake.set()
