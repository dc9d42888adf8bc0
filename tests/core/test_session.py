"""Session behaviour over in-memory transports (docs/protocol.md sections 3-5).

Everything with time runs on trio's autojump clock: timeouts of seconds cost nothing.
"""

from __future__ import annotations

import functools

import pytest
import trio
import trio.testing

from devyard.core import (
    GoAwayCode,
    MuxStream,
    SessionBrokenError,
    SessionConfig,
    SessionGoneAwayError,
    StreamRefusedError,
    open_session,
)
from devyard.core.codec import FrameDecoder, encode_data_header, encode_window_update
from devyard.core.frames import Flag, Frame, FrameType

from .conftest import session_pair

MiB = 1024 * 1024


async def _receive_exactly(stream: trio.abc.ReceiveStream, n: int) -> bytes:
    got = bytearray()
    while len(got) < n:
        chunk = await stream.receive_some()
        assert chunk, f"EOF after {len(got)} of {n} bytes"
        got += chunk
    return bytes(got)


async def _pair_of_streams(client, server) -> tuple[MuxStream, MuxStream]:  # type: ignore[no-untyped-def]
    a = await client.open_stream()
    b = await server.accept_stream()
    return a, b


async def test_mux_stream_is_a_half_closeable_stream() -> None:
    async with session_pair() as (client, server):
        maker = functools.partial(_pair_of_streams, client, server)

        async def clogged() -> tuple[MuxStream, MuxStream]:
            a, b = await maker()
            # fill the 256 KiB window both ways: further sends block until the peer reads
            await a.send_all(b"\0" * (256 * 1024))
            await b.send_all(b"\0" * (256 * 1024))
            return a, b

        await trio.testing.check_half_closeable_stream(maker, clogged)


async def test_many_streams_echo_concurrently() -> None:
    payloads = [bytes([i]) * (i * 37_000 + 1) for i in range(20)]

    async def echo_server(server) -> None:  # type: ignore[no-untyped-def]
        async with trio.open_nursery() as nursery:
            for _ in payloads:
                stream = await server.accept_stream()
                nursery.start_soon(echo, stream)

    async def echo(stream: MuxStream) -> None:
        while data := await stream.receive_some():
            await stream.send_all(data)
        await stream.send_eof()
        await stream.aclose()

    async def roundtrip(client, payload: bytes) -> None:  # type: ignore[no-untyped-def]
        stream = await client.open_stream()
        async with trio.open_nursery() as nursery:

            async def send() -> None:
                await stream.send_all(payload)
                await stream.send_eof()

            nursery.start_soon(send)
            assert await _receive_exactly(stream, len(payload)) == payload
            assert await stream.receive_some() == b""
        await stream.aclose()

    async with session_pair() as (client, server):
        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(echo_server, server)
                for payload in payloads:
                    nursery.start_soon(roundtrip, client, payload)
        stats = client.statistics()
        assert stats.streams_open == 0, "fully closed streams are forgotten"


async def test_stalled_reader_does_not_delay_other_streams(autojump_clock: trio.abc.Clock) -> None:
    async with session_pair() as (client, server):
        stalled_tx, stalled_rx = await _pair_of_streams(client, server)
        busy_tx, busy_rx = await _pair_of_streams(client, server)

        async def flood_stalled() -> None:
            await stalled_tx.send_all(b"s" * (4 * MiB))  # nobody reads stalled_rx

        async with trio.open_nursery() as nursery:
            nursery.start_soon(flood_stalled)
            with trio.fail_after(60):
                async with trio.open_nursery() as inner:
                    inner.start_soon(busy_tx.send_all, b"b" * (16 * MiB))
                    assert await _receive_exactly(busy_rx, 16 * MiB) == b"b" * (16 * MiB)
            # the stalled stream holds exactly its window, no more
            assert stalled_rx._buffered == 256 * 1024
            assert stalled_rx._window_max == 256 * 1024, "a stalled reader's window never grows"
            assert busy_rx._window_max > 256 * 1024, "a reader that keeps up gets a bigger window"
            nursery.cancel_scope.cancel()


