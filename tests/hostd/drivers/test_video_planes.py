"""The live view's pictures as yuv420p planes (drivers/_shared/video.py `Yuv420`, the virtual
device's `LiveScreen`): a frame whose only change is a touch mark is the cached planes with the
marks' boxes redrawn, and that must be exactly what converting the whole rendered screen gives;
the conversion is the one decoders undo (swscale's BT.601 limited range); scaled tiers and
padded plane rows decode to the right picture."""

from __future__ import annotations

import io

import attrs
import av
import pytest
from PIL import Image, ImageChops, ImageStat

from devyard.hostd.drivers import Codec, Platform, TouchAction
from devyard.hostd.drivers._shared.video import H264Encoder, Yuv420, to_yuv420
from devyard.hostd.drivers.virtual import VirtualDevice
from devyard.hostd.drivers.virtual.frames import LiveScreen
from devyard.hostd.drivers.virtual.models import MODELS
from devyard.hostd.drivers.virtual.render import render
from devyard.hostd.drivers.virtual.ui import Screen, TouchMark, UiApp

from .conftest import OpenDevice


def _launcher(platform: Platform, model: str) -> Screen:
    profile = MODELS[platform][model]
    return Screen(profile, apps=tuple(UiApp(a.app_id, a.label) for a in profile.system_apps))


def _planes(picture: Yuv420) -> tuple[bytes, bytes, bytes]:
    return picture.y.tobytes(), picture.u.tobytes(), picture.v.tobytes()


def _mean_difference(a: Image.Image, b: Image.Image) -> float:
    return sum(ImageStat.Stat(ImageChops.difference(a, b)).mean) / len(a.getbands())


def _plane(plane: av.video.plane.VideoPlane, width: int, height: int) -> Image.Image:
    """A decoded plane without its rows' padding."""
    data, line = bytes(plane), plane.line_size
    return Image.frombytes(
        "L", (width, height), b"".join(data[r * line :][:width] for r in range(height))
    )


@pytest.mark.parametrize(
    ("platform", "model"),
    [(Platform.ANDROID, "pixel-tablet"), (Platform.ANDROID, "pixel"), (Platform.IOS, "iphone")],
)
def test_marks_patched_over_cached_planes_equal_a_full_conversion(
    platform: Platform, model: str
) -> None:
    screen = _launcher(platform, model)
    width, height = screen.size
    live = LiveScreen(screen, started_at=0.0)
    cases = [
        [(0, 100, 200, True)],
        [(0, 0, 0, True)],  # clipped at the top left
        [(0, width - 1, height - 1, False)],  # at the (odd, for the iPhone) far corner
        [(0, 3, 7, True), (1, 20, 15, True)],  # overlapping boxes
        [(0, width // 2, height // 2, True), (1, width // 2 + 11, height // 2 + 5, False)],
    ]
    for marks in cases:
        marked = attrs.evolve(
            screen, marks=tuple(TouchMark(p, x, y, x, y, pressed=down) for p, x, y, down in marks)
        )
        assert live.update(marked)
        picture = live.snapshot()[1]()
        assert picture.size == (width - width % 2, height - height % 2)
        assert _planes(picture) == _planes(to_yuv420(render(marked))), marks
    # the base's planes are shared, never written: the unmarked screen is still itself
    assert live.update(screen)
    assert _planes(live.snapshot()[1]()) == _planes(to_yuv420(render(screen)))


def test_the_conversion_is_what_swscale_made_of_rgb() -> None:
    """Decoders undo BT.601 limited range (what the encoder got from swscale before): luma
    equal within rounding, chroma within its different filtering at edges."""
    picture = render(_launcher(Platform.ANDROID, "pixel"))
    ours = to_yuv420(picture)
    frame = av.VideoFrame.from_image(picture).reformat(format="yuv420p")  # type: ignore[no-untyped-call]
    theirs = [
        _plane(p, *mine.size)
        for p, mine in zip(frame.planes, (ours.y, ours.u, ours.v), strict=True)
    ]
    assert sum(ImageChops.difference(ours.y, theirs[0]).histogram()[2:]) == 0  # at most 1
    for mine, other in zip((ours.u, ours.v), theirs[1:], strict=True):
        assert _mean_difference(mine, other) < 0.5


def test_patches_must_be_even() -> None:
    planes = to_yuv420(Image.new("RGB", (64, 64), (10, 200, 30)))
    with pytest.raises(ValueError, match="even"):
        planes.patched([(1, 0, Image.new("RGB", (4, 4)))])
    with pytest.raises(ValueError, match="even"):
        planes.patched([(0, 0, Image.new("RGB", (3, 4)))])


def test_padded_plane_rows_encode_to_the_picture() -> None:
    """392 wide: PyAV pads the rows (400, 208), which the copy into the frame must skip."""
    picture = render(_launcher(Platform.IOS, "iphone")).crop((0, 0, 392, 852))
    planes = to_yuv420(picture)
    encoder = H264Encoder(392, 852)
    data, key = encoder.encode(planes, 0, True)
    assert key
    (decoded,) = av.CodecContext.create("h264", "r").decode(av.Packet(data))
    assert isinstance(decoded, av.VideoFrame)
    image = decoded.to_image()  # type: ignore[no-untyped-call]
    assert image.size == (392, 852)
    assert _mean_difference(image.convert("RGB"), picture) < 3


async def test_a_scaled_tier_decodes_to_the_scaled_screen(open_dev: OpenDevice) -> None:
    device: VirtualDevice
    async with open_dev(Platform.ANDROID, model="pixel-tablet") as device:
        await device.touch(0, TouchAction.DOWN, 0.3, 0.4)  # a mark: the patched path
        frames = device.frames(codec=Codec.H264, max_fps=30, max_size=640)
        frame = await anext(frames)
        assert (frame.width, frame.height) == (400, 640)
        (decoded,) = av.CodecContext.create("h264", "r").decode(av.Packet(frame.data))
        assert isinstance(decoded, av.VideoFrame)
        image = decoded.to_image()  # type: ignore[no-untyped-call]
        screenshot = Image.open(io.BytesIO(await device.screenshot())).convert("RGB")
        expected = screenshot.resize((400, 640), Image.Resampling.BILINEAR)
        assert _mean_difference(image.convert("RGB"), expected) < 3
