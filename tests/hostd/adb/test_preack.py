"""Debian's real `adb` through two early-acknowledging splices, as an emulator is bridged.

    adb --TCP--> adb_splice(local=adb)  --TCP--> adb_splice(local=adbd) --TCP--> adbd

The first splice stands for `devyard adb forward` (it acknowledges adb's writes: pushes), the
second for hostd next to an emulator's own adbd (it acknowledges the device's writes: pulls);
our serve_adb plays the emulator's adbd. Both must pre-ack and every byte must still arrive.
"""

from __future__ import annotations

import os
from functools import partial
from pathlib import Path

import pytest
import trio

from devyard.core.adb_splice import adb_splice
from devyard.core.adbwire import PreAcker
from devyard.hostd.adb import DEFAULT_FEATURES
from devyard.hostd.drivers.virtual import VirtualDevice

from .conftest import AdbClient, needs_adb, serve

pytestmark = [needs_adb, pytest.mark.slow]


async def _splicer(
    nursery: trio.Nursery, upstream: int, *, ack_the_client: bool, ackers: list[PreAcker]
) -> int:
    """A TCP listener splicing each connection to 127.0.0.1:upstream; returns its port."""

    async def handle(client: trio.SocketStream) -> None:
        upper = await trio.open_tcp_stream("127.0.0.1", upstream)
        acker = PreAcker()
        ackers.append(acker)
        if ack_the_client:
            await adb_splice(client, upper, acker=acker)
        else:
            await adb_splice(upper, client, acker=acker)

    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    await nursery.start(trio.serve_listeners, handle, listeners)
    return int(listeners[0].socket.getsockname()[1])


async def test_push_pull_shell_through_two_preacking_splices(
    adb: AdbClient, device: VirtualDevice, nursery: trio.Nursery, tmp_path: Path
) -> None:
    near_client: list[PreAcker] = []
    near_device: list[PreAcker] = []
    adbd = await serve(nursery, device, DEFAULT_FEATURES)
    inner = await _splicer(nursery, adbd, ack_the_client=False, ackers=near_device)
    outer = await _splicer(nursery, inner, ack_the_client=True, ackers=near_client)
    adb.serial = await adb.connect(outer)

    payload = os.urandom(9 * 1024 * 1024 + 4321)
    source, back = tmp_path / "big.bin", tmp_path / "back.bin"
    source.write_bytes(payload)
    assert "1 file pushed" in (await adb.run("push", str(source), "/sdcard/big.bin")).out
    await adb.run("pull", "/sdcard/big.bin", str(back))
    assert back.read_bytes() == payload
    assert (await adb.run("shell", "cat", stdin=b"x" * 300_000)).stdout == b"x" * 300_000
    failed = await adb.run("shell", "echo hi; false", check=False)
    assert (failed.status, failed.out) == (1, "hi\n")

    (client_side,) = near_client
    (device_side,) = near_device
    assert client_side.passthrough_reason is None and device_side.passthrough_reason is None
    assert client_side.preacks >= 9  # the push's 1 MiB writes, at least
    assert device_side.preacks >= 9  # the pull's
    # every remote OKAY for a pre-acked write was dropped, none went through twice
    assert client_side.dropped <= client_side.preacks
    assert device_side.dropped <= device_side.preacks


async def test_the_splice_steps_aside_for_what_it_does_not_understand(
    nursery: trio.Nursery,
) -> None:
    got = bytearray()

    async def sink(stream: trio.SocketStream) -> None:
        while data := await stream.receive_some():
            got.extend(data)
        await stream.send_all(b"bye")

    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    await nursery.start(trio.serve_listeners, sink, listeners)
    port = int(listeners[0].socket.getsockname()[1])
    acker = PreAcker()
    ours, theirs = trio.testing.memory_stream_pair()
    nursery.start_soon(
        partial(adb_splice, acker=acker), theirs, await trio.open_tcp_stream("127.0.0.1", port)
    )
    junk = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" * 10
    await ours.send_all(junk)
    await ours.send_eof()
    assert await ours.receive_some() == b"bye"
    assert bytes(got) == junk
    assert acker.passthrough_reason == "the local peer does not speak ADB"
