"""AdbConnection and AdbStream against a scripted host over memory streams (docs/adb.md)."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from devyard.hostd.adb import AdbConfig, AdbConnection, AdbStream, RemoteProtocolError
from devyard.hostd.adb.packets import A_VERSION, Command, Packet, encode_packet

from .host import BANNER, FakeHost, device_connection


async def echo(stream: AdbStream, conn: AdbConnection) -> None:
    stream.accept()
    while data := await stream.receive_some():
        await stream.send_all(data)


async def refuse(stream: AdbStream, conn: AdbConnection) -> None:
    stream.refuse()
    await trio.lowlevel.checkpoint()


async def test_handshake_answers_cnxn_with_the_banner() -> None:
    async with device_connection(echo) as (host, _):
        answer = await host.connect(maxdata=256 * 1024)
    assert answer == Packet(Command.CNXN, A_VERSION, 1 << 20, BANNER)


async def test_packets_before_cnxn_are_a_protocol_error() -> None:
    host_end, device_end = trio.testing.memory_stream_pair()
    conn = AdbConnection(device_end, BANNER, echo)
    await FakeHost(host_end).send(Packet(Command.OPEN, 1, 0, b"shell:\0"))
    with pytest.raises(RemoteProtocolError, match="before CNXN"):
        await conn.run()


async def test_coalesced_and_split_packets() -> None:
    async with device_connection(echo) as (host, conn):
        wire = encode_packet(Packet(Command.CNXN, A_VERSION, 1 << 20, b"host::\0"))
        wire += encode_packet(Packet(Command.OPEN, 5, 0, b"echo:\0"))
        for i in range(len(wire)):  # one byte per read
            await host.stream.send_all(wire[i : i + 1])
        assert (await host.receive()).command is Command.CNXN
        okay = await host.receive()
        assert (okay.command, okay.arg1) == (Command.OKAY, 5)
        device_id = okay.arg0
        await host.send(Packet(Command.WRTE, 5, device_id, b"ping"))
        assert {await host.receive(), await host.receive()} == {
            Packet(Command.OKAY, device_id, 5),  # our write consumed
            Packet(Command.WRTE, device_id, 5, b"ping"),  # the echo
        }
        # the ack and the close in one read: the service sees EOF and ends, no CLSE back
        await host.send(Packet(Command.OKAY, 5, device_id), Packet(Command.CLSE, 5, device_id))
        await trio.testing.wait_all_tasks_blocked()
        assert conn.streams_open == 0
        assert host.pending() == []


async def test_one_write_in_flight_and_chunks_of_maxdata() -> None:
    sent = trio.Event()

    async def writer(stream: AdbStream, conn: AdbConnection) -> None:
        stream.accept()
        await stream.send_all(b"a" * 4096 + b"b" * 4096 + b"c" * 100)
        sent.set()
        await trio.sleep_forever()

    async with device_connection(writer) as (host, _):
        await host.connect(maxdata=4096)
        okay = await host.open(1, "w:")
        first = await host.receive()
        assert first == Packet(Command.WRTE, okay.arg0, 1, b"a" * 4096)
        await trio.testing.wait_all_tasks_blocked()
        assert host.pending() == []  # nothing more until we ack
        await host.send(Packet(Command.OKAY, 1, okay.arg0))
        assert (await host.receive()).data == b"b" * 4096
        await trio.testing.wait_all_tasks_blocked()
        assert not sent.is_set()
        await host.send(Packet(Command.OKAY, 1, okay.arg0))
        assert (await host.receive()).data == b"c" * 100
        await trio.testing.wait_all_tasks_blocked()
        assert sent.is_set()


async def test_host_writes_are_acked_when_consumed() -> None:
    may_read = trio.Event()
    got: list[bytes] = []

    async def slow_reader(stream: AdbStream, conn: AdbConnection) -> None:
        stream.accept()
        await may_read.wait()
        got.append(await stream.receive_some(2))
        got.append(await stream.receive_some())

    async with device_connection(slow_reader) as (host, _):
        await host.connect()
        okay = await host.open(3, "r:")
        await host.send(Packet(Command.WRTE, 3, okay.arg0, b"hello"))
        await trio.testing.wait_all_tasks_blocked()
        assert host.pending() == []  # not consumed, not acked
        may_read.set()
        assert await host.receive() == Packet(Command.OKAY, okay.arg0, 3)
    assert got == [b"he", b"llo"]


async def test_queued_host_writes_are_acked_one_by_one_in_order() -> None:
    """A bridge that acknowledges early (core/adbwire.py) sends WRTEs before our OKAY."""
    may_read = trio.Event()
    got: list[bytes] = []

    async def slow_reader(stream: AdbStream, conn: AdbConnection) -> None:
        stream.accept()
        await may_read.wait()
        while data := await stream.receive_some(3):
            got.append(data)

    async with device_connection(slow_reader) as (host, _):
        await host.connect()
        okay = await host.open(1, "r:")
        device_id = okay.arg0
        await host.send(
            Packet(Command.WRTE, 1, device_id, b"one"),
            Packet(Command.WRTE, 1, device_id, b""),  # nothing to consume: acked at once
            Packet(Command.WRTE, 1, device_id, b"two!"),
        )
        assert await host.receive() == Packet(Command.OKAY, device_id, 1)
        await trio.testing.wait_all_tasks_blocked()
        assert host.pending() == []  # the others are not consumed yet
        may_read.set()
        assert await host.receive() == Packet(Command.OKAY, device_id, 1)
        assert await host.receive() == Packet(Command.OKAY, device_id, 1)
        await trio.testing.wait_all_tasks_blocked()
        assert host.pending() == []
        await host.send(Packet(Command.CLSE, 1, device_id))
        await trio.testing.wait_all_tasks_blocked()
    assert got == [b"one", b"two", b"!"]


async def test_unacked_writes_past_max_inbound_are_a_protocol_error() -> None:
    async def idle(stream: AdbStream, conn: AdbConnection) -> None:
        stream.accept()
        await trio.sleep_forever()

    host_end, device_end = trio.testing.memory_stream_pair()
    conn = AdbConnection(device_end, BANNER, idle, AdbConfig(max_inbound=5))
    host = FakeHost(host_end)
    async with trio.open_nursery() as nursery:

        async def script() -> None:
            await host.connect()
            okay = await host.open(1, "x:")
            await host.send(
                Packet(Command.WRTE, 1, okay.arg0, b"1234"),
                Packet(Command.WRTE, 1, okay.arg0, b"56"),
            )

        nursery.start_soon(script)
        with pytest.raises(RemoteProtocolError, match="exceed 5"):
            await conn.run()


async def test_refused_service_answers_clse_with_local_id_zero() -> None:
    async with device_connection(refuse) as (host, _):
        await host.connect()
        assert await host.open(9, "nope:") == Packet(Command.CLSE, 0, 9)


async def test_host_close_is_eof_and_breaks_sends() -> None:
    outcome: list[object] = []

    async def watcher(stream: AdbStream, conn: AdbConnection) -> None:
        stream.accept()
        outcome.append(await stream.receive_some())
        try:
            await stream.send_all(b"late")
        except trio.BrokenResourceError as exc:
            outcome.append(exc)

    async with device_connection(watcher) as (host, _):
        await host.connect()
        okay = await host.open(2, "w:")
        await host.send(Packet(Command.CLSE, 2, okay.arg0))
        await trio.testing.wait_all_tasks_blocked()
    assert outcome[0] == b""
    assert isinstance(outcome[1], trio.BrokenResourceError)


async def test_streams_past_the_limit_are_refused() -> None:
    async def idle(stream: AdbStream, conn: AdbConnection) -> None:
        stream.accept()
        await trio.sleep_forever()

    async with device_connection(idle, AdbConfig(max_streams=2)) as (host, conn):
        await host.connect()
        assert (await host.open(1, "a:")).command is Command.OKAY
        assert (await host.open(2, "b:")).command is Command.OKAY
        assert await host.open(3, "c:") == Packet(Command.CLSE, 0, 3)
        assert conn.streams_open == 2


async def test_eof_ends_the_connection_and_its_services() -> None:
    cancelled = trio.Event()

    async def idle(stream: AdbStream, conn: AdbConnection) -> None:
        stream.accept()
        try:
            await trio.sleep_forever()
        finally:
            cancelled.set()

    host_end, device_end = trio.testing.memory_stream_pair()
    conn = AdbConnection(device_end, BANNER, idle)
    host = FakeHost(host_end)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(conn.run)
        await host.connect()
        await host.open(1, "a:")
        await host_end.aclose()
    assert cancelled.is_set()


async def test_device_opened_streams() -> None:
    async with device_connection(echo) as (host, conn):
        await host.connect()
        async with trio.open_nursery() as nursery:
            opened: list[AdbStream] = []

            async def open_one() -> None:
                opened.append(await conn.open_stream("tcp:8081"))

            nursery.start_soon(open_one)
            request = await host.receive()
            assert request.command is Command.OPEN
            assert request.data == b"tcp:8081\0"
            await host.send(Packet(Command.OKAY, 77, request.arg0))
        stream = opened[0]
        assert stream.remote_id == 77
        await stream.send_all(b"hi")
        assert await host.receive() == Packet(Command.WRTE, request.arg0, 77, b"hi")

        async def answer_with_clse() -> None:
            second = await host.receive()
            await host.send(Packet(Command.CLSE, 0, second.arg0))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(answer_with_clse)
            with pytest.raises(trio.BrokenResourceError, match="refused"):
                await conn.open_stream("tcp:1")
        assert conn.streams_open == 1


async def test_abandoned_open_is_closed_when_the_host_answers() -> None:
    async with device_connection(echo) as (host, conn):
        await host.connect()
        with trio.CancelScope() as scope:
            scope.cancel()  # gives up at once, after the OPEN went out
            await conn.open_stream("tcp:9")
        request = await host.receive()
        await host.send(Packet(Command.OKAY, 50, request.arg0))
        assert await host.receive() == Packet(Command.CLSE, request.arg0, 50)
        assert conn.streams_open == 0
