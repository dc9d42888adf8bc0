"""Stream lifecycle as a transition table (docs/protocol.md section 3).

Role-agnostic: the opener and the acceptor share it. Opening (SYN/ACK) is tracked beside it by
the session, because it is orthogonal to closing: a stream may be half-closed before its ACK
arrives. Every change of a stream's state goes through `transition()`; an illegal one raises
LocalProtocolError for our own events and RemoteProtocolError for the peer's.
"""

from __future__ import annotations

import enum
from typing import Final

from ._errors import LocalProtocolError, RemoteProtocolError

__all__ = ["StreamEvent", "StreamState", "is_remote_event", "transition"]


class StreamState(enum.Enum):
    OPEN = "open"
    LOCAL_CLOSED = "local-closed"  # we sent FIN; the peer may still send
    REMOTE_CLOSED = "remote-closed"  # the peer sent FIN; we may still send
    CLOSED = "closed"  # both sides sent FIN
    RESET = "reset"  # either side sent RST


class StreamEvent(enum.Enum):
    SEND_FIN = "send-fin"
    RECV_FIN = "recv-fin"
    SEND_RST = "send-rst"
    RECV_RST = "recv-rst"
    RECV_DATA = "recv-data"
    SEND_DATA = "send-data"


_S = StreamState
_E = StreamEvent

_TABLE: Final[dict[tuple[StreamState, StreamEvent], StreamState]] = {
    (_S.OPEN, _E.SEND_DATA): _S.OPEN,
    (_S.OPEN, _E.RECV_DATA): _S.OPEN,
    (_S.OPEN, _E.SEND_FIN): _S.LOCAL_CLOSED,
    (_S.OPEN, _E.RECV_FIN): _S.REMOTE_CLOSED,
    (_S.LOCAL_CLOSED, _E.RECV_DATA): _S.LOCAL_CLOSED,
    (_S.LOCAL_CLOSED, _E.RECV_FIN): _S.CLOSED,
    (_S.REMOTE_CLOSED, _E.SEND_DATA): _S.REMOTE_CLOSED,
    (_S.REMOTE_CLOSED, _E.SEND_FIN): _S.CLOSED,
}
for _state in (_S.OPEN, _S.LOCAL_CLOSED, _S.REMOTE_CLOSED):
    _TABLE[(_state, _E.SEND_RST)] = _S.RESET
    _TABLE[(_state, _E.RECV_RST)] = _S.RESET
# A reset that crosses a FIN or another reset on the wire is not an error.
_TABLE[(_S.CLOSED, _E.RECV_RST)] = _S.CLOSED
_TABLE[(_S.RESET, _E.RECV_RST)] = _S.RESET
_TABLE[(_S.RESET, _E.SEND_RST)] = _S.RESET

_REMOTE: Final = frozenset({_E.RECV_FIN, _E.RECV_RST, _E.RECV_DATA})


def is_remote_event(event: StreamEvent) -> bool:
    return event in _REMOTE


def transition(state: StreamState, event: StreamEvent) -> StreamState:
    try:
        return _TABLE[(state, event)]
    except KeyError:
        message = f"{event.value} is not allowed in stream state {state.value}"
        if event in _REMOTE:
            raise RemoteProtocolError(message) from None
        raise LocalProtocolError(message) from None
