"""Codec tests (docs/protocol.md section 2): no trio, no I/O."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from devyard.core import Flag, Frame, FrameType, RemoteProtocolError
from devyard.core.codec import (
    FrameDecoder,
    encode_data_header,
    encode_frame,
    encode_go_away,
    encode_ping,
    encode_window_update,
)
from devyard.core.frames import HEADER_SIZE

MAX = 64 * 1024


def _frames() -> list[Frame]:
    return [
        Frame(FrameType.WINDOW_UPDATE, Flag.SYN, 1, 0),
        Frame(FrameType.DATA, 0, 1, 5, b"hello"),
        Frame(FrameType.DATA, Flag.FIN, 1, 0, b""),
        Frame(FrameType.WINDOW_UPDATE, Flag.ACK, 2, 1 << 20),
        Frame(FrameType.PING, Flag.SYN, 0, 0xDEADBEEF),
        Frame(FrameType.PING, Flag.ACK, 0, 0xDEADBEEF),
        Frame(FrameType.GO_AWAY, 0, 0, 0x12),
        Frame(FrameType.DATA, Flag.RST, 0xFFFF_FFFF, 3, b"\x00\xff\x10"),
        Frame(FrameType.DATA, 0, 7, MAX, bytes(range(256)) * (MAX // 256)),
    ]


def test_header_layout_is_yamux() -> None:
    # section 2: version | type | flags (u16 BE) | stream id (u32 BE) | length (u32 BE)
    assert encode_window_update(Flag.SYN | Flag.ACK, 0x01020304, 0x0A0B0C0D) == bytes(
        [0, 1, 0, 3, 1, 2, 3, 4, 0x0A, 0x0B, 0x0C, 0x0D]
    )
    assert encode_ping(Flag.ACK, 7) == bytes([0, 2, 0, 2, 0, 0, 0, 0, 0, 0, 0, 7])
    assert encode_go_away(1) == bytes([0, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1])
    assert encode_data_header(Flag.FIN, 3, 10) == bytes([0, 0, 0, 4, 0, 0, 0, 3, 0, 0, 0, 10])
    assert HEADER_SIZE == 12


def test_round_trip_all_at_once() -> None:
    frames = _frames()
    wire = b"".join(encode_frame(f) for f in frames)
    decoder = FrameDecoder(MAX)
    assert decoder.feed(wire) == frames
    assert decoder.buffered == 0
    decoder.feed_eof()


def test_round_trip_one_byte_at_a_time() -> None:
    frames = _frames()
    wire = b"".join(encode_frame(f) for f in frames)
    decoder = FrameDecoder(MAX)
    got: list[Frame] = []
    for i in range(len(wire)):
        got.extend(decoder.feed(wire[i : i + 1]))
    assert got == frames


@given(st.lists(st.integers(min_value=1, max_value=4096), min_size=1, max_size=50))
def test_round_trip_any_split(cuts: list[int]) -> None:
    frames = _frames()
    wire = b"".join(encode_frame(f) for f in frames)
    decoder = FrameDecoder(MAX)
    got: list[Frame] = []
    pos = 0
    for cut in cuts:
        got.extend(decoder.feed(memoryview(wire)[pos : pos + cut]))
        pos += cut
    got.extend(decoder.feed(wire[pos:]))
    assert got == frames


def test_a_frame_cut_across_chunks_is_held_back_until_whole() -> None:
    payload = bytes(range(256)) * 40
    wire = encode_frame(Frame(FrameType.DATA, 0, 3, len(payload), payload)) + encode_ping(0, 9)
    decoder = FrameDecoder(MAX)
    assert decoder.feed(wire[:5]) == []  # inside the header
    assert decoder.buffered == 5
    assert decoder.feed(wire[5:4000]) == []  # inside the payload
    assert decoder.buffered == 4000
    assert decoder.feed(bytearray(wire[4000:8000])) == []  # a mutable chunk is copied, not kept
    frames = decoder.feed(wire[8000:])
    assert frames == [
        Frame(FrameType.DATA, 0, 3, len(payload), payload),
        Frame(FrameType.PING, 0, 0, 9),
    ]
    assert type(frames[0].payload) is bytes
    assert decoder.buffered == 0


@given(st.binary(max_size=2000))
def test_any_bytes_give_frames_or_a_protocol_error(data: bytes) -> None:
    decoder = FrameDecoder(1024)
    try:
        frames = decoder.feed(data)
    except RemoteProtocolError:
        return
    for frame in frames:
        assert isinstance(frame.type, FrameType)
        assert frame.flags & ~0xF == 0
        if frame.type is FrameType.DATA:
            assert len(frame.payload) == frame.length <= 1024
        else:
            assert frame.payload == b""
    # what is left is less than a whole frame
    consumed = sum(HEADER_SIZE + len(f.payload) for f in frames)
    assert decoder.buffered == len(data) - consumed


@pytest.mark.parametrize(
    ("wire", "message"),
    [
        (bytes([1, 0, 0, 0]) + bytes(8), "version"),
        (bytes([0, 9, 0, 0]) + bytes(8), "type"),
        (bytes([0, 0, 0, 0x10]) + bytes(8), "flags"),
        (encode_data_header(0, 1, MAX + 1), "exceeds"),
    ],
)
def test_malformed_headers_are_protocol_errors(wire: bytes, message: str) -> None:
    decoder = FrameDecoder(MAX)
    with pytest.raises(RemoteProtocolError, match=message):
        decoder.feed(wire)
    with pytest.raises(RemoteProtocolError):
        decoder.feed(b"")  # a failed decoder stays failed


def test_eof_inside_a_frame_is_a_protocol_error() -> None:
    decoder = FrameDecoder(MAX)
    assert decoder.feed(encode_data_header(0, 1, 10) + b"abc") == []
    with pytest.raises(RemoteProtocolError, match="inside a frame"):
        decoder.feed_eof()


def test_encode_frame_checks_payload_length() -> None:
    with pytest.raises(ValueError, match="length"):
        encode_frame(Frame(FrameType.DATA, 0, 1, 3, b"ab"))
