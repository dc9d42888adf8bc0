"""H.264 for the live view: one encoder per resolution tier, shared by every viewer of it.

Theory of operation. A `Pictures` source (the virtual device's `LiveScreen`) holds the current
picture and says when it changed. An `H264Tier` is one libx264 encoder (PyAV; Baseline profile,
``ultrafast`` + ``zerolatency``, no B-frames, SPS/PPS before every IDR, Annex B) at one output
size and frame rate. It encodes nothing by itself: a viewer with nothing left to send calls
`H264Tier.produce`, the first one in takes the tier's lock and encodes the next frame once the
picture changed (or a key frame is due), the others wait on the lock and find the new frame.
So no viewer, no encoding; one encoding per change for all viewers; at most ``max_fps``.

Key frames (IDR): on a viewer's join (at once), every `KEY_INTERVAL_S` worth of frames at
``max_fps`` while the picture keeps changing, and for a viewer that fell behind (at most one
such per `MIN_KEY_GAP_S`). A static screen sends nothing at all after its key frame.

The tier keeps the frames since its latest key frame, at most `HISTORY` of them. A viewer
(`H264Stream`) sends them in order; one that fell further behind than that (its transport was
blocked while the tier moved on) skips to the newest key frame, or waits for the next one: it
never sees a frame it cannot decode and nothing buffers without bound.

Pictures arrive as `Yuv420` planes, the encoder's own format, so a frame costs no colour
conversion in the encoder: the source converts once per picture that really changed and may
patch only the regions that changed (`Yuv420.patched`; the virtual device does this for its
touch marks). `to_yuv420` is the conversion, BT.601 limited range with 2x2-averaged chroma,
which equals what swscale's default made of RGB before (docs/live-view.md).

Encoding (scale, libx264) runs in a worker thread under a per-run limiter of
`ENCODE_THREADS`, never on the trio loop.
"""

from __future__ import annotations

import collections
import importlib.util
import time
from collections.abc import Awaitable, Callable, Iterable
from fractions import Fraction
from typing import TYPE_CHECKING, Final, Protocol

import attrs
import trio
from PIL import Image

from ... import metrics
from ..base import Codec, Frame

if TYPE_CHECKING:
    from av.video.plane import VideoPlane

__all__ = [
    "AVAILABLE",
    "ENCODE_THREADS",
    "HISTORY",
    "KEY_INTERVAL_S",
    "MIN_KEY_GAP_S",
    "EncodedFrame",
    "H264Encoder",
    "H264Stream",
    "H264Tier",
    "Pictures",
    "Yuv420",
    "scaled_size",
    "to_yuv420",
]

#: PyAV (the hostd extra) is importable: the drivers offer H.264 only then.
AVAILABLE: Final = importlib.util.find_spec("av") is not None
KEY_INTERVAL_S: Final = 2.0
MIN_KEY_GAP_S: Final = 0.5
HISTORY: Final = 8
ENCODE_THREADS: Final = 2
#: x264's quality target: UI pictures (flat colour, text) stay sharp well above this.
CRF: Final = 26
#: x264's (sliced) threads per encoder. Its default, 1.5x the cores, cost a third more CPU per
#: frame on 2 cores for no lower latency; and a host encodes for many devices at once.
X264_THREADS: Final = 2
#: RGB -> Y'CbCr, BT.601 limited range (Y 16-235, Cb/Cr 16-240): a Pillow convert matrix
#: (each row: R, G, B factors and an offset). What swscale's default made of RGB before.
_BT601: Final = (
    0.2568, 0.5041, 0.0979, 16.0,
    -0.1482, -0.2910, 0.4392, 128.0,
    0.4392, -0.3678, -0.0714, 128.0,
)  # fmt: skip
_LIMITER: trio.lowlevel.RunVar[trio.CapacityLimiter] = trio.lowlevel.RunVar("video_limiter")


def _limiter() -> trio.CapacityLimiter:
    try:
        return _LIMITER.get()
    except LookupError:
        limiter = trio.CapacityLimiter(ENCODE_THREADS)
        _LIMITER.set(limiter)
        return limiter


