"""The error vocabulary of the multiplexing core.

    Exception
     ├── MuxError
     │    └── ProtocolError            a broken wire protocol; carries the GO_AWAY code
     │         ├── LocalProtocolError  we were asked to do something the protocol forbids
     │         └── RemoteProtocolError the peer sent something the protocol forbids
     ├── trio.BrokenResourceError
     │    ├── StreamResetError         the peer reset the stream (RST)
     │    │    └── StreamRefusedError  the peer refused a stream we opened (RST before any answer):
     │    │                            nothing reached its application, so retrying is safe
     │    ├── SessionBrokenError       the session died under us (EOF, dead peer, protocol error)
     │    └── SessionGoneAwayError     the peer sent GO_AWAY: no new streams on this session
     └── OpenError                     the acceptor of a stream answered its open preamble with a
                                       coded error (see preamble.py)

Stream operations raise trio's own ClosedResourceError (you closed it) and BrokenResourceError
(it broke under you), so code written against trio.abc.Stream handles ours without knowing it.
"""

from __future__ import annotations

import trio

from .frames import GoAwayCode

__all__ = [
    "LocalProtocolError",
    "MuxError",
    "OpenError",
    "ProtocolError",
    "RemoteProtocolError",
    "SessionBrokenError",
    "SessionGoneAwayError",
    "StreamRefusedError",
    "StreamResetError",
]


class MuxError(Exception):
    """Base of the errors that only the multiplexing core raises."""


class ProtocolError(MuxError):
    """A violation of the wire protocol; `code` is what goes into GO_AWAY."""

    def __init__(self, message: str, code: GoAwayCode = GoAwayCode.PROTOCOL_ERROR) -> None:
        super().__init__(message)
        self.code = code


class LocalProtocolError(ProtocolError):
    """We were about to send something the protocol forbids."""


class RemoteProtocolError(ProtocolError):
    """The peer sent something the protocol forbids."""


class StreamResetError(trio.BrokenResourceError):
    """The peer reset the stream."""


class StreamRefusedError(StreamResetError):
    """The peer reset a stream we opened before answering it: safe to retry elsewhere."""


class SessionBrokenError(trio.BrokenResourceError):
    """The session ended abnormally: transport EOF or error, dead peer, or protocol error."""


class SessionGoneAwayError(trio.BrokenResourceError):
    """The session no longer opens streams: a GO_AWAY was sent or received."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


class OpenError(MuxError):
    """The acceptor answered the open preamble with an error code."""

    def __init__(self, code: str, message: str, *, retry_after_s: float | None = None) -> None:
        super().__init__(f"{code}: {message}" if message else code)
        self.code = code
        self.message = message
        self.retry_after_s = retry_after_s
