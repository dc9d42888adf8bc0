"""Where a device (and the host on a device's behalf) may connect: one pure decision.

A device on this host shares the host's network. Without a rule it could reach the host's own
services (the control API, the raw link port, another instance's egress proxy) and the
operator's private networks. So every connection the host makes for a device, and every
initial-app download, is decided here on the *resolved address* (the caller resolves, asks,
then connects to exactly the address that was allowed, so a DNS answer that changes between
the check and the connect cannot get around it):

- allowed: globally routable unicast addresses (``ipaddress``'s ``is_global``), unless they are
  one of the host's own addresses;
- refused: loopback, private (RFC 1918, ULA), link-local (with the cloud metadata address
  169.254.169.254), shared (100.64/10), unspecified, broadcast, multicast, reserved and
  documentation ranges, and IPv6 forms that embed such an IPv4 address (mapped, 6to4,
  NAT64, Teredo);
- ``allow`` (operator configuration, CIDRs) overrides both: a private mirror, a lab network.

A destination that matches a tunnel-attached instance's selectors never comes here: it goes
through the tunnel and is dialled on the connector's side, inside the organization's network.

Refusals carry a `Refusal` reason that says which rule refused, never whether anything
listens there: the caller refuses before connecting, so every port of a refused address looks
the same.
"""

from __future__ import annotations

import enum
import ipaddress
from collections.abc import Iterable
from typing import Final, TypeAlias

import attrs

__all__ = [
    "IPAddress",
    "IPNetwork",
    "NetPolicy",
    "Refusal",
    "classify",
    "parse_networks",
]

IPAddress: TypeAlias = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork: TypeAlias = ipaddress.IPv4Network | ipaddress.IPv6Network

_NAT64: Final = ipaddress.IPv6Network("64:ff9b::/96")
_NAT64_LOCAL: Final = ipaddress.IPv6Network("64:ff9b:1::/48")


class Refusal(enum.Enum):
    """Why an address is refused (stable words: they appear in logs and error messages)."""

    LOOPBACK = "loopback"
    PRIVATE = "private"  # RFC 1918, ULA, shared address space, and other non-global unicast
    LINK_LOCAL = "link-local"  # 169.254/16 (cloud metadata), fe80::/10
    MULTICAST = "multicast"
    UNSPECIFIED = "unspecified"  # 0.0.0.0 and :: (which reach the host on Linux)
    HOST = "host"  # one of this host's own addresses


def _embedded_v4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address.teredo is not None:
        return address.teredo[1]  # the client's address
    if address in _NAT64 or address in _NAT64_LOCAL:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    if int(address) >> 32 == 0 and int(address) > 1:  # deprecated IPv4-compatible ::a.b.c.d
        return ipaddress.IPv4Address(int(address))
    return None


def classify(address: IPAddress) -> Refusal | None:
    """The rule that refuses *address* by default, or None for a public address."""
    if isinstance(address, ipaddress.IPv6Address):
        embedded = _embedded_v4(address)
        if embedded is not None:
            inner = classify(embedded)
            if inner is not None:
                return inner
    if address.is_unspecified:
        return Refusal.UNSPECIFIED
    if address.is_loopback:
        return Refusal.LOOPBACK
    if address.is_link_local:
        return Refusal.LINK_LOCAL
    if address.is_multicast:
        return Refusal.MULTICAST
    if not address.is_global:
        return Refusal.PRIVATE
    return None


def parse_networks(items: Iterable[str]) -> tuple[IPNetwork, ...]:
    """CIDRs (or bare addresses) as networks; ValueError naming the bad one."""
    out: list[IPNetwork] = []
    for item in items:
        try:
            out.append(ipaddress.ip_network(item.strip(), strict=False))
        except ValueError:
            raise ValueError(f"{item!r} is not an address or a CIDR network") from None
    return tuple(out)


def _to_address(value: str | IPAddress) -> IPAddress:
    if isinstance(value, str):
        return ipaddress.ip_address(value.split("%", 1)[0])  # drop an IPv6 zone
    return value


def _networks(items: Iterable[IPNetwork]) -> tuple[IPNetwork, ...]:
    return tuple(items)


def _addresses(items: Iterable[str | IPAddress]) -> frozenset[IPAddress]:
    return frozenset(_to_address(item) for item in items)


@attrs.frozen
class NetPolicy:
    """The host's policy for device connections and initial-app downloads.

    ``allow``: networks the operator opens although they are not public (``devyard hostd
    --allow-network CIDR``). ``host_addresses``: this host's own public addresses, refused like
    loopback (filled in by the daemon at start; loopback and private ones are refused anyway).
    """

    allow: tuple[IPNetwork, ...] = attrs.field(default=(), converter=_networks)
    host_addresses: frozenset[IPAddress] = attrs.field(default=frozenset(), converter=_addresses)

    def check(self, address: str | IPAddress) -> Refusal | None:
        """None if a connection to *address* is allowed, else why not."""
        ip = _to_address(address)
        mapped = ip.ipv4_mapped if isinstance(ip, ipaddress.IPv6Address) else None
        for candidate in (ip, mapped):
            if candidate is not None and any(
                candidate.version == net.version and candidate in net for net in self.allow
            ):
                return None
        if ip in self.host_addresses or (mapped is not None and mapped in self.host_addresses):
            return Refusal.HOST
        return classify(ip)

    def with_host_addresses(self, addresses: Iterable[str | IPAddress]) -> NetPolicy:
        return attrs.evolve(self, host_addresses=self.host_addresses | _addresses(addresses))
