"""The live screen: the current `Screen` value, change notification, encoding and frame pacing.

Theory of operation. The device replaces the screen value on every input; `LiveScreen.update`
bumps ``version`` only when the new value differs, and wakes everyone parked on the change
event. Nothing is rendered or encoded then: encoding happens when a reader asks, in a worker
thread, from the value current at that moment. So

- a viewer that is slower than the screen changes simply gets the newest picture next time it
  asks (latest frame wins; there is no queue to grow, not even a bounded one);
- no viewer, no encoding; several viewers at one size share one encoding (a small cache keyed
  by version and size);
- `FrameStream` paces itself: after sending at time t it sends nothing before
  t + 1/max_fps, and changes that land in between collapse into one frame.

``keyframe epoch`` counts `request_keyframe` calls: a stream that has not yet answered the
current epoch sends a frame even if the picture did not change. JPEG frames are all keyframes.

H.264 goes through `_shared.video`: one `H264Tier` (encoder) per output size and frame rate,
held while a viewer's iterator holds it (a weak map), shared by every viewer of that tier.

Cost per frame. The screen without its touch marks (``_Base``) is rendered once, and converted
to yuv420p once, when it changes. A frame whose only change is a touch mark (a moving
pointer, a tap's first frame) costs a copy of the cached planes with the few small boxes
around the marks redrawn and converted (`render.mark_boxes`, `Yuv420.patched`): no full
render and no full colour conversion, so most of a frame is x264's (bench/README.md).
"""

from __future__ import annotations

import math
import threading
import time
import weakref
from collections.abc import AsyncIterator, Callable
from typing import Final

import attrs
import trio
from PIL import Image

from .._errors import InvalidInputError
from .._shared.video import H264Stream, H264Tier, Yuv420, to_yuv420
from ..base import Codec, Frame
from .render import draw_marks, encode_jpeg, encode_png, mark_boxes, render
from .ui import Screen

__all__ = ["FrameStream", "LiveScreen"]

MAX_FPS_LIMIT: Final = 120.0
MIN_MAX_SIZE: Final = 16
_JPEG_CACHE: Final = 4


class _Base:
    """The screen without touch marks: its picture, and its yuv420p planes once asked for."""

    def __init__(self, screen: Screen) -> None:
        self.screen = screen
        self.rgb = render(screen)
        self._yuv: Yuv420 | None = None
        self._lock = threading.Lock()

    def yuv(self) -> Yuv420:
        with self._lock:  # two tiers' threads: one conversion
            if self._yuv is None:
                self._yuv = to_yuv420(self.rgb)
            return self._yuv


