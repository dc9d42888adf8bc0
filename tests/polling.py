"""Waiting for a side effect that signals nothing: state owned by another task or process."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import trio


async def eventually(
    condition: Callable[[], bool], seconds: float = 10, poll: float = 0.01
) -> None:
    """Return once `condition()` is true; fail the test after `seconds`."""
    with trio.fail_after(seconds):
        while not condition():  # noqa: ASYNC110 - polling by design
            await trio.sleep(poll)


async def until(condition: Callable[[], Awaitable[bool]], seconds: float = 15) -> None:
    """Return once the async *condition* holds; fail the test after *seconds*."""
    with trio.fail_after(seconds):
        while not await condition():  # noqa: ASYNC110 - polling an HTTP answer
            await trio.sleep(0.02)
