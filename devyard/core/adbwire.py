"""Early acknowledgement of ADB writes ("pre-ack"): the pure state machine (docs/adb.md).

No I/O and no trio: bytes in, bytes out. `PreAcker` watches both directions of one ADB
transport that a splice carries between a LOCAL peer (the one whose writes we acknowledge
early) and a REMOTE peer. It only tracks packet boundaries (24-byte header of six
little-endian u32: command, arg0, arg1, data_length, data_crc32, magic = command ^
0xffffffff; then the payload) and never reassembles or copies payloads: what it hands back is
the input, or slices of it.

ADB before `delayed_ack` keeps one WRTE in flight per stream: the sender waits for the
receiver's OKAY before the next write, so every write pays a round trip across the splice.
For each WRTE the LOCAL peer sends (arg0 = its stream id, arg1 = the remote's) we answer at once
with a synthetic OKAY(arg1, arg0), and drop the REMOTE peer's own OKAY for it later, so the
local peer sees exactly one OKAY per write. Every other packet passes unchanged.

The pre-acked bytes in flight per stream are bounded by `window`: a write past it is
forwarded but its OKAY is held back until the remote's next OKAY on that stream, which then
releases it (forwarded as is: it is byte for byte the OKAY we would have made). That keeps the
remote's buffering bounded, and it never deadlocks even against a peer that answers several
queued writes with one OKAY (adb and adbd do when their socket is full): such a peer only
makes us count too many writes in flight, which degrades the stream to one write per round
trip, ADB's own pace.

The watcher turns itself into a plain byte copy, for good, when either side's CNXN banner
advertises `delayed_ack` (adb then windows by itself, and its OKAYs carry payload), on STLS
(TLS follows), or on anything that does not parse as ADB (bad magic, an absurd length): it
never breaks a session it does not understand. It pre-acks only once both CNXNs were seen.
"""

from __future__ import annotations

import struct
from collections import deque
from typing import Final

__all__ = [
    "A_AUTH",
    "A_CLSE",
    "A_CNXN",
    "A_OKAY",
    "A_OPEN",
    "A_STLS",
    "A_SYNC",
    "A_VERSION",
    "A_WRTE",
    "DEFAULT_WINDOW",
    "HEADER",
    "HEADER_SIZE",
    "Buffer",
    "PreAcker",
    "encode_header",
]

# The ADB wire header, defined here once (hostd's device side, devyard.hostd.adb.packets,
# builds its Command enum and codec on these): six little-endian u32
#     command | arg0 | arg1 | data_length | data_check | magic (= command ^ 0xffffffff)
A_SYNC: Final = 0x434E5953
A_CNXN: Final = 0x4E584E43
A_AUTH: Final = 0x48545541
A_OPEN: Final = 0x4E45504F
A_OKAY: Final = 0x59414B4F
A_CLSE: Final = 0x45534C43
A_WRTE: Final = 0x45545257
A_STLS: Final = 0x534C5453
A_VERSION: Final = 0x01000001  # hosts since 2017: no checksums

HEADER: Final = struct.Struct("<6I")
HEADER_SIZE: Final = HEADER.size  # 24
#: A payload longer than this is not ADB (adb offers 1 MiB at most): stop watching.
MAX_SANE_PAYLOAD: Final = 16 * 1024 * 1024
#: A CNXN banner longer than this is not one: stop watching.
_MAX_BANNER: Final = 64 * 1024
#: Pre-acked WRTE payload in flight per stream.
DEFAULT_WINDOW: Final = 4 * 1024 * 1024

Buffer = bytes | bytearray | memoryview


def encode_header(command: int, arg0: int, arg1: int, length: int = 0) -> bytes:
    """A header with a zero checksum (hosts since 2017 neither send nor check it)."""
    return HEADER.pack(command, arg0, arg1, length, 0, command ^ 0xFFFF_FFFF)


