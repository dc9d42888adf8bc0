"""The device side of ADB: the real `adb` client drives our virtual Android devices.

`serve_adb(stream, device)` speaks ADB over any trio stream (a TCP socket today, a stream of the
host link behind the edge's ADB-over-WebSocket endpoint tomorrow); `serve_adb_tcp` listens for
`adb connect`. Layers, bottom up: packets.py (the pure codec), state.py (a stream's transition
table), stream.py and connection.py (the trio adapter), services.py and its shell, sync and
socket services, the interpreter behind `shell:`. docs/adb.md says what is supported and why.
"""

from ._errors import (
    AdbError,
    LocalProtocolError,
    ProtocolError,
    RemoteProtocolError,
    ServiceError,
)
from .config import DEFAULT_CONFIG, DEFAULT_FEATURES, AdbConfig
from .connection import AdbConnection
from .device import AdbDevice
from .server import banner, serve_adb, serve_adb_tcp
from .stream import AdbStream

__all__ = [
    "DEFAULT_CONFIG",
    "DEFAULT_FEATURES",
    "AdbConfig",
    "AdbConnection",
    "AdbDevice",
    "AdbError",
    "AdbStream",
    "LocalProtocolError",
    "ProtocolError",
    "RemoteProtocolError",
    "ServiceError",
    "banner",
    "serve_adb",
    "serve_adb_tcp",
]
