"""The DNS codec that answers an emulator guest's address queries (hostd/dnsmsg.py): pure."""

from __future__ import annotations

import ipaddress
import struct

import pytest

from devyard.hostd.dnsmsg import Rcode, answer, failure, parse_query


def query(name: bytes, qtype: int = 1, flags: int = 0x0100, qdcount: int = 1) -> bytes:
    labels = b"".join(bytes([len(x)]) + x for x in name.split(b".")) + b"\0"
    return (
        struct.pack("!6H", 0xBEEF, flags, qdcount, 0, 0, 0) + labels + struct.pack("!HH", qtype, 1)
    )


def test_an_a_query_is_answered_with_the_v4_addresses_only() -> None:
    q = parse_query(query(b"Example.COM"))
    assert q is not None
    assert (q.ident, q.name, q.family, q.recursion_desired) == (0xBEEF, "example.com", 4, True)
    v4, v6 = ipaddress.ip_address("93.184.216.34"), ipaddress.ip_address("2606:2800::1")
    reply = answer(q, [v4, v6, v4])
    ident, flags, qd, an, ns, ar = struct.unpack_from("!6H", reply)
    assert (ident, flags & 0x8000, flags & 0xF, flags & 0x0100, qd, an, ns, ar) == (
        0xBEEF, 0x8000, 0, 0x0100, 1, 1, 0, 0,
    )  # fmt: skip
    assert reply.endswith(v4.packed)
    aaaa = parse_query(query(b"example.com", 28))
    assert aaaa is not None and answer(aaaa, [v4, v6]).endswith(v6.packed)


def test_other_types_get_no_data_and_errors_their_code() -> None:
    mx = parse_query(query(b"example.com", 15))
    assert mx is not None and mx.family is None
    assert struct.unpack_from("!6H", answer(mx, [ipaddress.ip_address("1.2.3.4")]))[3] == 0
    assert struct.unpack_from("!6H", failure(mx, Rcode.NXDOMAIN))[1] & 0xF == 3


def test_replies_fit_512_bytes() -> None:
    q = parse_query(query(b"a" * 63 + b"." + b"b" * 63, 28))
    assert q is not None
    many = [ipaddress.ip_address(f"2001:db8::{i:x}") for i in range(1, 100)]
    assert len(answer(q, many)) <= 512


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\x00" * 12,
        query(b"x", flags=0x8100),  # a response, not a query
        query(b"x", flags=0x2800),  # opcode 5 (update)
        query(b"x", qdcount=2),
        query(b"x")[:-3],  # cut in the question
        query(b"bad name"),
        query(b"-x"),
        struct.pack("!6H", 1, 0, 1, 0, 0, 0) + b"\xc0\x0c" + struct.pack("!HH", 1, 1),  # pointer
        struct.pack("!6H", 1, 0, 1, 0, 0, 0) + b"\0" + struct.pack("!HH", 1, 1),  # the root
        query(b"x")[:-2] + b"\x00\x03",  # class CH
        query(b".".join([b"a" * 60] * 5)),  # name longer than 255
        query(b"x") + b"\0" * 600,  # longer than 512
    ],
)
def test_anything_else_is_dropped(data: bytes) -> None:
    assert parse_query(data) is None
