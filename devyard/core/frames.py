"""Frames of the yamux wire format (docs/protocol.md section 2).

Every frame starts with a 12-byte big-endian header:

    version u8 (always 0) | type u8 | flags u16 | stream_id u32 | length u32

For DATA, `length` is the payload length and the payload follows; for WINDOW_UPDATE it is the
credit delta, for PING the opaque value, for GO_AWAY the reason code, and no payload follows.
Stream 0 is the session itself (PING, GO_AWAY).
"""

from __future__ import annotations

import enum
import struct
from typing import Final

import attrs

__all__ = [
    "HEADER",
    "HEADER_SIZE",
    "MAX_STREAM_ID",
    "PROTOCOL_VERSION",
    "Flag",
    "Frame",
    "FrameType",
    "GoAwayCode",
]

PROTOCOL_VERSION: Final = 0
HEADER: Final = struct.Struct(">BBHII")
HEADER_SIZE: Final = HEADER.size  # 12
MAX_STREAM_ID: Final = 0xFFFF_FFFF


class FrameType(enum.IntEnum):
    DATA = 0
    WINDOW_UPDATE = 1
    PING = 2
    GO_AWAY = 3


class Flag(enum.IntFlag):
    NONE = 0
    SYN = 0x1
    ACK = 0x2
    FIN = 0x4
    RST = 0x8


class GoAwayCode(enum.IntEnum):
    """GO_AWAY reasons. 0-2 are yamux's; ours start at 0x10 (docs/protocol.md section 5)."""

    NORMAL = 0
    PROTOCOL_ERROR = 1
    INTERNAL_ERROR = 2
    TOKEN_ROTATED = 0x10
    TOKEN_EXPIRED = 0x11
    TUNNEL_DELETED = 0x12
    REPLACED = 0x13
    RELAY_RESTARTING = 0x14
    CONNECTOR_CLEAN_STOP = 0x15
    TOKEN_REVOKED = 0x16

    @classmethod
    def describe(cls, code: int) -> str:
        try:
            return cls(code).name.lower()
        except ValueError:
            return f"unknown({code:#x})"


@attrs.frozen(slots=True)
class Frame:
    """One decoded frame. `payload` is empty for every type but DATA.

    A decoded DATA payload is a read-only view of the bytes it arrived in (no copy); keep it
    only as long as needed, or take `bytes(payload)`, since it holds that whole chunk alive.
    """

    type: FrameType
    flags: int  # a Flag value, kept as int: building IntFlag per frame costs more than decoding
    stream_id: int
    length: int
    payload: bytes | memoryview = b""

    def __repr__(self) -> str:
        return (
            f"Frame({self.type.name} {Flag(self.flags)!s} sid={self.stream_id} len={self.length})"
        )
