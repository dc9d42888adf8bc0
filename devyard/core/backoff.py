"""Full-jitter exponential backoff for reconnecting links (docs/protocol.md section 10)."""

from __future__ import annotations

import random
from typing import Final

import attrs

__all__ = ["FIRST_RETRY_S", "Backoff"]

#: Host daemons' and connectors' first retry after a link that was up (or at start): the
#: window of the first delay (docs/protocol.md 10, docs/scale-out.md "Kill -9: where the time
#: goes"). A killed replica's clients are offline until they redial; spreading them over a
#: quarter second instead of a second keeps most of the herd's spread (the next retries back
#: off as before) and cuts the wait that dominated a kill -9's cost.
FIRST_RETRY_S: Final = 0.25


@attrs.define
class Backoff:
    """`next_delay()` gives uniform(0, min(cap, base * 2**attempt)) and counts the attempt.

    Call `succeeded(now)` when a connection comes up and `failed(now)` when it drops: a
    connection that stayed up for `reset_after` seconds resets the attempt count, so a link
    that was healthy for a while reconnects fast, and one that flaps backs off. *first*, when
    set, narrows the first attempt's window to uniform(0, min(first, base)); the later ones
    are unchanged (``base * 2**attempt``).
    """

    base: float = 1.0
    cap: float = 30.0
    reset_after: float = 60.0
    rng: random.Random = attrs.field(factory=random.Random)
    first: float | None = None
    attempt: int = 0
    _up_since: float | None = None

    def next_delay(self) -> float:
        ceiling = min(self.cap, self.base * (2 ** min(self.attempt, 32)))
        if self.attempt == 0 and self.first is not None:
            ceiling = min(ceiling, self.first)
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
