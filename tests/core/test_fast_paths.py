"""The core's copy-free paths (docs/protocol.md 2.3, 4.4, 9): fragments, views, the direct
sink, pieces, sendmsg. Each test checks the bytes arrive whole and in order, and that the path
under test really carried some of them."""

from __future__ import annotations

import os
import random
import socket
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio
import trio.testing
from hypothesis import given
from hypothesis import strategies as st

from devyard.core import Flag, Frame, FrameType, RemoteProtocolError, open_session, splice
from devyard.core.codec import FrameDecoder, encode_data_header, encode_frame, encode_window_update
from devyard.core.stream import MuxStream
from devyard.core.vectored import piece_sender
from tests.polling import eventually

from .conftest import session_pair

KiB = 1024
MiB = 1024 * KiB
_FIRST = int(Flag.SYN | Flag.ACK)
_LAST = int(Flag.FIN | Flag.RST)


def _wire_frames() -> list[Frame]:
    big = bytes(random.Random(7).randbytes(20_000))
    return [
        Frame(FrameType.DATA, Flag.SYN, 1, 5000, big[:5000]),
        Frame(FrameType.WINDOW_UPDATE, Flag.ACK, 2, 1 << 20),
        Frame(FrameType.DATA, 0, 1, 0, b""),
        Frame(FrameType.DATA, Flag.ACK | Flag.FIN, 2, 20_000, big),
        Frame(FrameType.PING, Flag.SYN, 0, 77),
        Frame(FrameType.DATA, Flag.RST, 3, 3, b"xyz"),
        Frame(FrameType.DATA, Flag.SYN | Flag.FIN, 5, 7000, big[7000:14000]),
    ]


@given(st.lists(st.integers(min_value=1, max_value=6000), min_size=1, max_size=40))
def test_fragments_pass_cut_payloads_on_at_once_with_flags_at_the_ends(cuts: list[int]) -> None:
    frames = _wire_frames()
    wire = b"".join(encode_frame(f) for f in frames)
    decoder = FrameDecoder(64 * KiB, fragments=True)
    out: list[Frame] = []
    pos = 0
    for cut in [*cuts, len(wire)]:
        chunk = wire[pos : pos + cut]
        pos += len(chunk)
        if chunk:
            got = decoder.feed(chunk)
            for frame in got:  # every payload is a view of the chunk it came in: no copy
                if frame.payload:
                    assert isinstance(frame.payload, memoryview)
                    assert frame.payload.obj is chunk
            out.extend(got)
    decoder.feed_eof()
    it = iter(out)
    for original in frames:
        first = next(it)
        if original.type is not FrameType.DATA:
            assert first == original
            continue
        pieces = [first]
        while sum(p.length for p in pieces) < original.length:
            pieces.append(next(it))
        assert all(p.type is FrameType.DATA and p.stream_id == original.stream_id for p in pieces)
        assert all(p.length == len(p.payload) for p in pieces)
        assert b"".join(bytes(p.payload) for p in pieces) == original.payload
        if len(pieces) == 1:
            assert pieces[0].flags == original.flags
        else:
            assert pieces[0].flags == original.flags & _FIRST
            assert pieces[-1].flags == original.flags & _LAST
            assert all(p.flags == 0 for p in pieces[1:-1])
    assert next(it, None) is None


def test_fragments_still_make_eof_inside_a_frame_an_error() -> None:
    decoder = FrameDecoder(64 * KiB, fragments=True)
    wire = encode_frame(Frame(FrameType.DATA, 0, 1, 100, bytes(100)))
    [piece] = decoder.feed(wire[:60])
    assert piece.length == 48
    assert decoder.buffered == 60
    with pytest.raises(RemoteProtocolError, match="inside a frame"):
        decoder.feed_eof()


