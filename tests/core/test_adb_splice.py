"""adb_splice between a scripted ADB host (local) and a scripted, slow device (remote)."""

from __future__ import annotations

import random
import struct
from collections import deque

import trio
import trio.testing

from devyard.core.adb_splice import adb_splice
from devyard.core.adbwire import A_CLSE, A_CNXN, A_OKAY, A_WRTE, encode_header

A_OPEN = 0x4E45504F
Packet = tuple[int, int, int, bytes]


def pkt(command: int, arg0: int, arg1: int, data: bytes = b"") -> bytes:
    return encode_header(command, arg0, arg1, len(data)) + data


class Peer:
    """One end of an ADB transport: whole packets in and out."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        self._buf = bytearray()
        self._packets: deque[Packet] = deque()

    async def send(self, command: int, arg0: int, arg1: int, data: bytes = b"") -> None:
        await self.stream.send_all(pkt(command, arg0, arg1, data))

    async def receive(self) -> Packet | None:
        while not self._packets:
            data = await self.stream.receive_some()
            if not data:
                assert not self._buf, "the stream ended inside a packet"
                return None
            self._buf += data
            while len(self._buf) >= 24:
                command, arg0, arg1, length, _, magic = struct.unpack_from("<6I", self._buf)
                assert magic == command ^ 0xFFFF_FFFF
                if len(self._buf) < 24 + length:
                    break
                self._packets.append((command, arg0, arg1, bytes(self._buf[24 : 24 + length])))
                del self._buf[: 24 + length]
        return self._packets.popleft()

    def pending(self) -> list[Packet]:
        return list(self._packets)


async def nothing_more(peer: Peer) -> None:
    """Nothing else arrives (within a moment of quiet)."""
    await trio.testing.wait_all_tasks_blocked()
    with trio.move_on_after(0.05):
        packet = await peer.receive()
        raise AssertionError(f"unexpected {packet}")


async def handshake(host: Peer, device: Peer) -> None:
    await host.send(A_CNXN, 0x01000001, 1 << 20, b"host::features=shell_v2\0")
    assert (await device.receive() or (0,))[0] == A_CNXN
    await device.send(A_CNXN, 0x01000001, 1 << 20, b"device::features=shell_v2")
    assert (await host.receive() or (0,))[0] == A_CNXN
    await host.send(A_OPEN, 1, 0, b"sync:\0")
    assert await device.receive() == (A_OPEN, 1, 0, b"sync:\0")
    await device.send(A_OKAY, 7, 1)
    assert await host.receive() == (A_OKAY, 7, 1, b"")


async def test_the_host_gets_its_okay_before_the_device_answered_and_only_once() -> None:
    host_end, local = trio.testing.memory_stream_pair()
    remote, device_end = trio.testing.memory_stream_pair()
    host, device = Peer(host_end), Peer(device_end)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(adb_splice, local, remote)
        await handshake(host, device)

        with trio.fail_after(5):
            await host.send(A_WRTE, 1, 7, b"first")
            # the device has read nothing yet: this OKAY is the splice's
            assert await host.receive() == (A_OKAY, 7, 1, b"")
            await host.send(A_WRTE, 1, 7, b"second")
            assert await host.receive() == (A_OKAY, 7, 1, b"")

        # the slow device now reads both writes and acks them, then writes itself
        assert await device.receive() == (A_WRTE, 1, 7, b"first")
        assert await device.receive() == (A_WRTE, 1, 7, b"second")
        await device.send(A_OKAY, 7, 1)
        await device.send(A_OKAY, 7, 1)
        await device.send(A_WRTE, 7, 1, b"reply")
        # its OKAYs were given already: the next thing the host sees is the device's write
        assert await host.receive() == (A_WRTE, 7, 1, b"reply")
        await nothing_more(host)
        await host.send(A_OKAY, 1, 7)  # the host's acks pass on untouched
        assert await device.receive() == (A_OKAY, 1, 7, b"")

        # a half-close passes on, the other direction goes on until the device closes too
        await host_end.send_eof()
        assert await device.receive() is None
        await device.send(A_CLSE, 7, 1)
        assert await host.receive() == (A_CLSE, 7, 1, b"")
        await device_end.aclose()
        assert await host.receive() is None
        await trio.testing.wait_all_tasks_blocked()
        assert host.pending() == device.pending() == []


async def test_an_adb_like_host_pushing_through_a_small_window_to_a_slow_device() -> None:
    """adb waits for each OKAY; the device acks late. Every byte arrives once, in order;
    the host gets exactly one OKAY per write; the window bounds what the device holds."""
    window, size, writes = 3000, 1000, 60
    host_end, local = trio.testing.memory_stream_pair()
    remote, device_end = trio.testing.memory_stream_pair()
    host, device = Peer(host_end), Peer(device_end)
    rng = random.Random(7)
    payloads = [rng.randbytes(size) for _ in range(writes)]
    received: list[bytes] = []
    most_unacked = 0
    all_received = trio.Event()

    async def slow_device() -> None:
        nonlocal most_unacked
        unacked: deque[bytes] = deque()
        while len(received) < writes:
            with trio.move_on_after(0.002):  # read what has come, then ack one, slowly
                while True:
                    packet = await device.receive()
                    assert packet is not None and packet[0] == A_WRTE
                    unacked.append(packet[3])
                    most_unacked = max(most_unacked, len(unacked))
            if unacked:
                received.append(unacked.popleft())
                await device.send(A_OKAY, 7, 1)
        all_received.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(lambda: adb_splice(local, remote, window=window))
        await handshake(host, device)
        nursery.start_soon(slow_device)
        with trio.fail_after(20):
            for data in payloads:
                await host.send(A_WRTE, 1, 7, data)
                assert await host.receive() == (A_OKAY, 7, 1, b"")
            await all_received.wait()
        await nothing_more(host)  # no OKAY reached the host twice
        nursery.cancel_scope.cancel()
    assert received == payloads
    # window / size pre-acked, plus the one whose OKAY was held back
    assert 1 < most_unacked <= window // size + 1
