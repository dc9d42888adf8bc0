"""The ADB packet codec and the other pure wire formats: no trio, no I/O (docs/adb.md)."""

from __future__ import annotations

import ast
import struct
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import devyard.hostd.adb as adb_package
from devyard.hostd.adb import RemoteProtocolError
from devyard.hostd.adb.packets import HEADER_SIZE, Command, Packet, PacketDecoder, encode_packet
from devyard.hostd.adb.shell_protocol import (
    ShellId,
    ShellPacketDecoder,
    encode_exit,
    encode_shell_packet,
)
from devyard.hostd.adb.sync_protocol import (
    StatResult,
    SyncDecoder,
    SyncMessage,
    encode_data,
    encode_dent_v2,
    encode_list_done,
    encode_stat_v1,
    encode_stat_v2,
)

PURE_MODULES = ("packets", "state", "shell_protocol", "sync_protocol", "shell_parse", "_errors")


def _packets() -> list[Packet]:
    return [
        Packet(Command.CNXN, 0x01000001, 1 << 20, b"host::features=shell_v2,cmd\0"),
        Packet(Command.OPEN, 1, 0, b"shell,v2,raw:echo hi\0"),
        Packet(Command.OKAY, 7, 1),
        Packet(Command.WRTE, 1, 7, bytes(range(256)) * 64),
        Packet(Command.CLSE, 1, 7),
        Packet(Command.WRTE, 0xFFFF_FFFF, 1, b""),
    ]


def test_header_layout() -> None:
    wire = encode_packet(Packet(Command.OKAY, 2, 3))
    assert len(wire) == HEADER_SIZE == 24
    cmd, arg0, arg1, length, check, magic = struct.unpack("<6I", wire)
    assert wire[:4] == b"OKAY"
    assert (cmd, arg0, arg1, length, check) == (0x59414B4F, 2, 3, 0, 0)
    assert magic == cmd ^ 0xFFFF_FFFF


def test_checksum_only_when_asked() -> None:
    packet = Packet(Command.WRTE, 1, 2, b"\x01\x02\xff")
    assert struct.unpack_from("<5I", encode_packet(packet))[4] == 0
    assert struct.unpack_from("<5I", encode_packet(packet, checksum=True))[4] == 0x102


def test_round_trip_at_once_and_byte_by_byte() -> None:
    packets = _packets()
    wire = b"".join(encode_packet(p) for p in packets)
    assert PacketDecoder().feed(wire) == packets
    decoder = PacketDecoder()
    got: list[Packet] = []
    for i in range(len(wire)):
        got += decoder.feed(wire[i : i + 1])
    assert got == packets
    assert decoder.buffered == 0
    decoder.feed_eof()


@given(st.lists(st.integers(min_value=1, max_value=5000), max_size=20))
def test_any_split_decodes_the_same(cuts: list[int]) -> None:
    packets = _packets()
    wire = b"".join(encode_packet(p) for p in packets)
    decoder = PacketDecoder()
    got: list[Packet] = []
    pos = 0
    for cut in cuts:
        got += decoder.feed(wire[pos : pos + cut])
        pos += cut
    got += decoder.feed(wire[pos:])
    assert got == packets


@given(st.binary(max_size=300))
def test_any_bytes_give_packets_or_a_protocol_error(data: bytes) -> None:
    decoder = PacketDecoder(max_payload=4096)
    try:
        for packet in decoder.feed(data):
            assert isinstance(packet.command, Command)
            assert len(packet.data) <= 4096
        decoder.feed_eof()
    except RemoteProtocolError:
        pass


@pytest.mark.parametrize(
    ("header", "message"),
    [
        (struct.pack("<6I", 0x12345678, 0, 0, 0, 0, 0x12345678 ^ 0xFFFF_FFFF), "unknown command"),
        (struct.pack("<6I", Command.OKAY, 0, 0, 0, 0, 0), "bad magic"),
        (struct.pack("<6I", Command.WRTE, 1, 1, 5000, 0, Command.WRTE ^ 0xFFFF_FFFF), "exceeds"),
    ],
)
def test_malformed_headers(header: bytes, message: str) -> None:
    decoder = PacketDecoder(max_payload=4096)
    with pytest.raises(RemoteProtocolError, match=message):
        decoder.feed(header)
    with pytest.raises(RemoteProtocolError, match="already failed"):
        decoder.feed(b"")


