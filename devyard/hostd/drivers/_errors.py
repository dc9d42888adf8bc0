"""The error vocabulary of device drivers.

    Exception
     └── DeviceError                  base of everything a driver raises on purpose
          ├── InvalidSpecError        the DeviceSpec names a model, OS version or platform the
          │                           driver does not have (raised before anything starts)
          ├── InvalidInputError       an argument is out of range or malformed: coordinates
          │                           outside [0, 1], an empty URL, a relative device path...
          ├── UnsupportedOperationError  the verb does not exist on this device (a screenshot
          │                           of a headless build machine, getprop on iOS)
          ├── AppNotFoundError        no app with that id is installed
          ├── InstallError            the file is not an installable app for this platform
          ├── DeviceFileError         a file operation failed on the device; carries errno so
          │                           shells can print "No such file or directory"
          └── PortClosedError         nothing listens on that device port or socket
                                      (what a real device answers with connection refused)

Calling a verb on a device that was closed raises trio's own ClosedResourceError.
"""

from __future__ import annotations

import errno as _errno
import os

__all__ = [
    "AppNotFoundError",
    "DeviceError",
    "DeviceFileError",
    "InstallError",
    "InvalidInputError",
    "InvalidSpecError",
    "PortClosedError",
    "UnsupportedOperationError",
]


class DeviceError(Exception):
    """Base of the errors drivers raise on purpose."""


class InvalidSpecError(DeviceError):
    """The spec asks for something this driver cannot provide."""


class InvalidInputError(DeviceError, ValueError):
    """An input argument is out of range or malformed."""


class UnsupportedOperationError(DeviceError):
    """The verb does not exist on this kind of device."""


class AppNotFoundError(DeviceError, LookupError):
    """No app with this id is installed on the device."""

    def __init__(self, app_id: str) -> None:
        super().__init__(f"no app {app_id!r} is installed")
        self.app_id = app_id


class InstallError(DeviceError):
    """The file cannot be installed as an app on this device."""


class DeviceFileError(DeviceError, OSError):
    """A file operation on the device failed; ``errno`` says why, as on a POSIX device."""

    def __init__(self, path: str, code: int) -> None:
        message = os.strerror(code)
        super().__init__(code, message)
        self.path = path
        # OSError.__init__ with two arguments sets errno and strerror; keep them explicit.
        self.errno = code
        self.strerror = message

    def __str__(self) -> str:
        return f"{self.path}: {self.strerror}"

    @classmethod
    def not_found(cls, path: str) -> DeviceFileError:
        return cls(path, _errno.ENOENT)


class PortClosedError(DeviceError, ConnectionRefusedError):
    """Nothing listens on this device TCP port or abstract socket."""
