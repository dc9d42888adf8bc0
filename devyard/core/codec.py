"""Pure encoder and incremental decoder of yamux frames (docs/protocol.md section 2).

No I/O and no trio: bytes in, frames out. `FrameDecoder.feed()` accepts any split of the byte
stream (one byte at a time or many frames at once) and returns the complete frames; a malformed
header raises RemoteProtocolError and leaves the decoder unusable. EOF is an input too:
`feed_eof()` says whether the stream ended cleanly between frames.
"""

from __future__ import annotations

from ._errors import RemoteProtocolError
from .frames import HEADER, HEADER_SIZE, PROTOCOL_VERSION, Flag, Frame, FrameType

__all__ = [
    "FrameDecoder",
    "encode_data_header",
    "encode_frame",
    "encode_go_away",
    "encode_ping",
    "encode_window_update",
]

_pack = HEADER.pack
_unpack_from = HEADER.unpack_from
_DATA = int(FrameType.DATA)
_TYPES = {int(t): t for t in FrameType}
_ALL_FLAGS = int(Flag.SYN | Flag.ACK | Flag.FIN | Flag.RST)


def encode_data_header(flags: int, stream_id: int, length: int) -> bytes:
    """Header of a DATA frame; the caller sends `length` payload bytes after it."""
    return _pack(PROTOCOL_VERSION, _DATA, flags, stream_id, length)


def encode_window_update(flags: int, stream_id: int, delta: int) -> bytes:
    return _pack(PROTOCOL_VERSION, FrameType.WINDOW_UPDATE, flags, stream_id, delta)


def encode_ping(flags: int, opaque: int) -> bytes:
    return _pack(PROTOCOL_VERSION, FrameType.PING, flags, 0, opaque)


def encode_go_away(code: int) -> bytes:
    return _pack(PROTOCOL_VERSION, FrameType.GO_AWAY, 0, 0, code)


def encode_frame(frame: Frame) -> bytes:
    """Whole frame as bytes (header, plus the payload for DATA)."""
    header = _pack(PROTOCOL_VERSION, frame.type, frame.flags, frame.stream_id, frame.length)
    if frame.type is FrameType.DATA:
        if len(frame.payload) != frame.length:
            raise ValueError("DATA frame length does not match its payload")
        return header + frame.payload
    return header


class FrameDecoder:
    """Incremental decoder. `max_payload` bounds a DATA frame (a larger one is a protocol error)."""

    __slots__ = ("_broken", "_buf", "_max_payload")

    def __init__(self, max_payload: int) -> None:
        self._buf = bytearray()
        self._max_payload = max_payload
        self._broken = False

    @property
    def buffered(self) -> int:
        """Bytes held back because they do not yet form a whole frame."""
        return len(self._buf)

    def feed(self, data: bytes | bytearray | memoryview) -> list[Frame]:
        if self._broken:
            raise RemoteProtocolError("decoder already failed")
        if self._buf:
            self._buf += data
            src: bytes | bytearray | memoryview = self._buf
        else:
            src = data  # fast path: parse straight from the caller's buffer, no accumulate copy
        frames: list[Frame] = []
        pos = 0
        end = len(src)
        max_payload = self._max_payload
        view = memoryview(src)
        try:
            while end - pos >= HEADER_SIZE:
                version, ftype, flags, sid, length = _unpack_from(src, pos)
                if version != PROTOCOL_VERSION:
                    raise self._fail(f"unsupported protocol version {version}")
                if flags & ~_ALL_FLAGS:
                    raise self._fail(f"unknown flags {flags:#x}")
                if ftype == _DATA:
                    if length > max_payload:
                        raise self._fail(f"DATA frame of {length} bytes exceeds {max_payload}")
                    stop = pos + HEADER_SIZE + length
                    if stop > end:
                        break
                    payload = bytes(view[pos + HEADER_SIZE : stop])
                    frames.append(Frame(FrameType.DATA, flags, sid, length, payload))
                    pos = stop
                else:
                    kind = _TYPES.get(ftype)
                    if kind is None:
                        raise self._fail(f"unknown frame type {ftype}")
                    frames.append(Frame(kind, flags, sid, length))
                    pos += HEADER_SIZE
        finally:
            view.release()
        if src is self._buf:
            del self._buf[:pos]
        elif pos < end:
            self._buf += memoryview(src)[pos:]
        return frames

    def feed_eof(self) -> None:
        """The byte stream ended. Raises RemoteProtocolError if it ended inside a frame."""
        if self._buf:
            n = len(self._buf)
            raise self._fail(f"stream ended inside a frame ({n} bytes pending)")

    def _fail(self, message: str) -> RemoteProtocolError:
        self._broken = True
        return RemoteProtocolError(message)