async def test_buffered_pieces_are_views_unless_small_against_their_chunk() -> None:
    ours, raw = trio.testing.memory_stream_pair()
    async with open_session(ours, client=False) as session:
        await raw.send_all(
            encode_window_update(Flag.SYN, 1, 0) + encode_window_update(Flag.SYN, 3, 0)
        )
        big, small = await session.accept_stream(), await session.accept_stream()
        payload = random.Random(1).randbytes(200 * KiB)
        await raw.send_all(
            encode_data_header(0, 1, len(payload))
            + payload
            + encode_data_header(0, 3, 10)
            + bytes(10)
        )
        await trio.testing.wait_all_tasks_blocked()
        # the big payload stays a view of the chunk it arrived in; the 10 bytes are copied out,
        # so a trickle of small frames cannot keep many large chunks alive
        assert isinstance(big._buf[0], memoryview) and len(big._buf[0]) == len(payload)
        assert type(small._buf[0]) is bytes
        pieces = await big._receive_parts(1 * MiB)
        assert [len(p) for p in pieces] == [len(payload)]
        assert isinstance(pieces[0], memoryview) and pieces[0].readonly
        data = await small.receive_some()
        assert type(data) is bytes and data == bytes(10)


async def test_passing_on_a_small_piece_of_a_big_chunk_queues_a_copy() -> None:
    async with session_pair() as (client, _server):
        tx = await client.open_stream()
        chunk = bytes(512 * KiB)
        assert tx._send_nowait(memoryview(chunk)[:100]) == 100
        assert tx._send_nowait(memoryview(chunk)[: 200 * KiB]) == 200 * KiB
        small, large = (payload for _, payload in list(client._data)[-2:])
        assert isinstance(small, memoryview) and small.obj is not chunk and len(small) == 100
        assert isinstance(large, memoryview) and large.obj is chunk


async def test_send_all_keeps_views_of_bytes_but_copies_what_can_change() -> None:
    async with session_pair() as (client, server):
        tx = await client.open_stream()
        await tx.send_all(b"!")
        rx = await server.accept_stream()
        assert await rx.receive_some() == b"!"
        mutable = bytearray(b"before")
        await tx.send_all(memoryview(mutable))
        mutable[:] = b"AFTER!"  # changed before the writer ran: the copy was sent
        frozen = memoryview(b"frozen-bytes")[:6]
        await tx.send_all(frozen)
        queued = [payload for _, payload in client._data]
        assert any(isinstance(p, memoryview) and p.obj is frozen.obj for p in queued)
        got = b""
        while len(got) < 12:
            got += await rx.receive_some()
        assert got == b"beforefrozen"


@asynccontextmanager
async def _tcp_pair() -> AsyncIterator[tuple[trio.SocketStream, trio.SocketStream]]:
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    async with listeners[0]:
        client = await trio.open_tcp_stream("127.0.0.1", port)
        server = await listeners[0].accept()
    async with client, server:
        yield client, server


async def _send_in_pieces(stream: trio.abc.SendStream, data: bytes, rng: random.Random) -> None:
    pos = 0
    while pos < len(data):
        n = rng.randint(1, 300 * KiB)
        await stream.send_all(data[pos : pos + n])
        pos += n
    await stream.send_eof()  # type: ignore[attr-defined]


async def _read_slowly(stream: trio.abc.ReceiveStream, rng: random.Random) -> bytes:
    got = bytearray()
    while data := await stream.receive_some(rng.randint(1, 64 * KiB)):
        got += data
        if rng.random() < 0.2:
            await trio.sleep(0.001)
    return bytes(got)


def _counted(real: Callable[..., int], total: list[int]) -> Callable[..., int]:
    """`real`, adding up what it returns (bytes taken) in total[0]."""

    def counting(*args: Any) -> int:
        n = real(*args)
        total[0] += n
        return n

    return counting


