"""AdbConnection: the device end of one ADB transport (a TCP socket, later a bridged stream).

Theory of operation
-------------------
`run()` owns a nursery with

* the **reader** (the `run` task itself), the only task that reads the transport: it feeds the
  pure PacketDecoder and dispatches each packet synchronously. CNXN is answered at once; OPEN
  creates an AdbStream and starts its service task; OKAY, WRTE and CLSE go to their stream's
  `_on_*` method, which only updates state and wakes waiters. The reader never waits on a
  service, so a stalled service cannot hold up the others.
* the **writer**, the only task that writes the transport. Everything is queued as encoded
  packets; the writer joins what is pending into one `send_all`. Control packets (OKAY, CLSE,
  OPEN) are queued without waiting: there are at most a few per stream, and streams are
  bounded by `max_streams`. WRTE payloads first wait for room under `max_outbound`.
* one **service task** per stream (and the reverse-forward listeners), which the nursery
  owns too, so they all end when the connection ends.

The connection ends on EOF (a clean return), a broken transport (a return: the host went away)
or a protocol violation (RemoteProtocolError is raised). Either way every stream breaks, every
service task is cancelled and the transport is closed.

Before the host's CNXN nothing but CNXN is accepted. We answer CNXN directly without AUTH, which
adb accepts ("connected"); a second CNXN means the host restarted its side: every stream breaks
and we answer again. Packets for streams we no longer know are dropped, as adbd does: they
crossed our CLSE on the wire.
"""

from __future__ import annotations

import itertools
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any, Final

import trio
from trio.lowlevel import ParkingLot, checkpoint

from ._errors import ProtocolError, RemoteProtocolError
from .config import DEFAULT_CONFIG, AdbConfig
from .packets import A_VERSION, Command, Packet, PacketDecoder, encode_packet
from .state import StreamState
from .stream import AdbStream

__all__ = ["AdbConnection", "ServiceRunner"]

log = logging.getLogger(__name__)

#: Runs the service a host-opened stream names; must accept() or refuse() it first.
ServiceRunner = Callable[[AdbStream, "AdbConnection"], Awaitable[None]]

_MIN_VERSION: Final = 0x01000000
_RECEIVE_SIZE: Final = 256 * 1024
_WRITE_BATCH: Final = 1024 * 1024