async def test_window_growth_respects_the_session_budget() -> None:
    config = SessionConfig(max_window=4 * MiB, session_window_budget=256 * 1024)
    async with session_pair(config) as (client, server):
        tx, rx = await _pair_of_streams(client, server)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(tx.send_all, b"x" * (8 * MiB))
            await _receive_exactly(rx, 8 * MiB)
        assert rx._window_max == 512 * 1024  # one doubling fits the 256 KiB budget, no more
        assert server._granted_extra == 256 * 1024


async def test_receive_some_hands_out_buffered_frames_in_one_piece() -> None:
    ours, raw = trio.testing.memory_stream_pair()
    async with open_session(ours, client=False) as session:
        await raw.send_all(encode_window_update(Flag.SYN, 1, 0))
        stream = await session.accept_stream()
        wire = b"".join(encode_data_header(0, 1, 3) + part for part in (b"abc", b"def", b"ghi"))
        await raw.send_all(wire)
        await trio.testing.wait_all_tasks_blocked()
        assert stream._buffered == 9
        # several frames in one call, cut anywhere by max_bytes, in order
        assert await stream.receive_some(5) == b"abcde"
        assert await stream.receive_some(2) == b"fg"
        assert await stream.receive_some() == b"hi"
        assert stream._buffered == 0 and not stream._buf


class _RecordingStream(trio.abc.Stream):
    """Forwards to `inner`, keeping every send_all's bytes."""

    def __init__(self, inner: trio.abc.Stream) -> None:
        self.inner = inner
        self.writes: list[bytes] = []

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        self.writes.append(bytes(data))
        await self.inner.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.inner.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        return await self.inner.receive_some(max_bytes)

    async def aclose(self) -> None:
        await self.inner.aclose()


async def test_frames_queued_together_share_one_write() -> None:
    ours, _raw = trio.testing.memory_stream_pair()
    recording = _RecordingStream(ours)
    async with open_session(recording, client=True) as session:
        await trio.testing.wait_all_tasks_blocked()  # the writer is idle, waiting for work
        stream = await session.open_stream()
        await stream.send_all(b"hi")
        await stream.send_eof()
        await trio.testing.wait_all_tasks_blocked()
        frames = FrameDecoder(64 * 1024).feed(recording.writes[0])
        assert [(f.type, f.flags, f.payload) for f in frames] == [
            (FrameType.WINDOW_UPDATE, Flag.SYN, b""),
            (FrameType.DATA, 0, b"hi"),
            (FrameType.WINDOW_UPDATE, Flag.FIN, b""),
        ]
        assert len(recording.writes) == 1


async def _read_frames(raw: trio.abc.ReceiveStream, until: FrameType) -> list[Frame]:
    decoder = FrameDecoder(64 * 1024)
    frames: list[Frame] = []
    while True:
        data = await raw.receive_some()
        if not data:
            return frames
        frames.extend(decoder.feed(data))
        if any(f.type is until for f in frames):
            return frames


async def test_window_overrun_is_answered_with_go_away_protocol_error() -> None:
    ours, raw = trio.testing.memory_stream_pair()
    async with open_session(ours, client=False) as session:
        await raw.send_all(encode_window_update(Flag.SYN, 1, 0))
        stream = await session.accept_stream()
        chunk = b"z" * (64 * 1024)
        for _ in range(4):  # exactly the 256 KiB window: fine
            await raw.send_all(encode_data_header(0, 1, len(chunk)) + chunk)
        await raw.send_all(encode_data_header(0, 1, 1) + b"!")  # one byte too many
        with trio.fail_after(5):
            frames = await _read_frames(raw, FrameType.GO_AWAY)
            await session.wait_ended()
        go_away = [f for f in frames if f.type is FrameType.GO_AWAY]
        assert go_away and go_away[0].length == GoAwayCode.PROTOCOL_ERROR
        assert "overran its receive window" in str(session.error)
        # what arrived within the window is still delivered; then the failure shows
        assert await _receive_exactly(stream, 256 * 1024) == b"z" * (256 * 1024)
        with pytest.raises(SessionBrokenError, match="overran"):
            await stream.receive_some()
        with pytest.raises(SessionBrokenError):
            await session.open_stream()