def advertises_delayed_ack(banner: bytes) -> bool:
    """Whether a CNXN banner (`kind::props;features=a,b,c`) lists the delayed_ack feature."""
    for part in banner.rstrip(b"\0").split(b";"):
        key, _, value = part.partition(b"=")
        if key.rpartition(b":")[2] == b"features" and b"delayed_ack" in value.split(b","):
            return True
    return False


class _Scanner:
    """Where one direction's byte stream stands: inside a header, a payload, or between."""

    __slots__ = ("banner", "banner_len", "head", "left")

    def __init__(self) -> None:
        self.head = bytearray()  # the start of a header split across reads
        self.left = 0  # payload bytes still to come of the current packet
        self.banner: bytearray | None = None  # a CNXN payload being collected
        self.banner_len = 0

    @property
    def at_boundary(self) -> bool:
        """Between two packets (bytes of a header held back do not count: none went out)."""
        return self.left == 0


class _Flight:
    """One local stream's writes: pre-acked ones awaiting the remote's OKAY, held ones."""

    __slots__ = ("acked", "acked_bytes", "held")

    def __init__(self) -> None:
        self.acked: deque[int] = deque()  # payload sizes
        self.acked_bytes = 0
        self.held: deque[int] = deque()  # payload sizes of writes whose OKAY we hold back


