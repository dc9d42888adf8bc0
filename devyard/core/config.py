"""Session configuration: protocol safety valves only (timeouts of operations belong to callers)."""

from __future__ import annotations

from typing import Final

import attrs

__all__ = ["DEFAULT_CONFIG", "SessionConfig"]

KiB: Final = 1024
_positive = attrs.validators.gt(0)
_positive_float = attrs.validators.gt(0.0)
MiB: Final = 1024 * KiB


@attrs.frozen(kw_only=True)
class SessionConfig:
    """How one multiplexed session behaves. Every field has the default of docs/protocol.md."""

    #: Receive window every stream starts with; yamux fixes it at 256 KiB, so must we.
    initial_window: int = attrs.field(default=256 * KiB, validator=_positive)
    #: A stream whose reader keeps up has its window doubled up to this.
    max_window: int = attrs.field(default=4 * MiB, validator=_positive)
    #: Growth stops while the windows granted on one session add up to more than this.
    session_window_budget: int = attrs.field(default=64 * MiB, validator=_positive)
    #: Largest DATA payload we send (never more than one write holds). We accept up to the
    #: stream's window (yamux sends that).
    max_frame_payload: int = attrs.field(default=1 * MiB, validator=_positive)
    #: Outbound bytes queued for the writer before senders wait.
    max_outbound_buffer: int = attrs.field(default=2 * MiB, validator=_positive)
    #: Largest single write to the transport (several whole frames per write).
    max_write_batch: int = attrs.field(default=2 * MiB, validator=_positive)
    #: Largest single read from the transport. Over loopback TCP, 1 MiB reads cost about half
    #: the CPU per byte of 256 KiB ones (docs/protocol.md 4.4).
    read_size: int = attrs.field(default=1 * MiB, validator=_positive)
    #: Streams open at once (both directions); a SYN over this is refused with RST.
    max_streams: int = attrs.field(default=4096, validator=_positive)
    #: Streams the peer opened that the application has not accepted yet; over it: RST.
    accept_backlog: int = attrs.field(default=256, validator=_positive)
    #: Send a PING when nothing arrived for this long.
    keepalive_interval: float = attrs.field(default=10.0, validator=_positive_float)
    #: Declare the session dead when nothing arrived for this long.
    dead_after: float = attrs.field(default=25.0, validator=_positive_float)
    #: A transport write that takes longer than this kills the session.
    write_timeout: float = attrs.field(default=10.0, validator=_positive_float)
    #: How long aclose() spends trying to say GO_AWAY before closing the transport.
    close_grace: float = attrs.field(default=2.0, validator=_positive_float)
    #: Control frames (window updates, acks, pings, resets) queued before the peer is cut off.
    max_control_backlog: int = attrs.field(default=65536, validator=_positive)

    def __attrs_post_init__(self) -> None:
        if self.max_window < self.initial_window:
            raise ValueError("max_window must be at least initial_window")
        if self.max_write_batch < self.max_frame_payload + 12:
            raise ValueError("max_write_batch must hold at least one whole frame")
        if self.dead_after <= self.keepalive_interval:
            raise ValueError("dead_after must be longer than keepalive_interval")


DEFAULT_CONFIG: Final = SessionConfig()
