"""Answering an address query from hostd's own resolver, with dnspython's message codec.

An emulator in its own network namespace has no route, so its guest's DNS (slirp's resolver
at 10.0.2.3, which asks the servers it was given) would go nowhere. hostd answers it instead,
inside the namespace (drivers/emulator/isolation.py): `parse_query` takes one datagram and
returns the question it asks, or None for anything but one standard query of class IN with
a plain host name (the caller drops those); `answer` builds the reply with the addresses
hostd's resolver found (A for A, AAAA for AAAA, none for any other type: "no data"), `failure`
one with an error code. Replies fit 512 bytes (the classic UDP limit); addresses that would
not fit are left out. Parsing and writing are dnspython's (``dns.message``); what is ours is
which queries we take and what we answer.

Answering is not a way around the host's policy: the guest then connects to an address,
which its egress proxy checks like any other.
"""

from __future__ import annotations

import enum
import ipaddress
import re
from collections.abc import Iterable
from typing import Final

import attrs
import dns.exception
import dns.flags
import dns.message
import dns.name
import dns.opcode
import dns.rcode
import dns.rdataclass
import dns.rdatatype
import dns.rrset

__all__ = ["MAX_QUERY", "Query", "Rcode", "answer", "failure", "parse_query"]

MAX_QUERY: Final = 512
_MAX_REPLY: Final = 512
_TTL: Final = 30
_LABEL: Final = re.compile(r"^[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?$")
_FAMILIES: Final = {dns.rdatatype.A: 4, dns.rdatatype.AAAA: 6}


class Rcode(enum.IntEnum):
    NOERROR = dns.rcode.NOERROR
    SERVFAIL = dns.rcode.SERVFAIL
    NXDOMAIN = dns.rcode.NXDOMAIN


@attrs.frozen
class Query:
    message: dns.message.QueryMessage = attrs.field(repr=False)
    name: str  # lowercase, no trailing dot
    qtype: int

    @property
    def ident(self) -> int:
        return int(self.message.id)

    @property
    def recursion_desired(self) -> bool:
        return bool(self.message.flags & dns.flags.RD)

    @property
    def family(self) -> int | None:
        """4 or 6 for an A or AAAA query, else None (answered with no data)."""
        return _FAMILIES.get(dns.rdatatype.RdataType(self.qtype))


def parse_query(data: bytes) -> Query | None:
    """One standard query (QR=0, opcode 0, one question, class IN, a host name), or None."""
    if len(data) > MAX_QUERY:
        return None
    try:
        message = dns.message.from_wire(data)
    except (dns.exception.DNSException, ValueError):
        return None
    if (
        not isinstance(message, dns.message.QueryMessage)
        or message.flags & dns.flags.QR
        or message.opcode() != dns.opcode.QUERY
        or len(message.question) != 1
        or message.answer
        or message.authority
    ):
        return None
    question = message.question[0]
    labels = [label.decode("ascii", "replace") for label in question.name.labels if label]
    if (
        question.rdclass != dns.rdataclass.IN
        or not labels
        or not all(_LABEL.match(label) for label in labels)
        or len(question.name.to_wire() or b"") > 255
    ):
        return None
    return Query(message, ".".join(labels).lower(), int(question.rdtype))


def _response(query: Query, rcode: Rcode) -> dns.message.Message:
    reply = dns.message.make_response(query.message, recursion_available=True)
    reply.set_rcode(dns.rcode.Rcode(int(rcode)))
    return reply


def answer(
    query: Query, addresses: Iterable[ipaddress.IPv4Address | ipaddress.IPv6Address]
) -> bytes:
    """The reply carrying the ``addresses`` of the query's family (others are skipped)."""
    reply = _response(query, Rcode.NOERROR)
    wanted = query.family
    chosen = [str(a) for a in dict.fromkeys(addresses) if a.version == wanted]
    name = query.message.question[0].name
    rdtype = dns.rdatatype.A if wanted == 4 else dns.rdatatype.AAAA
    while chosen:  # as many as fit in 512 bytes
        reply.answer = [dns.rrset.from_text_list(name, _TTL, "IN", rdtype, chosen)]
        try:
            return reply.to_wire(max_size=_MAX_REPLY)
        except dns.exception.TooBig:
            chosen.pop()
    reply.answer = []
    return reply.to_wire(max_size=_MAX_REPLY)


def failure(query: Query, rcode: Rcode) -> bytes:
    return _response(query, rcode).to_wire(max_size=_MAX_REPLY)
