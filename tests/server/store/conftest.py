from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest

from devyard.server.store import Store, open_store


class FakeClock:
    """A clock that moves one millisecond per reading: deterministic, strictly increasing
    timestamps."""

    def __init__(self) -> None:
        self.now = datetime(2030, 1, 2, 3, 4, 5, 123456, tzinfo=UTC)

    def __call__(self) -> datetime:
        self.now += timedelta(milliseconds=1)
        return self.now


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
async def store(database_target: str, clock: FakeClock) -> AsyncIterator[Store]:
    async with open_store(database_target, clock=clock) as opened:
        yield opened
