"""The server's organization build cache bounds (docs/builds.md, "Gradle's build cache")."""

from __future__ import annotations

from typing import Final

import attrs

__all__ = ["NAMESPACE", "BuildCacheSettings"]

#: The blob namespace of the entries, beside the assets on the configured backend.
NAMESPACE: Final = "build-cache"


@attrs.frozen
class BuildCacheSettings:
    """*max_bytes*: an organization's entries at most (least recently used go first past it);
    *max_entry*: one entry at most (413 past it); *max_idle_days*: an entry nobody read or
    wrote for that long goes at the next sweep, every *sweep_interval* seconds."""

    max_bytes: int = attrs.field(default=10 * 1024**3, validator=attrs.validators.gt(0))
    max_entry: int = attrs.field(default=512 * 1024**2, validator=attrs.validators.gt(0))
    max_idle_days: float = attrs.field(default=7.0, validator=attrs.validators.gt(0))
    sweep_interval: float = attrs.field(default=3600.0, validator=attrs.validators.gt(0))
