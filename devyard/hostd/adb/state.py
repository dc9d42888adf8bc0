"""The life of one ADB stream as a transition table (docs/adb.md, "Streams").

Role-agnostic: the table holds for streams the host opened (they start ACCEPTING) and streams
we opened toward the host for `adb reverse` (they start OPENING). Besides opening and closing it
tracks ADB's only flow control, which has two independent halves:

* **our write in flight**: after we send WRTE we may not send another until the host's OKAY;
* **the host's write owed an ack**: we send OKAY once the service has consumed the data (that
  is the backpressure). adb itself waits for that OKAY before its next WRTE, but a splice that
  acknowledges early (core/adbwire.py) may send more: they queue in the stream (bounded by
  `AdbConfig.max_inbound`) and each gets its own OKAY in order, so ACKING means "one or more
  owed" and the stream leaves it with the last one.

The four combinations are spelled out as states (IDLE, WRITING, ACKING, WRITING_ACKING) so one
table answers every question. Every change goes through `transition()`; an illegal one raises
RemoteProtocolError for the host's events and LocalProtocolError for ours. ABANDONED is a stream
we opened and gave up on before the host answered: its answer must still be consumed (an OKAY
is answered with CLSE, never left dangling).
"""

from __future__ import annotations

import enum
from typing import Final

from ._errors import LocalProtocolError, RemoteProtocolError

__all__ = ["OPEN_STATES", "WRITE_IN_FLIGHT", "StreamEvent", "StreamState", "transition"]


class StreamState(enum.Enum):
    ACCEPTING = "accepting"  # the host sent OPEN; we have not answered yet
    OPENING = "opening"  # we sent OPEN; the host has not answered yet
    ABANDONED = "abandoned"  # we sent OPEN and gave up before the answer
    IDLE = "idle"  # open, nothing in flight either way
    WRITING = "writing"  # our WRTE awaits the host's OKAY
    ACKING = "acking"  # the host's WRTE awaits our OKAY
    WRITING_ACKING = "writing+acking"
    CLOSED = "closed"


class StreamEvent(enum.Enum):
    SEND_OKAY = "send-okay"  # accept an OPEN, or ack the host's WRTE
    RECV_OKAY = "recv-okay"  # the host accepted our OPEN, or acked our WRTE
    SEND_WRTE = "send-wrte"
    RECV_WRTE = "recv-wrte"
    SEND_CLSE = "send-clse"  # also: refuse an OPEN, abandon our OPEN
    RECV_CLSE = "recv-clse"


_S = StreamState
_E = StreamEvent

_TABLE: Final[dict[tuple[StreamState, StreamEvent], StreamState]] = {
    (_S.ACCEPTING, _E.SEND_OKAY): _S.IDLE,
    (_S.ACCEPTING, _E.SEND_CLSE): _S.CLOSED,
    (_S.ACCEPTING, _E.RECV_CLSE): _S.CLOSED,
    (_S.OPENING, _E.RECV_OKAY): _S.IDLE,
    (_S.OPENING, _E.RECV_CLSE): _S.CLOSED,
    (_S.OPENING, _E.SEND_CLSE): _S.ABANDONED,
    (_S.ABANDONED, _E.RECV_OKAY): _S.CLOSED,
    (_S.ABANDONED, _E.RECV_CLSE): _S.CLOSED,
    (_S.IDLE, _E.SEND_WRTE): _S.WRITING,
    (_S.IDLE, _E.RECV_WRTE): _S.ACKING,
    (_S.WRITING, _E.RECV_OKAY): _S.IDLE,
    (_S.WRITING, _E.RECV_WRTE): _S.WRITING_ACKING,
    (_S.ACKING, _E.SEND_OKAY): _S.IDLE,
    (_S.ACKING, _E.SEND_WRTE): _S.WRITING_ACKING,
    (_S.WRITING_ACKING, _E.RECV_OKAY): _S.ACKING,
    (_S.WRITING_ACKING, _E.SEND_OKAY): _S.WRITING,
    (_S.ACKING, _E.RECV_WRTE): _S.ACKING,  # queued behind the first (early acks upstream)
    (_S.WRITING_ACKING, _E.RECV_WRTE): _S.WRITING_ACKING,
}
for _state in (_S.IDLE, _S.WRITING, _S.ACKING, _S.WRITING_ACKING):
    _TABLE[(_state, _E.SEND_CLSE)] = _S.CLOSED
    _TABLE[(_state, _E.RECV_CLSE)] = _S.CLOSED

_REMOTE: Final = frozenset({_E.RECV_OKAY, _E.RECV_WRTE, _E.RECV_CLSE})

# States in which the stream may still send WRTE once its write in flight is acked.
OPEN_STATES: Final = frozenset({_S.IDLE, _S.WRITING, _S.ACKING, _S.WRITING_ACKING})
# States with a write of ours in flight.
WRITE_IN_FLIGHT: Final = frozenset({_S.WRITING, _S.WRITING_ACKING})


def transition(state: StreamState, event: StreamEvent) -> StreamState:
    try:
        return _TABLE[(state, event)]
    except KeyError:
        message = f"{event.value} is not allowed in stream state {state.value}"
        if event in _REMOTE:
            raise RemoteProtocolError(message) from None
        raise LocalProtocolError(message) from None