class LiveScreen:
    def __init__(self, screen: Screen, *, started_at: float) -> None:
        self._screen = screen
        self._version = 0
        self._key_epoch = 0
        self._changed = trio.Event()
        self._closed = False
        self.started_at = started_at
        self._png: tuple[int, bytes] | None = None
        self._base: _Base | None = None
        self._base_lock = threading.Lock()
        self._jpeg: dict[tuple[int, int | None], tuple[bytes, int, int, int]] = {}
        self._tiers: weakref.WeakValueDictionary[tuple[int | None, float], H264Tier] = (
            weakref.WeakValueDictionary()
        )

    @property
    def screen(self) -> Screen:
        return self._screen

    @property
    def version(self) -> int:
        return self._version

    @property
    def key_epoch(self) -> int:
        return self._key_epoch

    @property
    def closed(self) -> bool:
        return self._closed

    def update(self, screen: Screen) -> bool:
        """Make ``screen`` current; True if the picture changed."""
        if screen == self._screen:
            return False
        self._screen = screen
        self._version += 1
        self._jpeg.clear()
        self._wake()
        return True

    def request_keyframe(self) -> None:
        self._key_epoch += 1
        self._wake()

    def close(self) -> None:
        self._closed = True
        self._wake()

    async def wait_changed(self, version: int, key_epoch: int) -> None:
        """Return once the screen is past ``version``, a keyframe was asked, or it closed."""
        while self._version == version and self._key_epoch == key_epoch and not self._closed:
            await self._changed.wait()

    def snapshot(self) -> tuple[int, Callable[[], Yuv420]]:
        """(version, a function making that picture in yuv420p), for `H264Tier` (run in a
        thread)."""
        screen = self._screen
        return self._version, lambda: self._yuv(screen)

    def _base_of(self, screen: Screen) -> _Base:
        """The one-entry cache of the picture without touch marks (a full render is ~5x a JPEG
        encode at 800x1280; bench/README.md). Called from worker threads, hence the lock."""
        unmarked = attrs.evolve(screen, marks=()) if screen.marks else screen
        with self._base_lock:
            cached = self._base
        if cached is None or cached.screen != unmarked:
            cached = _Base(unmarked)
            with self._base_lock:
                self._base = cached
        return cached

    def _render(self, screen: Screen) -> Image.Image:
        """`render(screen)`, by drawing only the touch marks over the cached base picture
        (which is returned itself when there are none: callers never change it)."""
        base = self._base_of(screen)
        return draw_marks(base.rgb.copy(), screen) if screen.marks else base.rgb

    def _yuv(self, screen: Screen) -> Yuv420:
        """`to_yuv420(render(screen))`: the base's planes with each mark's box redrawn."""
        base = self._base_of(screen)
        if not screen.marks:
            return base.yuv()
        patches = []
        for box in mark_boxes(screen):
            patches.append((box[0], box[1], draw_marks(base.rgb.crop(box), screen, box[:2])))
        return base.yuv().patched(patches)

    async def png(self) -> bytes:
        version, screen = self._version, self._screen
        if self._png is not None and self._png[0] == version:
            await trio.lowlevel.checkpoint()
            return self._png[1]
        data = await trio.to_thread.run_sync(lambda: encode_png(self._render(screen)))
        if version == self._version:
            self._png = (version, data)
        return data

    async def jpeg(self, max_size: int | None) -> tuple[int, bytes, int, int, int]:
        """(version, data, width, height, capture wall clock µs) of the current picture."""
        version, screen = self._version, self._screen
        cached = self._jpeg.get((version, max_size))
        if cached is not None:
            await trio.lowlevel.checkpoint()
            return (version, *cached)
        captured = time.time_ns() // 1000
        data, width, height = await trio.to_thread.run_sync(
            lambda: encode_jpeg(self._render(screen), max_size)
        )
        if version == self._version:
            if len(self._jpeg) >= _JPEG_CACHE:
                self._jpeg.clear()
            self._jpeg[(version, max_size)] = (data, width, height, captured)
        return version, data, width, height, captured

    def frames(self, *, max_fps: float, max_size: int | None) -> FrameStream:
        return FrameStream(self, max_fps=max_fps, max_size=max_size)

    def h264_frames(self, *, max_fps: float, max_size: int | None) -> AsyncIterator[Frame]:
        """H.264 frames from the tier of (size, fps), made on first use, shared after."""
        _check(max_fps, max_size)
        key = (max_size, max_fps)
        tier = self._tiers.get(key)
        if tier is None:
            tier = H264Tier(self, max_size=max_size, max_fps=max_fps)
            self._tiers[key] = tier
        return H264Stream(tier)

    def _wake(self) -> None:
        self._changed.set()
        self._changed = trio.Event()


def _check(max_fps: float, max_size: int | None) -> None:
    if not (math.isfinite(max_fps) and 0 < max_fps <= MAX_FPS_LIMIT):
        raise InvalidInputError(f"max_fps must be in (0, {MAX_FPS_LIMIT:g}]: {max_fps!r}")
    if max_size is not None and max_size < MIN_MAX_SIZE:
        raise InvalidInputError(f"max_size must be at least {MIN_MAX_SIZE}: {max_size!r}")


class FrameStream:
    """One viewer's frames: an async iterator that ends when the device closes."""

    def __init__(self, live: LiveScreen, *, max_fps: float, max_size: int | None) -> None:
        _check(max_fps, max_size)
        self._live = live
        self._interval = 1.0 / max_fps
        self._max_size = max_size
        self._sent_version: int | None = None
        self._sent_epoch = live.key_epoch
        self._not_before = -math.inf  # trio time before which the next frame may not go out
        self._seq = 0

    def __aiter__(self) -> FrameStream:
        return self

    async def __anext__(self) -> Frame:
        live = self._live
        if self._sent_version is not None:
            await live.wait_changed(self._sent_version, self._sent_epoch)
            await trio.sleep_until(self._not_before)
        if live.closed:
            raise StopAsyncIteration
        epoch = live.key_epoch
        version, data, width, height, captured = await live.jpeg(self._max_size)
        now = trio.current_time()
        self._sent_version, self._sent_epoch = version, epoch
        self._not_before = now + self._interval
        frame = Frame(
            codec=Codec.JPEG,
            data=data,
            width=width,
            height=height,
            pts_us=round((now - live.started_at) * 1_000_000),
            keyframe=True,
            seq=self._seq,
            capture_us=captured,
        )
        self._seq += 1
        return frame
