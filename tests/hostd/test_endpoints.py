"""hostd's stream dispatch (docs/protocol.md 6): kinds, refusals, and the ADB bridge's two
paths (our own device side for the virtual device; splicing to a device's own adbd)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path

import pytest
import trio
import trio.testing

from devyard.core import OpenError, Session, open_session, request_open
from devyard.hostd.adb import serve_adb_tcp
from devyard.hostd.adb.packets import Command, Packet, PacketDecoder, encode_packet
from devyard.hostd.drivers import DeviceDriver, DeviceSpec, Platform, open_device
from devyard.hostd.drivers.virtual import VirtualDevice
from devyard.hostd.endpoints import serve_streams
from devyard.hostd.endpoints.browser import parse_control


class WithOwnAdbd(VirtualDevice):
    """A device with its own adbd on a TCP port, as an emulator has."""

    adbd_port = 0

    async def open_adb_transport(self) -> trio.abc.Stream:  # type: ignore[override]
        return await trio.open_tcp_stream("127.0.0.1", self.adbd_port)


@asynccontextmanager
async def edge_side(devices: dict[str, DeviceDriver]) -> AsyncIterator[Session]:
    """A host session serving *devices*, and the edge's end of it."""
    edge_end, host_end = trio.testing.memory_stream_pair()
    async with (
        trio.open_nursery() as nursery,
        open_session(edge_end, client=False) as edge,
        open_session(host_end, client=True) as host,
    ):
        stops = {name: trio.Event() for name in devices}

        def lookup(instance_id: str) -> tuple[DeviceDriver, trio.Event] | None:
            device = devices.get(instance_id)
            return None if device is None else (device, stops[instance_id])

        nursery.start_soon(serve_streams, host, lookup)
        yield edge
        nursery.cancel_scope.cancel()


async def _cnxn_reply(stream: trio.abc.Stream) -> Packet:
    await stream.send_all(encode_packet(Packet(Command.CNXN, 0x01000001, 1 << 20, b"host::\0")))
    decoder = PacketDecoder()
    with trio.fail_after(10):
        while True:
            packets = decoder.feed(await stream.receive_some())
            if packets:
                return packets[0]


async def test_adb_is_served_by_us_or_spliced_to_the_device_adbd(tmp_path: Path) -> None:
    async with (
        open_device(DeviceSpec(Platform.ANDROID, "virt", tmp_path / "a")) as virtual,
        open_device(DeviceSpec(Platform.ANDROID, "emu-adbd", tmp_path / "b")) as adbd_device,
        trio.open_nursery() as nursery,
    ):
        assert isinstance(adbd_device, VirtualDevice)
        emulator = WithOwnAdbd(DeviceSpec(Platform.ANDROID, "emu", tmp_path / "c"))
        async with emulator:
            emulator.adbd_port = await nursery.start(partial(serve_adb_tcp, adbd_device))
            async with edge_side({"virt": virtual, "emu": emulator}) as edge:
                for instance_id, props in (("virt", virtual), ("emu", adbd_device)):
                    stream = await edge.open_stream()
                    await request_open(stream, "adb", instance_id=instance_id)
                    reply = await _cnxn_reply(stream)
                    assert reply.command is Command.CNXN
                    model = props.properties()["ro.product.model"]  # type: ignore[attr-defined]
                    assert f"ro.product.model={model}".encode() in reply.data
                    await stream.aclose()
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize(
    ("kind", "fields", "code"),
    [
        ("adb", {"instance_id": "nope"}, "not-found"),
        ("adb", {"instance_id": "ios"}, "bad-request"),
        ("http", {"instance_id": "virt", "port": 0}, "bad-request"),
        ("http", {"instance_id": "virt", "port": 8099}, "refused"),
        ("warp", {"instance_id": "virt"}, "bad-request"),
    ],
)
async def test_refusals_say_why(
    tmp_path: Path, kind: str, fields: dict[str, object], code: str
) -> None:
    async with (
        open_device(DeviceSpec(Platform.ANDROID, "virt", tmp_path / "a")) as virtual,
        open_device(DeviceSpec(Platform.IOS, "ios", tmp_path / "b")) as ios,
        edge_side({"virt": virtual, "ios": ios}) as edge,
    ):
        stream = await edge.open_stream()
        with pytest.raises(OpenError) as refused:
            await request_open(stream, kind, **fields)
        assert refused.value.code == code
        await stream.aclose()


@pytest.mark.parametrize(
    "raw",
    [
        "[" * 100_000 + "]" * 100_000,  # deeper than the parser's recursion
        '{"type": "text", "text": [[["x"]]]}',  # nested at all
        '{"type": "text", "text": "' + "x" * (256 * 1024) + '"}',  # too long
        "[]",
    ],
)
def test_control_messages_are_bounded_flat_objects(raw: str) -> None:
    with pytest.raises(Exception, match="control message") as caught:
        parse_control(raw)
    assert type(caught.value).__name__ == "_BadInput"
