"""frames(): a frame after a change, none while unchanged, paced, latest picture wins.

Time is trio's autojump clock: waiting "ten seconds" for a frame that must not come costs
nothing, and pacing is measured on the clock the code under test uses.
"""

from __future__ import annotations

import io
from collections.abc import AsyncIterator

import pytest
import trio
import trio.testing
from PIL import Image

from devyard.hostd.drivers import Codec, Frame, InvalidInputError
from devyard.hostd.drivers.virtual import VirtualDevice


async def next_frame(frames: AsyncIterator[Frame]) -> Frame:
    return await anext(frames)


async def test_first_frame_at_once_then_only_after_a_change(
    android: VirtualDevice, autojump_clock: trio.testing.MockClock
) -> None:
    frames = android.frames(max_fps=10)
    start = trio.current_time()
    first = await next_frame(frames)
    assert trio.current_time() == start  # no waiting for the first frame
    assert (first.codec, first.seq, first.keyframe) == (Codec.JPEG, 0, True)
    assert (first.width, first.height) == (540, 1200)
    assert Image.open(io.BytesIO(first.data)).format == "JPEG"

    with trio.move_on_after(10) as idle:
        await next_frame(frames)
    assert idle.cancelled_caught  # unchanged screen: nothing to send

    await android.text("x")
    changed = await next_frame(frames)
    assert changed.seq == 1 and changed.data != first.data
    assert changed.pts_us > first.pts_us


async def test_pacing_and_coalescing_at_max_fps(
    android: VirtualDevice, autojump_clock: trio.testing.MockClock
) -> None:
    frames = android.frames(max_fps=5)
    first = await next_frame(frames)
    # Three changes in quick succession become one frame, no sooner than 1/5 s later.
    for text in "abc":
        await android.text(text)
    frame = await next_frame(frames)
    assert frame.pts_us - first.pts_us >= 200_000
    assert android._live.screen.field_text() == "abc"
    reference = await anext(android.frames())  # a fresh stream shows the current picture
    assert frame.data == reference.data
    with trio.move_on_after(10) as idle:
        await next_frame(frames)
    assert idle.cancelled_caught


async def test_latest_frame_wins_for_a_slow_consumer(
    android: VirtualDevice, autojump_clock: trio.testing.MockClock
) -> None:
    """A viewer that does not ask while the screen changes 50 times gets one frame, of the
    newest picture, when it asks again; nothing was queued for it meanwhile."""
    frames = android.frames(max_fps=30)
    await next_frame(frames)
    for i in range(50):
        await android.text(str(i % 10))
        await trio.sleep(0.2)
    caught_up = await next_frame(frames)
    assert caught_up.seq == 1
    fresh = await anext(android.frames())
    assert caught_up.data == fresh.data  # the newest picture, not the first change
    with trio.move_on_after(10) as idle:
        await next_frame(frames)
    assert idle.cancelled_caught  # and no backlog of the other 49


async def test_two_viewers_at_different_speeds_see_the_same_final_picture(
    android: VirtualDevice, autojump_clock: trio.testing.MockClock
) -> None:
    fast, slow = android.frames(max_fps=30), android.frames(max_fps=1)
    await next_frame(fast)
    await next_frame(slow)
    await android.text("hello")
    fast_frame = await next_frame(fast)
    await android.text(" world")
    fast_frame = await next_frame(fast)
    slow_frame = await next_frame(slow)
    assert slow_frame.seq == 1 and fast_frame.seq == 2
    assert slow_frame.data == fast_frame.data  # one encoding shared through the cache


async def test_request_keyframe_resends_an_unchanged_picture(
    android: VirtualDevice, autojump_clock: trio.testing.MockClock
) -> None:
    frames = android.frames()
    first = await next_frame(frames)
    android.request_keyframe()
    again = await next_frame(frames)
    assert again.keyframe and again.data == first.data and again.seq == 1


async def test_max_size_scales_the_longer_side(
    android: VirtualDevice, autojump_clock: trio.testing.MockClock
) -> None:
    frame = await anext(android.frames(max_size=600))
    assert (frame.width, frame.height) == (270, 600)
    assert Image.open(io.BytesIO(frame.data)).size == (270, 600)


async def test_frames_end_when_the_device_closes(
    android: VirtualDevice, autojump_clock: trio.testing.MockClock
) -> None:
    frames = android.frames()
    await next_frame(frames)
    got: list[Frame] = []

    async def viewer() -> None:
        async for frame in frames:
            got.append(frame)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(viewer)
        await trio.sleep(1)
        await android.aclose()
    assert got == []


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"max_fps": 0}, InvalidInputError),
        ({"max_fps": float("inf")}, InvalidInputError),
        ({"max_size": 4}, InvalidInputError),
        ({"codec": Codec.H264, "max_fps": 0}, InvalidInputError),
        ({"codec": Codec.H264, "max_size": 4}, InvalidInputError),
    ],
)
async def test_bad_frame_options(
    android: VirtualDevice, kwargs: dict[str, object], error: type[Exception]
) -> None:
    with pytest.raises(error):
        android.frames(**kwargs)  # type: ignore[arg-type]
