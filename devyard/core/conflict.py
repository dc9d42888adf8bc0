"""ConflictDetector: trio's BusyResourceError for a stream direction used by two tasks at once."""

from __future__ import annotations

import trio

__all__ = ["ConflictDetector"]


class ConflictDetector:
    """Raise BusyResourceError when two tasks use one direction of a stream at once."""

    __slots__ = ("_held", "_message")

    def __init__(self, message: str) -> None:
        self._message = message
        self._held = False

    def __enter__(self) -> None:
        if self._held:
            raise trio.BusyResourceError(self._message)
        self._held = True

    def __exit__(self, *exc: object) -> None:
        self._held = False