def test_eof_inside_a_packet() -> None:
    decoder = PacketDecoder()
    decoder.feed(encode_packet(Packet(Command.WRTE, 1, 2, b"abc"))[:-1])
    with pytest.raises(RemoteProtocolError, match="inside a packet"):
        decoder.feed_eof()


def test_shell_v2_packets() -> None:
    assert encode_shell_packet(ShellId.STDOUT, b"hi") == b"\x01\x02\x00\x00\x00hi"
    assert encode_exit(1) == b"\x03\x01\x00\x00\x00\x01"
    assert encode_exit(256 + 3)[-1] == 3
    wire = encode_shell_packet(ShellId.STDIN, b"abc") + encode_shell_packet(ShellId.CLOSE_STDIN)
    decoder = ShellPacketDecoder()
    got = [p for i in range(len(wire)) for p in decoder.feed(wire[i : i + 1])]
    assert got == [(ShellId.STDIN, b"abc"), (ShellId.CLOSE_STDIN, b"")]
    with pytest.raises(RemoteProtocolError):
        ShellPacketDecoder().feed(b"\x09\x00\x00\x00\x00")


def test_sync_requests_across_splits() -> None:
    path = b"/data/local/tmp/a.bin,33188"
    wire = (
        b"SEND" + struct.pack("<I", len(path)) + path
        + encode_data(b"x" * 70)
        + b"DONE" + struct.pack("<I", 1234)
        + b"QUIT" + bytes(4)
    )  # fmt: skip
    decoder = SyncDecoder()
    got = [m for i in range(0, len(wire), 7) for m in decoder.feed(wire[i : i + 7])]
    assert got == [
        SyncMessage(b"SEND", len(path), path),
        SyncMessage(b"DATA", 70, b"x" * 70),
        SyncMessage(b"DONE", 1234),
        SyncMessage(b"QUIT", 0),
    ]
    with pytest.raises(RemoteProtocolError, match="unknown sync request"):
        SyncDecoder().feed(b"NOPE\0\0\0\0")
    with pytest.raises(RemoteProtocolError, match="DATA of"):
        SyncDecoder().feed(b"DATA" + struct.pack("<I", 64 * 1024 + 1))
    with pytest.raises(RemoteProtocolError, match="path of"):
        SyncDecoder().feed(b"STAT" + struct.pack("<I", 1025))


def test_sync_reply_sizes_match_adb_structs() -> None:
    # file_sync_protocol.h: sync_stat_v1 16 B, sync_stat_v2 72 B, sync_dent_v2 76 B + name
    assert len(encode_stat_v1(StatResult(mode=0o100644, size=3, mtime=5))) == 16
    assert encode_stat_v1(StatResult(error=2)) == b"STAT" + bytes(12)
    assert len(encode_stat_v2(b"LST2", StatResult(size=1 << 40))) == 72
    assert encode_stat_v2(b"STA2", StatResult(error=2))[:8] == b"STA2\x02\0\0\0"
    assert len(encode_dent_v2(b"name", StatResult())) == 76 + 4
    assert len(encode_list_done(v2=False)) == 20
    assert len(encode_list_done(v2=True)) == 76


@pytest.mark.parametrize("module", PURE_MODULES)
def test_pure_modules_import_no_trio(module: str) -> None:
    source = (Path(adb_package.__file__).parent / f"{module}.py").read_text()
    imported = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            imported.add(node.module.split(".")[0])
    assert "trio" not in imported


@given(st.binary(max_size=300))
def test_any_bytes_give_sync_messages_or_a_protocol_error(data: bytes) -> None:
    try:
        for message in SyncDecoder().feed(data):
            assert len(message.payload) <= 64 * 1024
    except RemoteProtocolError:
        pass


@given(st.binary(max_size=300))
def test_any_bytes_give_shell_packets_or_a_protocol_error(data: bytes) -> None:
    try:
        for kind, _ in ShellPacketDecoder().feed(data):
            assert isinstance(kind, ShellId)
    except RemoteProtocolError:
        pass