async def _force_both_paths(
    *,
    tx: MuxStream,
    inner: MuxStream,
    payload: bytes,
    direct: list[int],
    nursery: trio.Nursery,
    rng: random.Random,
) -> None:
    """Send `payload` on `tx` so that both ways out of the splice from `inner` carry some of it.

    The splice must already be running, and nobody reads its far side yet. First a small piece
    while the pump waits with nothing buffered: the session reader passes it straight on. Then
    more than the stalled far side can take, until `inner` holds bytes in its buffer: those
    only the pump can send. The rest follows in random pieces. Each step waits for its effect,
    not for the scheduler, so a loaded machine cannot skip a path.
    """
    first = 32 * KiB
    await trio.testing.wait_all_tasks_blocked()  # the pump is parked, nothing buffered
    await tx.send_all(payload[:first])
    await eventually(lambda: direct[0] >= first)
    nursery.start_soon(_send_in_pieces, tx, payload[first:], rng)
    await eventually(lambda: inner._buffered > 0)


async def test_splice_to_a_slow_socket_mixes_the_direct_path_and_the_pump_in_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    direct = [0]
    monkeypatch.setattr(os, "write", _counted(os.write, direct))
    rng = random.Random(5)
    payload = rng.randbytes(12 * MiB)
    async with _tcp_pair() as (link_a, link_b), _tcp_pair() as (sink, far):
        sink.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 * KiB)
        async with (
            open_session(link_a, client=True) as client,
            open_session(link_b, client=False) as server,
            trio.open_nursery() as nursery,
        ):
            tx = await client.open_stream()
            await tx.send_all(b"")  # the SYN
            inner = await server.accept_stream()
            results = []

            async def run() -> None:
                results.append(await splice(inner, sink))

            nursery.start_soon(run)
            await _force_both_paths(
                tx=tx, inner=inner, payload=payload, direct=direct, nursery=nursery, rng=rng
            )
            got = await _read_slowly(far, rng)
            await far.send_eof()
            assert await tx.receive_some() == b""
    assert got == payload
    assert results[0].a_to_b == len(payload)
    # both ways out of the stream carried bytes: written at once by the reader, and by the pump
    assert 0 < direct[0] < len(payload), direct[0]


async def test_splice_between_mux_streams_passes_on_within_credit_in_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    direct = [0]
    monkeypatch.setattr(MuxStream, "_send_nowait", _counted(MuxStream._send_nowait, direct))
    rng = random.Random(9)
    payload = rng.randbytes(8 * MiB)
    async with (
        _tcp_pair() as (a, b),
        _tcp_pair() as (c, d),
        open_session(a, client=True) as left_client,
        open_session(b, client=False) as left_server,
        open_session(c, client=True) as right_client,
        open_session(d, client=False) as right_server,
        trio.open_nursery() as nursery,
    ):
        # left_outer ==left== inner_from ~~splice~~ inner_to ==right== right_outer
        left_outer = await left_client.open_stream()
        await left_outer.send_all(b"")
        inner_from = await left_server.accept_stream()
        inner_to = await right_client.open_stream()
        await inner_to.send_all(b"")
        right_outer = await right_server.accept_stream()
        results = []

        async def run() -> None:
            results.append(await splice(inner_from, inner_to))

        nursery.start_soon(run)
        await _force_both_paths(
            tx=left_outer,
            inner=inner_from,
            payload=payload,
            direct=direct,
            nursery=nursery,
            rng=rng,
        )
        got = await _read_slowly(right_outer, rng)
        await right_outer.send_eof()
        assert await left_outer.receive_some() == b""
    assert got == payload
    assert results[0].a_to_b == len(payload)
    assert 0 < direct[0] < len(payload), direct[0]


