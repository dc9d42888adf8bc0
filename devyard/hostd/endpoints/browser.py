"""The browser stream (``endpointWebSocketUrl``), served by the host on a relayed mux stream.

The edge carries the browser's WebSocket messages over a ``device-stream`` stream as relay
messages (docs/protocol.md 6.3): text is JSON control, binary is media. The protocol is the
one of docs/devices.md "Browser stream":

    host -> browser  {"type": "hello", "protocol": 1, "protocols": [1, 2], "width", "height",
                      "rotation", "codecs", "instanceId", "platform", "model"}
    browser -> host  {"type": "start", "codec": "jpeg", "maxFps"?, "maxSize"?}       (v1)
                     {"type": "start", "protocol": 2, "accept": "h264,jpeg", ...} (v2)
                     v2 "ackWindow": N (1-64): at most N frames unacknowledged in flight;
                     the viewer then sends {"type": "ack", "count"} (frames it received
                     since "started"), and a viewer behind on acks gets no frame (H.264:
                     it resumes at a key frame) rather than filling the network's buffers
    host -> browser  v2 only: {"type": "started", "protocol": 2, "codec"} (the first accepted
                     codec the device offers)
    host -> browser  media frames, binary:
                     v1 [u8 kind][u8 flags][u64 BE pts us][payload]
                     v2 [u8 kind][u8 flags][u64 BE pts us][u32 BE seq][u64 BE capture us][payload]
                     kind 1 = H.264 access unit (Annex B; v2 only), 3 = JPEG picture,
                     4 = PNG screenshot (the answer to "screenshot"); flags bit 0 = keyframe
    browser -> host  {"type": "touch", "pointerId", "action", "x", "y"} (x, y in [0, 1]),
                     "key" {key}, "text" {text}, "scroll" {x, y, dx, dy},
                     "clipboard" {text?} (without text: the host answers {"type": "clipboard",
                     "text"}), "rotate" {rotation}, "openUrl" {url}, "screenshot",
                     "requestFrame", "stop", "keepAlive"
    host -> browser  {"type": "keepAlive"} every 15 s; {"type": "error", "message"} on bad input

A new ``start`` replaces the running one (codec or size change) and begins with a keyframe.
Frames are pulled from the device's iterator only as fast as the stream takes them, and the
iterator keeps only the latest picture (H.264: the frames since the last key frame, at most
a few; drivers/_shared/video.py): a slow viewer gets fewer frames, never a backlog.
``capture us`` is the host's wall clock when the picture was taken (docs/live-view.md).
"""

from __future__ import annotations

import json
import logging
import math
import struct
from collections.abc import AsyncIterator
from typing import Any, Final

import trio

from ...core import RelayChannel
from .. import metrics
from ..drivers import (
    Codec,
    DeviceDriver,
    DeviceError,
    Frame,
    Key,
    Rotation,
    TouchAction,
)

log = logging.getLogger(__name__)

__all__ = ["PROTOCOL_VERSION", "serve_browser_stream"]

PROTOCOL_VERSION: Final = 1
PROTOCOLS: Final = (1, 2)
KIND_H264: Final = 1
KIND_JPEG: Final = 3
KIND_SCREENSHOT: Final = 4
FLAG_KEYFRAME: Final = 1
_MEDIA_HEADER: Final = struct.Struct(">BBQ")
_MEDIA_HEADER_V2: Final = struct.Struct(">BBQIQ")
_KINDS: Final = {Codec.H264: KIND_H264, Codec.JPEG: KIND_JPEG}
_KEEPALIVE_S: Final = 15.0
_DEFAULT_FPS: Final = 30.0
#: Control messages are flat objects; text and clipboard carry the only long strings.
MAX_CONTROL_MESSAGE: Final = 256 * 1024


class _BadInput(Exception):
    pass


def media_frame(kind: int, keyframe: bool, pts_us: int, payload: bytes) -> bytes:
    return _MEDIA_HEADER.pack(kind, FLAG_KEYFRAME if keyframe else 0, pts_us) + payload


def media_frame_v2(frame: Frame) -> bytes:
    flags = FLAG_KEYFRAME if frame.keyframe else 0
    header = _MEDIA_HEADER_V2.pack(
        _KINDS[frame.codec], flags, frame.pts_us, frame.seq & 0xFFFFFFFF, frame.capture_us
    )
    return header + frame.data


