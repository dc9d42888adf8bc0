"""The pure pre-ack state machine (core/adbwire.py, docs/adb.md "Early acknowledgement")."""

from __future__ import annotations

import struct
from itertools import pairwise

from hypothesis import given
from hypothesis import strategies as st

from devyard.core.adbwire import (
    A_CLSE,
    A_CNXN,
    A_OKAY,
    A_STLS,
    A_WRTE,
    PreAcker,
    advertises_delayed_ack,
    encode_header,
)

A_OPEN = 0x4E45504F
HOST_BANNER = b"host::features=shell_v2,cmd,stat_v2\0"
DEVICE_BANNER = b"device::ro.product.name=p;features=shell_v2,cmd"


def pkt(command: int, arg0: int, arg1: int, data: bytes = b"") -> bytes:
    return encode_header(command, arg0, arg1, len(data)) + data


def okay(arg0: int, arg1: int) -> bytes:
    return pkt(A_OKAY, arg0, arg1)


def join(parts: list[bytes | bytearray | memoryview]) -> bytes:
    return b"".join(bytes(p) for p in parts)


def cut(data: bytes, cuts: list[int]) -> list[bytes]:
    """`data` split at the given offsets (taken modulo its length, sorted, deduplicated)."""
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    return [data[a:b] for a, b in pairwise(points) if a < b]


def connected(window: int = 1 << 22) -> PreAcker:
    acker = PreAcker(window)
    acker.local_data(pkt(A_CNXN, 0x01000001, 1 << 20, HOST_BANNER))
    assert acker.remote_data(pkt(A_CNXN, 0x01000001, 1 << 20, DEVICE_BANNER))
    assert acker.active
    return acker


def feed_local(acker: PreAcker, chunks: list[bytes]) -> tuple[bytes, list[bytes]]:
    to_remote: list[bytes | bytearray | memoryview] = []
    to_local: list[bytes] = []
    for chunk in chunks:
        remote, local = acker.local_data(chunk)
        to_remote += remote
        to_local += local
    return join(to_remote), to_local


def feed_remote(acker: PreAcker, chunks: list[bytes]) -> bytes:
    out: list[bytes | bytearray | memoryview] = []
    for chunk in chunks:
        out += acker.remote_data(chunk)
    return join(out)


# ---- packets as hypothesis builds them -----------------------------------------------------

_streams = st.integers(1, 4)
_payloads = st.binary(max_size=300)


@st.composite
def remote_packets(draw: st.DrawFn) -> list[tuple[int, int, int, bytes]]:
    """What a device might send: OKAYs, WRTEs and CLSEs on a few streams, some OPENs."""
    kinds = st.sampled_from([A_OKAY, A_OKAY, A_WRTE, A_CLSE, A_OPEN])
    packets = []
    for _ in range(draw(st.integers(0, 25))):
        command = draw(kinds)
        local_id = draw(_streams)
        data = draw(_payloads) if command in (A_WRTE, A_OPEN) else b""
        packets.append((command, 100 + local_id, local_id, data))
    return packets


def expected_remote(
    packets: list[tuple[int, int, int, bytes]], preacked: dict[int, int]
) -> tuple[bytes, int]:
    """The model: OKAY(_, k) is dropped while k has pre-acks; CLSE(_, k) forgets them."""
    counts = dict(preacked)
    out = b""
    dropped = 0
    for command, arg0, arg1, data in packets:
        if command == A_OKAY and counts.get(arg1, 0) > 0:
            counts[arg1] -= 1
            dropped += 1
            continue
        if command == A_CLSE:
            counts.pop(arg1, None)
        out += pkt(command, arg0, arg1, data)
    return out, dropped


# ---- properties ----------------------------------------------------------------------------


@given(
    writes=st.lists(st.tuples(_streams, st.binary(max_size=200)), max_size=12),
    cuts=st.lists(st.integers(0, 10_000), max_size=30),
)
def test_local_writes_are_passed_on_unchanged_and_preacked_whatever_the_chunking(
    writes: list[tuple[int, bytes]], cuts: list[int]
) -> None:
    wire = b"".join(pkt(A_WRTE, local_id, 100 + local_id, data) for local_id, data in writes)
    acker = connected()
    to_remote, to_local = feed_local(acker, cut(wire, cuts))
    assert to_remote == wire  # nothing the local peer sends is changed
    # one OKAY each, in order, addressed back to the writer (remote direction idle: at once)
    assert to_local == [okay(100 + local_id, local_id) for local_id, _ in writes]
    assert acker.preacks == len(writes)


