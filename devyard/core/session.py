"""Session: a yamux-compatible multiplexer over one trio byte stream.

Theory of operation
-------------------
`open_session(transport, client=...)` runs two background tasks in a nursery it owns:

* the **reader**, the only task that reads the transport: it feeds bytes to the pure
  FrameDecoder (payloads are views of what was read, a payload cut by a read comes in pieces)
  and dispatches every frame synchronously, into bounded per-stream buffers (stream.py), or,
  for a stream a splice is waiting on, straight on to where the splice sends (splice.py). It
  never awaits anything but the transport, so a stream whose application stalls cannot hold
  up the others: its window, not the reader, absorbs the stall.
* the **writer**, the only task that writes the transport: control frames (window updates,
  ACKs, pings, resets, GO_AWAY) go first, then data frames in FIFO order; everything pending,
  up to `max_write_batch` (`MessageStream.max_send` over a WebSocket), is joined into one
  `send_all` (over a plain TCP socket, one `sendmsg` of the pieces: no join), always whole
  frames (a WebSocket message then carries whole frames). FIN
  travels with the data so it never overtakes it. Woken with little pending, it lets the
  tasks already runnable take two turns first, so frames queued together share one write.
  It also keeps the session alive: while it waits for frames to send, the deadline of its
  wait is the next keepalive tick (`_tick`): PING after `keepalive_interval` without inbound
  frames (the accepting side waits half an interval longer, so on an idle link only the
  dialling side's PINGs cross), the session is dead after `dead_after`, and streams whose
  peer never finished closing them are reset. (A task of its own for this cost an idle link
  ~3 KB: bench links.) The writer, its batching and the keepalive are in _session_writer.py.

Senders never touch the transport: they append to the outbound queue, which is bounded by
`max_outbound_buffer` (senders park when it is full), and wake the writer.

Ending. GO_AWAY (either way) stops new streams; existing ones run on. `aclose()` says GO_AWAY,
flushes what is queued within `close_grace`, and closes the transport. Any failure (transport
EOF or error, protocol error, dead peer, write timeout) ends the session at once: a protocol
error is answered with GO_AWAY(protocol error), every waiting task wakes, and stream operations
raise SessionBrokenError. Background tasks never raise: the reason is kept in `session.error`.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from types import TracebackType
from typing import Final

import attrs
import trio
from trio.lowlevel import (
    ParkingLot,
    cancel_shielded_checkpoint,
    checkpoint,
    checkpoint_if_cancelled,
)

from ._errors import (
    ProtocolError,
    RemoteProtocolError,
    SessionBrokenError,
    SessionGoneAwayError,
)
from ._groups import collapse_single_group
from ._session_writer import SessionWriter, unpark_all
from .codec import (
    FrameDecoder,
    encode_go_away,
    encode_ping,
)
from .config import DEFAULT_CONFIG, SessionConfig
from .frames import HEADER_SIZE, MAX_STREAM_ID, Flag, Frame, FrameType, GoAwayCode
from .state import StreamState
from .stream import YAMUX_INITIAL_WINDOW, MuxStream
from .transports import MessageStream

__all__ = ["Session", "SessionStatistics", "open_session"]

_SYN: Final = int(Flag.SYN)
_ACK: Final = int(Flag.ACK)
_RST: Final = int(Flag.RST)
_DATA: Final = FrameType.DATA
_WINDOW_UPDATE: Final = FrameType.WINDOW_UPDATE


@attrs.frozen
class SessionStatistics:
    streams_open: int
    accept_backlog: int
    outbound_buffered: int
    bytes_sent: int
    bytes_received: int
    rtt: float | None
    local_go_away: int | None
    remote_go_away: int | None


class Session(SessionWriter):
    """One multiplexed session. Create it with `open_session()`, never directly."""

    # slots: an idle link holds one session and its control stream (bench links); the
    # parking lots and events that idle links seldom use are created on first use
    __slots__ = (
        "_accept_lot",
        "_accept_queue",
        "_background_cancelled",
        "_bytes_received",
        "_closed_by_us",
        "_decoder",
        "_ended",
        "_ended_event",
        "_granted_extra",
        "_last_inbound",
        "_next_id",
        "_ping_ids",
        "_pings",
        "_reader_scope",
        "_slot_lot",
        "_streams",
        "_transport",
        "client",
        "config",
        "error",
        "local_go_away",
        "max_frame",
        "remote_go_away",
        "rtt",
    )

    def __init__(self, transport: trio.abc.Stream, *, client: bool, config: SessionConfig) -> None:
        self.config: Final = config
        self.client: Final = client
        self._transport = transport
        self._max_write = config.max_write_batch
        if isinstance(transport, MessageStream):  # one write is one message: keep it small
            self._max_write = min(self._max_write, transport.max_send)
        #: Largest DATA payload sent: a frame always fits in one write (one message).
        self.max_frame: Final = min(config.max_frame_payload, self._max_write - HEADER_SIZE)
        # Go yamux sends DATA frames as large as the window; the window check bounds them.
        self._decoder = FrameDecoder(config.max_window, fragments=True)
        self._next_id = 1 if client else 2
        self._streams: dict[int, MuxStream] = {}
        # lists, not deques: an empty deque takes 760 bytes, and an idle link has three
        self._accept_queue: list[MuxStream] = []
        self._accept_lot: ParkingLot | None = None
        self._slot_lot: ParkingLot | None = None
        self._lingering: list[tuple[float, MuxStream]] = []
        self._granted_extra = 0  # window growth granted beyond the initial windows
        # outbound
        self._control: list[bytes] = []
        self._data: list[tuple[bytes, bytes | memoryview]] = []
        self._outbound = 0
        self._writer_lot = ParkingLot()
        self._outbound_lot: ParkingLot | None = None
        self._writer_done = False
        self._writer_done_event: trio.Event | None = None
        # liveness: the accepting side waits half an interval longer before it pings (never
        # past halfway to dead_after), so the dialling side's PING, answered, keeps both alive
        # and one PING and its ACK cross per interval on an idle link instead of two of each
        interval = config.keepalive_interval
        self._ping_after = (
            interval if client else min(1.5 * interval, (interval + config.dead_after) / 2)
        )
        self._last_inbound = trio.current_time()
        self._last_ping_sent = -math.inf
        self._ping_ids: itertools.count[int] | None = None
        self._pings: dict[int, trio.Event] | None = None
        self.rtt: float | None = None
        # ending
        self.local_go_away: int | None = None
        self.remote_go_away: int | None = None
        self.error: BaseException | None = None
        self._ended = False
        self._closed_by_us = False
        self._ended_event: trio.Event | None = None
        # one cancel scope per background task (no task and nursery of their own to hold them)
        self._reader_scope: trio.CancelScope | None = None
        self._writer_scope: trio.CancelScope | None = None
        self._background_cancelled = False
        self._bytes_sent = 0
        self._bytes_received = 0

    def __repr__(self) -> str:
        role = "client" if self.client else "server"
        return f"<Session {role} streams={len(self._streams)} ended={self._ended}>"

    # ---- public API -------------------------------------------------------------------------

    async def open_stream(self) -> MuxStream:
        """Open a stream to the peer. It is usable at once: data may follow the SYN."""
        await checkpoint_if_cancelled()
        blocked = False
        while len(self._streams) >= self.config.max_streams:
            self._raise_if_ended()
            blocked = True
            await self._slot_parking().park()
        self._raise_if_ended()
        if self.local_go_away is not None or self.remote_go_away is not None:
            code = self.remote_go_away if self.remote_go_away is not None else self.local_go_away
            assert code is not None
            raise SessionGoneAwayError(
                f"session is going away ({GoAwayCode.describe(code)}): no new streams", code
            )
        stream_id = self._next_id
        if stream_id > MAX_STREAM_ID:
            self.go_away_nowait(GoAwayCode.NORMAL)
            raise SessionGoneAwayError("stream ids exhausted", GoAwayCode.NORMAL)
        self._next_id += 2
        stream = MuxStream(self, stream_id, opened_locally=True)
        self._streams[stream_id] = stream
        self._queue_window_update(
            stream_id, _SYN, self.config.initial_window - YAMUX_INITIAL_WINDOW
        )
        if not blocked:
            await cancel_shielded_checkpoint()
        return stream

    async def accept_stream(self) -> MuxStream:
        """The next stream the peer opened.

        Raises trio.EndOfChannel once no more can come after a clean end (GO_AWAY from the
        peer, or our own aclose), and SessionBrokenError when the session failed.
        """
        await checkpoint_if_cancelled()
        blocked = False
        while not self._accept_queue:
            if self._ended:
                if self.error is not None and not self._closed_by_us:
                    raise SessionBrokenError(str(self.error)) from self.error
                raise trio.EndOfChannel
            if self.remote_go_away is not None:
                raise trio.EndOfChannel
            blocked = True
            if self._accept_lot is None:
                self._accept_lot = ParkingLot()
            await self._accept_lot.park()
        stream = self._accept_queue.pop(0)
        if not self._ended and stream.state is not StreamState.RESET:
            extra = self.config.initial_window - YAMUX_INITIAL_WINDOW
            self._queue_window_update(stream.stream_id, _ACK, extra)
        if not blocked:
            await cancel_shielded_checkpoint()
        return stream

    def __aiter__(self) -> AsyncIterator[MuxStream]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[MuxStream]:
        while True:
            try:
                stream = await self.accept_stream()
            except trio.EndOfChannel:
                return
            yield stream

    async def ping(self) -> float:
        """Round-trip time of one PING, in seconds."""
        self._raise_if_ended()
        if self._ping_ids is None or self._pings is None:
            self._ping_ids = itertools.count(1)
            self._pings = {}
        opaque = next(self._ping_ids) & 0xFFFF_FFFF
        answered = trio.Event()
        pings = self._pings
        pings[opaque] = answered
        started = trio.current_time()
        try:
            self._queue_control(encode_ping(_SYN, opaque))
            self._last_ping_sent = started
            await answered.wait()
        finally:
            pings.pop(opaque, None)
        self._raise_if_ended()
        self.rtt = trio.current_time() - started
        return self.rtt

    def go_away_nowait(self, code: int = GoAwayCode.NORMAL) -> None:
        """Tell the peer this session opens and accepts no new streams; existing ones go on."""
        if self.local_go_away is not None or self._ended:
            return
        self.local_go_away = int(code)
        self._queue_control(encode_go_away(int(code)))
        unpark_all(self._accept_lot)

    async def drain(self) -> None:
        """GO_AWAY, then wait until every stream has finished (bound it with a cancel scope)."""
        self.go_away_nowait(GoAwayCode.NORMAL)
        await self.wait_streams(0)

    async def wait_streams(self, at_most: int) -> None:
        """Until at most *at_most* streams are open, or the session ended."""
        while len(self._streams) > at_most and not self._ended:
            await self._slot_parking().park()
        await checkpoint()

    async def wait_ended(self) -> None:
        """Return once the session has ended, for whatever reason (see `error`)."""
        if self._ended:
            await checkpoint()
            return
        if self._ended_event is None:
            self._ended_event = trio.Event()
        await self._ended_event.wait()

    @property
    def ended(self) -> bool:
        return self._ended

    def statistics(self) -> SessionStatistics:
        return SessionStatistics(
            streams_open=len(self._streams),
            accept_backlog=len(self._accept_queue),
            outbound_buffered=self._outbound,
            bytes_sent=self._bytes_sent,
            bytes_received=self._bytes_received,
            rtt=self.rtt,
            local_go_away=self.local_go_away,
            remote_go_away=self.remote_go_away,
        )

    async def aclose(self, code: int = GoAwayCode.NORMAL) -> None:
        """GO_AWAY with `code`, flush what is queued within close_grace, close the transport."""
        if self._closed_by_us:
            await checkpoint()
            return
        self._closed_by_us = True
        if not self._ended:
            self.go_away_nowait(code)
            self._end(None, flush=True)
            if self._writer_scope is not None and not self._writer_done:
                # the writer runs: let it flush, briefly
                self._writer_done_event = done = trio.Event()
                with trio.move_on_after(self.config.close_grace, shield=True):
                    await done.wait()
        self._cancel_background()
        await trio.aclose_forcefully(self._transport)

    # ---- background tasks -------------------------------------------------------------------

    def _start(self, nursery: trio.Nursery) -> None:
        """Start the two background tasks in *nursery* (open_session's own: no task and
        nursery in between, which an idle link would pay for in memory), each in a cancel
        scope of its own."""
        self._reader_scope = trio.CancelScope()
        self._writer_scope = trio.CancelScope()
        nursery.start_soon(self._reader, self._reader_scope)
        nursery.start_soon(self._writer, self._writer_scope)

    def _cancel_background(self) -> None:
        self._background_cancelled = True
        for scope in (self._reader_scope, self._writer_scope):
            if scope is not None:
                scope.cancel()

    async def _reader(self, scope: trio.CancelScope) -> None:
        with scope:
            await self._read()

    async def _read(self) -> None:
        receive_some = self._transport.receive_some
        read_size = self.config.read_size
        take = self._take_chunk
        try:
            while not self._ended:
                data = await receive_some(read_size)
                if not data:
                    self._decoder.feed_eof()
                    if self.remote_go_away is None:
                        self._end(SessionBrokenError("the peer closed the connection"))
                    else:
                        self._end(None)  # it said GO_AWAY first: a clean end
                    return
                take(data)
                del data  # not kept (nor views of it) while the next read waits
        except ProtocolError as exc:
            self._end(exc, go_away=exc.code)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            self._end(SessionBrokenError(f"transport failed: {exc!r}"))

    def _take_chunk(self, data: bytes | bytearray) -> None:
        self._last_inbound = trio.current_time()
        self._bytes_received += len(data)
        dispatch = self._dispatch
        for frame in self._decoder.feed(data):
            dispatch(frame)

    # ---- inbound frames ---------------------------------------------------------------------

    def _dispatch(self, frame: Frame) -> None:
        ftype = frame.type
        if ftype is _DATA or ftype is _WINDOW_UPDATE:
            self._on_stream_frame(frame)
        elif ftype is FrameType.PING:
            self._on_ping(frame)
        else:
            self._on_go_away(frame)

    def _on_stream_frame(self, frame: Frame) -> None:
        sid = frame.stream_id
        flags = frame.flags
        if sid == 0:
            raise RemoteProtocolError(f"{frame.type.name} frame on stream 0")
        stream = self._streams.get(sid)
        if flags & _SYN:
            stream = self._on_syn(sid, stream)
            if stream is None:
                return
        elif stream is None:
            return  # a stream we already finished or reset: its late frames are dropped
        if frame.type is _WINDOW_UPDATE:
            stream._on_window_update(frame.length)
            stream._on_frame(flags, b"")
        else:
            stream._on_frame(flags, frame.payload)

    def _on_syn(self, sid: int, existing: MuxStream | None) -> MuxStream | None:
        if existing is not None:
            raise RemoteProtocolError(f"SYN for stream {sid}, which is already open")
        if (sid & 1) == (1 if self.client else 0):
            raise RemoteProtocolError(f"the peer opened stream {sid}, an id of ours")
        if (
            self.local_go_away is not None
            or self._ended
            or len(self._streams) >= self.config.max_streams
            or len(self._accept_queue) >= self.config.accept_backlog
        ):
            self._queue_window_update(sid, _RST, 0)  # refused: safe for the peer to retry
            return None
        stream = MuxStream(self, sid, opened_locally=False)
        self._streams[sid] = stream
        self._accept_queue.append(stream)
        if self._accept_lot is not None:
            self._accept_lot.unpark()
        return stream

    def _on_ping(self, frame: Frame) -> None:
        if frame.flags & _SYN:
            self._queue_control(encode_ping(_ACK, frame.length))
        elif frame.flags & _ACK and self._pings is not None:
            waiter = self._pings.get(frame.length)
            if waiter is not None:
                waiter.set()

    def _on_go_away(self, frame: Frame) -> None:
        self.remote_go_away = frame.length
        unpark_all(self._accept_lot)
        unpark_all(self._slot_lot)
        if frame.length in (GoAwayCode.PROTOCOL_ERROR, GoAwayCode.INTERNAL_ERROR):
            reason = GoAwayCode.describe(frame.length)
            self._end(SessionBrokenError(f"the peer went away with {reason}"))

    # ---- stream bookkeeping -----------------------------------------------------------------

    def _grow_window(self, current: int) -> int:
        """Extra window a keeping-up stream may take now (0 when at the cap or over budget)."""
        extra = min(current, self.config.max_window - current)
        if extra <= 0 or self._granted_extra + extra > self.config.session_window_budget:
            return 0
        self._granted_extra += extra
        return extra

    def _forget(self, stream: MuxStream) -> None:
        if self._streams.pop(stream.stream_id, None) is not None:
            self._granted_extra -= stream._window_max - self.config.initial_window
            unpark_all(self._slot_lot)

    def _slot_parking(self) -> ParkingLot:
        if self._slot_lot is None:
            self._slot_lot = ParkingLot()
        return self._slot_lot

    def _raise_if_ended(self) -> None:
        if not self._ended:
            return
        if self._closed_by_us:
            raise trio.ClosedResourceError("the session was closed")
        if self.error is None:
            raise SessionBrokenError("the peer closed the session")
        raise SessionBrokenError(f"the session ended: {self.error}") from self.error

    def _end(
        self, error: BaseException | None, *, flush: bool = False, go_away: int | None = None
    ) -> None:
        """End the session now. Synchronous: callable from the reader's dispatch."""
        if self._ended:
            return
        if go_away is not None and self.local_go_away is None:
            self.local_go_away = go_away
            self._control = [encode_go_away(go_away)]
        self._ended = True
        self.error = error
        if not flush:
            if go_away is None:
                self._control.clear()
            self._data.clear()
        if self._ended_event is not None:
            self._ended_event.set()
        self._writer_lot.unpark_all()
        unpark_all(self._outbound_lot)
        unpark_all(self._accept_lot)
        unpark_all(self._slot_lot)
        for waiter in (self._pings or {}).values():
            waiter.set()
        for stream in list(self._streams.values()):
            stream._on_session_end()
        for stream in self._accept_queue:
            stream._on_session_end()


