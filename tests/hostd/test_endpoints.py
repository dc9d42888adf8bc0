"""hostd's stream dispatch (docs/protocol.md 6): kinds, refusals, and the ADB bridge's two
paths (our own device side for the virtual device; splicing to a device's own adbd)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path

import pytest
import trio
import trio.testing

from devyard.core import (
    OpenError,
    RelayChannel,
    Session,
    open_session,
    receive_message,
    request_open,
)
from devyard.hostd import metrics
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


async def _api(edge: Session, method: str, path: str, body: bytes) -> tuple[int, bytes]:
    stream = await edge.open_stream()
    await request_open(stream, "api", instance_id="virt", method=method, path=path)
    await stream.send_all(body)
    await stream.send_eof()
    head = await receive_message(stream)
    answer = bytearray()
    while chunk := await stream.receive_some():
        answer += chunk
    await stream.aclose()
    return int(head["status"]), bytes(answer)


@pytest.mark.parametrize(
    "body",
    [
        b"[" * 100_000 + b"]" * 100_000,  # deeper than the parser goes
        b'{"type": "tap", "x": 1' + b"0" * 400 + b', "y": 1}',  # past float's range
        b'{"type": "swipe", "x1": 1, "y1": 1, "x2": 2, "y2": 2, "durationMs": "slow"}',
        b'{"type": "touch", "action": "down", "x": 1, "y": 1, "pointerId": "one"}',
        b'{"type": "scroll", "x": 1, "y": 1, "dx": [], "dy": 1}',
    ],
)
async def test_bad_device_api_input_is_a_400_on_a_stream_that_answers(
    tmp_path: Path, body: bytes
) -> None:
    async with (
        open_device(DeviceSpec(Platform.ANDROID, "virt", tmp_path / "a")) as virtual,
        edge_side({"virt": virtual}) as edge,
    ):
        with trio.fail_after(10):
            status, answer = await _api(edge, "POST", "/input", body)
            assert status == 400, answer
            assert json.loads(answer)["reason"] == "bad_request"
            status, _ = await _api(edge, "GET", "/", b"")  # the host serves on
            assert status == 200


@asynccontextmanager
async def _viewer(tmp_path: Path) -> AsyncIterator[RelayChannel]:
    """A live-view viewer of a virtual Android device, past the host's ``hello``."""
    async with (
        open_device(DeviceSpec(Platform.ANDROID, "virt", tmp_path / "a")) as virtual,
        edge_side({"virt": virtual}) as edge,
    ):
        stream = await edge.open_stream()
        await request_open(stream, "device-stream", instance_id="virt")
        viewer = RelayChannel(stream)
        with trio.fail_after(10):
            assert json.loads(await viewer.receive())["type"] == "hello"
        yield viewer
        await stream.aclose()


async def test_bad_control_messages_are_answered_and_the_viewer_serves_on(tmp_path: Path) -> None:
    async with _viewer(tmp_path) as viewer:
        with trio.fail_after(10):
            for bad in ('{"type": "rotate", "rotation": 1e400}', "[" * 100_000 + "]" * 100_000):
                await viewer.send(bad)
                answer = await viewer.receive()
                assert isinstance(answer, str) and json.loads(answer)["type"] == "error"
            await viewer.send('{"type": "clipboard"}')
            assert json.loads(await viewer.receive())["type"] == "clipboard"


def _sample(name: str, **labels: str) -> float:
    value = metrics.REGISTRY.get_sample_value(name, labels or None)
    return 0.0 if value is None else value


@pytest.mark.parametrize("codec", ["h264", "jpeg"])
async def test_frames_sent_to_a_viewer_move_the_stream_metrics(tmp_path: Path, codec: str) -> None:
    """The host's live-view figures (issue 20): frames and bytes per codec, whose rate is the
    fps viewers get, and the shared H.264 encoder's time per frame."""
    frames_before = _sample("devyard_host_stream_frames_total", codec=codec)
    bytes_before = _sample("devyard_host_stream_bytes_total", codec=codec)
    encoded_before = _sample("devyard_host_stream_encode_seconds_count")
    async with _viewer(tmp_path) as viewer:
        with trio.fail_after(20):
            await viewer.send(json.dumps({"type": "start", "protocol": 2, "accept": codec}))
            while not isinstance(await viewer.receive(), bytes):  # a still screen: one frame
                pass
    assert _sample("devyard_host_stream_frames_total", codec=codec) >= frames_before + 1
    assert _sample("devyard_host_stream_bytes_total", codec=codec) > bytes_before
    encoded = _sample("devyard_host_stream_encode_seconds_count") - encoded_before
    assert encoded >= 1 if codec == "h264" else encoded == 0
