"""A scripted ADB host for the connection tests: packets in, packets out, over memory streams."""

from __future__ import annotations

from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio
import trio.testing

from devyard.hostd.adb import DEFAULT_CONFIG, AdbConfig, AdbConnection
from devyard.hostd.adb.connection import ServiceRunner
from devyard.hostd.adb.packets import A_VERSION, Command, Packet, PacketDecoder, encode_packet

BANNER = b"device::ro.product.name=p;ro.product.model=m;ro.product.device=d;features=shell_v2"


class FakeHost:
    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        self._decoder = PacketDecoder()
        self._pending: deque[Packet] = deque()

    async def send(self, *packets: Packet) -> None:
        await self.stream.send_all(b"".join(encode_packet(p) for p in packets))

    async def receive(self) -> Packet:
        while not self._pending:
            data = await self.stream.receive_some()
            if not data:
                raise EOFError("the device closed the connection")
            self._pending.extend(self._decoder.feed(data))
        return self._pending.popleft()

    def pending(self) -> list[Packet]:
        return list(self._pending)

    async def connect(self, maxdata: int = 1 << 20) -> Packet:
        await self.send(Packet(Command.CNXN, A_VERSION, maxdata, b"host::features=shell_v2\0"))
        return await self.receive()

    async def open(self, host_id: int, service: str) -> Packet:
        await self.send(Packet(Command.OPEN, host_id, 0, service.encode() + b"\0"))
        return await self.receive()


@asynccontextmanager
async def device_connection(
    runner: ServiceRunner, config: AdbConfig = DEFAULT_CONFIG
) -> AsyncIterator[tuple[FakeHost, AdbConnection]]:
    """An AdbConnection serving `runner`, and a FakeHost at the other end."""
    host_end, device_end = trio.testing.memory_stream_pair()
    conn = AdbConnection(device_end, BANNER, runner, config)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(conn.run)
        yield FakeHost(host_end), conn
        nursery.cancel_scope.cancel()