def open_session(
    transport: trio.abc.Stream,
    *,
    client: bool,
    config: SessionConfig = DEFAULT_CONFIG,
) -> AbstractAsyncContextManager[Session]:
    """Run a session over `transport` for the duration of the block; close it on exit.

    `client=True` opens odd stream ids, `client=False` even ones (as yamux). The transport is
    owned by the session from here on and closed when the block exits.
    """
    return _SessionBlock(Session(transport, client=client, config=config))


class _SessionBlock(AbstractAsyncContextManager[Session]):
    """open_session's block: a class, not an @asynccontextmanager, whose suspended generator
    and context-manager objects each idle link would hold for its lifetime (~1 KB)."""

    __slots__ = ("_nursery", "_nursery_manager", "_session")

    def __init__(self, session: Session) -> None:
        self._session = session
        self._nursery_manager: AbstractAsyncContextManager[trio.Nursery] | None = None
        self._nursery: trio.Nursery | None = None

    async def __aenter__(self) -> Session:
        manager = trio.open_nursery()
        nursery = await manager.__aenter__()
        self._nursery_manager, self._nursery = manager, nursery
        self._session._start(nursery)
        return self._session

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        manager, nursery = self._nursery_manager, self._nursery
        assert manager is not None and nursery is not None
        self._nursery_manager = self._nursery = None
        try:
            with trio.CancelScope(shield=True):
                await self._session.aclose()
        except BaseException as error:
            nursery.cancel_scope.cancel()
            with collapse_single_group():
                await manager.__aexit__(type(error), error, error.__traceback__)
            raise
        nursery.cancel_scope.cancel()
        with collapse_single_group():
            return await manager.__aexit__(exc_type, exc, tb)
