"""Pick a device driver by name: what ``devyard hostd --drivers virtual,...`` offers.

A driver is registered as an *opener*: a function from a `DeviceSpec` to an async context
manager that yields a running `DeviceDriver` and stops it (removing its sandbox) on exit.
Real drivers (``android-emulator``, later ``ios-simulator``) are a line in `drivers_by_name`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from contextlib import AbstractAsyncContextManager
from typing import Final

from ._errors import InvalidSpecError
from .base import DeviceDriver, DeviceSpec
from .emulator import EmulatorConfig, open_emulator_device
from .gradle import open_gradle_device
from .virtual import open_virtual_device
from .xcode import XcodeConfig, open_with_xcode_sandbox, open_xcode_device

__all__ = ["DEFAULT_DRIVER", "DriverOpener", "drivers_by_name", "open_device"]

DriverOpener = Callable[[DeviceSpec], AbstractAsyncContextManager[DeviceDriver]]

DEFAULT_DRIVER: Final = "virtual"


def drivers_by_name(
    *, emulator: EmulatorConfig | None = None, xcode: XcodeConfig | None = None
) -> Mapping[str, DriverOpener]:
    """Every driver this build knows, by the name hostd's ``--drivers`` option uses; each
    opener bound to its driver's configuration. *xcode* also serves the Xcode sandbox of the
    virtual driver's iOS instances (``spec.sandbox.xcode.enabled``)."""
    virtual = functools.partial(open_with_xcode_sandbox, opener=open_virtual_device, config=xcode)
    return {
        "virtual": virtual,
        "android-emulator": functools.partial(open_emulator_device, config=emulator),
        "gradle": open_gradle_device,
        "xcode": functools.partial(open_xcode_device, config=xcode),
    }


def open_device(
    spec: DeviceSpec,
    driver: str = DEFAULT_DRIVER,
    *,
    emulator: EmulatorConfig | None = None,
    xcode: XcodeConfig | None = None,
) -> AbstractAsyncContextManager[DeviceDriver]:
    """``async with open_device(spec) as device:`` starts a device with the named driver;
    ``emulator`` configures the ``android-emulator`` driver (hostd's CLI loads it)."""
    try:
        opener = drivers_by_name(emulator=emulator, xcode=xcode)[driver]
    except KeyError:
        known = ", ".join(sorted(drivers_by_name()))
        raise InvalidSpecError(f"unknown driver {driver!r} (known: {known})") from None
    return opener(spec)