async def test_peer_opening_one_of_our_ids_is_a_protocol_error() -> None:
    ours, raw = trio.testing.memory_stream_pair()
    async with open_session(ours, client=True) as session:
        await raw.send_all(encode_window_update(Flag.SYN, 3, 0))  # odd ids are the client's
        with trio.fail_after(5):
            frames = await _read_frames(raw, FrameType.GO_AWAY)
        assert frames[-1].length == GoAwayCode.PROTOCOL_ERROR
        assert "an id of ours" in str(session.error)


async def test_half_open_transport_is_declared_dead(autojump_clock: trio.abc.Clock) -> None:
    ours, raw = trio.testing.memory_stream_pair()
    async with open_session(ours, client=True) as session:
        started = trio.current_time()
        seen: list[Frame] = []

        async def drain_silently() -> None:
            decoder = FrameDecoder(64 * 1024)
            while data := await raw.receive_some():  # read, never answer: a half-open peer
                seen.extend(decoder.feed(data))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(drain_silently)
            with trio.fail_after(120):
                await session.wait_ended()
            nursery.cancel_scope.cancel()
        assert trio.current_time() - started == pytest.approx(25, abs=0.5)
        pings = [f for f in seen if f.type is FrameType.PING and f.flags & Flag.SYN]
        assert len(pings) >= 2, "keepalive pings went out after 10 s of silence"
        assert "no frames from the peer" in str(session.error)


async def test_idle_session_with_live_peer_stays_up(autojump_clock: trio.abc.Clock) -> None:
    async with session_pair() as (client, server):
        await trio.sleep(300)
        assert not client.ended and not server.ended
        assert await client.ping() >= 0


async def test_write_timeout_ends_the_session(autojump_clock: trio.abc.Clock) -> None:
    ours, _unread = trio.testing.lockstep_stream_pair()  # nobody reads the peer end: writes block
    async with open_session(ours, client=True) as session:
        await session.open_stream()
        with trio.fail_after(60):
            await session.wait_ended()
        assert "timed out" in str(session.error)


async def test_go_away_stops_new_streams_but_not_existing_ones() -> None:
    async with session_pair() as (client, server):
        tx, rx = await _pair_of_streams(client, server)
        server.go_away_nowait(GoAwayCode.TOKEN_ROTATED)
        with trio.fail_after(5):
            await trio.testing.wait_all_tasks_blocked()  # the GO_AWAY frame has crossed
        assert client.remote_go_away == GoAwayCode.TOKEN_ROTATED
        with pytest.raises(SessionGoneAwayError) as info:
            await client.open_stream()
        assert info.value.code == GoAwayCode.TOKEN_ROTATED
        with pytest.raises(SessionGoneAwayError):
            await server.open_stream()
        await tx.send_all(b"still works")
        assert await rx.receive_some() == b"still works"
        with pytest.raises(trio.EndOfChannel):
            await client.accept_stream()


async def test_streams_over_the_accept_backlog_are_refused() -> None:
    config = SessionConfig(accept_backlog=2)
    async with session_pair(config) as (client, server):
        streams = [await client.open_stream() for _ in range(3)]
        for stream in streams:
            await stream.send_all(b"hi")
        with pytest.raises(StreamRefusedError):
            with trio.fail_after(5):
                await streams[2].receive_some()
        accepted = [await server.accept_stream() for _ in range(2)]
        assert [s.stream_id for s in accepted] == [1, 3]
        assert await accepted[0].receive_some() == b"hi"
        retry = await client.open_stream()  # refused is safe to retry once there is room
        await retry.send_all(b"again")
        assert await (await server.accept_stream()).receive_some() == b"again"


