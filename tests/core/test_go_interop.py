"""Interop with a peer nobody here wrote: hashicorp/yamux (Debian's snapshot), in a real Go
process over real TCP on 127.0.0.1.

The Go side is `bench/goyamux` in mode `peer`: it echoes every stream we open (until our FIN,
then closes its side), and on stdin commands opens streams to us (8-byte big-endian length,
then that many bytes of `j % 251`; it expects them echoed, then our FIN, then closes), pings,
or tries OpenStream to show whether it saw our GO_AWAY. Every line it prints is an event we
wait for. Each test runs with Go as yamux server (we open odd ids) and as client (even ids).

Skipped, with the reason, only where `go` or the yamux sources are missing; CI installs both
(scripts/deps). Every wait is bounded by `trio.fail_after`; the Go process is ended on the
way out of every test, also on failure.
"""

from __future__ import annotations

import struct
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio

from bench._gopeer import go_peer
from bench._procs import Child, spawn
from devyard.core import MuxStream, Session, SessionConfig, open_session

pytestmark = pytest.mark.slow

MiB = 1024 * 1024
STEP = 10.0  # seconds any single step may take; generous for a loaded 2-core CI machine
GO_AWAY_REFUSED = "remote end is not accepting connections"  # yamux.ErrRemoteGoAway


