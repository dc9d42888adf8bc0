"""AdbStream: one ADB stream as a `trio.abc.Stream`.

Theory of operation
-------------------
The connection's single reader task hands each stream its packets synchronously (the `_on_*`
methods); services call `send_all` / `receive_some` / `aclose`, which touch only this stream's
state (state.py) and the connection's outbound queue. No stream ever reads or writes the
transport.

Flow control is ADB's: one WRTE in flight per direction. `send_all` cuts data into chunks of at
most the negotiated payload size and sends the next chunk only after the host's OKAY for the
previous one. On the receive side the host's WRTE sits here, unacknowledged, until the service
has consumed all of it; only then do we send OKAY. So a stalled service holds back exactly one
packet of its own stream and never the reader. A bridge that acknowledges early
(core/adbwire.py) sends further WRTEs before our OKAY: they queue here, up to
`AdbConfig.max_inbound` bytes, and each is acknowledged when consumed, in order.

ADB has no half-close: CLSE ends both directions. The host's CLSE reads as EOF (after whatever
was already buffered) and makes `send_all` raise BrokenResourceError; the connection dying does
both with BrokenResourceError. `aclose` sends CLSE at once: the host still delivers the WRTE in
flight before it closes its end, so nothing we sent is lost.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Final

import trio
from trio.lowlevel import ParkingLot, checkpoint

from ...core.conflict import ConflictDetector
from ._errors import RemoteProtocolError
from .packets import Command, Packet
from .state import OPEN_STATES, WRITE_IN_FLIGHT, StreamEvent, StreamState, transition

if TYPE_CHECKING:
    from .connection import AdbConnection

__all__ = ["AdbStream"]

_E = StreamEvent
_S = StreamState
_RECEIVE_DEFAULT: Final = 256 * 1024


class AdbStream(trio.abc.Stream):
    """A stream of an AdbConnection: opened by the host (OPEN) or by us (`open_stream`)."""

    def __init__(
        self, conn: AdbConnection, local_id: int, remote_id: int, service: str, state: StreamState
    ) -> None:
        self._conn = conn
        self.local_id: Final = local_id
        self.remote_id = remote_id  # 0 until the host answers our OPEN
        self.service: Final = service
        self._state = state
        self._closed_locally = False
        self._closed_by_host = False
        self._lost = False  # the connection died
        self._inbound: deque[bytes] = deque()  # the host's writes, each owed an OKAY
        self._inbound_bytes = 0
        self._inbound_offset = 0  # into the first
        self._lot = ParkingLot()  # every waiter: receivers, senders, openers
        self._recv_conflict = ConflictDetector("another task is receiving on this stream")
        self._send_conflict = ConflictDetector("another task is sending on this stream")

    def __repr__(self) -> str:
        return f"<AdbStream {self.local_id}:{self.remote_id} {self.service!r} {self._state.value}>"

    @property
    def state(self) -> StreamState:
        return self._state

    # ---- opening ---------------------------------------------------------------------------

    def accept(self) -> None:
        """Answer the host's OPEN with OKAY: the service is there."""
        self._state = transition(self._state, _E.SEND_OKAY)
        self._conn.enqueue(Packet(Command.OKAY, self.local_id, self.remote_id))

    def refuse(self) -> None:
        """Answer the host's OPEN with CLSE: `adb` reports the service as closed."""
        self._state = transition(self._state, _E.SEND_CLSE)
        self._closed_locally = True
        self._conn.enqueue(Packet(Command.CLSE, 0, self.remote_id))
        self._conn.forget(self)

    async def wait_opened(self) -> None:
        """For a stream we opened: wait for the host's OKAY. Raises BrokenResourceError if the
        host refused it (CLSE) or the connection died."""
        try:
            while self._state is _S.OPENING:
                await self._lot.park()
        except trio.Cancelled:
            if self._state is _S.OPENING:
                self._state = transition(self._state, _E.SEND_CLSE)  # -> ABANDONED
                self._closed_locally = True
            raise
        if self._state not in OPEN_STATES:
            raise trio.BrokenResourceError(f"the host refused {self.service!r}")
        await checkpoint()

    # ---- receiving -------------------------------------------------------------------------

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        if max_bytes is not None and max_bytes < 1:
            raise ValueError("max_bytes must be >= 1")
        with self._recv_conflict:
            while True:
                if self._closed_locally:
                    raise trio.ClosedResourceError("stream closed")
                if self._inbound:
                    break
                if self._closed_by_host:
                    await checkpoint()
                    return b""
                if self._lost:
                    raise trio.BrokenResourceError("the ADB connection ended")
                await self._lot.park()
            head = self._inbound[0]
            start = self._inbound_offset
            stop = start + (max_bytes or _RECEIVE_DEFAULT)
            data = head[start:stop] if start or stop < len(head) else head
            if stop < len(head):
                self._inbound_offset = stop
            else:  # this write is consumed: ack it (the next queued one, if any, stays owed)
                self._inbound.popleft()
                self._inbound_bytes -= len(head)
                self._inbound_offset = 0
                if self._state in OPEN_STATES:  # else the host closed; nothing to ack
                    if not self._inbound:
                        self._state = transition(self._state, _E.SEND_OKAY)
                    self._conn.enqueue(Packet(Command.OKAY, self.local_id, self.remote_id))
            await checkpoint()
            return data

    # ---- sending ---------------------------------------------------------------------------

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        with self._send_conflict:
            if not data:
                self._check_sendable()
                await checkpoint()
                return
            view = memoryview(data)
            step = self._conn.max_data
            for offset in range(0, len(view), step):
                await self._wait_writable()
                await self._conn.wait_outbound_room()
                self._check_sendable()
                if self._state in WRITE_IN_FLIGHT:  # an OKAY can't be undone; defensive
                    raise AssertionError("write in flight after _wait_writable")
                self._state = transition(self._state, _E.SEND_WRTE)
                chunk = bytes(view[offset : offset + step])
                self._conn.enqueue(Packet(Command.WRTE, self.local_id, self.remote_id, chunk))

    async def wait_send_all_might_not_block(self) -> None:
        with self._send_conflict:
            await self._wait_writable()

    async def _wait_writable(self) -> None:
        while True:
            self._check_sendable()
            if self._state not in WRITE_IN_FLIGHT:
                await checkpoint()
                return
            await self._lot.park()

    def _check_sendable(self) -> None:
        if self._closed_locally:
            raise trio.ClosedResourceError("stream closed")
        if self._lost:
            raise trio.BrokenResourceError("the ADB connection ended")
        if self._closed_by_host or self._state not in OPEN_STATES:
            raise trio.BrokenResourceError(f"the host closed {self.service!r}")

    # ---- closing ---------------------------------------------------------------------------

    async def aclose(self) -> None:
        self.close_nowait()
        await checkpoint()

    def close_nowait(self) -> None:
        """aclose() without the checkpoint, for cleanup paths that must not block."""
        if self._closed_locally:
            return
        self._closed_locally = True
        if self._state is _S.ACCEPTING:
            self.refuse()
        elif self._state is _S.OPENING:
            self._state = transition(self._state, _E.SEND_CLSE)  # -> ABANDONED, kept until answered
        elif self._state in OPEN_STATES:
            self._state = transition(self._state, _E.SEND_CLSE)
            if not self._lost:
                self._conn.enqueue(Packet(Command.CLSE, self.local_id, self.remote_id))
            self._conn.forget(self)
        self._lot.unpark_all()

    # ---- the connection's reader calls these, synchronously ---------------------------------

    def _on_okay(self, remote_id: int) -> None:
        was = self._state
        self._state = transition(self._state, _E.RECV_OKAY)
        if was is _S.OPENING:
            self.remote_id = remote_id
        elif was is _S.ABANDONED:  # we gave up on it: close what the host just opened
            self._conn.enqueue(Packet(Command.CLSE, self.local_id, remote_id))
            self._conn.forget(self)
        self._lot.unpark_all()

    def _on_wrte(self, data: bytes) -> None:
        self._state = transition(self._state, _E.RECV_WRTE)
        if not data:  # nothing to consume: ack at once
            if not self._inbound:
                self._state = transition(self._state, _E.SEND_OKAY)
            self._conn.enqueue(Packet(Command.OKAY, self.local_id, self.remote_id))
            return
        self._inbound_bytes += len(data)
        if self._inbound and self._inbound_bytes > self._conn.config.max_inbound:
            raise RemoteProtocolError(
                f"{self._inbound_bytes} bytes of unacknowledged writes on {self.service!r} "
                f"exceed {self._conn.config.max_inbound}"
            )
        self._inbound.append(data)
        self._lot.unpark_all()

    def _on_clse(self) -> None:
        self._state = transition(self._state, _E.RECV_CLSE)
        self._closed_by_host = True
        self._conn.forget(self)
        self._lot.unpark_all()

    def _on_lost(self) -> None:
        self._lost = True
        self._lot.unpark_all()
