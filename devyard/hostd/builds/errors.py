"""The build data plane's error vocabulary (no HTTP here: `http.py` holds the one table)."""

from __future__ import annotations

import enum

__all__ = ["BuildError", "BuildReason"]


class BuildReason(enum.StrEnum):
    """The ``reason`` of an error answer of a build instance's ``/sync`` and ``/exec``."""

    BAD_REQUEST = "bad_request"  # a malformed body, a bad path, a hash that does not match
    UNSUPPORTED = "unsupported"  # xcodebuild on a Linux host
    NOT_FOUND = "not_found"  # no such exec (never was)
    CONFLICT = "conflict"  # an exec runs: no second exec, no sync under it
    TOO_LARGE = "too_large"  # the body or the manifest past its bound
    GONE = "gone"  # the instance is stopping


class BuildError(Exception):
    def __init__(self, reason: BuildReason, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message