class Pictures(Protocol):
    """What a tier encodes from: a picture with a version that grows on every change."""

    @property
    def version(self) -> int: ...

    @property
    def key_epoch(self) -> int: ...

    @property
    def closed(self) -> bool: ...

    @property
    def started_at(self) -> float: ...

    async def wait_changed(self, version: int, key_epoch: int) -> None: ...

    def snapshot(self) -> tuple[int, Callable[[], Yuv420]]:
        """(version, a function that makes that picture; called in a worker thread)."""
        ...


@attrs.frozen(eq=False)
class Yuv420:
    """A picture in yuv420p: Pillow "L" images, Y at its even size, Cb and Cr at half of it.
    Never changed in place (a source may hand the same one to several tiers)."""

    y: Image.Image
    u: Image.Image
    v: Image.Image

    @property
    def size(self) -> tuple[int, int]:
        return self.y.size

    def resized(self, size: tuple[int, int]) -> Yuv420:
        """Scaled to *size* (even), each plane on its own (bilinear, antialiased)."""
        half = (size[0] // 2, size[1] // 2)
        bilinear = Image.Resampling.BILINEAR
        return Yuv420(
            self.y.resize(size, bilinear),
            self.u.resize(half, bilinear),
            self.v.resize(half, bilinear),
        )

    def patched(self, patches: Iterable[tuple[int, int, Image.Image]]) -> Yuv420:
        """A copy with each (left, top, RGB picture) converted and put in place. With even
        left, top and sizes the result equals converting the whole patched picture."""
        y, u, v = self.y.copy(), self.u.copy(), self.v.copy()
        for left, top, picture in patches:
            if left % 2 or top % 2 or picture.width % 2 or picture.height % 2:
                raise ValueError(f"a patch is even-aligned: {left, top, picture.size}")
            part = to_yuv420(picture)
            y.paste(part.y, (left, top))
            u.paste(part.u, (left // 2, top // 2))
            v.paste(part.v, (left // 2, top // 2))
        return Yuv420(y, u, v)


def to_yuv420(picture: Image.Image) -> Yuv420:
    """*picture* (RGB) in yuv420p; an odd last column or row is left out (4:2:0 needs even)."""
    width, height = picture.size
    if width % 2 or height % 2:
        picture = picture.crop((0, 0, width - width % 2, height - height % 2))
    if picture.mode != "RGB":
        picture = picture.convert("RGB")
    y, cb, cr = picture.convert("RGB", _BT601).split()
    return Yuv420(y, cb.reduce(2), cr.reduce(2))


def scaled_size(width: int, height: int, max_size: int | None) -> tuple[int, int]:
    """The encoded size: the longer side at most *max_size*, both sides even (4:2:0)."""
    if max_size is not None and max(width, height) > max_size:
        scale = max_size / max(width, height)
        width, height = round(width * scale), round(height * scale)
    return max(2, width - width % 2), max(2, height - height % 2)


@attrs.frozen
class EncodedFrame:
    """One access unit (Annex B). ``capture_us`` is the wall clock (µs) when the picture was
    taken; ``pts_us`` counts from the device's start on trio's clock."""

    seq: int
    data: bytes = attrs.field(repr=lambda b: f"<{len(b)} bytes>")
    keyframe: bool
    width: int
    height: int
    pts_us: int
    capture_us: int
    encode_ms: float


class H264Encoder:
    """A libx264 context; only ever used from one worker thread at a time. *threads*: x264's
    (0: its default, 1.5x the cores)."""

    def __init__(self, width: int, height: int, *, threads: int = X264_THREADS) -> None:
        import av  # noqa: PLC0415 (PyAV loads FFmpeg: only when someone watches in H.264)

        context = av.CodecContext.create("libx264", "w")
        assert isinstance(context, av.VideoCodecContext)
        context.width, context.height = width, height
        context.pix_fmt = "yuv420p"
        context.time_base = Fraction(1, 1_000_000)
        context.gop_size = 1 << 30  # key frames are ours to ask for, never x264's
        context.max_b_frames = 0
        context.options = {
            "preset": "ultrafast",
            "tune": "zerolatency",
            "profile": "baseline",
            "crf": str(CRF),
            "forced-idr": "1",
            "x264-params": f"scenecut=0:bframes=0:repeat-headers=1:annexb=1:threads={threads}",
        }
        context.open()
        self._context = context
        self.width, self.height = width, height

    def encode(self, picture: Yuv420, pts_us: int, keyframe: bool) -> tuple[bytes, bool]:
        import av  # noqa: PLC0415
        from av.video.frame import PictureType  # noqa: PLC0415

        # a new frame each time (allocating is nothing next to x264): the encoder may keep a
        # reference to the last one, so it is never written again
        frame = av.VideoFrame(self.width, self.height, "yuv420p")
        for plane, image in zip(frame.planes, (picture.y, picture.u, picture.v), strict=True):
            _fill(plane, image)
        frame.pts = pts_us
        if keyframe:
            frame.pict_type = PictureType.I
        packets = self._context.encode(frame)
        return b"".join(bytes(p) for p in packets), any(p.is_keyframe for p in packets)


def _fill(plane: VideoPlane, image: Image.Image) -> None:
    """Copy an "L" picture into a frame's plane (whose rows may be padded for alignment)."""
    data = memoryview(image.tobytes())
    target = memoryview(plane)
    width, line = image.width, plane.line_size
    if line == width:
        target[: len(data)] = data
        return
    for row in range(image.height):
        target[row * line : row * line + width] = data[row * width : (row + 1) * width]


class H264Tier:
    """One encoder at one (size, fps), shared by its viewers."""

    def __init__(self, source: Pictures, *, max_size: int | None, max_fps: float) -> None:
        self.source = source
        self.max_size = max_size
        self._interval = 1.0 / max_fps
        self._gop = max(1, round(KEY_INTERVAL_S * max_fps))
        self._since_key = 0
        self._encoder: H264Encoder | None = None
        self._lock = trio.Lock()
        self._history: collections.deque[EncodedFrame] = collections.deque(maxlen=HISTORY)
        self._seq = -1  # the newest frame's
        self._encoded: tuple[int, int] | None = None  # (version, key epoch) last encoded
        self._not_before = -float("inf")
        self._key_at = -float("inf")  # a key frame is wanted from this (trio) time
        self._last_key = -float("inf")
        self._woken = trio.Event()
        #: counters for metrics and the bench
        self.encoded = 0
        self.keyframes = 0
        self.bytes = 0

    @property
    def seq(self) -> int:
        return self._seq

    def want_key(self, *, urgent: bool) -> None:
        """Ask for a key frame: at once (a join) or within MIN_KEY_GAP_S of the last one."""
        now = trio.current_time()
        at = now if urgent else max(now, self._last_key + MIN_KEY_GAP_S)
        if at < self._key_at or self._key_at <= self._last_key:
            self._key_at = at
        self._woken.set()
        self._woken = trio.Event()

    def next_after(self, last: int | None, floor: int) -> EncodedFrame | None:
        """The frame a viewer that sent *last* (None: nothing decodable yet) sends next: the
        one after it, else the newest key frame past *floor* it has not sent; None to wait."""
        history = self._history
        if last is not None and history and history[0].seq <= last + 1 <= history[-1].seq:
            return history[last + 1 - history[0].seq]
        newest = max(last if last is not None else -1, floor)
        keys = [f for f in history if f.keyframe and f.seq > newest]
        return keys[-1] if keys else None

    def behind(self, last: int) -> bool:
        """True when the frame after *last* is gone: the viewer must wait for a key frame."""
        return bool(self._history) and (
            self._history[0].seq > last + 1 or self._history[-1].seq < last
        )

    async def produce(self, known_seq: int) -> None:
        """Return once there is a frame newer than *known_seq* (encoding it if nobody else
        is), or the source closed."""
        async with self._lock:
            if self._seq != known_seq:
                return
            await self._wait_due()
            if self.source.closed:
                return
            await self._encode_next()

    async def _wait_due(self) -> None:
        source = self.source
        while not source.closed:
            now = trio.current_time()
            changed = self._encoded != (source.version, source.key_epoch)
            due = changed or self._key_at <= now or self._encoded is None
            if due:
                if now >= self._not_before:
                    return
                await trio.sleep_until(self._not_before)  # paced: changes meanwhile collapse
                continue
            with trio.move_on_at(self._key_at):
                await self._wait_change()

    async def _wait_change(self) -> None:
        version, epoch = self._encoded or (-1, -1)
        woken = self._woken
        async with trio.open_nursery() as nursery:

            async def first(wait: Callable[[], Awaitable[object]]) -> None:
                await wait()
                nursery.cancel_scope.cancel()

            nursery.start_soon(first, lambda: self.source.wait_changed(version, epoch))
            nursery.start_soon(first, woken.wait)

    async def _encode_next(self) -> None:
        source = self.source
        now = trio.current_time()
        epoch = source.key_epoch
        keyframe = (
            self._encoded is None
            or self._key_at <= now
            or epoch != self._encoded[1]
            or self._since_key + 1 >= self._gop
        )
        version, draw = source.snapshot()
        capture_us = time.time_ns() // 1000
        pts_us = round((now - source.started_at) * 1_000_000)

        def encode() -> tuple[bytes, bool, float, int, int]:
            started = time.perf_counter()
            picture = draw()
            width, height = scaled_size(*picture.size, self.max_size)
            encoder = self._encoder
            if encoder is None or (encoder.width, encoder.height) != (width, height):
                # a new size (a rotation): a new encoder, whose first frame is a key frame
                encoder = self._encoder = H264Encoder(width, height)
            if picture.size != (width, height):
                picture = picture.resized((width, height))
            data, key = encoder.encode(picture, pts_us, keyframe)
            return data, key, (time.perf_counter() - started) * 1000, width, height

        data, key, encode_ms, width, height = await trio.to_thread.run_sync(
            encode, limiter=_limiter()
        )
        metrics.STREAM_ENCODE_SECONDS.observe(encode_ms / 1000)
        self._encoded = (version, epoch)
        self._not_before = now + self._interval
        if not data:  # (x264 with zerolatency answers every frame at once; never seen)
            return
        self._since_key += 1
        if key:
            self._since_key = 0
            self._history.clear()
            self._last_key = now
            self.keyframes += 1
            if self._key_at <= now:
                self._key_at = float("inf")
        self._seq += 1
        self._history.append(
            EncodedFrame(self._seq, data, key, width, height, pts_us, capture_us, encode_ms)
        )
        self.encoded += 1
        self.bytes += len(data)


class H264Stream:
    """One viewer's place in a tier: an async iterator of frames it can decode, in order."""

    def __init__(self, tier: H264Tier) -> None:
        self.tier = tier
        self._last: int | None = None
        self._floor = tier.seq  # a joining viewer waits for a key frame newer than this
        self.drops = 0  # times this viewer fell behind and skipped to a key frame
        tier.want_key(urgent=True)

    def __aiter__(self) -> H264Stream:
        return self

    async def __anext__(self) -> Frame:
        tier = self.tier
        while True:
            if tier.source.closed:
                raise StopAsyncIteration
            frame = tier.next_after(self._last, self._floor)
            if frame is not None:
                self._last = frame.seq
                await trio.lowlevel.checkpoint()
                return Frame(
                    Codec.H264,
                    frame.data,
                    frame.width,
                    frame.height,
                    frame.pts_us,
                    frame.keyframe,
                    frame.seq,
                    frame.capture_us,
                )
            if self._last is not None and tier.behind(self._last):
                self.drops += 1
                self._floor, self._last = tier.seq, None
                tier.want_key(urgent=False)
                continue
            await tier.produce(tier.seq)
