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
_LAST_FLAGS = int(Flag.FIN | Flag.RST)  # what the last fragment of a cut DATA frame carries


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
    """Incremental decoder. `max_payload` bounds a DATA frame (a larger one is a protocol error).

    Whole frames are parsed straight from the caller's buffer, and a whole DATA payload is a
    read-only view of it: no copy (the receiver decides whether to copy; see
    MuxStream._on_data). Only a frame cut by the end of a chunk is held back: a partial header
    (under 12 bytes) as a copy, a DATA payload as the pieces seen so far (views of immutable
    `bytes` chunks, copies of anything else), joined once when the last piece arrives.

    With `fragments=True` a cut DATA payload is not held back either: each piece comes out as
    it arrives, as a DATA frame of that piece's length for the same stream, so no payload byte
    is ever copied. The first piece carries the frame's SYN and ACK, the last its FIN and RST,
    the ones between no flags. (The session reads large chunks, so most large frames are cut;
    a stream does not care where one frame ends and the next begins.)
    """

    __slots__ = ("_broken", "_fragments", "_head", "_max_payload", "_need", "_parts", "_pending")

    def __init__(self, max_payload: int, *, fragments: bool = False) -> None:
        self._max_payload = max_payload
        self._fragments = fragments
        self._broken = False
        self._head = b""  # bytes of a header not yet complete
        self._pending: tuple[int, int, int] | None = None  # flags, sid, length of a cut DATA
        self._parts: list[bytes | memoryview] = []  # its payload so far
        self._need = 0  # payload bytes it still lacks

    @property
    def buffered(self) -> int:
        """Bytes of a frame not yet complete (held back, or passed on as fragments)."""
        if self._pending is not None:
            return HEADER_SIZE + self._pending[2] - self._need
        return len(self._head)

    def feed(self, data: bytes | bytearray | memoryview) -> list[Frame]:
        if self._broken:
            raise RemoteProtocolError("decoder already failed")
        frames: list[Frame] = []
        if not isinstance(data, bytes):
            data = bytes(data)  # we may keep views of it: the caller may reuse a mutable buffer
        pos = 0
        end = len(data)
        view = memoryview(data)
        if self._pending is not None:
            pos = self._continue_payload(data, frames)
            if self._pending is not None:
                return frames
        elif self._head:
            missing = HEADER_SIZE - len(self._head)
            if end < missing:
                self._head += data
                return frames
            header = self._head + data[:missing]  # a header cut in two: only it is joined
            self._head = b""
            pos = self._frame(header, 0, view, missing, end=end, frames=frames)
            if self._need:  # that frame's payload runs past this chunk
                return frames
        while end - pos >= HEADER_SIZE:
            pos = self._frame(data, pos, view, pos + HEADER_SIZE, end=end, frames=frames)
            if self._need:
                return frames
        if pos < end:
            self._head = data[pos:]
        return frames

    def _frame(
        self, header: bytes, at: int, view: memoryview, start: int, *, end: int, frames: list[Frame]
    ) -> int:
        """Decode the header at header[at:], whose payload (if any) starts at view[start:end].

        Returns where the next frame starts; a payload cut by `end` leaves `_pending` set.
        """
        version, ftype, flags, sid, length = _unpack_from(header, at)
        if version != PROTOCOL_VERSION:
            raise self._fail(f"unsupported protocol version {version}")
        if flags & ~_ALL_FLAGS:
            raise self._fail(f"unknown flags {flags:#x}")
        if ftype != _DATA:
            kind = _TYPES.get(ftype)
            if kind is None:
                raise self._fail(f"unknown frame type {ftype}")
            frames.append(Frame(kind, flags, sid, length))
            return start
        if length > self._max_payload:
            raise self._fail(f"DATA frame of {length} bytes exceeds {self._max_payload}")
        stop: int = start + length
        if stop <= end:
            frames.append(Frame(FrameType.DATA, flags, sid, length, view[start:stop]))
            return stop
        self._need = stop - end
        if not self._fragments:
            self._pending = (flags, sid, length)
            self._parts = [view[start:]]
            return end
        self._pending = (flags & _LAST_FLAGS, sid, length)
        first = flags & ~_LAST_FLAGS
        if start < end or first:
            piece = view[start:]
            frames.append(Frame(FrameType.DATA, first, sid, len(piece), piece))
        return end

    def _continue_payload(self, data: bytes, frames: list[Frame]) -> int:
        """Add the next piece of a cut DATA payload; return where the next frame starts."""
        assert self._pending is not None
        take = min(self._need, len(data))
        self._need -= take
        if self._fragments:
            flags, sid, _ = self._pending
            done = self._need == 0
            piece = memoryview(data)[:take]
            frames.append(Frame(FrameType.DATA, flags if done else 0, sid, take, piece))
            if done:
                self._pending = None
            return take
        self._parts.append(memoryview(data)[:take])
        if self._need == 0:
            flags, sid, length = self._pending
            frames.append(Frame(FrameType.DATA, flags, sid, length, b"".join(self._parts)))
            self._pending = None
            self._parts = []
        return take

    def feed_eof(self) -> None:
        """The byte stream ended. Raises RemoteProtocolError if it ended inside a frame."""
        if self.buffered:
            raise self._fail(f"stream ended inside a frame ({self.buffered} bytes pending)")

    def _fail(self, message: str) -> RemoteProtocolError:
        self._broken = True
        return RemoteProtocolError(message)