@pytest.mark.parametrize("with_fin", [False, True])
async def test_bytes_that_arrived_before_the_splice_are_passed_on(with_fin: bool) -> None:
    # The splice's way out of a mux stream starts without a task (it waits on the reader's
    # direct sink): what is already buffered, or an EOF already received, must still go.
    async with (
        _tcp_pair() as (link_a, link_b),
        _tcp_pair() as (sink, far),
        open_session(link_a, client=True) as client,
        open_session(link_b, client=False) as server,
    ):
        tx = await client.open_stream()
        await tx.send_all(b"early bytes")
        if with_fin:
            await tx.send_eof()
        inner = await server.accept_stream()
        await eventually(lambda: inner._buffered == len(b"early bytes"))
        async with trio.open_nursery() as nursery:
            nursery.start_soon(splice, inner, sink)
            got = b""
            while len(got) < len(b"early bytes"):
                got += await far.receive_some()
            assert got == b"early bytes"
            if with_fin:
                assert await far.receive_some() == b""
            else:
                await tx.send_all(b" and late ones")
                got = b""
                while len(got) < len(b" and late ones"):
                    got += await far.receive_some()
                assert got == b" and late ones"
                await tx.send_eof()
                assert await far.receive_some() == b""
            await far.send_eof()
            assert await tx.receive_some() == b""


class _Spawns(trio.abc.Instrument):
    def __init__(self) -> None:
        self.names: list[str] = []

    def task_spawned(self, task: trio.lowlevel.Task) -> None:
        self.names.append(task.name)


async def test_a_splice_whose_socket_never_blocks_runs_in_one_task() -> None:
    # Stream opens cost mostly trio's per-task machinery: the way out of the mux stream gets
    # a task only once the socket (or the end of the stream) needs one.
    async with (
        _tcp_pair() as (link_a, link_b),
        _tcp_pair() as (sink, far),
        open_session(link_a, client=True) as client,
        open_session(link_b, client=False) as server,
        trio.open_nursery() as nursery,
    ):
        tx = await client.open_stream()
        await tx.send_all(b"")
        inner = await server.accept_stream()
        spawns = _Spawns()
        trio.lowlevel.add_instrument(spawns)
        try:
            nursery.start_soon(splice, inner, sink, name="the splice")
            for i in range(20):
                await tx.send_all(b"x%d" % i)
                assert await far.receive_some() == b"x%d" % i
            assert spawns.names == ["the splice"]
            await tx.send_eof()  # now the way out needs a task, to pass the EOF on
            assert await far.receive_some() == b""
            assert len(spawns.names) == 2
        finally:
            trio.lowlevel.remove_instrument(spawns)
        await far.send_eof()
        assert await tx.receive_some() == b""


async def test_piece_sender_sends_every_piece_in_order_over_a_slow_socket() -> None:
    rng = random.Random(3)
    pieces: list[bytes | memoryview] = []
    for i in range(2500):  # more than one sendmsg takes (IOV_MAX 1024), and empty pieces
        size = rng.choice([0, 1, 12, 100, 4 * KiB, 64 * KiB])
        block = bytes([i % 251]) * size
        pieces.append(memoryview(block)[: size // 2 or size] if i % 3 == 0 else block)
    expected = b"".join(pieces)
    async with _tcp_pair() as (ours, theirs):
        ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 32 * KiB)
        send = piece_sender(ours)
        async with trio.open_nursery() as nursery:

            async def sender() -> None:
                await send(list(pieces))
                await ours.send_eof()

            nursery.start_soon(sender)
            got = await _read_slowly(theirs, rng)
    assert got == expected


async def test_piece_sender_reports_a_gone_peer_as_broken_and_joins_for_other_streams() -> None:
    async with _tcp_pair() as (ours, theirs):
        await theirs.aclose()
        send = piece_sender(ours)
        with pytest.raises(trio.BrokenResourceError):
            for _ in range(100):  # the first writes may still be accepted by the kernel
                await send([b"x" * 64 * KiB, memoryview(b"y" * 64 * KiB)])
                await trio.sleep(0.01)
    a, b = trio.testing.memory_stream_pair()
    await piece_sender(a)([b"one ", memoryview(b"two three")[:3]])
    assert await b.receive_some() == b"one two"
