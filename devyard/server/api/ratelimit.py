"""Per-key token buckets: the API's rate limit.

Theory of operation: each key (an API key's id, or a client address for the few anonymous
endpoints that are limited) owns a bucket of at most ``burst`` tokens that refills continuously
at ``rate`` tokens per second. A request takes one token; with none left it is refused, and the
refusal says how long until one token is back (the ``Retry-After`` of the 429).

The module is pure: time comes from the injected ``clock`` (``trio.current_time`` in the app, a
plain float in tests), there is no I/O and no locking (trio runs one task at a time and nothing
here awaits). Memory is bounded: at most ``max_keys`` buckets are kept, least recently used
first out. A bucket idle for ``burst / rate`` seconds is full again, so evicting it is exact;
evicting a busier one only forgives some debt, which errs on the side of the client.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Final

import attrs

__all__ = ["DEFAULT_MAX_KEYS", "KeyedRateLimiter", "TokenBucket"]

DEFAULT_MAX_KEYS: Final = 100_000


@attrs.define
class TokenBucket:
    """One key's bucket: ``tokens`` as of ``updated`` (clock seconds)."""

    tokens: float
    updated: float

    def take(self, now: float, *, rate: float, burst: int) -> float:
        """Take one token at *now*; return 0.0 when taken, else seconds until one is available."""
        elapsed = max(0.0, now - self.updated)
        self.tokens = min(float(burst), self.tokens + elapsed * rate)
        self.updated = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return 0.0
        return (1.0 - self.tokens) / rate


class KeyedRateLimiter:
    """Token buckets by key, bounded in number."""

    def __init__(
        self,
        *,
        rate: float,
        burst: int,
        clock: Callable[[], float],
        max_keys: int = DEFAULT_MAX_KEYS,
    ) -> None:
        if not rate > 0:
            raise ValueError(f"rate must be positive, got {rate!r}")
        if burst < 1:
            raise ValueError(f"burst must be at least 1, got {burst!r}")
        if max_keys < 1:
            raise ValueError(f"max_keys must be at least 1, got {max_keys!r}")
        self.rate: Final = rate
        self.burst: Final = burst
        self._clock = clock
        self._max_keys = max_keys
        self._buckets: OrderedDict[str, TokenBucket] = OrderedDict()

    def __repr__(self) -> str:
        return (
            f"KeyedRateLimiter(rate={self.rate}, burst={self.burst}, "
            f"keys={len(self._buckets)}/{self._max_keys})"
        )

    def acquire(self, key: str) -> float:
        """Spend one of *key*'s tokens. Return 0.0 if the request may go, else the wait in s."""
        now = self._clock()
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = TokenBucket(tokens=float(self.burst), updated=now)
            self._buckets[key] = bucket
            if len(self._buckets) > self._max_keys:
                self._buckets.popitem(last=False)
        else:
            self._buckets.move_to_end(key)
        return bucket.take(now, rate=self.rate, burst=self.burst)

    def statistics(self) -> dict[str, int]:
        return {"keys": len(self._buckets), "max_keys": self._max_keys}
