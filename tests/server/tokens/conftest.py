"""Fixtures of the scoped-token and analytics tests: the control API's fixtures (both backends,
in-process ASGI client, callers of each role) over a store whose clock the test sets, so token
expiry and usage histories have exact, hand-computable times."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest

from devyard.server.store import Store, open_store
from devyard.server.store.base import Instance, InstanceState, Platform, TerminationReason
from tests.server.api.conftest import (  # fixtures, used by name
    Caller,
    Callers,
    app,
    callers,
    client,
    config,
    manual_clock,
)

__all__ = [
    "Caller",
    "Callers",
    "SetClock",
    "app",
    "callers",
    "client",
    "config",
    "manual_clock",
    "run_instance",
]


class SetClock:
    """The store's clock: stands still until the test moves it."""

    def __init__(self) -> None:
        self.now = datetime(2030, 3, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def set(self, text: str) -> None:
        self.now = datetime.fromisoformat(text)

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


@pytest.fixture
def store_clock() -> SetClock:
    return SetClock()


@pytest.fixture
async def store(database_target: str, store_clock: SetClock) -> AsyncIterator[Store]:
    async with open_store(database_target, clock=store_clock) as opened:
        yield opened


async def run_instance(
    store: Store,
    clock: SetClock,
    org_id: str,
    *,
    platform: Platform = Platform.IOS,
    labels: dict[str, str] | None = None,
    created: str,
    ready: str | None = None,
    terminated: str | None = None,
) -> Instance:
    """An instance created, made ready and terminated at these times (RFC 3339), through the
    store's own transitions; ``ready=None`` fails it while creating."""
    clock.set(created)
    instance = await store.create_instance(
        org_id=org_id,
        platform=platform,
        region="local",
        labels=labels or {},
        spec={},
        display_name=None,
        token=f"dyi_{created}{platform}",
        stream_token=f"dys_{created}{platform}",
    )
    if ready is not None:
        await store.transition_instance(
            instance.id,
            InstanceState.ASSIGNED,
            expected=frozenset({InstanceState.CREATING}),
            host_id="h1",
        )
        clock.set(ready)
        instance = await store.transition_instance(
            instance.id, InstanceState.READY, expected=frozenset({InstanceState.ASSIGNED})
        )
    if terminated is not None:
        clock.set(terminated)
        reason = TerminationReason.USER_REQUESTED if ready else TerminationReason.ERROR
        instance = await store.transition_instance(
            instance.id,
            InstanceState.TERMINATED,
            expected=frozenset(InstanceState) - {InstanceState.TERMINATED},
            termination_reason=reason,
            error_message=None if ready else "no host accepted the order",
        )
    return instance
