"""Copy bytes both ways between two streams, propagating half-close (docs/protocol.md 9)."""

from __future__ import annotations

from typing import Final

import attrs
import trio

__all__ = ["SpliceResult", "splice"]

_CHUNK: Final = 256 * 1024


@attrs.define
class SpliceResult:
    a_to_b: int = 0
    b_to_a: int = 0


async def _pump(
    source: trio.abc.ReceiveStream, sink: trio.abc.SendStream, counter: list[int]
) -> None:
    while True:
        data = await source.receive_some(_CHUNK)
        if not data:
            break
        await sink.send_all(data)
        counter[0] += len(data)
    if isinstance(sink, trio.abc.HalfCloseableStream):
        await sink.send_eof()


async def splice(a: trio.abc.Stream, b: trio.abc.Stream, *, linger: float = 10.0) -> SpliceResult:
    """Copy a->b and b->a until both directions end; close both streams; return byte counts.

    When one direction reaches EOF it is passed on as a half-close (send_eof) where the other
    side supports it; the second direction then gets at most `linger` seconds to finish, so a
    peer that never closes cannot pin the splice. A broken direction ends both at once.
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

            nursery.start_soon(direction, b, a, counts[1])
            await direction(a, b, counts[0])  # in this task: one task spawn per splice, not two
    except* (trio.BrokenResourceError, trio.ClosedResourceError):
        pass  # one side went away: the other is closed below, which is all there is to do
    finally:
        with trio.CancelScope(shield=True):
            await trio.aclose_forcefully(a)
            await trio.aclose_forcefully(b)
    return SpliceResult(counts[0][0], counts[1][0])
