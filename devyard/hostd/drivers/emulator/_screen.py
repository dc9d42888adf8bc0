"""The emulator's screen: screencap, the frame iterator and keyframes."""

from __future__ import annotations

import hashlib
import io
import math
from collections.abc import AsyncIterator
from typing import Final

import trio
from PIL import Image

from .._errors import (
    InvalidInputError,
    UnsupportedOperationError,
)
from ..base import (
    DEFAULT_MAX_FPS,
    Codec,
    Frame,
)
from ..uitree import UiNode, UiTreeError, parse_uiautomator_xml
from ._base import DeviceBase
from .adb import AdbError
from .parse import (
    png_size,
)

__all__ = ["ScreenMixin"]

_IDLE_FRAME_POLL_S: Final = 0.1  # unchanged screen: screencap at most this often
_JPEG_QUALITY: Final = 80
_DUMP: Final = "/sdcard/window_dump.xml"  # where `uiautomator dump` writes by default


def _encode_jpeg(png: bytes, max_size: int | None) -> tuple[bytes, int, int]:
    with Image.open(io.BytesIO(png)) as image:
        picture = image.convert("RGB")
    if max_size is not None and max(picture.size) > max_size:
        picture.thumbnail((max_size, max_size))
    out = io.BytesIO()
    picture.save(out, "JPEG", quality=_JPEG_QUALITY)
    return out.getvalue(), picture.width, picture.height


class ScreenMixin(DeviceBase):
    async def screenshot(self) -> bytes:
        self._check_open()
        result = await self._adb.run("exec-out", "screencap -p", serial=self.serial)
        png = result.stdout
        try:
            self._size = png_size(png)
        except ValueError:
            raise AdbError(f"screencap gave no PNG: {result.text[:200]!r}") from None
        return png

    async def ui_tree(self) -> UiNode:
        """``uiautomator dump`` into a file, then read it (``/dev/tty`` does not print on
        every Android release), parsed into the shared tree (`uitree.UiTreeDevice`)."""
        self._check_open()
        result = await self._shell(f"uiautomator dump {_DUMP} >/dev/null && cat {_DUMP}")
        try:
            return parse_uiautomator_xml(result.stdout)
        except UiTreeError as exc:
            raise AdbError(f"uiautomator dump: {exc}") from None

    def frames(
        self,
        *,
        codec: Codec = Codec.JPEG,
        max_fps: float = DEFAULT_MAX_FPS,
        max_size: int | None = None,
    ) -> AsyncIterator[Frame]:
        self._check_open()
        if codec is not Codec.JPEG:
            raise UnsupportedOperationError(f"the android-emulator driver sends jpeg, not {codec}")
        if not (math.isfinite(max_fps) and max_fps > 0):
            raise InvalidInputError(f"max_fps must be positive: {max_fps}")
        if max_size is not None and max_size < 1:
            raise InvalidInputError(f"max_size must be positive: {max_size}")
        return self._frames(max_fps, max_size)

    async def _frames(self, max_fps: float, max_size: int | None) -> AsyncIterator[Frame]:
        """Pull-paced: a screencap only when the viewer wants the next frame, so the newest
        picture always wins and nothing queues. Unchanged pictures are not sent."""
        spacing = 1.0 / max_fps
        seq, last_digest, seen_generation = 0, b"", -1
        while True:
            self._check_open()
            captured_at = trio.current_time()
            png = await self.screenshot()
            digest = hashlib.blake2b(png, digest_size=16).digest()
            forced = seen_generation != self._keyframe_generation
            if forced or digest != last_digest:
                seen_generation, last_digest = self._keyframe_generation, digest
                jpeg, width, height = await trio.to_thread.run_sync(_encode_jpeg, png, max_size)
                pts = int((captured_at - self._started_at) * 1_000_000)
                yield Frame(Codec.JPEG, jpeg, width, height, pts, True, seq)
                seq += 1
                await trio.sleep_until(captured_at + spacing)
            else:
                await trio.sleep_until(captured_at + spacing)
                with trio.move_on_at(captured_at + max(spacing, _IDLE_FRAME_POLL_S)):
                    await self._keyframe_requested.wait()

    def request_keyframe(self) -> None:
        self._check_open()
        self._keyframe_generation += 1
        self._keyframe_requested.set()
        self._keyframe_requested = trio.Event()
