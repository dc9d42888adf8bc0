"""MuxStream: one multiplexed stream, a `trio.abc.HalfCloseableStream`.

Theory of operation
-------------------
The session's single reader task hands each stream its frames synchronously (`_on_*` methods);
the stream buffers DATA payloads in a list and wakes its reader. Application tasks call
`send_all` / `receive_some` / `send_eof` / `aclose`, which only touch this stream's state and
the session's outbound queue: no stream ever reads or writes the transport.

Flow control (docs/protocol.md section 4). Invariant on the receive side:

    recv_window (credit the peer still has) + buffered + unacked == window_max

`unacked` is what the application consumed and we have not credited back yet; once it reaches
half of `window_max` we send one WINDOW_UPDATE. A reader that keeps up (nothing left buffered
when credit is returned) has its window doubled up to `max_window`, within the session's
window budget; a stalled reader never grows and never gets more than `window_max` buffered, so it
cannot delay any other stream. A peer that sends past its credit is a protocol error.

Copies. Buffered payloads are views of the chunks the session read (small ones are copied out,
so they do not pin big chunks); receive_some joins them into the bytes it returns, while
core.splice takes them as they are (`_receive_parts`) and, while its pump waits, has the reader
pass arriving bytes straight on (`_set_direct_sink`, `_send_nowait`).

Closing follows TCP. `send_eof` sends FIN. `aclose` sends FIN, or RST when unread data is
thrown away; data that arrives after `aclose` is answered with RST, so a peer that keeps
writing to a stream nobody reads learns it (BrokenResourceError) instead of blocking forever.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import TYPE_CHECKING, Final, TypeAlias, cast

import trio
from trio.lowlevel import (
    ParkingLot,
    cancel_shielded_checkpoint,
    checkpoint,
    checkpoint_if_cancelled,
)

from ._errors import RemoteProtocolError, StreamRefusedError, StreamResetError
from .conflict import ConflictDetector
from .frames import Flag
from .state import StreamEvent, StreamState, transition

if TYPE_CHECKING:
    from .session import Session

__all__ = ["YAMUX_INITIAL_WINDOW", "DirectSink", "MuxStream"]

#: The window every yamux stream starts with, in both directions, before any WINDOW_UPDATE.
YAMUX_INITIAL_WINDOW: Final = 256 * 1024

_SYN: Final = int(Flag.SYN)
_ACK: Final = int(Flag.ACK)
_FIN: Final = int(Flag.FIN)
_RST: Final = int(Flag.RST)
_TERMINAL: Final = frozenset({StreamState.CLOSED, StreamState.RESET})
#: What receive_some() without max_bytes hands out at most in one call.
_COALESCE: Final = 256 * 1024
#: A buffered payload that is a view of a received chunk is copied out of it when it is under
#: this share of the chunk, so a trickle of small frames cannot pin many large chunks.
_PIN_SHARE: Final = 4

#: Takes bytes that arrived on a stream, synchronously, and returns how many it took (see
#: `MuxStream._set_direct_sink`). It must not raise.
DirectSink: TypeAlias = Callable[[memoryview], int]


class MuxStream(trio.abc.HalfCloseableStream):
    """A stream of a Session; create it with `Session.open_stream()` / `accept_stream()`."""

    # slots: an idle link holds one session and its control stream (bench links)
    __slots__ = (
        "_answered",
        "_app_closed",
        "_buf",
        "_buf_offset",
        "_buf_start",
        "_buffered",
        "_direct",
        "_recv_conflict",
        "_recv_lot",
        "_recv_window",
        "_reset_by_peer",
        "_send_conflict",
        "_send_lot",
        "_send_window",
        "_session",
        "_state",
        "_unacked",
        "_wake_hook",
        "_window_max",
        "bytes_received",
        "bytes_sent",
        "opened_locally",
        "stream_id",
    )

    def __init__(self, session: Session, stream_id: int, *, opened_locally: bool) -> None:
        self._session = session
        self.stream_id: Final = stream_id
        self.opened_locally: Final = opened_locally
        self._state = StreamState.OPEN
        self._app_closed = False
        self._answered = not opened_locally  # the peer ACKed, or sent us anything
        self._reset_by_peer = False
        # receive side
        # A list read from _buf_start on, not a deque (760 bytes even when empty): compacted
        # once half of it is consumed, so taking pieces from the front stays O(1) amortised.
        self._buf: list[bytes | memoryview] = []
        self._buf_start = 0
        self._direct: DirectSink | None = None
        self._wake_hook: Callable[[], None] | None = None  # see _set_idle_receiver
        self._buf_offset = 0  # consumed bytes of self._buf[0]
        self._buffered = 0
        window = session.config.initial_window
        self._window_max = window
        self._recv_window = window
        self._unacked = 0
        # parking lots on first use: an idle link's control stream seldom needs both
        self._recv_lot: ParkingLot | None = None
        self._recv_conflict = ConflictDetector("another task is receiving on this stream")
        # send side
        self._send_window = YAMUX_INITIAL_WINDOW
        self._send_lot: ParkingLot | None = None
        self._send_conflict = ConflictDetector("another task is sending on this stream")
        self.bytes_sent = 0
        self.bytes_received = 0

    def __repr__(self) -> str:
        return f"<MuxStream {self.stream_id} {self._state.value}>"

    @property
    def state(self) -> StreamState:
        return self._state

    # ---- application side: receiving -------------------------------------------------------

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        if max_bytes is not None:
            if not isinstance(max_bytes, int):
                raise TypeError("max_bytes must be an integer or None")
            if max_bytes < 1:
                raise ValueError("max_bytes must be >= 1")
        parts = await self._receive_parts(_COALESCE if max_bytes is None else max_bytes)
        if not parts:
            return b""
        return bytes(parts[0]) if len(parts) == 1 else b"".join(parts)

    async def _receive_parts(self, limit: int) -> list[bytes | memoryview]:
        """receive_some() as the buffered pieces themselves, not joined ([] at EOF).

        The pieces are `bytes` or read-only views of `bytes`: they never change. For core.splice,
        which passes them on without copying them.
        """
        with self._recv_conflict:
            await checkpoint_if_cancelled()
            blocked = False
            while True:
                if self._app_closed:
                    raise trio.ClosedResourceError("this stream was closed")
                if self._buffered:
                    parts = self._take(limit)
                    break
                if self._state is StreamState.RESET:
                    raise self._reset_error()
                if self._state in (StreamState.REMOTE_CLOSED, StreamState.CLOSED):
                    parts = []
                    break
                self._session._raise_if_ended()
                blocked = True
                if self._recv_lot is None:
                    self._recv_lot = ParkingLot()
                await self._recv_lot.park()
            if not blocked:
                await cancel_shielded_checkpoint()
            return parts

    def _take(self, limit: int) -> list[bytes | memoryview]:
        """Up to `limit` buffered bytes, as the pieces they are buffered in."""
        buf = self._buf
        offset = self._buf_offset
        parts: list[bytes | memoryview] = []
        room = limit
        start = self._buf_start
        done = start  # index of the first piece not wholly taken
        for chunk in itertools.islice(buf, start, None):
            if not room:
                break
            available = len(chunk) - offset
            if available <= room:
                parts.append(memoryview(chunk)[offset:] if offset else chunk)
                done += 1
                room -= available
                offset = 0
            else:
                parts.append(memoryview(chunk)[offset : offset + room])
                offset += room
                room = 0
        if done == len(buf):
            buf.clear()
            done = 0
        elif done > 32 and done * 2 > len(buf):
            del buf[:done]
            done = 0
        self._buf_start = done
        self._buf_offset = offset
        taken = limit - room
        self._buffered -= taken
        self._consumed(taken)
        return parts

    def _consumed(self, n: int) -> None:
        """The application took n bytes: credit them back once half the window is used."""
        self._unacked += n
        if self._unacked >= self._window_max >> 1 and self._state in (
            StreamState.OPEN,
            StreamState.LOCAL_CLOSED,
        ):
            self._return_credit()

    def _return_credit(self) -> None:
        delta = self._unacked
        if self._buffered == 0:  # the reader keeps up: a bigger window may be what limits it
            extra = self._session._grow_window(self._window_max)
            self._window_max += extra
            delta += extra
        self._unacked = 0
        self._recv_window += delta
        self._session._queue_window_update(self.stream_id, 0, delta)

    # ---- application side: sending ----------------------------------------------------------

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        with self._send_conflict:
            await checkpoint_if_cancelled()
            self._check_can_send()
            # We keep the payload past our return: copy anything that could change.
            if not isinstance(data, bytes) and not _immutable_view(data):
                data = bytes(data)
            payload = memoryview(data)
            total = len(payload)
            session = self._session
            max_frame = session.max_frame
            offset = 0
            blocked = False
            while offset < total:
                if self._send_window == 0 or not session._has_outbound_room():
                    blocked = True
                    await self._wait_writable()
                    continue
                n = min(total - offset, self._send_window, max_frame)
                session._queue_data(self.stream_id, payload[offset : offset + n])
                self._send_window -= n
                offset += n
            self.bytes_sent += total
            if not blocked:
                await cancel_shielded_checkpoint()

    def _send_nowait(self, data: memoryview) -> int:
        """Queue as much of `data` as credit and outbound room allow, now; return how much.

        The caller guarantees no task is in send_all (core.splice: its pump is parked) and
        that `data` stays unchanged until sent (a view of immutable received bytes).
        """
        session = self._session
        if (
            self._app_closed
            or session._ended
            or self._state not in (StreamState.OPEN, StreamState.REMOTE_CLOSED)
        ):
            return 0
        n = min(
            len(data), self._send_window, session.config.max_outbound_buffer - session._outbound
        )
        if n <= 0:
            return 0
        data = memoryview(_unpinned(data[:n]))  # it waits in the queue: must not pin a chunk
        max_frame = session.max_frame
        offset = 0
        while offset < n:
            end = min(n, offset + max_frame)
            session._queue_data(self.stream_id, data[offset:end])
            offset = end
        self._send_window -= n
        self.bytes_sent += n
        return n

    async def wait_send_all_might_not_block(self) -> None:
        with self._send_conflict:
            await checkpoint_if_cancelled()
            self._check_can_send()
            if self._send_window and self._session._has_outbound_room():
                await cancel_shielded_checkpoint()
                return
            await self._wait_writable()

    async def _wait_writable(self) -> None:
        """Park until this stream has send credit and the session has outbound room."""
        while True:
            session = self._session
            if self._send_window == 0:
                if self._send_lot is None:
                    self._send_lot = ParkingLot()
                await self._send_lot.park()
            elif not session._has_outbound_room():
                await session._outbound_parking().park()
            else:
                return
            self._check_can_send()

    def _check_can_send(self) -> None:
        if self._app_closed:
            raise trio.ClosedResourceError("this stream was closed")
        state = self._state
        if state is StreamState.RESET:
            raise self._reset_error()
        if state in (StreamState.LOCAL_CLOSED, StreamState.CLOSED):
            raise trio.ClosedResourceError("send_eof() was called on this stream")
        self._session._raise_if_ended()

    async def send_eof(self) -> None:
        with self._send_conflict:
            await checkpoint_if_cancelled()
            if self._app_closed:
                raise trio.ClosedResourceError("this stream was closed")
            state = self._state
            if state is StreamState.RESET:
                raise self._reset_error()
            if state in (StreamState.OPEN, StreamState.REMOTE_CLOSED):
                self._session._raise_if_ended()
                self._send_fin()
            await cancel_shielded_checkpoint()

    async def aclose(self) -> None:
        if self._app_closed:
            await checkpoint()
            return
        self._app_closed = True
        discarded = self._buffered
        self._buf.clear()
        self._buf_start = self._buf_offset = 0
        self._buffered = 0
        if not self._session._ended and self._state in (
            StreamState.OPEN,
            StreamState.REMOTE_CLOSED,
        ):
            if discarded and self._state is StreamState.OPEN:
                self._send_rst()  # unread data thrown away: say so, as TCP does
            else:
                self._send_fin()
        if self._state in _TERMINAL or self._session._ended:
            self._session._forget(self)
        else:
            self._session._linger(self)
        self._wake_all()
        await checkpoint()

    # ---- session side: frames in ------------------------------------------------------------

    def _on_frame(self, flags: int, data: bytes | memoryview) -> None:
        """Handle one DATA or WINDOW_UPDATE frame's flags and payload (not its window delta)."""
        if flags & _ACK:
            self._answered = True
        if data:
            self._on_data(data)
        if flags & _FIN:
            self._state = transition(self._state, StreamEvent.RECV_FIN)
            self._answered = True
            if self._recv_lot is not None:
                self._recv_lot.unpark_all()
            self._call_wake_hook()
            if self._state in _TERMINAL:
                self._session._forget(self)
        if flags & _RST:
            self._on_reset()

    def _on_data(self, data: bytes | memoryview) -> None:
        n = len(data)
        if n > self._recv_window:
            raise RemoteProtocolError(
                f"stream {self.stream_id} overran its receive window ({n} > {self._recv_window})"
            )
        self._state = transition(self._state, StreamEvent.RECV_DATA)
        self._answered = True
        self._recv_window -= n
        self.bytes_received += n
        if self._app_closed:
            # Nobody will read it: tell the peer, as TCP does, rather than let it block.
            self._send_rst()
            self._session._forget(self)
            return
        direct = self._direct
        if direct is not None and not self._buffered and (self._recv_lot or self._wake_hook):
            # The one receiving task is parked with nothing in hand: whatever it would do
            # with these bytes, the direct sink does now, without a copy or a task switch.
            taken = direct(memoryview(data))
            if taken:
                self._consumed(taken)
                if taken == n:
                    return
                data = data[taken:]
                n -= taken
        self._buf.append(_unpinned(data))
        self._buffered += n
        if self._recv_lot is not None:
            self._recv_lot.unpark()
        self._call_wake_hook()

    def _set_direct_sink(self, sink: DirectSink | None) -> None:
        """Let the session's reader hand arriving bytes to `sink` (None: stop).

        Only while the single task receiving from this stream is parked in receive_some with
        nothing buffered, so order is kept: that task has passed on all it took. Whatever the
        sink does not take is buffered as usual and wakes the task. Used by core.splice.
        """
        self._direct = sink

    def _set_idle_receiver(self, sink: DirectSink | None, wake: Callable[[], None] | None) -> None:
        """Stand for a receiving task that is not there yet: `sink` takes arriving bytes as
        in `_set_direct_sink`, and `wake` is called (once, synchronously, then forgotten) as soon
        as something needs a task: bytes the sink did not take, FIN, RST, the session's end, or
        aclose. core.splice starts its pump task from `wake`, so a stream whose bytes all pass
        straight on never gets one. (None, None) stops it without calling `wake`.
        """
        self._direct = sink
        self._wake_hook = wake
        if wake is not None and (
            self._buffered
            or self._app_closed
            or self._session._ended
            or self._state not in (StreamState.OPEN, StreamState.LOCAL_CLOSED)
        ):
            self._call_wake_hook()  # a task is needed already

    def _call_wake_hook(self) -> None:
        hook = self._wake_hook
        if hook is not None:
            self._wake_hook = None
            hook()

    def _on_window_update(self, delta: int) -> None:
        if delta:
            self._send_window += delta
            if self._send_lot is not None:
                self._send_lot.unpark_all()

    def _on_reset(self) -> None:
        self._state = transition(self._state, StreamEvent.RECV_RST)
        if self._state is StreamState.RESET:
            self._reset_by_peer = True
            self._buf.clear()
            self._buf_start = self._buf_offset = 0
            self._buffered = 0
        self._session._forget(self)
        self._wake_all()

    def _on_session_end(self) -> None:
        self._wake_all()

    def _wake_all(self) -> None:
        if self._recv_lot is not None:
            self._recv_lot.unpark_all()
        if self._send_lot is not None:
            self._send_lot.unpark_all()
        self._call_wake_hook()

    # ---- frames out -------------------------------------------------------------------------

    def _send_fin(self) -> None:
        self._state = transition(self._state, StreamEvent.SEND_FIN)
        self._session._queue_fin(self.stream_id)
        if self._state in _TERMINAL:
            self._session._forget(self)

    def _send_rst(self) -> None:
        self._state = transition(self._state, StreamEvent.SEND_RST)
        self._session._queue_window_update(self.stream_id, _RST, 0)
        self._wake_all()

    def _reset_error(self) -> trio.BrokenResourceError:
        if not self._reset_by_peer:
            return StreamResetError(f"stream {self.stream_id} was reset")
        if not self._answered:
            return StreamRefusedError(f"the peer refused stream {self.stream_id}")
        return StreamResetError(f"the peer reset stream {self.stream_id}")


def _immutable_view(data: bytes | bytearray | memoryview) -> bool:
    """Whether `data` is a read-only view of `bytes` (which nothing can change)."""
    return isinstance(data, memoryview) and data.readonly and isinstance(data.obj, bytes)


def _unpinned(data: bytes | memoryview) -> bytes | memoryview:
    """`data`, copied out if it is a view of a chunk over _PIN_SHARE times its size.

    A kept view keeps its whole chunk alive, so a trickle of small pieces of large chunks
    could hold many times the bytes that windows and buffers bound.
    """
    if isinstance(data, memoryview) and len(data) * _PIN_SHARE < len(cast(bytes, data.obj)):
        return bytes(data)
    return data