def pattern(n: int) -> bytes:
    """The Go peer's payload: byte j is j % 251."""
    return (bytes(range(251)) * (n // 251 + 1))[:n]


@pytest.fixture(scope="session")
def go_binary() -> Path:
    built = go_peer()
    if built.path is None:
        pytest.skip(f"Go yamux peer unavailable: {built.reason}")
    return built.path


@pytest.fixture(params=["go-server", "go-client"])
def go_role(request: pytest.FixtureRequest) -> str:
    role: str = request.param
    return role


class GoPeer:
    """The Go process: send a command line, wait for the event line that answers it."""

    def __init__(self, child: Child) -> None:
        self.child = child
        self.events: list[str] = []
        self._reading = trio.Lock()

    async def command(self, line: str) -> None:
        await self.child.send_line(line)

    async def expect(self, match: Callable[[str], bool]) -> str:
        """The first event (already seen or next) that `match`es; other events are kept for
        whoever waits for them. One task reads at a time; the others look at what it kept."""
        with trio.fail_after(STEP):
            async with self._reading:
                for i, event in enumerate(self.events):
                    if match(event):
                        return self.events.pop(i)
                while True:
                    event = await self.child.readline()
                    if match(event):
                        return event
                    self.events.append(event)

    async def expect_prefix(self, prefix: str) -> str:
        return await self.expect(lambda event: event.startswith(prefix))

    async def echoed(self, stream_id: int) -> tuple[int, str]:
        """Go's report that it echoed our stream `stream_id`: (bytes, 'ok' or the error)."""
        event = await self.expect(lambda e: e.startswith(f"ECHOED {stream_id} "))
        _, _, count, outcome = event.split(" ", 3)
        return int(count), outcome


@asynccontextmanager
async def go_session(
    binary: Path, role: str, logdir: Path, config: SessionConfig | None = None
) -> AsyncIterator[tuple[Session, GoPeer]]:
    """Our session joined to a Go yamux session; Go is the yamux server for "go-server"."""
    config = config or SessionConfig()
    if role == "go-server":
        async with spawn(
            "go-peer", [str(binary), "peer", "-listen", "127.0.0.1:0"], logdir=logdir
        ) as child:
            peer = GoPeer(child)
            with trio.fail_after(STEP):
                host, port = await child.wait_listen()
                transport: trio.abc.Stream = await trio.open_tcp_stream(host, port)
            async with open_session(transport, client=True, config=config) as session:
                await peer.expect_prefix("READY")
                yield session, peer
            # Our session is closed (GO_AWAY, then the connection): Go's session must end too.
            assert await peer.expect_prefix("SESSION") == "SESSION closed"
    else:
        (listener,) = await trio.open_tcp_listeners(0, host="127.0.0.1")
        async with listener:
            port = listener.socket.getsockname()[1]
            argv = [str(binary), "peer", "-dial", f"127.0.0.1:{port}"]
            async with spawn("go-peer", argv, logdir=logdir) as child:
                peer = GoPeer(child)
                with trio.fail_after(STEP):
                    transport = await listener.accept()
                async with open_session(transport, client=False, config=config) as session:
                    await peer.expect_prefix("READY")
                    yield session, peer
                assert await peer.expect_prefix("SESSION") == "SESSION closed"


async def echo_through(stream: MuxStream, payload: bytes) -> bytes:
    """Send `payload` then our FIN while collecting what comes back until the peer's FIN."""
    received = bytearray()

    async def send() -> None:
        view = memoryview(payload)
        for offset in range(0, len(payload), 100_000):  # uneven pieces: not frame-aligned
            await stream.send_all(view[offset : offset + 100_000])
        await stream.send_eof()

    async def receive() -> None:
        while chunk := await stream.receive_some():
            received.extend(chunk)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(send)
        nursery.start_soon(receive)
    return bytes(received)


async def receive_exactly(stream: MuxStream, n: int) -> bytes:
    data = bytearray()
    while len(data) < n:
        chunk = await stream.receive_some(n - len(data))
        assert chunk, f"EOF after {len(data)} of {n} bytes"
        data.extend(chunk)
    return bytes(data)


async def serve_go_stream(stream: MuxStream) -> int:
    """Echo one Go-opened stream: length header, echo that many bytes, our FIN, their FIN."""
    size: int = struct.unpack(">Q", await receive_exactly(stream, 8))[0]
    echoed = bytearray()
    while len(echoed) < size:
        chunk = await stream.receive_some(size - len(echoed))
        assert chunk, f"Go's stream {stream.stream_id} ended after {len(echoed)} of {size}"
        await stream.send_all(chunk)
        echoed.extend(chunk)
    assert bytes(echoed) == pattern(size)
    await stream.send_eof()
    assert await stream.receive_some() == b"", "Go should close its side after our FIN"
    await stream.aclose()
    return size


def our_parity(role: str) -> int:
    return 1 if role == "go-server" else 0


async def test_we_open_a_stream_and_go_echoes_megabytes(
    go_binary: Path, go_role: str, tmp_path: Path
) -> None:
    async with go_session(go_binary, go_role, tmp_path) as (session, peer):
        stream = await session.open_stream()
        assert stream.stream_id % 2 == our_parity(go_role)
        payload = pattern(3 * MiB + 17)  # a dozen 256 KiB windows each way
        with trio.fail_after(STEP):
            back = await echo_through(stream, payload)
        assert back == payload
        # Go's io.Copy ended on our FIN (our send_eof), then it closed: that gave us EOF above.
        assert await peer.echoed(stream.stream_id) == (len(payload), "ok")
        await stream.aclose()


async def test_concurrent_streams_we_open(go_binary: Path, go_role: str, tmp_path: Path) -> None:
    sizes = [1, 1000, 65536, 65537, 300_000, MiB, 2 * MiB, 4 * MiB]
    async with go_session(go_binary, go_role, tmp_path) as (session, peer):
        results: dict[int, bool] = {}

        async def one(size: int) -> None:
            stream = await session.open_stream()
            payload = pattern(size)
            results[stream.stream_id] = await echo_through(stream, payload) == payload
            assert await peer.echoed(stream.stream_id) == (size, "ok")
            await stream.aclose()

        with trio.fail_after(3 * STEP):
            async with trio.open_nursery() as nursery:
                for size in sizes:
                    nursery.start_soon(one, size)
        assert len(results) == len(sizes)
        assert all(results.values())
        assert all(sid % 2 == our_parity(go_role) for sid in results)


@pytest.mark.parametrize(
    "size",
    [
        # One Go Write of 60000 bytes: frames no larger than ours (64 KiB).
        pytest.param(60_000, id="frames-within-64KiB"),
        # One Go Write of 2 MiB: yamux cuts DATA frames by the send window alone, so frames of
        # 256 KiB and, as our window grows, more. Legal yamux: the window is the only limit.
        pytest.param(2 * MiB, id="window-sized-frames"),
    ],
)
async def test_go_opens_streams_and_we_echo(
    go_binary: Path, go_role: str, tmp_path: Path, size: int
) -> None:
    count = 4
    async with go_session(go_binary, go_role, tmp_path) as (session, peer):
        await peer.command(f"open {count} {size}")
        served: list[int] = []
        with trio.fail_after(3 * STEP):
            async with trio.open_nursery() as nursery:
                for _ in range(count):
                    stream = await session.accept_stream()
                    assert stream.stream_id % 2 == 1 - our_parity(go_role)

                    async def serve(s: MuxStream = stream) -> None:
                        served.append(await serve_go_stream(s))

                    nursery.start_soon(serve)
        assert served == [size] * count
        # Go verified the echo byte for byte and saw our FIN before closing.
        assert await peer.expect_prefix("OPENED") == f"OPENED ok {count}"


async def test_a_stalled_stream_does_not_hold_up_another(
    go_binary: Path, go_role: str, tmp_path: Path
) -> None:
    payload = pattern(2 * MiB)  # far more than the windows and buffers on the way hold
    async with go_session(go_binary, go_role, tmp_path) as (session, peer):
        stalled = await session.open_stream()
        pushed = trio.Event()

        async def push() -> None:
            # Go echoes what we send; we do not read it yet, so Go's echo stops at our window,
            # then Go stops reading, then our send_all stops at Go's window.
            await stalled.send_all(payload)
            await stalled.send_eof()
            pushed.set()

        with trio.fail_after(3 * STEP):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(push)
                other = await session.open_stream()
                assert await echo_through(other, b"still moving") == b"still moving"
                assert await peer.echoed(other.stream_id) == (12, "ok")
                assert not pushed.is_set(), "the stalled stream should still be held by its window"
                drained = bytearray()
                while chunk := await stalled.receive_some():
                    drained.extend(chunk)
        assert bytes(drained) == payload
        assert await peer.echoed(stalled.stream_id) == (len(payload), "ok")


async def test_pings_both_ways(go_binary: Path, go_role: str, tmp_path: Path) -> None:
    async with go_session(go_binary, go_role, tmp_path) as (session, peer):
        await peer.command("ping")
        event = await peer.expect_prefix("PING")
        assert event.startswith("PING ok "), event
        assert int(event.split()[2]) > 0
        with trio.fail_after(STEP):
            rtt = await session.ping()
        assert 0 < rtt < STEP


async def test_go_sees_our_go_away(go_binary: Path, go_role: str, tmp_path: Path) -> None:
    async with go_session(go_binary, go_role, tmp_path) as (session, peer):
        session.go_away_nowait()
        with trio.fail_after(STEP):
            await session.ping()  # answered after Go read the GO_AWAY queued before it
        await peer.command("open-check")
        assert await peer.expect_prefix("OPENCHECK") == f"OPENCHECK refused {GO_AWAY_REFUSED}"


async def test_go_away_on_close_keeps_existing_streams_until_then(
    go_binary: Path, go_role: str, tmp_path: Path
) -> None:
    async with go_session(go_binary, go_role, tmp_path) as (session, peer):
        stream = await session.open_stream()
        session.go_away_nowait()
        # A stream opened before GO_AWAY goes on working both ways.
        with trio.fail_after(STEP):
            assert await echo_through(stream, pattern(MiB)) == pattern(MiB)
        assert await peer.echoed(stream.stream_id) == (MiB, "ok")


async def test_go_closing_the_connection_ends_our_session(
    go_binary: Path, go_role: str, tmp_path: Path
) -> None:
    async with go_session(go_binary, go_role, tmp_path) as (session, peer):
        stream = await session.open_stream()
        await peer.command("close")
        with trio.fail_after(STEP):
            await session.wait_ended()
        with pytest.raises(trio.BrokenResourceError):
            await stream.send_all(b"after the end")
        with pytest.raises((trio.EndOfChannel, trio.BrokenResourceError)):
            await session.accept_stream()
