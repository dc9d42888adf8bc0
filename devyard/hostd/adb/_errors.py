"""The error vocabulary of the device side of ADB.

    Exception
     └── AdbError
          ├── ProtocolError            a broken ADB wire protocol (packets, streams, sync, shell v2)
          │    ├── LocalProtocolError  we were about to send something the protocol forbids
          │    └── RemoteProtocolError the host sent something the protocol forbids: the
          │                            connection ends
          └── ServiceError             a service string we cannot serve: the OPEN is refused
                                       (CLSE) and the message is logged, the connection lives on

Stream operations raise trio's own ClosedResourceError (you closed it) and BrokenResourceError
(the host closed it, or the connection died), so services are written against trio.abc.Stream.
"""

from __future__ import annotations

__all__ = [
    "AdbError",
    "LocalProtocolError",
    "ProtocolError",
    "RemoteProtocolError",
    "ServiceError",
]


class AdbError(Exception):
    """Base of the errors only the ADB device side raises."""


class ProtocolError(AdbError):
    """A violation of the ADB wire protocol."""


class LocalProtocolError(ProtocolError):
    """We were about to send something the protocol forbids (a bug on our side)."""


class RemoteProtocolError(ProtocolError):
    """The host sent something the protocol forbids."""


class ServiceError(AdbError):
    """A service string names nothing we can serve; the stream is refused."""
