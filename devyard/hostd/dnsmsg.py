"""Just enough DNS (RFC 1035) to answer an address query from hostd's own resolver: pure.

An emulator in its own network namespace has no route, so its guest's DNS (slirp's resolver
at 10.0.2.3, which asks the servers it was given) would go nowhere. hostd answers it instead,
inside the namespace (drivers/emulator/isolation.py): `parse_query` takes one datagram and
returns the question it asks, or None for anything but one standard query of class IN with
a plain host name (the caller drops those); `answer` builds the reply with the addresses
hostd's resolver found (A for A, AAAA for AAAA, none for any other type: "no data"), `failure`
one with an error code. No name compression is read (a query has one question), none is
written beyond the pointer to that question. Replies fit 512 bytes (the classic UDP limit);
addresses that would not fit are left out.

Answering is not a way around the host's policy: the guest then connects to an address,
which its egress proxy checks like any other.
"""

from __future__ import annotations

import enum
import ipaddress
import re
import struct
from collections.abc import Iterable
from typing import Final

import attrs

__all__ = ["MAX_QUERY", "Query", "Rcode", "answer", "failure", "parse_query"]

MAX_QUERY: Final = 512
_MAX_REPLY: Final = 512
_HEADER: Final = struct.Struct("!HHHHHH")
_TYPE_A: Final = 1
_TYPE_AAAA: Final = 28
_CLASS_IN: Final = 1
_TTL: Final = 30
_LABEL: Final = re.compile(rb"^[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?$")


class Rcode(enum.IntEnum):
    NOERROR = 0
    SERVFAIL = 2
    NXDOMAIN = 3


@attrs.frozen
class Query:
    ident: int
    recursion_desired: bool
    name: str  # lowercase, no trailing dot
    qtype: int
    question: bytes  # the question section as sent, echoed in the reply

    @property
    def family(self) -> int | None:
        """4 or 6 for an A or AAAA query, else None (answered with no data)."""
        return {_TYPE_A: 4, _TYPE_AAAA: 6}.get(self.qtype)


def parse_query(data: bytes) -> Query | None:
    """One standard query (QR=0, opcode 0, one question, class IN), or None."""
    if not _HEADER.size < len(data) <= MAX_QUERY:
        return None
    ident, flags, qdcount, ancount, nscount, _arcount = _HEADER.unpack_from(data)
    if flags & 0x8000 or (flags >> 11) & 0xF or qdcount != 1 or ancount or nscount:
        return None
    labels: list[bytes] = []
    offset = _HEADER.size
    while True:
        if offset >= len(data):
            return None
        length = data[offset]
        offset += 1
        if length == 0:
            break
        label = data[offset : offset + length]
        if length > 63 or len(label) != length or not _LABEL.match(label):
            return None  # a compression pointer (0xC0..), a short or odd label
        labels.append(label)
        offset += length
    if not labels or offset + 4 > len(data) or offset - _HEADER.size > 255:
        return None
    qtype, qclass = struct.unpack_from("!HH", data, offset)
    if qclass != _CLASS_IN:
        return None
    name = b".".join(labels).decode("ascii").lower()
    question = data[_HEADER.size : offset + 4]
    return Query(ident, bool(flags & 0x0100), name, qtype, question)


def _reply(query: Query, rcode: Rcode, records: list[bytes]) -> bytes:
    flags = 0x8000 | 0x0080 | int(rcode)  # QR, RA
    if query.recursion_desired:
        flags |= 0x0100
    head = _HEADER.pack(query.ident, flags, 1, len(records), 0, 0)
    return head + query.question + b"".join(records)


def answer(
    query: Query, addresses: Iterable[ipaddress.IPv4Address | ipaddress.IPv6Address]
) -> bytes:
    """The reply carrying the ``addresses`` of the query's family (others are skipped)."""
    records: list[bytes] = []
    size = _HEADER.size + len(query.question)
    wanted = query.family
    for address in dict.fromkeys(addresses):
        if address.version != wanted:
            continue
        rtype = _TYPE_A if address.version == 4 else _TYPE_AAAA
        rdata = address.packed
        record = struct.pack("!HHHIH", 0xC000 | _HEADER.size, rtype, _CLASS_IN, _TTL, len(rdata))
        if size + len(record) + len(rdata) > _MAX_REPLY:
            break
        records.append(record + rdata)
        size += len(record) + len(rdata)
    return _reply(query, Rcode.NOERROR, records)


def failure(query: Query, rcode: Rcode) -> bytes:
    return _reply(query, rcode, [])
