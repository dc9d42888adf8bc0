"""What an idle session does on the wire: keepalives (docs/protocol.md 5.2)."""

from __future__ import annotations

import trio
import trio.testing

from devyard.core import open_session
from devyard.core.codec import FrameDecoder
from devyard.core.frames import Flag, FrameType


async def _relay(
    source: trio.abc.ReceiveStream, sink: trio.abc.SendStream, pings: list[float]
) -> None:
    """Copy bytes on, noting when each PING (not its ACK) passes."""
    decoder = FrameDecoder(1024 * 1024)
    while data := await source.receive_some():
        for frame in decoder.feed(data):
            if frame.type is FrameType.PING and frame.flags & Flag.SYN:
                pings.append(trio.current_time())
        await sink.send_all(data)


async def test_on_an_idle_link_only_the_dialling_side_pings(
    autojump_clock: trio.abc.Clock,
) -> None:
    client_end, client_wire = trio.testing.memory_stream_pair()
    server_end, server_wire = trio.testing.memory_stream_pair()
    from_client: list[float] = []
    from_server: list[float] = []
    async with (
        open_session(client_end, client=True) as client,
        open_session(server_end, client=False) as server,
        trio.open_nursery() as nursery,
    ):
        nursery.start_soon(_relay, client_wire, server_wire, from_client)
        nursery.start_soon(_relay, server_wire, client_wire, from_server)
        started = trio.current_time()
        await trio.sleep(305)
        assert not client.ended and not server.ended
        nursery.cancel_scope.cancel()
    # one PING per 10 s of silence, answered; the accepting side, which would ping after 15 s,
    # never has to: each PING from the dialling side reaches it first
    assert len(from_client) == 30
    assert from_client[0] - started == 10
    assert from_server == []


async def test_the_accepting_side_pings_a_peer_that_does_not(
    autojump_clock: trio.abc.Clock,
) -> None:
    ours, raw = trio.testing.memory_stream_pair()
    async with open_session(ours, client=False) as session:
        started = trio.current_time()
        decoder = FrameDecoder(64 * 1024)
        with trio.fail_after(60):
            while not any(f.type is FrameType.PING for f in decoder.feed(await raw.receive_some())):
                pass
        assert trio.current_time() - started == 15  # half an interval after the dialler would
        assert not session.ended