@given(
    preacked=st.dictionaries(_streams, st.integers(0, 3)),
    packets=remote_packets(),
    cuts=st.lists(st.integers(0, 10_000), max_size=40),
)
def test_remote_okays_for_preacked_writes_are_dropped_whatever_the_chunking(
    preacked: dict[int, int], packets: list[tuple[int, int, int, bytes]], cuts: list[int]
) -> None:
    acker = connected()
    for local_id, n in preacked.items():
        for _ in range(n):
            _, given_okays = acker.local_data(pkt(A_WRTE, local_id, 100 + local_id, b"x"))
            assert given_okays == [okay(100 + local_id, local_id)]
    wire = b"".join(pkt(*p) for p in packets)
    out = feed_remote(acker, cut(wire, cuts))
    expected, dropped = expected_remote(packets, preacked)
    assert out == expected
    assert acker.dropped == dropped


@given(
    banner_side=st.sampled_from(["local", "remote"]),
    cuts=st.lists(st.integers(0, 10_000), max_size=20),
)
def test_delayed_ack_in_either_banner_turns_it_into_a_plain_copy(
    banner_side: str, cuts: list[int]
) -> None:
    acker = PreAcker()
    host = HOST_BANNER.replace(b"cmd", b"cmd,delayed_ack") if banner_side == "local" else None
    device = DEVICE_BANNER + b",delayed_ack" if banner_side == "remote" else None
    local_wire = pkt(A_CNXN, 0x01000001, 1 << 20, host or HOST_BANNER)
    local_wire += pkt(A_WRTE, 1, 101, b"data")
    remote_wire = pkt(A_CNXN, 0x01000001, 1 << 20, device or DEVICE_BANNER)
    remote_wire += pkt(A_OKAY, 101, 1, struct.pack("<I", 4096))  # delayed_ack's OKAY
    remote_wire += okay(101, 1)
    # the CNXNs first (as adb does), then the rest; each side cut anyhow
    local_cnxn = len(pkt(A_CNXN, 0, 0, host or HOST_BANNER))
    to_remote, to_local = feed_local(acker, cut(local_wire[:local_cnxn], cuts))
    out = feed_remote(acker, cut(remote_wire, cuts))
    more, more_local = feed_local(acker, cut(local_wire[local_cnxn:], cuts))
    assert to_remote + more == local_wire
    assert to_local == more_local == []
    assert out == remote_wire
    assert acker.passthrough_reason is not None and "delayed_ack" in acker.passthrough_reason


@given(garbage=st.binary(min_size=24, max_size=400), cuts=st.lists(st.integers(0, 10_000)))
def test_anything_but_adb_passes_unchanged(garbage: bytes, cuts: list[int]) -> None:
    command = struct.unpack_from("<I", garbage)[0]
    bad_magic = struct.pack("<I", command ^ 0xFFFF_FFFF ^ 1)
    garbage = garbage[:20] + bad_magic + garbage[24:]
    acker = PreAcker()
    assert feed_remote(acker, cut(garbage, cuts)) == garbage
    assert acker.passthrough
    to_remote, to_local = feed_local(acker, cut(garbage, cuts))
    assert (to_remote, to_local) == (garbage, [])


@given(cuts=st.lists(st.integers(0, 10_000), max_size=20))
def test_stls_hands_over_to_tls(cuts: list[int]) -> None:
    acker = PreAcker()
    feed_local(acker, [pkt(A_CNXN, 0x01000001, 1 << 20, HOST_BANNER)])
    tls = b"\x16\x03\x01\x02\x00" + bytes(range(256)) * 3  # a ClientHello-ish blob
    wire = pkt(A_STLS, 0x01000000, 0) + tls
    assert feed_remote(acker, cut(wire, cuts)) == wire
    assert acker.passthrough_reason == "STLS: TLS follows"
    assert feed_local(acker, cut(pkt(A_STLS, 0x01000000, 0) + tls, cuts))[1] == []


# ---- examples ------------------------------------------------------------------------------


def test_no_preacks_before_both_banners() -> None:
    acker = PreAcker()
    acker.local_data(pkt(A_CNXN, 0x01000001, 1 << 20, HOST_BANNER))
    assert acker.local_data(pkt(A_WRTE, 1, 101, b"x"))[1] == []
    assert acker.remote_data(okay(101, 1)) == [okay(101, 1)]


