"""Duration strings of the instance spec (``inactivityTimeout``, ``hardTimeout``): one or
more ``<integer><unit>`` parts with units ``h``, ``m``, ``s`` in that order (``90s``, ``10m``,
``1h30m``), or ``0`` for "none". Responses echo them normalised: the largest units first, no
zero parts (``90s`` -> ``1m30s``, ``600s`` -> ``10m``)."""

from __future__ import annotations

import re
from typing import Final

__all__ = [
    "MAX_SECONDS",
    "DurationTooLong",
    "InvalidDuration",
    "format_duration",
    "parse_duration",
]

MAX_SECONDS: Final = 7 * 24 * 3600  # a week: longer is a mistake, not a plan
_DURATION: Final = re.compile(r"(?:(\d{1,7})h)?(?:(\d{1,9})m)?(?:(\d{1,9})s)?")


class InvalidDuration(ValueError):
    def __init__(self, field: str, value: str, why: str) -> None:
        super().__init__(f"{field}: {why}, got {value!r} (examples: 30s, 10m, 3h, 1h30m, 0)")
        self.field = field


class DurationTooLong(InvalidDuration):
    """Well-formed but over `MAX_SECONDS` (the API answers 422, not 400)."""


def parse_duration(field: str, value: str) -> int:
    """Seconds; 0 means none. Raises `InvalidDuration` naming ``field``."""
    if value == "0":
        return 0
    match = _DURATION.fullmatch(value)
    if not value or match is None:
        raise InvalidDuration(field, value, "expected a duration")
    hours, minutes, seconds = (int(part or 0) for part in match.groups())
    total = hours * 3600 + minutes * 60 + seconds
    if total > MAX_SECONDS:
        raise DurationTooLong(field, value, f"at most {format_duration(MAX_SECONDS)}")
    return total


def format_duration(seconds: int) -> str:
    if seconds <= 0:
        return "0"
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [f"{n}{unit}" for n, unit in ((hours, "h"), (minutes, "m"), (secs, "s")) if n]
    return "".join(parts)
