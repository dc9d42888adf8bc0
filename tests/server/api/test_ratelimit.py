"""The per-key token bucket: pure tests with a manual clock, then the 429 it causes."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from quart.typing import TestClientProtocol as Client

from devyard.server.api.ratelimit import KeyedRateLimiter
from devyard.server.config import RateLimitConfig, ServerConfig

from .conftest import Callers, ManualClock, assert_api_error


def _limiter(
    rate: float = 2.0, burst: int = 3, max_keys: int = 100
) -> tuple[KeyedRateLimiter, list[float]]:
    now = [0.0]
    return KeyedRateLimiter(rate=rate, burst=burst, clock=lambda: now[0], max_keys=max_keys), now


def test_a_burst_then_one_token_per_interval() -> None:
    limiter, now = _limiter(rate=2.0, burst=3)
    assert [limiter.acquire("k") for _ in range(3)] == [0.0, 0.0, 0.0]
    assert limiter.acquire("k") == pytest.approx(0.5)
    now[0] = 0.5
    assert limiter.acquire("k") == 0.0
    assert limiter.acquire("k") == pytest.approx(0.5)


def test_keys_have_separate_buckets() -> None:
    limiter, _ = _limiter(burst=1)
    assert limiter.acquire("a") == 0.0
    assert limiter.acquire("a") > 0
    assert limiter.acquire("b") == 0.0


def test_refill_stops_at_the_burst() -> None:
    limiter, now = _limiter(rate=2.0, burst=3)
    limiter.acquire("k")
    now[0] = 1000.0
    assert [limiter.acquire("k") for _ in range(3)] == [0.0, 0.0, 0.0]
    assert limiter.acquire("k") > 0


def test_the_table_of_buckets_is_bounded() -> None:
    limiter, _ = _limiter(burst=1, max_keys=2)
    for key in ("a", "b", "c", "d"):
        limiter.acquire(key)
    assert limiter.statistics() == {"keys": 2, "max_keys": 2}


@pytest.mark.parametrize(("rate", "burst"), [(0.0, 1), (-1.0, 1), (1.0, 0)])
def test_nonsense_limits_are_refused(rate: float, burst: int) -> None:
    with pytest.raises(ValueError):
        KeyedRateLimiter(rate=rate, burst=burst, clock=lambda: 0.0)


@given(
    rate=st.floats(min_value=0.1, max_value=100),
    burst=st.integers(min_value=1, max_value=50),
    steps=st.lists(st.floats(min_value=0, max_value=2), max_size=200),
)
def test_never_more_than_burst_plus_refill(rate: float, burst: int, steps: list[float]) -> None:
    limiter, now = _limiter(rate=rate, burst=burst)
    granted = 0
    for step in steps:
        now[0] += step
        wait = limiter.acquire("k")
        assert wait >= 0
        if wait == 0:
            granted += 1
        else:
            assert wait <= 1 / rate + 1e-9
    assert granted <= burst + now[0] * rate + 1e-6


# -- through the app -----------------------------------------------------------------------


@pytest.fixture
def config(tmp_path: Path) -> ServerConfig:
    return ServerConfig(data_dir=tmp_path, rate_limit=RateLimitConfig(rate=0.5, burst=2))


async def test_the_api_answers_429_with_retry_after_per_key(
    client: Client, callers: Callers, manual_clock: ManualClock
) -> None:
    for _ in range(2):
        assert (await client.get("/whoami", headers=callers.admin.headers)).status_code == 200
    refused = await client.get("/whoami", headers=callers.admin.headers)
    body = await assert_api_error(refused, 429, "rate limit")
    assert body["reason"] == "rate_limited"
    assert refused.headers["Retry-After"] == "2"  # one token at 0.5/s
    # Another key is not affected.
    assert (await client.get("/whoami", headers=callers.member.headers)).status_code == 200
    manual_clock.now += 2.0
    assert (await client.get("/whoami", headers=callers.admin.headers)).status_code == 200


async def test_anonymous_writes_are_limited_per_client_and_health_is_not(
    client: Client, manual_clock: ManualClock
) -> None:
    for _ in range(2):
        assert (await client.post("/feedback", json={"message": "m"})).status_code == 200
    await assert_api_error(await client.post("/feedback", json={"message": "m"}), 429)
    for _ in range(5):
        assert (await client.get("/livez")).status_code == 200