def _hello(device: DeviceDriver) -> dict[str, Any]:
    info = device.describe()
    return {
        "type": "hello",
        "protocol": PROTOCOL_VERSION,
        "protocols": list(PROTOCOLS),
        "width": info.width,
        "height": info.height,
        "rotation": int(info.rotation),
        "codecs": [c.value for c in info.codecs],
        "instanceId": info.instance_id,
        "platform": info.platform.value,
        "model": info.model,
    }


def parse_control(raw: str) -> dict[str, Any]:
    """One control message: a flat JSON object of at most MAX_CONTROL_MESSAGE characters.

    Nesting is bounded twice: the C parser refuses input deeper than the interpreter's
    recursion limit (RecursionError, raised at once and caught here), and anything nested at
    all is refused after parsing, since no control message carries an object or an array."""
    if len(raw) > MAX_CONTROL_MESSAGE:
        raise _BadInput(f"a control message is at most {MAX_CONTROL_MESSAGE} characters")
    try:
        message = json.loads(raw)
    except RecursionError:
        raise _BadInput("a control message is a flat JSON object, not nested") from None
    if not isinstance(message, dict):
        raise _BadInput("a control message must be a JSON object")
    if any(isinstance(value, dict | list) for value in message.values()):
        raise _BadInput("a control message is a flat JSON object, not nested")
    return message


def _num(message: dict[str, Any], name: str, default: float | None = None) -> float:
    value = message.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _BadInput(f"{message.get('type')}: {name!r} must be a number")
    try:
        number = float(value)
    except OverflowError:  # an integer past float's range
        number = math.inf
    if not math.isfinite(number):
        raise _BadInput(f"{message.get('type')}: {name!r} must be a finite number")
    return number


def _str(message: dict[str, Any], name: str) -> str:
    value = message.get(name)
    if not isinstance(value, str):
        raise _BadInput(f"{message.get('type')}: {name!r} must be a string")
    return value


