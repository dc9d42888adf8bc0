"""The device log: a bounded ring buffer that readers can follow."""

from __future__ import annotations

import trio
import trio.testing

from devyard.hostd.drivers import LogLevel
from devyard.hostd.drivers._shared.logbuffer import LogBuffer
from devyard.hostd.drivers.virtual import VirtualDevice


async def test_device_logs_boot_launches_and_input_without_typed_text(
    android: VirtualDevice,
) -> None:
    await android.launch("com.android.settings")
    await android.text("hunter2")
    lines = [f"{e.level}/{e.tag}: {e.message}" for e in android.logs()]
    assert lines[0] == "I/devyard: boot completed: Virtual Pixel, Android 15"
    assert "I/ActivityManager: Start proc com.android.settings" in lines
    assert "D/Input: text (7 characters)" in lines
    assert not any("hunter2" in line for line in lines)  # typed text may be a password
    seqs = [e.seq for e in android.logs()]
    assert seqs == list(range(1, len(seqs) + 1))
    assert android.logs(after=seqs[-1]) == []


async def test_ring_buffer_keeps_the_newest_entries() -> None:
    buffer = LogBuffer(capacity=3)
    for i in range(5):
        buffer.append(LogLevel.INFO, "t", str(i))
    assert [e.message for e in buffer.since(0)] == ["2", "3", "4"]
    assert [e.message for e in buffer.since(3)] == ["3", "4"]  # seq 4 and 5
    assert buffer.last_seq == 5


async def test_wait_logs_wakes_on_the_next_entry(
    android: VirtualDevice, autojump_clock: trio.testing.MockClock
) -> None:
    last = android.logs()[-1].seq
    got = []

    async def follower() -> None:
        got.extend(await android.wait_logs(after=last))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(follower)
        await trio.testing.wait_all_tasks_blocked()
        assert got == []
        await trio.sleep(3)
        android.log(LogLevel.WARN, "adbd", "shell: echo hi")
    assert [(e.level, e.tag, e.message) for e in got] == [(LogLevel.WARN, "adbd", "shell: echo hi")]
    assert got[0].time >= 3


async def test_wait_logs_ends_when_the_device_closes(
    android: VirtualDevice, autojump_clock: trio.testing.MockClock
) -> None:
    last = android.logs()[-1].seq
    async with trio.open_nursery() as nursery:

        async def follower() -> None:
            try:
                await android.wait_logs(after=last)
            except trio.ClosedResourceError:
                return
            raise AssertionError("wait_logs returned on a closed device")

        nursery.start_soon(follower)
        await trio.testing.wait_all_tasks_blocked()
        await android.aclose()
