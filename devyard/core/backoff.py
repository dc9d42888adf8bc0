"""Full-jitter exponential backoff for reconnecting links (docs/protocol.md section 10)."""

from __future__ import annotations

import random

import attrs

__all__ = ["Backoff"]


@attrs.define
class Backoff:
    """`next_delay()` gives uniform(0, min(cap, base * 2**attempt)) and counts the attempt.

    Call `succeeded(now)` when a connection comes up and `failed(now)` when it drops: a
    connection that stayed up for `reset_after` seconds resets the attempt count, so a link
    that was healthy for a while reconnects fast, and one that flaps backs off.
    """

    base: float = 1.0
    cap: float = 30.0
    reset_after: float = 60.0
    rng: random.Random = attrs.field(factory=random.Random)
    attempt: int = 0
    _up_since: float | None = None

    def next_delay(self) -> float:
        ceiling = min(self.cap, self.base * (2 ** min(self.attempt, 32)))
        self.attempt += 1
        return self.rng.uniform(0.0, ceiling)

    def succeeded(self, now: float) -> None:
        self._up_since = now

    def failed(self, now: float) -> None:
        if self._up_since is not None and now - self._up_since >= self.reset_after:
            self.attempt = 0
        self._up_since = None

    def reset(self) -> None:
        self.attempt = 0
        self._up_since = None
