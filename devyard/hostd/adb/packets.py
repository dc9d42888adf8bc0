"""ADB packets: the 24-byte header, the pure encoder and the incremental decoder.

No I/O and no trio: bytes in, packets out. Every packet is a header of six little-endian u32

    command | arg0 | arg1 | data_length | data_check | magic (= command ^ 0xffffffff)

followed by `data_length` payload bytes. Hosts speaking version >= 0x01000001 (every adb since
2017, and the only version we accept) neither send nor check `data_check`, so we send 0 unless
told otherwise. `PacketDecoder.feed()` accepts any split of the byte stream and returns the whole
packets; a malformed header raises RemoteProtocolError and leaves the decoder unusable.
"""

from __future__ import annotations

import enum
from typing import Final

import attrs

from ...core.adbwire import (
    A_AUTH,
    A_CLSE,
    A_CNXN,
    A_OKAY,
    A_OPEN,
    A_STLS,
    A_SYNC,
    A_VERSION,
    A_WRTE,
    HEADER,
    HEADER_SIZE,
)
from ._errors import RemoteProtocolError

__all__ = [
    "A_VERSION",
    "HEADER_SIZE",
    "MAX_PAYLOAD",
    "Command",
    "Packet",
    "PacketDecoder",
    "encode_packet",
]

MAX_PAYLOAD: Final = 1024 * 1024  # what the host offers (adb >= 28)


class Command(enum.IntEnum):
    """The commands of devyard.core.adbwire (where the header is defined), as an enum."""

    SYNC = A_SYNC
    CNXN = A_CNXN
    AUTH = A_AUTH
    OPEN = A_OPEN
    OKAY = A_OKAY
    CLSE = A_CLSE
    WRTE = A_WRTE
    STLS = A_STLS


_COMMANDS: Final = {int(c): c for c in Command}


@attrs.frozen
class Packet:
    command: Command
    arg0: int
    arg1: int
    data: bytes = b""

    def __repr__(self) -> str:
        return f"<Packet {self.command.name} {self.arg0:#x} {self.arg1:#x} {len(self.data)}B>"


def encode_packet(packet: Packet, *, checksum: bool = False) -> bytes:
    """Header plus payload. `checksum` only for hosts older than A_VERSION."""
    cmd = int(packet.command)
    check = sum(packet.data) & 0xFFFF_FFFF if checksum else 0
    header = HEADER.pack(cmd, packet.arg0, packet.arg1, len(packet.data), check, cmd ^ 0xFFFF_FFFF)
    return header + packet.data


class PacketDecoder:
    """Incremental decoder. `max_payload` bounds a packet's data (larger is a protocol error)."""

    __slots__ = ("_broken", "_buf", "max_payload")

    def __init__(self, max_payload: int = MAX_PAYLOAD) -> None:
        self._buf = bytearray()
        self._broken = False
        self.max_payload = max_payload

    @property
    def buffered(self) -> int:
        """Bytes held back because they do not yet form a whole packet."""
        return len(self._buf)

    def feed(self, data: bytes | bytearray | memoryview) -> list[Packet]:
        if self._broken:
            raise RemoteProtocolError("decoder already failed")
        buf = self._buf
        buf += data
        packets: list[Packet] = []
        pos = 0
        end = len(buf)
        while end - pos >= HEADER_SIZE:
            cmd, arg0, arg1, length, _check, magic = HEADER.unpack_from(buf, pos)
            command = _COMMANDS.get(cmd)
            if command is None:
                raise self._fail(f"unknown command {cmd:#010x}")
            if magic != cmd ^ 0xFFFF_FFFF:
                raise self._fail(f"bad magic {magic:#010x} for {command.name}")
            if length > self.max_payload:
                raise self._fail(f"{command.name} of {length} bytes exceeds {self.max_payload}")
            stop = pos + HEADER_SIZE + length
            if stop > end:
                break
            packets.append(Packet(command, arg0, arg1, bytes(buf[pos + HEADER_SIZE : stop])))
            pos = stop
        del buf[:pos]
        return packets

    def feed_eof(self) -> None:
        """The byte stream ended. Raises RemoteProtocolError if it ended inside a packet."""
        if self._buf:
            raise self._fail(f"connection ended inside a packet ({len(self._buf)} bytes pending)")

    def _fail(self, message: str) -> RemoteProtocolError:
        self._broken = True
        return RemoteProtocolError(message)
