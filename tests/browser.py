"""Debian's headless Chromium driven by Playwright from trio tests.

Playwright's async API needs asyncio and these tests run under trio, so the browser lives on
an asyncio loop in its own thread (`BrowserThread`) and the trio test awaits each Playwright
call there while the server and the host daemon keep running in trio. Debian's
``/usr/bin/chromium`` is used as is: no ``playwright install``.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
import trio

try:
    from playwright.async_api import Browser, async_playwright
except ImportError:  # pragma: no cover - depends on the environment
    HAVE_PLAYWRIGHT = False
else:
    HAVE_PLAYWRIGHT = True

CHROMIUM = Path("/usr/bin/chromium")
T = TypeVar("T")

#: Marks for a module of browser tests: skipped, with the reason, where they cannot run.
NEEDS_CHROMIUM = [
    pytest.mark.skipif(
        not HAVE_PLAYWRIGHT, reason="playwright is not installed (pip install playwright)"
    ),
    pytest.mark.skipif(
        not CHROMIUM.exists(), reason=f"{CHROMIUM} is missing (apt-get install chromium)"
    ),
]


class BrowserThread:
    """One headless Chromium, owned by an asyncio loop in a thread of its own."""

    #: Why Chromium did not start, set by the thread. A class-level default rather than an
    #: assignment in __init__, which mypy would take to narrow it to None for good there.
    _error: BaseException | None = None

    def __init__(self, *args: str) -> None:
        self._args = args  # Chromium flags besides the ones every test needs
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self.browser: Browser | None = None
        self._thread = threading.Thread(target=self._main, name="playwright", daemon=True)
        self._thread.start()
        if not self._ready.wait(60):
            raise RuntimeError("Chromium did not start within 60 s")
        if self._error is not None:
            self.close()
            raise RuntimeError(f"Chromium did not start: {self._error!r}") from self._error

    def _main(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as exc:  # reported by the constructor, not as a thread exception
            self._error = self._error or exc
            self._ready.set()

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        async with async_playwright() as playwright:
            self.browser = await playwright.chromium.launch(
                executable_path=str(CHROMIUM),
                headless=True,
                # CI runs as root, where Chromium's sandbox refuses
                args=["--no-sandbox", *self._args],
            )
            try:
                self._ready.set()
                await self._stop.wait()
            finally:
                await self.browser.close()

    async def call(self, fn: Callable[..., Awaitable[T]], *args: Any, **kwargs: Any) -> T:
        """``await fn(*args, **kwargs)`` on the browser's loop, from trio."""

        async def job() -> T:
            return await fn(*args, **kwargs)

        assert self._loop is not None
        future = asyncio.run_coroutine_threadsafe(job(), self._loop)
        done = trio.Event()
        token = trio.lowlevel.current_trio_token()

        def wake(_: object) -> None:
            # (after a cancellation the trio run may be over by the time this runs)
            with contextlib.suppress(trio.RunFinishedError):
                token.run_sync_soon(done.set)

        future.add_done_callback(wake)
        try:
            await done.wait()
        except trio.Cancelled:
            future.cancel()
            raise
        return future.result()

    def close(self) -> None:
        if self._loop is not None and self._stop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)
