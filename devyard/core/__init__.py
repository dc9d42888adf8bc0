"""The multiplexing core: yamux-compatible framing, the trio session, transports and helpers.

Everything that carries bytes between devyard processes runs on this package: host links,
connector links, the tunnel relay, the device stream proxy, the ADB bridge and the per-instance
HTTP proxies. The wire format is normative in docs/protocol.md.
"""

from ._errors import (
    LocalProtocolError,
    MuxError,
    OpenError,
    ProtocolError,
    RemoteProtocolError,
    SessionBrokenError,
    SessionGoneAwayError,
    StreamRefusedError,
    StreamResetError,
)
from .backoff import FIRST_RETRY_S, Backoff
from .channel import ControlChannel, MessageChannel, RelayChannel
from .config import DEFAULT_CONFIG, SessionConfig
from .frames import Flag, Frame, FrameType, GoAwayCode
from .preamble import (
    accept_open,
    read_open,
    receive_message,
    reject_open,
    request_open,
    send_message,
)
from .relay import RelayDecoder, encode_relay
from .session import Session, SessionStatistics, open_session
from .splice import SpliceResult, splice
from .state import StreamState
from .stream import MuxStream
from .transports import MessageStream, WebSocketStream, open_transport
from .upgrade import UpgradeRejected, UpgradeRequest, accept_upgrade

__all__ = [
    "DEFAULT_CONFIG",
    "FIRST_RETRY_S",
    "Backoff",
    "ControlChannel",
    "Flag",
    "Frame",
    "FrameType",
    "GoAwayCode",
    "LocalProtocolError",
    "MessageChannel",
    "MessageStream",
    "MuxError",
    "MuxStream",
    "OpenError",
    "ProtocolError",
    "RelayChannel",
    "RelayDecoder",
    "RemoteProtocolError",
    "Session",
    "SessionBrokenError",
    "SessionConfig",
    "SessionGoneAwayError",
    "SessionStatistics",
    "SpliceResult",
    "StreamRefusedError",
    "StreamResetError",
    "StreamState",
    "UpgradeRejected",
    "UpgradeRequest",
    "WebSocketStream",
    "accept_open",
    "accept_upgrade",
    "encode_relay",
    "open_session",
    "open_transport",
    "read_open",
    "receive_message",
    "reject_open",
    "request_open",
    "send_message",
    "splice",
]
