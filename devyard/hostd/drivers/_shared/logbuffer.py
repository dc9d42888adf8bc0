"""A bounded ring buffer of device log lines that readers can wait on.

Entries get consecutive ``seq`` numbers from 1; the oldest fall off once ``capacity`` is
reached, so a reader that asks for ``after=n`` may find a gap (as ``logcat`` readers do).
Waiters park on one `trio.Event` that is replaced after each append: a reader that saw no
entry waits for the next one without polling.
"""

from __future__ import annotations

import collections
from typing import Final

import trio

from ..base import LogEntry, LogLevel

__all__ = ["DEFAULT_CAPACITY", "LogBuffer"]

DEFAULT_CAPACITY: Final = 2000


class LogBuffer:
    def __init__(self, *, capacity: int = DEFAULT_CAPACITY, started_at: float = 0.0) -> None:
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self._entries: collections.deque[LogEntry] = collections.deque(maxlen=capacity)
        self._seq = 0
        self._started_at = started_at
        self._appended = trio.Event()
        self._closed = False

    @property
    def last_seq(self) -> int:
        return self._seq

    def append(self, level: LogLevel, tag: str, message: str) -> LogEntry:
        self._seq += 1
        entry = LogEntry(self._seq, trio.current_time() - self._started_at, level, tag, message)
        self._entries.append(entry)
        self._wake()
        return entry

    def since(self, after: int = 0) -> list[LogEntry]:
        """The retained entries with ``seq > after``, oldest first."""
        if not self._entries or after >= self._seq:
            return []
        first = self._entries[0].seq
        return list(self._entries)[max(0, after + 1 - first) :]

    async def wait(self, after: int = 0) -> list[LogEntry]:
        """Entries after ``after``, waiting for one if there are none yet."""
        while True:
            if self._closed:
                raise trio.ClosedResourceError("the device is closed")
            entries = self.since(after)
            if entries:
                await trio.lowlevel.checkpoint()
                return entries
            await self._appended.wait()

    def close(self) -> None:
        self._closed = True
        self._wake()

    def _wake(self) -> None:
        self._appended.set()
        self._appended = trio.Event()
