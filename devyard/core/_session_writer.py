"""The session's writer: the one task that writes the transport, and the keepalive it runs.

Part of `Session` (session.py, whose docstring is the theory of operation): a mixin holding
no state of its own (Session declares every slot), so the writer's methods are looked up on
the session as before and cost nothing more.

* The outbound queue: control frames (window updates, ACKs, pings, resets, GO_AWAY) go
  first, then data frames in FIFO order; senders append (`_queue_*`), bounded by
  `max_outbound_buffer` (senders park when it is full), and wake the writer.
* Batching: everything pending, up to `max_write_batch` (`MessageStream.max_send` over a
  WebSocket), is one write of whole frames (`_next_batch`). Woken with little pending, the
  writer lets the tasks already runnable take two turns first, so frames queued together
  share one write.
* The keepalive: the deadline of the writer's wait is the next tick (`_tick`): PING after
  `keepalive_interval` without inbound frames, the session is dead after `dead_after`, and
  streams whose peer never finished closing them are reset.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Final

import trio
from trio.lowlevel import ParkingLot, cancel_shielded_checkpoint

from ._errors import RemoteProtocolError, SessionBrokenError
from .codec import encode_data_header, encode_ping, encode_window_update
from .frames import HEADER_SIZE, Flag
from .vectored import piece_sender

if TYPE_CHECKING:
    from .config import SessionConfig
    from .stream import MuxStream

__all__ = ["SessionWriter", "unpark_all"]

_SYN: Final = int(Flag.SYN)
_FIN: Final = int(Flag.FIN)
# Woken with less than this pending, the writer first lets the tasks that are already
# runnable have _COALESCE_ROUNDS turns, so frames queued at about the same moment (a SYN and
# the first data, the last data and the FIN, several streams' window updates) share one
# transport write and wake the peer once; a few microseconds of latency, no timer. Bulk
# transfers, with more than this pending, never wait. (Over loopback this took a stream
# open, 1-byte echo and close from ~2.1 to ~1.6 writes on each side.)
_COALESCE_BELOW: Final = 64 * 1024
_COALESCE_ROUNDS: Final = 2
_LINGER: Final = 60.0  # seconds a closed stream waits for the peer's FIN before we reset it


def unpark_all(lot: ParkingLot | None) -> None:
    if lot is not None:
        lot.unpark_all()


class SessionWriter:
    """The writer task, the outbound queue and the keepalive of a `Session`."""

    # the writer's state (Session.__init__ sets it); what it uses of the rest is declared below
    __slots__ = (
        "_bytes_sent",
        "_control",
        "_data",
        "_last_ping_sent",
        "_lingering",
        "_max_write",
        "_outbound",
        "_outbound_lot",
        "_ping_after",
        "_writer_done",
        "_writer_done_event",
        "_writer_lot",
        "_writer_scope",
    )

    if TYPE_CHECKING:
        # the writer's state, as Session.__init__ sets it
        _lingering: list[tuple[float, MuxStream]]
        _control: list[bytes]
        _data: list[tuple[bytes, bytes | memoryview]]
        _outbound: int
        _writer_lot: ParkingLot
        _outbound_lot: ParkingLot | None
        _writer_done: bool
        _writer_done_event: trio.Event | None
        _writer_scope: trio.CancelScope | None
        _max_write: int
        _bytes_sent: int
        _ping_after: float
        _last_ping_sent: float

        # Session's state that the writer reads
        @property
        def config(self) -> SessionConfig: ...

        _transport: trio.abc.Stream
        _streams: dict[int, MuxStream]
        _background_cancelled: bool
        _last_inbound: float
        _ended: bool
        _closed_by_us: bool

        # ... and the methods of Session that it calls
        def _end(
            self, error: BaseException | None, *, flush: bool = False, go_away: int | None = None
        ) -> None: ...

        def _forget(self, stream: MuxStream) -> None: ...

        def _cancel_background(self) -> None: ...

    # ---- the writer task --------------------------------------------------------------------

    async def _writer(self, scope: trio.CancelScope) -> None:
        send = piece_sender(self._transport)
        write_timeout = self.config.write_timeout
        writer_lot = self._writer_lot
        # One scope at a time for the writer's writes and waits: its deadline is the write
        # timeout while a write is under way and the next keepalive tick while it waits for
        # frames (a fresh move_on_after per write cost as much as the rest of a small write's
        # bookkeeping). A passed deadline ends the scope: a tick then runs, and a new scope.
        self._tick()
        tick_at = self._next_tick()
        try:
            while not self._ended or self._control or self._data:
                writing = False
                with scope:
                    while True:
                        if not self._control and not self._data:
                            if self._ended:
                                break
                            # as of now: what arrived since (a PING) may put it off
                            tick_at = scope.deadline = self._next_tick()
                            await writer_lot.park()
                            for _ in range(_COALESCE_ROUNDS):
                                if self._outbound >= _COALESCE_BELOW:
                                    break
                                await cancel_shielded_checkpoint()
                            continue
                        if scope.cancel_called:
                            break  # a tick came due while we were woken: it goes first
                        batch, size, data_bytes = self._next_batch()
                        scope.deadline = trio.current_time() + write_timeout
                        writing = True
                        await send(batch)
                        writing = False
                        del batch  # not kept while the writer waits
                        self._bytes_sent += size
                        if data_bytes:
                            self._outbound -= data_bytes
                            unpark_all(self._outbound_lot)
                        if trio.current_time() >= tick_at:  # writing without a pause
                            self._tick()
                            tick_at = self._next_tick()
                if not self._tick_due(scope, writing=writing):
                    break
                self._tick()
                tick_at = self._next_tick()
                scope = self._writer_scope = trio.CancelScope()
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            self._end(SessionBrokenError(f"transport failed: {exc!r}"))
        finally:
            self._writer_done = True
            if self._writer_done_event is not None:
                self._writer_done_event.set()
            with trio.CancelScope(shield=True):
                await trio.aclose_forcefully(self._transport)
            self._cancel_background()

    def _tick_due(self, scope: trio.CancelScope, *, writing: bool) -> bool:
        """Why the writer's scope ended: True for a keepalive tick (the writer goes on)."""
        if self._background_cancelled:
            return False
        if writing:
            self._end(SessionBrokenError("a transport write timed out"))
            return False
        return scope.cancel_called  # else the session ended and all is sent

    def _next_batch(self) -> tuple[list[bytes | memoryview], int, int]:
        """The next write: every control frame, then whole data frames up to _max_write.

        Returns the pieces, their total size, and how much of it is data frames.
        """
        control = self._control
        self._control = []
        size = HEADER_SIZE * len(control)  # control frames are bare headers
        batch: list[bytes | memoryview] = [b"".join(control)] if control else []
        data_bytes = 0
        max_batch = self._max_write
        queue = self._data
        taken = 0
        for header, payload in queue:
            if size >= max_batch and batch:
                break
            frame_size = len(header) + len(payload)
            if size + frame_size > max_batch and batch:
                break
            taken += 1
            batch.append(header)
            if payload:
                batch.append(payload)
            size += frame_size
            data_bytes += frame_size
        del queue[:taken]  # once per write, not a pop per frame
        return batch, size, data_bytes

    def _tick(self) -> None:
        """The keepalive's work that is due now. Synchronous: it only queues frames and may
        end the session. When the next is due: `_next_tick()`."""
        now = trio.current_time()
        dead_after = self.config.dead_after
        if now - self._last_inbound >= dead_after:
            self._end(SessionBrokenError(f"no frames from the peer for {dead_after:g} s"))
            return
        if now >= self._ping_at():
            self._last_ping_sent = now
            self._queue_control(encode_ping(_SYN, 0))
        expired = 0
        for when, stream in self._lingering:
            if when > now:
                break
            expired += 1
            if stream.stream_id in self._streams:
                stream._send_rst()
                self._forget(stream)
        del self._lingering[:expired]

    def _ping_at(self) -> float:
        """When a keepalive PING is due: an interval after the last frame heard or PING sent.
        A frame heard just after our PING was most likely its answer, which then does not put
        the next PING off: one wake-up per interval, not two (bench links' CPU)."""
        heard = self._last_inbound
        sent = self._last_ping_sent
        if heard - sent <= self._ping_after / 10:
            heard = sent
        return max(heard, sent) + self._ping_after

    def _next_tick(self) -> float:
        """When `_tick` has work next: the deadline of the writer's waits."""
        return min(
            self._ping_at(),
            self._last_inbound + self.config.dead_after,
            self._lingering[0][0] if self._lingering else math.inf,
        )

    # ---- outbound frames --------------------------------------------------------------------

    def _queue_control(self, frame: bytes) -> None:
        if self._ended and not self._closed_by_us:
            return
        if len(self._control) >= self.config.max_control_backlog:
            self._end(RemoteProtocolError("control frame backlog exceeded"), go_away=1)
            return
        self._control.append(frame)
        self._writer_lot.unpark()

    def _queue_window_update(self, sid: int, flags: int, delta: int) -> None:
        self._queue_control(encode_window_update(flags, sid, delta))

    def _queue_data(self, sid: int, payload: memoryview) -> None:
        self._data.append((encode_data_header(0, sid, len(payload)), payload))
        self._outbound += len(payload) + 12
        self._writer_lot.unpark()

    def _queue_fin(self, sid: int) -> None:
        self._data.append((encode_window_update(_FIN, sid, 0), b""))
        self._outbound += 12
        self._writer_lot.unpark()

    def _has_outbound_room(self) -> bool:
        return self._outbound < self.config.max_outbound_buffer

    def _outbound_parking(self) -> ParkingLot:
        if self._outbound_lot is None:
            self._outbound_lot = ParkingLot()
        return self._outbound_lot

    def _linger(self, stream: MuxStream) -> None:
        self._lingering.append((trio.current_time() + _LINGER, stream))
