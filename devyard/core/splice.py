"""Copy bytes both ways between two streams, propagating half-close (docs/protocol.md 9)."""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from typing import Final, TypeAlias

import attrs
import trio

from .stream import DirectSink, MuxStream
from .vectored import Pieces, piece_sender

__all__ = ["SpliceResult", "splice"]

#: One read from a source. Loopback TCP costs about half as much CPU per byte moved in 1 MiB
#: reads and writes as in 256 KiB ones (bench/README.md), and a mux stream hands out what it
#: has buffered, up to this, in one piece.
_CHUNK: Final = 1024 * 1024


@attrs.define
class SpliceResult:
    a_to_b: int = 0
    b_to_a: int = 0


def _direct_sink(sink: trio.abc.SendStream, counter: list[int]) -> DirectSink | None:
    """What a mux stream's reader may hand arriving bytes to instead of waking the pump.

    Another mux stream takes them into its session's outbound queue (credit and room
    permitting); a TCP socket takes what a non-blocking write accepts. Either way the bytes
    are not copied in Python and the pump task is not woken; whatever is not taken is buffered
    and the pump sends it, and any error is left for the pump's own send to meet.
    """
    if isinstance(sink, MuxStream):
        send_nowait = sink._send_nowait

        def to_stream(data: memoryview) -> int:
            n = send_nowait(data)
            counter[0] += n
            return n

        return to_stream
    if isinstance(sink, trio.SocketStream):
        sock = sink.socket

        def to_socket(data: memoryview) -> int:
            fd = sock.fileno()  # -1 once closed: never write to a reused descriptor
            if fd < 0:
                return 0
            try:
                n = os.write(fd, data)
            except OSError:  # would block, or broken: the pump's send_all says which
                return 0
            counter[0] += n
            return n

        return to_socket
    return None


async def _pump(
    source: trio.abc.ReceiveStream, sink: trio.abc.SendStream, counter: list[int]
) -> None:
    if isinstance(source, MuxStream):
        await _pump_mux(source, sink, counter)
    else:
        while True:
            data = await source.receive_some(_CHUNK)
            if not data:
                break
            await sink.send_all(data)
            counter[0] += len(data)
    if isinstance(sink, trio.abc.HalfCloseableStream):
        await sink.send_eof()


async def _pump_mux(source: MuxStream, sink: trio.abc.SendStream, counter: list[int]) -> None:
    """From a mux stream: its buffered pieces as they are, and the direct path while idle."""
    send: Callable[[Pieces], Awaitable[None]]
    if isinstance(sink, MuxStream):
        send_all = sink.send_all

        async def send_each(pieces: Pieces) -> None:
            for piece in pieces:  # views of received bytes: queued as they are, no copy
                await send_all(piece)

        send = send_each
    else:
        send = piece_sender(sink)
    source._set_direct_sink(_direct_sink(sink, counter))
    try:
        while True:
            pieces = await source._receive_parts(_CHUNK)
            if not pieces:
                break
            size = sum(map(len, pieces))
            await send(pieces)
            counter[0] += size
    finally:
        source._set_direct_sink(None)


_Direction: TypeAlias = Callable[[trio.abc.Stream, trio.abc.Stream, list[int]], Awaitable[None]]


@attrs.frozen
class _Lazy:
    """A splice whose direction out of mux stream `src` needs no task until it blocks."""

    src: MuxStream
    dst: trio.abc.Stream
    counter: list[int]
    sink: DirectSink
    other_counter: list[int]


def _lazy_direction(
    a: trio.abc.Stream, b: trio.abc.Stream, counts: tuple[list[int], list[int]]
) -> _Lazy | None:
    """The direction that can wait without a task: out of a mux stream to a direct sink."""
    if isinstance(b, MuxStream) and (sink := _direct_sink(a, counts[1])) is not None:
        return _Lazy(b, a, counts[1], sink, counts[0])
    if isinstance(a, MuxStream) and (sink := _direct_sink(b, counts[0])) is not None:
        return _Lazy(a, b, counts[0], sink, counts[1])
    return None


async def _run_lazily(nursery: trio.Nursery, direction: _Direction, lazy: _Lazy) -> None:
    """Run the other direction in this task; the lazy one passes bytes on in the session's
    reader (the direct sink) and gets its task only when the sink cannot take them or the
    stream ends; if it has none when the other direction is done, it runs in this task."""
    started = False

    def start() -> None:
        nonlocal started
        started = True
        nursery.start_soon(direction, lazy.src, lazy.dst, lazy.counter)

    src = lazy.src
    src._set_idle_receiver(lazy.sink, start)
    try:
        await direction(lazy.dst, src, lazy.other_counter)
    finally:
        if not started:
            src._set_idle_receiver(None, None)
    if not started:
        await direction(src, lazy.dst, lazy.counter)


async def splice(a: trio.abc.Stream, b: trio.abc.Stream, *, linger: float = 10.0) -> SpliceResult:
    """Copy a->b and b->a until both directions end; close both streams; return byte counts.

    When one direction reaches EOF it is passed on as a half-close (send_eof) where the other
    side supports it; the second direction then gets at most `linger` seconds to finish, so a
    peer that never closes cannot pin the splice. A broken direction ends both at once.

    From a mux stream to another mux stream or a TCP socket, the session's reader passes
    arriving bytes on itself while the pump waits (MuxStream._set_direct_sink): no copy, no
    task switch; the pump sends only what could not be passed on at once. That direction
    gets its pump task only when it first needs one (the sink would block, or the stream
    ends): a short-lived stream whose bytes all pass straight on costs one task, not two.
    """
    counts = ([0], [0])
    try:
        async with trio.open_nursery() as nursery:
            done = [0]

            async def direction(
                src: trio.abc.Stream, dst: trio.abc.Stream, counter: list[int]
            ) -> None:
                await _pump(src, dst, counter)
                done[0] += 1
                if done[0] == 1:
                    nursery.cancel_scope.deadline = min(
                        nursery.cancel_scope.deadline, trio.current_time() + linger
                    )

            lazy = _lazy_direction(a, b, counts)
            if lazy is None:
                nursery.start_soon(direction, b, a, counts[1])
                await direction(a, b, counts[0])  # in this task: one task spawn, not two
            else:
                await _run_lazily(nursery, direction, lazy)
    except* (trio.BrokenResourceError, trio.ClosedResourceError):
        pass  # one side went away: the other is closed below, which is all there is to do
    finally:
        with trio.CancelScope(shield=True):
            await trio.aclose_forcefully(a)
            await trio.aclose_forcefully(b)
    return SpliceResult(counts[0][0], counts[1][0])
