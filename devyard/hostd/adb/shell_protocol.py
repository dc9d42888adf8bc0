"""The shell v2 protocol carried inside a `shell,v2,...:` stream: pure encoder and decoder.

Every packet is `id u8 | length u32 (little-endian) | data`. The host sends STDIN,
CLOSE_STDIN and WINDOW_SIZE_CHANGE; we send STDOUT, STDERR and, last, EXIT with one byte: the
exit status `adb shell` returns. Packets may be split or coalesced across ADB WRTEs.
"""

from __future__ import annotations

import enum
import struct
from typing import Final

from ._errors import RemoteProtocolError

__all__ = ["ShellId", "ShellPacketDecoder", "encode_exit", "encode_shell_packet"]

_HEADER: Final = struct.Struct("<BI")
#: adbd reads into a MAX_PAYLOAD buffer and splits larger packets; we refuse anything bigger.
MAX_SHELL_PACKET: Final = 1024 * 1024


class ShellId(enum.IntEnum):
    STDIN = 0
    STDOUT = 1
    STDERR = 2
    EXIT = 3
    CLOSE_STDIN = 4
    WINDOW_SIZE_CHANGE = 5


_IDS: Final = {int(i): i for i in ShellId}


def encode_shell_packet(kind: ShellId, data: bytes = b"") -> bytes:
    return _HEADER.pack(kind, len(data)) + data


def encode_exit(status: int) -> bytes:
    """The EXIT packet; the status is truncated to a byte, as a POSIX wait status is."""
    return encode_shell_packet(ShellId.EXIT, bytes([status & 0xFF]))


class ShellPacketDecoder:
    __slots__ = ("_buf",)

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[tuple[ShellId, bytes]]:
        buf = self._buf
        buf += data
        packets: list[tuple[ShellId, bytes]] = []
        pos = 0
        while len(buf) - pos >= _HEADER.size:
            kind, length = _HEADER.unpack_from(buf, pos)
            shell_id = _IDS.get(kind)
            if shell_id is None:
                raise RemoteProtocolError(f"unknown shell packet id {kind}")
            if length > MAX_SHELL_PACKET:
                raise RemoteProtocolError(f"shell packet of {length} bytes")
            stop = pos + _HEADER.size + length
            if stop > len(buf):
                break
            packets.append((shell_id, bytes(buf[pos + _HEADER.size : stop])))
            pos = stop
        del buf[:pos]
        return packets
