"""The ``virtual`` driver: a pure-Python device that runs anywhere, the one CI tests against.

Android flavour (OS 13/14/15), iOS flavour (iphone, iphone-duo, ipad, watch) and headless
xcode/gradle build machines; see `device.VirtualDevice` for the API and docs/devices.md for
the decisions (screen sizes, APK package detection, the port model).
"""

from .._shared.ports import ListeningSocket, PortHandler, SocketKind
from .device import DRIVER_NAME, VirtualDevice, open_virtual_device

__all__ = [
    "DRIVER_NAME",
    "ListeningSocket",
    "PortHandler",
    "SocketKind",
    "VirtualDevice",
    "open_virtual_device",
]