class _Viewer:
    def __init__(self, channel: RelayChannel, device: DeviceDriver) -> None:
        self.channel = channel
        self.device = device
        self._frames_scope: trio.CancelScope | None = None
        self._window = 0  # frames in flight without an ack; 0: no acks asked for
        self._sent = 0
        self._acked = 0
        self._ack_event = trio.Event()

    async def send_json(self, message: dict[str, Any]) -> None:
        await self.channel.send(json.dumps(message, separators=(",", ":")))

    async def run(self) -> None:
        await self.send_json(_hello(self.device))
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._keepalive)
            try:
                await self._receive_loop(nursery)
            finally:
                nursery.cancel_scope.cancel()

    async def _keepalive(self) -> None:
        while True:
            await trio.sleep(_KEEPALIVE_S)
            await self.send_json({"type": "keepAlive"})

    async def _receive_loop(self, nursery: trio.Nursery) -> None:
        while True:
            try:
                raw = await self.channel.receive()
            except trio.EndOfChannel:
                return
            if isinstance(raw, bytes):
                await self.send_json({"type": "error", "message": "binary input is not supported"})
                continue
            try:
                await self._handle(parse_control(raw), nursery)
            except (_BadInput, DeviceError, ValueError) as exc:
                await self.send_json({"type": "error", "message": str(exc)})

    async def _handle(self, message: dict[str, Any], nursery: trio.Nursery) -> None:
        kind = message.get("type")
        device = self.device
        if kind == "start":
            await self._start(message, nursery)
        elif kind == "stop":
            self._stop_frames()
        elif kind == "touch":
            action = TouchAction(_str(message, "action"))
            pointer = int(_num(message, "pointerId", 0))
            await device.touch(pointer, action, _num(message, "x"), _num(message, "y"))
        elif kind == "key":
            await device.key(Key(_str(message, "key")))
        elif kind == "text":
            await device.text(_str(message, "text"))
        elif kind == "scroll":
            x, y = _num(message, "x"), _num(message, "y")
            await device.scroll(x, y, _num(message, "dx", 0.0), _num(message, "dy", 0.0))
        elif kind == "clipboard":
            if "text" in message:
                await device.set_clipboard(_str(message, "text"))
            else:
                await self.send_json({"type": "clipboard", "text": await device.get_clipboard()})
        elif kind == "rotate":
            await device.rotate(Rotation(int(_num(message, "rotation"))))
        elif kind == "openUrl":
            await device.open_url(_str(message, "url"))
        elif kind == "screenshot":
            png = await device.screenshot()
            await self.channel.send(media_frame(KIND_SCREENSHOT, True, 0, png))
        elif kind == "requestFrame":
            device.request_keyframe()
        elif kind == "keepAlive":
            pass
        elif kind == "ack":
            self._acked = max(self._acked, int(_num(message, "count")))
            self._ack_event.set()
            self._ack_event = trio.Event()
        else:
            raise _BadInput(f"unknown message type {kind!r}")

    async def _start(self, message: dict[str, Any], nursery: trio.Nursery) -> None:
        device = self.device
        version = message.get("protocol", 1)
        if version not in PROTOCOLS or isinstance(version, bool):
            raise _BadInput(f"start: 'protocol' must be one of {list(PROTOCOLS)}")
        offered = device.describe().codecs
        if version == 1:
            codec = Codec(message.get("codec", Codec.JPEG.value))
            if codec is not Codec.JPEG:  # v1 frames say neither seq nor which H.264 unit
                raise _BadInput("protocol 1 streams jpeg only")
        else:
            codec = _negotiate(message.get("accept"), offered)
        if codec not in offered:
            raise _BadInput(f"codec {codec.value!r} is not offered by this device")
        max_fps = _num(message, "maxFps", _DEFAULT_FPS)
        max_size = message.get("maxSize")
        if max_size is not None and (not isinstance(max_size, int) or max_size < 16):
            raise _BadInput("start: 'maxSize' must be an integer >= 16")
        window = message.get("ackWindow", 0) if version == 2 else 0
        if not isinstance(window, int) or isinstance(window, bool) or not 0 <= window <= 64:
            raise _BadInput("start: 'ackWindow' must be an integer from 0 to 64")
        frames = device.frames(codec=codec, max_fps=max_fps, max_size=max_size)
        self._stop_frames()
        self._window, self._sent, self._acked = window, 0, 0
        if version == 2:
            await self.send_json({"type": "started", "protocol": 2, "codec": codec.value})
        self._frames_scope = await nursery.start(self._send_frames, frames, version)

    def _stop_frames(self) -> None:
        if self._frames_scope is not None:
            self._frames_scope.cancel()
            self._frames_scope = None

    async def _send_frames(
        self,
        frames: AsyncIterator[Frame],
        version: int,
        task_status: trio.TaskStatus[trio.CancelScope],
    ) -> None:
        with trio.CancelScope() as scope:
            task_status.started(scope)
            async for frame in frames:
                while self._window and self._sent - self._acked >= self._window:
                    await self._ack_event.wait()  # the iterator is not pulled meanwhile
                self._sent += 1
                if version == 1:
                    data = media_frame(KIND_JPEG, frame.keyframe, frame.pts_us, frame.data)
                else:
                    data = media_frame_v2(frame)
                await self.channel.send(data)
                metrics.STREAM_FRAMES.labels(frame.codec.value).inc()
                metrics.STREAM_BYTES.labels(frame.codec.value).inc(len(data))


def _negotiate(accept: object, offered: tuple[Codec, ...]) -> Codec:
    """The first codec of the viewer's *accept* (codec names, comma-separated, the viewer's
    preference first: control messages are flat) that the device offers."""
    if not isinstance(accept, str) or not accept:
        raise _BadInput("start: 'accept' must be codec names separated by commas")
    for name in accept.split(","):
        if name.strip() in {c.value for c in offered}:
            return Codec(name.strip())
    names = ",".join(c.value for c in offered)
    raise _BadInput(f"start: none of {accept!r} is offered (this device sends {names!r})")


async def serve_browser_stream(stream: trio.abc.Stream, device: DeviceDriver) -> None:
    """Serve one viewer until it goes away (the open preamble was accepted by the caller)."""
    channel = RelayChannel(stream)
    instance_id = device.describe().instance_id
    try:
        await _Viewer(channel, device).run()
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        log.info("viewer of %s went away", instance_id)
    finally:
        await trio.aclose_forcefully(stream)
