"""The organization build cache on the server: Gradle's HTTP build cache at
``/v1/build_cache/{key}`` and for hosts over their link (docs/builds.md)."""

from __future__ import annotations

from .service import CONTENT_TYPE, BadKey, BuildCacheService, EntryTooLarge, check_key
from .settings import NAMESPACE, BuildCacheSettings

__all__ = [
    "CONTENT_TYPE",
    "NAMESPACE",
    "BadKey",
    "BuildCacheService",
    "BuildCacheSettings",
    "EntryTooLarge",
    "check_key",
]