def test_window_holds_the_okay_of_a_write_past_it_until_the_remote_answers() -> None:
    mib = b"x" * (1 << 20)
    acker = connected(window=2 << 20)
    assert acker.local_data(pkt(A_WRTE, 1, 101, mib))[1] == [okay(101, 1)]
    assert acker.local_data(pkt(A_WRTE, 1, 101, mib))[1] == [okay(101, 1)]
    assert acker.local_data(pkt(A_WRTE, 1, 101, mib))[1] == []  # past the window: held
    assert acker.in_flight(1) == (2, 1)
    # the remote's first OKAY acks the first write and releases the held one: passed on
    assert join(acker.remote_data(okay(101, 1))) == okay(101, 1)
    assert acker.in_flight(1) == (2, 0)
    assert acker.remote_data(okay(101, 1)) == []
    assert acker.remote_data(okay(101, 1)) == []
    assert acker.in_flight(1) == (0, 0)
    assert acker.remote_data(okay(101, 1)) == [okay(101, 1)]  # not ours: passed on


def test_a_peer_answering_several_writes_with_one_okay_cannot_stall_a_stream() -> None:
    # adb and adbd answer the writes queued behind a full socket with one OKAY: we then count
    # writes in flight that are not, and fall back to one write per round trip, never to none
    acker = connected(window=2)
    for _ in range(2):
        assert acker.local_data(pkt(A_WRTE, 1, 101, b"a"))[1] == [okay(101, 1)]
    for _ in range(5):
        assert acker.local_data(pkt(A_WRTE, 1, 101, b"a"))[1] == []  # held
        # the peer drained everything and says so once: the held write is released
        assert acker.remote_data(okay(101, 1)) == [okay(101, 1)]


def test_a_synthetic_okay_waits_for_the_end_of_a_remote_packet() -> None:
    acker = connected()
    wrte = pkt(A_WRTE, 101, 1, b"y" * 100)
    first = acker.remote_data(wrte[:50])  # the remote is inside a packet
    _, now = acker.local_data(pkt(A_WRTE, 1, 101, b"x"))
    assert now == []  # it would land inside the remote's WRTE
    rest = acker.remote_data(wrte[50:] + okay(101, 1) + pkt(A_WRTE, 101, 1, b"z"))
    # it goes out right after the WRTE; the remote's own OKAY for our write is dropped
    assert join(first) + join(rest) == wrte + okay(101, 1) + pkt(A_WRTE, 101, 1, b"z")
    assert acker.dropped == 1


def test_split_header_of_a_dropped_okay_is_never_half_sent() -> None:
    acker = connected()
    acker.local_data(pkt(A_WRTE, 1, 101, b"x"))
    data = okay(101, 1) + okay(101, 1)
    assert acker.remote_data(data[:10]) == []
    assert acker.remote_data(data[10:30]) == []
    assert join(acker.remote_data(data[30:])) == okay(101, 1)


def test_clse_forgets_a_streams_preacks() -> None:
    acker = connected()
    acker.local_data(pkt(A_WRTE, 1, 101, b"x"))
    acker.local_data(pkt(A_CLSE, 1, 101))
    assert acker.remote_data(okay(101, 1)) == [okay(101, 1)]  # crossed our CLSE: passed on
    acker.local_data(pkt(A_WRTE, 2, 102, b"x"))
    assert acker.remote_data(pkt(A_CLSE, 102, 2) + okay(102, 2)) != []
    assert acker.in_flight(2) == (0, 0)


def test_remote_eof_flushes_what_is_owed_and_stops_preacking() -> None:
    acker = connected()
    acker.remote_data(pkt(A_WRTE, 101, 1, b"y" * 100)[:30])
    assert acker.local_data(pkt(A_WRTE, 1, 101, b"x"))[1] == []
    assert acker.remote_eof() == []  # inside a packet: an OKAY cannot be slipped in
    assert acker.local_data(pkt(A_WRTE, 1, 101, b"x"))[1] == []
    assert not acker.active


def test_banner_feature_parsing() -> None:
    assert advertises_delayed_ack(b"host::features=shell_v2,delayed_ack\0")
    assert advertises_delayed_ack(b"device::ro.x=y;features=delayed_ack,cmd")
    assert not advertises_delayed_ack(b"device::ro.x=delayed_ack;features=cmd")
    assert not advertises_delayed_ack(b"host::features=delayed_ack_v2")