async def test_closing_a_stream_nobody_reads_resets_the_writer() -> None:
    async with session_pair() as (client, server):
        tx, rx = await _pair_of_streams(client, server)
        await rx.aclose()
        with pytest.raises(trio.BrokenResourceError), trio.fail_after(5):
            while True:
                await tx.send_all(b"x" * 1000)


async def test_session_close_ends_peer_cleanly() -> None:
    a, b = trio.testing.memory_stream_pair()
    async with open_session(b, client=False) as server:
        async with open_session(a, client=True) as client:
            tx = await client.open_stream()
            rx = await server.accept_stream()
            await tx.send_all(b"last words")
        # the client said GO_AWAY, flushed, and closed: the server saw a clean end
        assert await rx.receive_some() == b"last words"
        with trio.fail_after(5):
            await server.wait_ended()
        assert server.error is None
        assert server.remote_go_away == GoAwayCode.NORMAL
        with pytest.raises(trio.EndOfChannel):
            await server.accept_stream()
        with pytest.raises(trio.ClosedResourceError):
            await tx.send_all(b"after close")


async def test_transport_eof_without_go_away_breaks_streams() -> None:
    ours, raw = trio.testing.memory_stream_pair()
    async with open_session(ours, client=False) as session:
        await raw.send_all(encode_window_update(Flag.SYN, 1, 0))
        stream = await session.accept_stream()
        await raw.aclose()
        with pytest.raises(SessionBrokenError, match="closed the connection"):
            with trio.fail_after(5):
                await stream.receive_some()
        with pytest.raises(SessionBrokenError):
            await session.accept_stream()


async def test_ping_measures_round_trip() -> None:
    async with session_pair() as (client, server):
        assert await client.ping() >= 0
        assert await server.ping() >= 0
        assert client.rtt is not None


async def test_drain_waits_for_streams_to_finish() -> None:
    async with session_pair() as (client, server):
        tx, rx = await _pair_of_streams(client, server)
        finished = trio.Event()

        async def drain() -> None:
            await client.drain()
            finished.set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(drain)
            await trio.testing.wait_all_tasks_blocked()
            assert not finished.is_set()
            await tx.send_eof()
            await rx.send_eof()
            assert await rx.receive_some() == b""
            assert await tx.receive_some() == b""
        assert finished.is_set()


# The uncancelled scenario takes about 45 scheduling rounds: sweep all of them, then run it whole.
@pytest.mark.parametrize("cancel_after", [*range(0, 60), None])
async def test_cancellation_at_any_point_leaves_no_task_behind(cancel_after: int | None) -> None:
    before = trio.lowlevel.current_statistics().tasks_living
    a, b = trio.testing.memory_stream_pair()

    handed: list[trio.abc.Stream] = []

    async def scenario() -> None:
        handed.append(a)
        async with open_session(a, client=True) as client:
            handed.append(b)
            async with open_session(b, client=False) as server:
                tx = await client.open_stream()
                rx = await server.accept_stream()
                await tx.send_all(b"x" * 200_000)
                await _receive_exactly(rx, 200_000)
                await tx.send_eof()
                await rx.aclose()
                await client.ping()
        completed.append(True)

    completed: list[bool] = []
    with trio.fail_after(10):  # a hang here would be the bug
        with trio.CancelScope() as scope:
            async with trio.open_nursery() as nursery:

                async def canceller(rounds: int) -> None:
                    for _ in range(rounds):
                        await trio.lowlevel.checkpoint()
                    scope.cancel()

                if cancel_after is not None:
                    nursery.start_soon(canceller, cancel_after)
                nursery.start_soon(scenario)
    assert trio.lowlevel.current_statistics().tasks_living == before
    if cancel_after is None:
        assert completed, "the scenario itself runs to the end"
    # every transport handed to a session was closed on the way out
    for transport in handed:
        with pytest.raises(trio.ClosedResourceError):
            await transport.send_all(b"x")
