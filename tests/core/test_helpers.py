"""splice, backoff, and the open preamble / control channel (docs/protocol.md 6, 7, 9, 10)."""

from __future__ import annotations

import random

import pytest
import trio
import trio.testing

from devyard.core import (
    FIRST_RETRY_S,
    Backoff,
    ControlChannel,
    OpenError,
    RemoteProtocolError,
    accept_open,
    read_open,
    reject_open,
    request_open,
    splice,
)
from devyard.core.messages import MAX_MESSAGE_SIZE, MessageDecoder, encode_message

from .conftest import session_pair


async def test_splice_copies_both_ways_and_propagates_half_close() -> None:
    async with session_pair() as (client, server):
        # left_outer <-> left_inner ==splice== right_inner <-> right_outer
        left_outer = await client.open_stream()
        left_inner = await server.accept_stream()
        right_inner = await server.open_stream()
        right_outer = await client.accept_stream()
        async with trio.open_nursery() as nursery:
            results = []

            async def run() -> None:
                results.append(await splice(left_inner, right_inner))

            nursery.start_soon(run)
            await left_outer.send_all(b"ping" * 1000)
            await left_outer.send_eof()
            got = b""
            while data := await right_outer.receive_some():
                got += data
            assert got == b"ping" * 1000  # and EOF arrived: the half-close went through
            await right_outer.send_all(b"pong")  # the other direction still works
            await right_outer.send_eof()
            assert await left_outer.receive_some() == b"pong"
            assert await left_outer.receive_some() == b""
        assert (results[0].a_to_b, results[0].b_to_a) == (4000, 4)


async def test_splice_linger_bounds_the_second_direction(autojump_clock: trio.abc.Clock) -> None:
    async with session_pair() as (client, server):
        a_outer = await client.open_stream()
        a_inner = await server.accept_stream()
        b_inner = await server.open_stream()
        b_outer = await client.accept_stream()
        await a_outer.send_eof()  # one direction ends; b_outer never does
        start = trio.current_time()
        with trio.fail_after(60):
            await splice(a_inner, b_inner, linger=5)
        assert trio.current_time() - start == pytest.approx(5, abs=0.1)
        assert await b_outer.receive_some() == b""
        del b_outer


def test_backoff_is_full_jitter_exponential_and_resets_after_health() -> None:
    backoff = Backoff(base=1, cap=30, reset_after=60, rng=random.Random(7))
    ceilings = [1, 2, 4, 8, 16, 30, 30]
    for ceiling in ceilings:
        delay = backoff.next_delay()
        assert 0 <= delay <= ceiling
    assert backoff.attempt == len(ceilings)
    backoff.succeeded(now=100)
    backoff.failed(now=130)  # up for 30 s: not long enough to forget the history
    assert backoff.attempt == len(ceilings)
    backoff.succeeded(now=200)
    backoff.failed(now=261)
    assert backoff.attempt == 0
    samples = [Backoff(rng=random.Random(i), attempt=10).next_delay() for i in range(200)]
    assert max(samples) <= 30 and min(samples) < 5, "jitter spreads over the whole range"


def test_a_first_window_narrows_only_the_first_retry_after_a_healthy_run() -> None:
    """Hosts' and connectors' links (FIRST_RETRY_S): a killed replica's clients are back
    within a quarter second, a flapping link still backs off as before."""
    backoff = Backoff(base=1, cap=30, reset_after=60, first=0.25, rng=random.Random(3))
    first = backoff.next_delay()
    assert 0 <= first <= 0.25
    later = [backoff.next_delay() for _ in range(200)]
    assert max(later) > 1, "the second retry's window is the base's doubling, not the first's"
    backoff.succeeded(now=0)
    backoff.failed(now=61)  # a healthy minute: the next loss starts from the first window
    assert backoff.attempt == 0
    samples = [Backoff(first=0.25, rng=random.Random(i)).next_delay() for i in range(200)]
    assert max(samples) <= 0.25 and max(samples) > 0.2, "spread over the whole first window"
    assert Backoff(base=0.1, first=0.25, rng=random.Random(1)).next_delay() <= 0.1
    assert FIRST_RETRY_S == 0.25


async def test_open_preamble_ok_then_raw_bytes_are_not_consumed() -> None:
    async with session_pair() as (client, server):
        opener = await client.open_stream()
        acceptor = await server.accept_stream()
        async with trio.open_nursery() as nursery:

            async def accept_side() -> None:
                request = await read_open(acceptor)
                assert request == {"kind": "tunnel-dial", "dest": "db.internal:5432"}
                await accept_open(acceptor, selector_version=3)
                await acceptor.send_all(b"SERVER-FIRST-BYTES")  # sent right behind the reply

            nursery.start_soon(accept_side)
            reply = await request_open(opener, "tunnel-dial", dest="db.internal:5432")
            assert reply == {"ok": True, "selector_version": 3}
            assert await opener.receive_some() == b"SERVER-FIRST-BYTES"


async def test_open_preamble_error_is_coded() -> None:
    async with session_pair() as (client, server):
        opener = await client.open_stream()
        acceptor = await server.accept_stream()
        async with trio.open_nursery() as nursery:

            async def accept_side() -> None:
                await read_open(acceptor)
                await reject_open(acceptor, "forbidden", "not in selectors", retry_after_s=2)

            nursery.start_soon(accept_side)
            with pytest.raises(OpenError) as info:
                await request_open(opener, "tunnel-dial", dest="evil:22")
        assert info.value.code == "forbidden"
        assert info.value.retry_after_s == 2
        assert "not in selectors" in str(info.value)


async def test_control_channel_round_trip_and_eof() -> None:
    async with session_pair() as (client, server):
        a = ControlChannel(await client.open_stream())
        b = ControlChannel(await server.accept_stream())
        for i in range(50):
            await a.send({"type": "config", "version": i})
        for i in range(50):
            assert await b.receive() == {"type": "config", "version": i}
        await a.stream.send_eof()  # type: ignore[attr-defined]
        with pytest.raises(trio.EndOfChannel):
            await b.receive()


def test_message_decoder_rejects_garbage() -> None:
    with pytest.raises(RemoteProtocolError, match="exceeds"):
        MessageDecoder().feed((MAX_MESSAGE_SIZE + 1).to_bytes(4, "big"))
    with pytest.raises(RemoteProtocolError, match="not JSON"):
        MessageDecoder().feed(b"\0\0\0\3abc")
    with pytest.raises(RemoteProtocolError, match="object"):
        MessageDecoder().feed(b"\0\0\0\2[]")
    decoder = MessageDecoder()
    wire = encode_message({"a": 1}) + encode_message({"b": "é"})
    assert [m for i in range(len(wire)) for m in decoder.feed(wire[i : i + 1])] == [
        {"a": 1},
        {"b": "é"},
    ]
    with pytest.raises(ValueError, match="exceeds"):
        encode_message({"x": "y" * MAX_MESSAGE_SIZE})


async def test_preamble_without_kind_is_a_protocol_error() -> None:
    a, b = trio.testing.memory_stream_pair()
    await a.send_all(encode_message({"nope": 1}))
    with pytest.raises(RemoteProtocolError, match="kind"):
        await read_open(b)


def test_leaves_flattens_nested_groups_in_order() -> None:
    from devyard.core._groups import leaves  # noqa: PLC0415

    a, b, c = ValueError("a"), KeyError("b"), OSError("c")
    nested = BaseExceptionGroup(
        "outer", [a, ExceptionGroup("inner", [b, ExceptionGroup("x", [c])])]
    )
    assert leaves(nested) == [a, b, c]
    assert leaves(a) == [a]