class PreAcker:
    """The pre-ack state of one spliced ADB transport (see the module docstring).

    `local_data` / `remote_data` take what each peer sent and say what to pass on; the
    caller must hand the results to the writers in the order the calls were made, with no
    other bytes for the local peer in between (one writer to the local peer).
    """

    def __init__(self, window: int = DEFAULT_WINDOW) -> None:
        if window < 1:
            raise ValueError("window must be positive")
        self.window = window
        self.passthrough_reason: str | None = None
        self.preacks = 0  # synthetic OKAYs made, for tests and statistics
        self.dropped = 0  # remote OKAYs dropped
        self._local = _Scanner()
        self._remote = _Scanner()
        self._cnxn_local = False
        self._cnxn_remote = False
        self._flights: dict[int, _Flight] = {}
        self._pending: list[bytes] = []  # synthetic OKAYs waiting for a remote packet boundary
        self._local_closed = False  # no more bytes may be written to the local peer

    # ---- state -------------------------------------------------------------------------------

    @property
    def passthrough(self) -> bool:
        return self.passthrough_reason is not None

    @property
    def active(self) -> bool:
        """Pre-acking: both CNXNs seen and nothing made us stop."""
        return (
            self._cnxn_local
            and self._cnxn_remote
            and self.passthrough_reason is None
            and not self._local_closed
        )

    def in_flight(self, local_id: int) -> tuple[int, int]:
        """(pre-acked writes awaiting the remote's OKAY, writes whose OKAY is held back)."""
        flight = self._flights.get(local_id)
        return (0, 0) if flight is None else (len(flight.acked), len(flight.held))

    def _stop(self, reason: str) -> None:
        if self.passthrough_reason is None:
            self.passthrough_reason = reason
            self._flights.clear()

    # ---- the local peer's bytes ----------------------------------------------------------------

    def local_data(self, data: bytes | bytearray) -> tuple[list[Buffer], list[bytes]]:
        """What the local peer sent: (bytes for the remote, bytes for the local peer now).

        The bytes for the remote are always `data` itself: nothing the local peer sends is
        held back or dropped. Synthetic OKAYs are returned for writing at once when the remote
        direction is between packets, else kept and slipped in by `remote_data` at the next
        boundary."""
        if self.passthrough_reason is not None or not data:
            return [data] if data else [], []
        sc = self._local
        view = memoryview(data)
        pos, end = 0, len(view)
        to_local: list[bytes] = []
        while pos < end and not self.passthrough:
            if sc.left:
                pos = self._skip_payload(sc, view, pos, local=True)
                continue
            header, pos = self._take_header(sc, view, pos)
            if header is None:
                break
            okay = self._on_local_header(header)
            if okay is not None:
                to_local.append(okay)
        if to_local and not self._remote.at_boundary:
            self._pending.extend(to_local)
            to_local = []
        return [data], to_local

    def _on_local_header(self, header: tuple[int, ...]) -> bytes | None:
        command, arg0, arg1, length = header[0], header[1], header[2], header[3]
        sc = self._local
        if header[5] != command ^ 0xFFFF_FFFF or length > MAX_SANE_PAYLOAD:
            self._stop("the local peer does not speak ADB")
            return None
        sc.left = length
        if command == A_WRTE:
            if self.active and arg0 and arg1:
                return self._on_local_write(arg0, arg1, length)
        elif command == A_CLSE:
            self._flights.pop(arg0, None)
        elif command == A_CNXN:
            self._start_banner(sc, length, local=True)
        elif command == A_STLS:
            self._stop("STLS: TLS follows")
        return None

    def _on_local_write(self, local_id: int, remote_id: int, length: int) -> bytes | None:
        flight = self._flights.get(local_id)
        if flight is None:
            flight = self._flights[local_id] = _Flight()
        if not flight.held and (not flight.acked or flight.acked_bytes + length <= self.window):
            flight.acked.append(length)
            flight.acked_bytes += length
            self.preacks += 1
            return encode_header(A_OKAY, remote_id, local_id)
        flight.held.append(length)  # its OKAY waits for the remote's next one
        return None

    # ---- the remote peer's bytes ---------------------------------------------------------------

    def remote_data(self, data: bytes | bytearray) -> list[Buffer]:
        """What the remote peer sent: the bytes for the local peer (slices of `data`, minus
        the OKAYs we already gave, plus held-back synthetic OKAYs at packet boundaries)."""
        sc = self._remote
        if self.passthrough_reason is not None:
            return self._flush_raw(sc, data)
        view = memoryview(data)
        pos, end = 0, len(view)
        out: list[Buffer] = []
        run = 0  # start of the bytes of `view` not yet put in `out`
        while pos < end and not self.passthrough:
            if sc.left:
                pos = self._skip_payload(sc, view, pos, local=False)
                continue
            if self._pending:  # between packets: the held-back synthetic OKAYs go here
                if run < pos:
                    out.append(view[run:pos])
                out.extend(self._pending)
                self._pending.clear()
                run = pos
            start, split = pos, bool(sc.head)
            header, pos = self._take_header(sc, view, pos)
            if header is None:  # an incomplete header is held back: it may be dropped
                if run < start:
                    out.append(view[run:start])
                run = end
                break
            keep = self._on_remote_header(header)
            if split:  # its first bytes came in an earlier read and were held back
                if keep:
                    out.append(HEADER.pack(*header))
                run = pos
            elif not keep:
                if run < start:
                    out.append(view[run:start])
                run = pos
        if run < end:
            out.append(view[run:end])
        if self._pending and sc.at_boundary and not sc.head:
            out.extend(self._pending)
            self._pending.clear()
        if len(out) == 1 and isinstance(out[0], memoryview) and len(out[0]) == len(data):
            return [data]  # the common case: all of it, as it came
        return out

    def _on_remote_header(self, header: tuple[int, ...]) -> bool:
        """Whether to pass this header on."""
        command, arg1, length = header[0], header[2], header[3]
        sc = self._remote
        if header[5] != command ^ 0xFFFF_FFFF or length > MAX_SANE_PAYLOAD:
            self._stop("the remote peer does not speak ADB")
            return True
        sc.left = length
        if command == A_OKAY:
            if length:
                self._stop("an OKAY with payload (delayed_ack)")
                return True
            flight = self._flights.get(arg1)
            if flight is None:
                return True
            if flight.acked:
                flight.acked_bytes -= flight.acked.popleft()
                if flight.held:  # it releases a held write: pass it on as that write's OKAY
                    size = flight.held.popleft()
                    flight.acked.append(size)
                    flight.acked_bytes += size
                    return True
                self.dropped += 1
                return False
            if flight.held:
                flight.held.popleft()
            return True
        if command == A_CLSE:
            self._flights.pop(arg1, None)
        elif command == A_CNXN:
            self._start_banner(sc, length, local=False)
        elif command == A_STLS:
            self._stop("STLS: TLS follows")
        return True

    # ---- ends ------------------------------------------------------------------------------------

    def local_eof(self) -> list[Buffer]:
        """The local peer's bytes ended: nothing is held in that direction."""
        return []

    def remote_eof(self) -> list[Buffer]:
        """The remote peer's bytes ended: what is still owed to the local peer, after which
        nothing more may be written to it."""
        sc = self._remote
        out: list[Buffer] = []
        if sc.head:
            out.append(bytes(sc.head))  # a torn header: pass it on, the local peer judges
            sc.head.clear()
        elif sc.at_boundary:
            out.extend(self._pending)
        self._pending.clear()
        self._local_closed = True
        return out

    def local_closed(self) -> None:
        """Nothing more may be written to the local peer (it went away): stop pre-acking."""
        self._local_closed = True
        self._pending.clear()

    # ---- helpers -----------------------------------------------------------------------------

    def _flush_raw(self, sc: _Scanner, data: bytes | bytearray) -> list[Buffer]:
        out: list[Buffer] = []
        if sc.head:  # held back before we stopped watching
            out.append(bytes(sc.head))
            sc.head.clear()
        elif self._pending and sc.at_boundary:
            out.extend(self._pending)
        self._pending.clear()
        if data:
            out.append(data)
        return out

    def _skip_payload(self, sc: _Scanner, view: memoryview, pos: int, *, local: bool) -> int:
        """Pass over the current packet's payload in `view` from `pos` (a CNXN's is read)."""
        take = min(sc.left, len(view) - pos)
        if sc.banner is not None:
            self._collect(sc, view[pos : pos + take], local=local)
        sc.left -= take
        return pos + take

    @staticmethod
    def _take_header(
        sc: _Scanner, view: memoryview, pos: int
    ) -> tuple[tuple[int, ...] | None, int]:
        """The next header from `pos` (completing one held in `sc.head`), or None if the
        read ends inside it (its bytes are then kept in `sc.head`)."""
        if not sc.head and len(view) - pos >= HEADER_SIZE:
            return HEADER.unpack_from(view, pos), pos + HEADER_SIZE
        take = min(HEADER_SIZE - len(sc.head), len(view) - pos)
        sc.head += view[pos : pos + take]
        pos += take
        if len(sc.head) < HEADER_SIZE:
            return None, pos
        header = HEADER.unpack(sc.head)
        sc.head.clear()
        return header, pos

    def _start_banner(self, sc: _Scanner, length: int, *, local: bool) -> None:
        if length > _MAX_BANNER:
            self._stop("a CNXN banner too long to be one")
            return
        sc.banner = bytearray()
        sc.banner_len = length
        if length == 0:
            self._banner_done(sc, local=local)

    def _collect(self, sc: _Scanner, chunk: memoryview, *, local: bool) -> None:
        assert sc.banner is not None
        sc.banner += chunk
        if len(sc.banner) >= sc.banner_len:
            self._banner_done(sc, local=local)

    def _banner_done(self, sc: _Scanner, *, local: bool) -> None:
        banner = bytes(sc.banner or b"")
        sc.banner = None
        if advertises_delayed_ack(banner):
            self._stop("delayed_ack: adb windows by itself")
            return
        if local:
            if self._cnxn_local:  # the host restarted its end: every stream is gone
                self._flights.clear()
            self._cnxn_local = True
        else:
            self._cnxn_remote = True
