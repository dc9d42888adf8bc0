"""Object ids: ``<kind>_<ULID>``, e.g. ``org_01J9ZQ3W5X8K2M4N6P7R9S0T1V``.

The ULID part is 48 bits of milliseconds since the epoch then 80 random bits, in Crockford
base32 (26 characters), so ids sort by creation time as strings and as database keys. Ids
made in the same millisecond by this process increment the random part instead of drawing a
new one (the ULID "monotonic" rule), so they still sort in creation order; that is why the
generator keeps state behind a lock. The kind prefix makes an id self-describing in logs and
lets the API reject an id of the wrong kind without a query.
"""

from __future__ import annotations

import enum
import re
import secrets
import threading
import time
from typing import Final

__all__ = ["Kind", "is_id", "new_id", "new_ulid"]

_ALPHABET: Final = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"  # Crockford: no I, L, O, U
_RANDOM_BITS: Final = 80
_ULID_RE: Final = re.compile(r"[0-7][0-9A-HJKMNP-TV-Z]{25}")


class Kind(enum.StrEnum):
    """Id prefixes. Later tables add members here (instances, tunnels, assets, tokens)."""

    ORGANIZATION = "org"
    USER = "usr"
    API_KEY = "key"
    FEEDBACK = "fbk"
    SCOPED_TOKEN = "stk"  # noqa: S105 (an id prefix, not a secret)
    AUDIT_EVENT = "aud"


def _encode(value: int) -> str:
    chars = []
    for _ in range(26):
        chars.append(_ALPHABET[value & 31])
        value >>= 5
    return "".join(reversed(chars))


class _Monotonic:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last_ms = -1
        self._last_random = 0

    def next(self) -> int:
        with self._lock:
            ms = time.time_ns() // 1_000_000
            if ms <= self._last_ms:
                # Same millisecond (or the wall clock stepped back): keep the last
                # timestamp and count up, so ordering survives both.
                ms = self._last_ms
                rand = self._last_random + 1
                if rand >> _RANDOM_BITS:
                    ms, rand = ms + 1, secrets.randbits(_RANDOM_BITS)
            else:
                rand = secrets.randbits(_RANDOM_BITS)
            self._last_ms, self._last_random = ms, rand
            return (ms << _RANDOM_BITS) | rand


_generator: Final = _Monotonic()


def new_ulid() -> str:
    """The ULID part alone, for ids whose prefix is not a fixed `Kind` (instances)."""
    return _encode(_generator.next())


def new_id(kind: Kind) -> str:
    """A new, unique, time-sortable id of the given kind."""
    return f"{kind.value}_{_encode(_generator.next())}"


def is_id(kind: Kind, value: str) -> bool:
    """Whether ``value`` is well-formed as an id of ``kind`` (says nothing about existence)."""
    prefix, sep, ulid = value.partition("_")
    return sep == "_" and prefix == kind.value and _ULID_RE.fullmatch(ulid) is not None
