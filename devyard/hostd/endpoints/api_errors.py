"""The device API's error vocabulary, and its one translation to HTTP.

Routes and the request reader raise `RequestError` with a `Reason`; drivers raise their own
typed errors (devyard.hostd.drivers._errors). Neither knows HTTP: `classify` names the
reason of either, and `STATUS` is the one table from a reason to an HTTP status, used only
where the device API answers (`device_api.serve_device_api`).
"""

from __future__ import annotations

import enum
import errno
from collections.abc import Mapping
from typing import Final

import trio

from ..drivers import (
    AppNotFoundError,
    DeviceError,
    DeviceFileError,
    InstallError,
    InvalidInputError,
    PortClosedError,
    UnsupportedOperationError,
)

__all__ = ["STATUS", "Reason", "RequestError", "classify"]


class Reason(enum.StrEnum):
    """The ``reason`` of an error answer (docs/endpoints.md)."""

    BAD_REQUEST = "bad_request"
    UNSUPPORTED = "unsupported"
    TOO_LARGE = "too_large"
    NOT_FOUND = "not_found"
    METHOD_NOT_ALLOWED = "method_not_allowed"
    APP_NOT_FOUND = "app_not_found"
    FILE_NOT_FOUND = "file_not_found"
    FILE_ERROR = "file_error"
    INSTALL_FAILED = "install_failed"
    PORT_CLOSED = "port_closed"
    GONE = "gone"
    DEVICE_ERROR = "device_error"


class RequestError(Exception):
    """A request the device API refuses: what was wrong with it, not how HTTP says so."""

    def __init__(self, reason: Reason, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


#: The one translation of a reason to an HTTP status.
STATUS: Final[Mapping[Reason, int]] = {
    Reason.BAD_REQUEST: 400,
    Reason.UNSUPPORTED: 400,
    Reason.TOO_LARGE: 413,
    Reason.NOT_FOUND: 404,
    Reason.METHOD_NOT_ALLOWED: 405,
    Reason.APP_NOT_FOUND: 404,
    Reason.FILE_NOT_FOUND: 404,
    Reason.FILE_ERROR: 400,
    Reason.INSTALL_FAILED: 422,
    Reason.PORT_CLOSED: 502,
    Reason.GONE: 410,
    Reason.DEVICE_ERROR: 500,
}

_DRIVER_REASONS: Final[tuple[tuple[type[Exception], Reason], ...]] = (
    (InvalidInputError, Reason.BAD_REQUEST),
    (UnsupportedOperationError, Reason.UNSUPPORTED),
    (AppNotFoundError, Reason.APP_NOT_FOUND),
    (InstallError, Reason.INSTALL_FAILED),
    (PortClosedError, Reason.PORT_CLOSED),
)


def classify(exc: RequestError | DeviceError | trio.ClosedResourceError) -> tuple[Reason, str]:
    """The reason and message of an error a route raised."""
    if isinstance(exc, RequestError):
        return exc.reason, exc.message
    if isinstance(exc, trio.ClosedResourceError):
        return Reason.GONE, "the instance is stopping"
    if isinstance(exc, DeviceFileError):
        missing = exc.errno == errno.ENOENT
        return (Reason.FILE_NOT_FOUND if missing else Reason.FILE_ERROR), str(exc)
    for kind, reason in _DRIVER_REASONS:
        if isinstance(exc, kind):
            return reason, str(exc)
    return Reason.DEVICE_ERROR, str(exc)
