"""Session pairs over in-memory transports, for the core's deterministic tests."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import trio
import trio.testing

from devyard.core import DEFAULT_CONFIG, Session, SessionConfig, open_session

PairMaker = Callable[[], tuple[trio.abc.Stream, trio.abc.Stream]]


@asynccontextmanager
async def session_pair(
    config: SessionConfig = DEFAULT_CONFIG,
    make_pair: PairMaker = trio.testing.memory_stream_pair,
    server_config: SessionConfig | None = None,
) -> AsyncIterator[tuple[Session, Session]]:
    """A client and a server session joined by `make_pair()`'s two ends."""
    a, b = make_pair()
    async with (
        open_session(a, client=True, config=config) as client,
        open_session(b, client=False, config=server_config or config) as server,
    ):
        yield client, server
