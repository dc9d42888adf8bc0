"""H.264 frames of the virtual device (drivers/_shared/video.py): decodable with PyAV, a key
frame first, then only on change; one encoder per tier shared by its viewers; a viewer that
stops pulling costs no memory and comes back at a key frame."""

from __future__ import annotations

import gc
import io
from collections.abc import AsyncIterator

import av
import trio
import trio.testing
from PIL import Image, ImageChops, ImageStat

from devyard.hostd.drivers import Codec, Frame, TouchAction
from devyard.hostd.drivers._shared.video import HISTORY, H264Tier
from devyard.hostd.drivers.virtual import VirtualDevice


class Decoder:
    """PyAV's H.264 decoder, fed one access unit at a time, as the viewer page feeds WebCodecs."""

    def __init__(self) -> None:
        self.context = av.CodecContext.create("h264", "r")

    def decode(self, frame: Frame) -> Image.Image:
        pictures = self.context.decode(av.Packet(frame.data))
        assert len(pictures) == 1, pictures  # zerolatency, no B-frames: one in, one out
        picture = pictures[0]
        assert isinstance(picture, av.VideoFrame)
        image: Image.Image = picture.to_image()  # type: ignore[no-untyped-call]
        return image


def _nal_types(data: bytes) -> list[int]:
    return [data[i + 3] & 31 for i in range(len(data) - 3) if data[i : i + 3] == b"\0\0\1"]


def _difference(a: Image.Image, b: Image.Image) -> float:
    """Mean absolute difference per channel, 0-255."""
    diff = ImageChops.difference(a.convert("RGB"), b.convert("RGB"))
    return sum(ImageStat.Stat(diff).mean) / 3


def _tiers(device: VirtualDevice) -> list[H264Tier]:
    gc.collect()
    return list(device._live._tiers.values())


async def test_key_frame_first_then_frames_only_on_change(
    android: VirtualDevice, autojump_clock: trio.testing.MockClock
) -> None:
    frames = android.frames(codec=Codec.H264, max_fps=30)
    decoder = Decoder()
    first = await anext(frames)
    assert (first.codec, first.keyframe, first.seq) == (Codec.H264, True, 0)
    assert (first.width, first.height) == (540, 1200)
    assert first.capture_us > 0
    assert 7 in _nal_types(first.data) and 8 in _nal_types(first.data)  # SPS and PPS in-band
    assert first.data[5] == 66  # profile_idc of the SPS: Baseline
    picture = decoder.decode(first)
    assert picture.size == (540, 1200)
    screenshot = Image.open(io.BytesIO(await android.screenshot()))
    assert _difference(picture, screenshot) < 3

    with trio.move_on_after(10) as idle:
        await anext(frames)
    assert idle.cancelled_caught  # a static screen costs nothing after its key frame

    await android.touch(0, TouchAction.DOWN, 0.5, 0.5)
    changed = await anext(frames)
    assert (changed.keyframe, changed.seq) == (False, 1)
    assert len(changed.data) < len(first.data) / 4
    picture = decoder.decode(changed)
    screenshot = Image.open(io.BytesIO(await android.screenshot()))
    assert _difference(picture, screenshot) < 3


async def _frames_of(device: VirtualDevice) -> AsyncIterator[Frame]:
    return device.frames(codec=Codec.H264, max_fps=120)


async def test_one_encoder_for_all_viewers_and_a_stalled_viewer_resumes_at_a_key_frame(
    android: VirtualDevice,
) -> None:
    fast, slow = await _frames_of(android), await _frames_of(android)
    (tier,) = _tiers(android)  # one tier (size, fps) for both viewers
    fast_decoder, slow_decoder = Decoder(), Decoder()
    with trio.fail_after(20):
        first_fast, first_slow = await anext(fast), await anext(slow)
        assert first_fast == first_slow and first_fast.keyframe  # the same encoding
        fast_decoder.decode(first_fast)
        slow_decoder.decode(first_slow)
        await android.touch(0, TouchAction.DOWN, 0.1, 0.1)
        seqs = []
        for step in range(3 * HISTORY):  # the slow viewer pulls nothing meanwhile
            await android.touch(0, TouchAction.MOVE, 0.1 + step / 40, 0.2)
            frame = await anext(fast)
            fast_decoder.decode(frame)
            seqs.append(frame.seq)
            assert len(tier._history) <= HISTORY  # what the stalled viewer costs: nothing more
        assert seqs == list(range(1, len(seqs) + 1))  # the puller misses nothing
        assert tier.encoded == len(seqs) + 1  # one encoding per picture, not per viewer

        # The stalled viewer comes back: the frames it missed are gone, so it gets a key
        # frame (asked for now, at most MIN_KEY_GAP_S after the last one), and decodes on.
        resumed = await anext(slow)
        assert resumed.keyframe and resumed.seq > seqs[-1]
        slow_decoder.decode(resumed)
        await android.touch(0, TouchAction.MOVE, 0.9, 0.9)
        after = await anext(slow)
        assert after.seq == resumed.seq + 1 and not after.keyframe
        slow_decoder.decode(after)
        # the fast viewer went on through the same key frame
        for _ in range(2):
            fast_decoder.decode(await anext(fast))

    del fast, slow, tier
    assert _tiers(android) == []  # the encoder goes with its last viewer
