"""docs/protocol.md 6.3: relayed WebSocket messages keep their kind and their boundaries."""

from __future__ import annotations

import pytest
import trio
import trio.testing
from hypothesis import given
from hypothesis import strategies as st

from devyard.core import RelayChannel, RelayDecoder, RemoteProtocolError, encode_relay
from devyard.core.relay import MAX_RELAY_MESSAGE

messages = st.lists(st.one_of(st.text(max_size=300), st.binary(max_size=300)), max_size=20)


@given(messages, st.integers(min_value=1, max_value=50))
def test_any_split_decodes_the_same_messages(batch: list[str | bytes], step: int) -> None:
    wire = b"".join(encode_relay(m) for m in batch)
    decoder = RelayDecoder()
    out: list[str | bytes] = []
    for start in range(0, len(wire), step):
        out += decoder.feed(wire[start : start + step])
    decoder.feed_eof()
    assert out == batch
    assert [type(m) for m in out] == [type(m) for m in batch]


def test_bad_input_is_a_protocol_error() -> None:
    with pytest.raises(RemoteProtocolError, match="opcode 7"):
        RelayDecoder().feed(b"\x07\x00\x00\x00\x00")
    with pytest.raises(RemoteProtocolError, match="too large"):
        RelayDecoder().feed(b"\x02" + (MAX_RELAY_MESSAGE + 1).to_bytes(4, "big"))
    with pytest.raises(RemoteProtocolError, match="not UTF-8"):
        RelayDecoder().feed(b"\x01\x00\x00\x00\x01\xff")
    truncated = RelayDecoder()
    truncated.feed(encode_relay(b"abc")[:-1])
    with pytest.raises(RemoteProtocolError, match="inside a relay message"):
        truncated.feed_eof()
    with pytest.raises(ValueError, match="exceeds"):
        encode_relay(bytes(MAX_RELAY_MESSAGE + 1))


async def test_channel_over_a_stream_pair() -> None:
    left, right = trio.testing.memory_stream_pair()
    a, b = RelayChannel(left), RelayChannel(right)
    await a.send('{"type":"hello"}')
    await a.send(b"\x03\x01frame")
    assert await b.receive() == '{"type":"hello"}'
    assert await b.receive() == b"\x03\x01frame"
    await left.send_eof()
    with pytest.raises(trio.EndOfChannel):
        await b.receive()
