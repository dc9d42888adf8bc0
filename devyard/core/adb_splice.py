"""`adb_splice`: `splice` for an ADB transport, acknowledging the local peer's writes early.

The pre-ack rules are in `adbwire.PreAcker` (pure); this module moves the bytes. Two pumps and
one writer:

* local -> remote: read the local peer, hand the bytes to the PreAcker, send them on to the
  remote unchanged; the synthetic OKAYs it makes go to the local writer.
* remote -> local: read the remote, hand the bytes to the PreAcker (which drops the OKAYs
  already given and slips held-back synthetic ones in at packet boundaries), queue the rest
  for the local writer; it reads the remote only while the writer's queue is short, so what
  waits for the local peer stays bounded.
* the local writer: the only task that writes the local peer, so a synthetic OKAY can never
  land inside another packet. The PreAcker is fed and the writer's queue filled in one
  synchronous step, so the queue's order is the order the PreAcker decided on.

Half-close, linger and closing both streams are `splice`'s (core/splice.py).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from typing import Final

import trio
from trio.lowlevel import ParkingLot

from .adbwire import DEFAULT_WINDOW, Buffer, PreAcker
from .splice import SpliceResult

__all__ = ["adb_splice"]

_CHUNK: Final = 256 * 1024
#: Bytes queued for the local peer before the remote -> local pump stops reading.
_LOCAL_QUEUE: Final = 512 * 1024


class _LocalWriter:
    """The one writer of the local peer: a bounded queue of buffers and a task draining it."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        self._stream = stream
        self._queue: deque[Buffer] = deque()
        self._queued = 0
        self._closing = False
        self._lot = ParkingLot()  # the writer waits here for work
        self._room = ParkingLot()  # the remote -> local pump waits here for room

    def put(self, buffers: Iterable[Buffer]) -> None:
        if self._closing:
            return
        for buf in buffers:
            if buf:
                self._queue.append(buf)
                self._queued += len(buf)
        self._lot.unpark_all()

    async def wait_room(self) -> None:
        while self._queued >= _LOCAL_QUEUE:
            await self._room.park()

    def close(self) -> None:
        """Write what is queued, then half-close the local peer and end."""
        self._closing = True
        self._lot.unpark_all()

    async def run(self) -> None:
        queue = self._queue
        while True:
            while not queue and not self._closing:
                await self._lot.park()
            if not queue:
                break
            batch = list(queue)
            queue.clear()
            size = self._queued
            await self._stream.send_all(batch[0] if len(batch) == 1 else b"".join(batch))
            self._queued -= size
            self._room.unpark_all()
        if isinstance(self._stream, trio.abc.HalfCloseableStream):
            await self._stream.send_eof()


class _Directions:
    """The two pumps of one adb_splice, sharing the PreAcker and the local writer."""

    def __init__(
        self, local: trio.abc.Stream, remote: trio.abc.Stream, acker: PreAcker, linger: float
    ) -> None:
        self.local = local
        self.remote = remote
        self.acker = acker
        self.writer = _LocalWriter(local)
        self.linger = linger
        self.counts = [0, 0]
        self._done = 0

    def finished(self, scope: trio.CancelScope) -> None:
        """One direction ended: the other gets `linger` seconds more."""
        self._done += 1
        if self._done == 1:
            scope.deadline = min(scope.deadline, trio.current_time() + self.linger)

    async def local_to_remote(self, scope: trio.CancelScope) -> None:
        local, remote, acker, writer = self.local, self.remote, self.acker, self.writer
        while True:
            data = await local.receive_some(_CHUNK)
            if not data:
                break
            self.counts[0] += len(data)
            to_remote, to_local = acker.local_data(data)
            if to_local:
                writer.put(to_local)
            for buf in to_remote:
                await remote.send_all(buf)
        if isinstance(remote, trio.abc.HalfCloseableStream):
            await remote.send_eof()
        self.finished(scope)

    async def remote_to_local(self) -> None:
        remote, acker, writer = self.remote, self.acker, self.writer
        try:
            while True:
                await writer.wait_room()
                data = await remote.receive_some(_CHUNK)
                if not data:
                    break
                self.counts[1] += len(data)
                writer.put(acker.remote_data(data))  # no checkpoint in between: order kept
            writer.put(acker.remote_eof())
        finally:
            acker.local_closed()
            writer.close()

    async def write_local(self, scope: trio.CancelScope) -> None:
        await self.writer.run()
        self.finished(scope)


async def adb_splice(
    local: trio.abc.Stream,
    remote: trio.abc.Stream,
    *,
    linger: float = 10.0,
    window: int = DEFAULT_WINDOW,
    acker: PreAcker | None = None,
) -> SpliceResult:
    """Splice an ADB transport, acknowledging `local`'s writes early (docs/adb.md).

    Same contract as `splice(local, remote)`: bytes both ways until both directions end,
    half-close passed on, `linger` seconds for the second direction, both streams closed;
    returns byte counts (`a_to_b` is local -> remote as read). `window` bounds the pre-acked
    write payload in flight per stream; `acker` replaces the PreAcker made from it (tests
    read its counters)."""
    run = _Directions(local, remote, acker or PreAcker(window), linger)
    try:
        async with trio.open_nursery() as nursery:
            scope = nursery.cancel_scope
            nursery.start_soon(run.write_local, scope)
            nursery.start_soon(run.remote_to_local)
            await run.local_to_remote(scope)  # in this task: one spawn fewer
    except* (trio.BrokenResourceError, trio.ClosedResourceError):
        pass  # one side went away: the other is closed below, which is all there is to do
    finally:
        with trio.CancelScope(shield=True):
            await trio.aclose_forcefully(local)
            await trio.aclose_forcefully(remote)
    return SpliceResult(run.counts[0], run.counts[1])
