"""The file sync protocol carried inside a `sync:` stream: pure encoders and decoder.

Requests are `id (4 ASCII bytes) | u32 little-endian | payload`. For STAT, STA2, LST2, LIST,
LIS2, SEND and RECV the u32 is the length of the path that follows (at most 1024 bytes); for
DATA it is the length of the chunk that follows (at most 64 KiB); for DONE it is the file's
mtime and nothing follows; QUIT ends the session. Replies are fixed structs:

    STAT  id | mode u32 | size u32 | mtime u32                         (v1: mode 0 = missing)
    STA2  id | error u32 | dev u64 | ino u64 | mode u32 | nlink u32 | uid u32 | gid u32 |
          size u64 | atime i64 | mtime i64 | ctime i64                 (LST2 echoes its own id)
    DENT  id | mode u32 | size u32 | mtime u32 | namelen u32 | name    (LIST; DONE closes, 20 B)
    DNT2  the STA2 fields | namelen u32 | name                         (LIS2; DONE closes, 76 B)
    DATA  id | length u32 | data ;  DONE id | 0 ;  OKAY id | 0 ;  FAIL id | length | message
"""

from __future__ import annotations

import struct
from typing import Final

import attrs

from ._errors import RemoteProtocolError

__all__ = [
    "MAX_PATH",
    "SYNC_DATA_MAX",
    "StatResult",
    "SyncDecoder",
    "SyncMessage",
    "encode_data",
    "encode_dent_v1",
    "encode_dent_v2",
    "encode_done",
    "encode_fail",
    "encode_list_done",
    "encode_okay",
    "encode_stat_v1",
    "encode_stat_v2",
]

SYNC_DATA_MAX: Final = 64 * 1024
MAX_PATH: Final = 1024

_REQUEST: Final = struct.Struct("<4sI")
_STAT_V1: Final = struct.Struct("<4sIII")
_STAT_V2: Final = struct.Struct("<4sIQQIIIIQqqq")
_DENT_V1: Final = struct.Struct("<4sIIII")
_DENT_V2: Final = struct.Struct("<4sIQQIIIIQqqqI")

#: Requests whose u32 is the length of a path that follows.
_PATH_REQUESTS: Final = frozenset({b"STAT", b"STA2", b"LST2", b"LIST", b"LIS2", b"SEND", b"RECV"})


@attrs.frozen
class SyncMessage:
    id: bytes  # b"STAT", b"DATA", ...
    value: int  # the u32: a length, or DONE's mtime
    payload: bytes = b""


@attrs.frozen
class StatResult:
    """What a stat reply carries; `error` is an errno (0: the other fields are valid)."""

    error: int = 0
    mode: int = 0
    size: int = 0
    mtime: int = 0
    nlink: int = 1
    ino: int = 0


class SyncDecoder:
    """Host -> device sync messages, across any split of the byte stream."""

    __slots__ = ("_buf",)

    def __init__(self) -> None:
        self._buf = bytearray()

    @property
    def buffered(self) -> int:
        return len(self._buf)

    def feed(self, data: bytes) -> list[SyncMessage]:
        buf = self._buf
        buf += data
        messages: list[SyncMessage] = []
        pos = 0
        while len(buf) - pos >= _REQUEST.size:
            ident, value = _REQUEST.unpack_from(buf, pos)
            if ident in _PATH_REQUESTS:
                if value > MAX_PATH:
                    raise RemoteProtocolError(f"sync {ident.decode()} path of {value} bytes")
                length = value
            elif ident == b"DATA":
                if value > SYNC_DATA_MAX:
                    raise RemoteProtocolError(f"sync DATA of {value} bytes")
                length = value
            elif ident in (b"DONE", b"QUIT"):
                length = 0
            else:
                raise RemoteProtocolError(f"unknown sync request {bytes(ident)!r}")
            stop = pos + _REQUEST.size + length
            if stop > len(buf):
                break
            messages.append(
                SyncMessage(bytes(ident), value, bytes(buf[pos + _REQUEST.size : stop]))
            )
            pos = stop
        del buf[:pos]
        return messages


def encode_stat_v1(st: StatResult) -> bytes:
    if st.error:
        return _STAT_V1.pack(b"STAT", 0, 0, 0)
    return _STAT_V1.pack(b"STAT", st.mode, st.size & 0xFFFF_FFFF, st.mtime & 0xFFFF_FFFF)


def encode_stat_v2(ident: bytes, st: StatResult) -> bytes:
    if st.error:
        return _STAT_V2.pack(ident, st.error, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
    return _STAT_V2.pack(
        ident, 0, 0, st.ino, st.mode, st.nlink, 0, 0, st.size, st.mtime, st.mtime, st.mtime
    )


def encode_dent_v1(name: bytes, st: StatResult) -> bytes:
    header = _DENT_V1.pack(
        b"DENT", st.mode, st.size & 0xFFFF_FFFF, st.mtime & 0xFFFF_FFFF, len(name)
    )
    return header + name


def encode_dent_v2(name: bytes, st: StatResult) -> bytes:
    header = _DENT_V2.pack(
        b"DNT2", st.error, 0, st.ino, st.mode, st.nlink, 0, 0, st.size,
        st.mtime, st.mtime, st.mtime, len(name),
    )  # fmt: skip
    return header + name


def encode_list_done(v2: bool) -> bytes:
    size = _DENT_V2.size if v2 else _DENT_V1.size
    return b"DONE" + bytes(size - 4)


def encode_data(chunk: bytes | memoryview) -> bytes:
    return _REQUEST.pack(b"DATA", len(chunk)) + chunk


def encode_done() -> bytes:
    return _REQUEST.pack(b"DONE", 0)


def encode_okay() -> bytes:
    return _REQUEST.pack(b"OKAY", 0)


def encode_fail(message: str) -> bytes:
    data = message.encode("utf-8", "replace")
    return _REQUEST.pack(b"FAIL", len(data)) + data