class AdbConnection:
    def __init__(
        self,
        transport: trio.abc.Stream,
        banner: bytes,
        run_service: ServiceRunner,
        config: AdbConfig = DEFAULT_CONFIG,
    ) -> None:
        self._transport = transport
        self._banner = banner
        self._run_service_fn = run_service
        self.config: Final = config
        self.max_data = config.max_payload  # lowered to the host's maxdata by CNXN
        self.host_banner = ""
        self._online = False
        self._checksum = False
        self._streams: dict[int, AdbStream] = {}
        self._ids = itertools.count(1)
        self._outbound: deque[bytes] = deque()
        self._outbound_data = 0  # WRTE payload bytes in self._outbound
        self._writer_lot = ParkingLot()
        self._room_lot = ParkingLot()
        self._writing = False  # the writer is inside send_all
        self._nursery: trio.Nursery | None = None
        self._ended = False

    def __repr__(self) -> str:
        return f"<AdbConnection streams={len(self._streams)} online={self._online}>"

    @property
    def streams_open(self) -> int:
        return len(self._streams)

    # ---- running ---------------------------------------------------------------------------

    async def run(self) -> None:
        """Serve the transport until the host goes away; raises RemoteProtocolError on a
        protocol violation. Closes the transport in every case."""
        error: BaseException | None = None
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                nursery.start_soon(self._writer)
                try:
                    await self._reader()
                except (ProtocolError, trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                    error = exc
                self._lose_all()
                # Let the last answers (a CLSE, an exit code) go out before the transport closes.
                with trio.move_on_after(self.config.close_grace):
                    while (self._outbound or self._writing) and not self._ended:
                        await self._room_lot.park()
                nursery.cancel_scope.cancel()
        finally:
            self._ended = True
            self._lose_all()
            await trio.aclose_forcefully(self._transport)
        if isinstance(error, ProtocolError):
            raise error

    async def start(self, fn: Callable[..., Awaitable[Any]], *args: object) -> Any:
        """`nursery.start()` in the connection's nursery: for listeners that report readiness."""
        if self._nursery is None or self._ended:
            raise trio.BrokenResourceError("the ADB connection ended")
        return await self._nursery.start(fn, *args)

    async def open_stream(self, service: str) -> AdbStream:
        """Open a stream toward the host (for `adb reverse`); BrokenResourceError if refused."""
        if self._ended or not self._online:
            raise trio.BrokenResourceError("the ADB connection is not online")
        stream = AdbStream(self, next(self._ids), 0, service, StreamState.OPENING)
        self._streams[stream.local_id] = stream
        self.enqueue(Packet(Command.OPEN, stream.local_id, 0, service.encode() + b"\0"))
        await stream.wait_opened()
        return stream

    # ---- the outbound queue (streams call these) --------------------------------------------

    def enqueue(self, packet: Packet) -> None:
        if self._ended:
            return
        self._outbound.append(encode_packet(packet, checksum=self._checksum))
        if packet.command is Command.WRTE:
            self._outbound_data += len(packet.data)
        self._writer_lot.unpark_all()

    async def wait_outbound_room(self) -> None:
        while self._outbound_data >= self.config.max_outbound and not self._ended:
            await self._room_lot.park()
        await checkpoint()

    def forget(self, stream: AdbStream) -> None:
        if self._streams.get(stream.local_id) is stream:
            del self._streams[stream.local_id]

    # ---- tasks -----------------------------------------------------------------------------

    async def _writer(self) -> None:
        outbound = self._outbound
        header_size = 24
        while True:
            while not outbound:
                await self._writer_lot.park()
            batch: list[bytes] = []
            size = 0
            data = 0
            while outbound and size < _WRITE_BATCH:
                item = outbound.popleft()
                batch.append(item)
                size += len(item)
                if item[:4] == b"WRTE":
                    data += len(item) - header_size
            self._writing = True
            try:
                await self._transport.send_all(batch[0] if len(batch) == 1 else b"".join(batch))
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                self._ended = True
                self._lose_all()
                self._room_lot.unpark_all()
                return
            finally:
                self._writing = False
            self._outbound_data -= data
            self._room_lot.unpark_all()

    async def _reader(self) -> None:
        decoder = PacketDecoder(self.config.max_payload)
        while True:
            data = await self._transport.receive_some(_RECEIVE_SIZE)
            if not data:
                decoder.feed_eof()
                return
            for packet in decoder.feed(data):
                self._dispatch(packet)

    async def _serve_stream(self, stream: AdbStream) -> None:
        try:
            await self._run_service_fn(stream, self)
        except* (trio.BrokenResourceError, trio.ClosedResourceError) as group:
            log.debug("%r ended: %s", stream, group.exceptions[0])
        except* Exception:
            # A bug in one service must not take the device's other streams down with it.
            log.exception("service %r failed", stream.service)
        finally:
            stream.close_nowait()

    # ---- dispatch (synchronous, in the reader) -----------------------------------------------

    def _dispatch(self, packet: Packet) -> None:
        command = packet.command
        if command is Command.CNXN:
            self._on_cnxn(packet)
            return
        if not self._online:
            raise RemoteProtocolError(f"{command.name} before CNXN")
        if command is Command.OPEN:
            self._on_open(packet)
            return
        if command not in (Command.OKAY, Command.WRTE, Command.CLSE):
            raise RemoteProtocolError(f"unexpected {command.name} from the host")
        stream = self._streams.get(packet.arg1)
        if stream is None:
            return  # crossed our CLSE
        opening = stream.state in (StreamState.OPENING, StreamState.ABANDONED)
        if not opening and packet.arg0 != stream.remote_id:
            return  # not the peer of this stream: adbd drops these too
        if command is Command.OKAY:
            stream._on_okay(packet.arg0)
        elif command is Command.WRTE:
            stream._on_wrte(packet.data)
        else:
            stream._on_clse()

    def _on_cnxn(self, packet: Packet) -> None:
        if packet.arg0 < _MIN_VERSION:
            raise RemoteProtocolError(f"unsupported ADB version {packet.arg0:#x}")
        if self._online:
            self._lose_all()  # the host restarted its side of the transport
        self._checksum = packet.arg0 < A_VERSION
        self.max_data = max(256, min(packet.arg1, self.config.max_payload))
        self.host_banner = packet.data.rstrip(b"\0").decode("utf-8", "replace")
        self.enqueue(Packet(Command.CNXN, A_VERSION, self.config.max_payload, self._banner))
        self._online = True

    def _on_open(self, packet: Packet) -> None:
        remote_id = packet.arg0
        if remote_id == 0:
            raise RemoteProtocolError("OPEN with local-id 0")
        service = packet.data.removesuffix(b"\0").decode("utf-8", "surrogateescape")
        if len(self._streams) >= self.config.max_streams:
            log.warning("refusing %r: %d streams open", service, len(self._streams))
            self.enqueue(Packet(Command.CLSE, 0, remote_id))
            return
        stream = AdbStream(self, next(self._ids), remote_id, service, StreamState.ACCEPTING)
        log.debug("OPEN %r as %d", service, stream.local_id)
        self._streams[stream.local_id] = stream
        assert self._nursery is not None
        self._nursery.start_soon(self._serve_stream, stream)

    def _lose_all(self) -> None:
        streams = list(self._streams.values())
        self._streams.clear()
        for stream in streams:
            stream._on_lost()
