"""Device drivers: the `DeviceDriver` interface, its records and errors, and the registry.

``virtual`` is the pure-Python device CI tests against (`devyard.hostd.drivers.virtual`);
real drivers slot in beside it through `registry.drivers_by_name`.
"""

from ._errors import (
    AppNotFoundError,
    DeviceError,
    DeviceFileError,
    InstallError,
    InvalidInputError,
    InvalidSpecError,
    PortClosedError,
    UnsupportedOperationError,
)
from .base import (
    AndroidDevice,
    AppInfo,
    Codec,
    DeviceDriver,
    DeviceInfo,
    DeviceSpec,
    FileEntry,
    FileKind,
    Frame,
    GuestNetworkDevice,
    Key,
    LogEntry,
    LogLevel,
    Platform,
    Rotation,
    ShellDevice,
    ShellResult,
    TouchAction,
)
from .registry import DEFAULT_DRIVER, DriverOpener, drivers_by_name, open_device

__all__ = [
    "DEFAULT_DRIVER",
    "AndroidDevice",
    "AppInfo",
    "AppNotFoundError",
    "Codec",
    "DeviceDriver",
    "DeviceError",
    "DeviceFileError",
    "DeviceInfo",
    "DeviceSpec",
    "DriverOpener",
    "FileEntry",
    "FileKind",
    "Frame",
    "GuestNetworkDevice",
    "InstallError",
    "InvalidInputError",
    "InvalidSpecError",
    "Key",
    "LogEntry",
    "LogLevel",
    "Platform",
    "PortClosedError",
    "Rotation",
    "ShellDevice",
    "ShellResult",
    "TouchAction",
    "UnsupportedOperationError",
    "drivers_by_name",
    "open_device",
]
