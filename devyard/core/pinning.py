"""Outbound requests to a URL a tenant chose, pinned to an address that was checked.

A tenant names a URL (a build webhook, an identity provider's issuer) and a process of ours
fetches it. Checking the name's addresses and then letting the HTTP client resolve the name
again leaves a gap: DNS can answer a public address to the check and a private one to the
connection (DNS rebinding). `pin` resolves once, checks every address the name has, and
returns the URL rewritten to the first checked address with what the request needs to still
be the original name's request: the ``Host`` header and the TLS server name (httpx's
``sni_hostname`` request extension, which also names the certificate's expected host).

The policy: a global unicast address (``ipaddress``'s ``is_global``), or one inside a network
the operator listed. Loopback, private, link-local, shared, reserved and multicast addresses
are refused unless listed. Pure stdlib plus trio's resolver: no HTTP client is imported here.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from typing import Final
from urllib.parse import urlsplit, urlunsplit

import attrs
import trio

__all__ = ["AddressPolicy", "Pinned", "PinningError", "pin"]

_DEFAULT_PORTS: Final = {"http": 80, "https": 443}

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address


class PinningError(Exception):
    """The URL's host does not resolve, or resolves to an address the policy refuses. The
    message names the host and the address, never the URL's path or query."""


@attrs.frozen
class AddressPolicy:
    """Global addresses, plus *extra* networks the operator allows (e.g. an internal identity
    provider's ``10.0.0.0/8``; tests allow ``127.0.0.0/8``)."""

    extra: tuple[Network, ...] = ()

    @classmethod
    def parse(cls, networks: Iterable[str]) -> AddressPolicy:
        """From CIDR strings; ValueError names the bad one."""
        parsed = []
        for text in networks:
            try:
                parsed.append(ipaddress.ip_network(text, strict=False))
            except ValueError:
                raise ValueError(f"not a network in CIDR form: {text!r}") from None
        return cls(tuple(parsed))

    def allows(self, address: Address) -> bool:
        mapped = getattr(address, "ipv4_mapped", None)
        if mapped is not None:  # ::ffff:10.0.0.1 is 10.0.0.1
            address = mapped
        if any(address in network for network in self.extra):
            return True
        return address.is_global and not address.is_multicast


@attrs.frozen
class Pinned:
    """*url* with its host replaced by the checked address; send it with *headers* (``Host``)
    and *extensions* (``sni_hostname``, for https)."""

    url: str
    host: str
    address: str
    headers: dict[str, str]
    extensions: dict[str, str]


def _literal(text: str) -> Address | None:
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


async def _resolve(host: str, port: int) -> list[Address]:
    literal = _literal(host)
    if literal is not None:
        return [literal]
    try:
        infos = await trio.socket.getaddrinfo(host, port, type=trio.socket.SOCK_STREAM)
    except OSError as exc:
        raise PinningError(f"{host} does not resolve ({exc.strerror or exc})") from None
    addresses: list[Address] = []
    for *_, sockaddr in infos:
        address = ipaddress.ip_address(str(sockaddr[0]).split("%", 1)[0])
        if address not in addresses:
            addresses.append(address)
    if not addresses:
        raise PinningError(f"{host} does not resolve")
    return addresses


async def pin(url: str, policy: AddressPolicy) -> Pinned:
    """Resolve *url*'s host once; every address must be allowed (a name that answers one
    public and one private address is refused: which one a client picks is not ours)."""
    parts = urlsplit(url)
    host = parts.hostname
    if not host or parts.scheme not in _DEFAULT_PORTS:
        raise PinningError("not an http(s) URL with a host")
    port = parts.port or _DEFAULT_PORTS[parts.scheme]
    addresses = await _resolve(host, port)
    for address in addresses:
        if not policy.allows(address):
            raise PinningError(f"{host} resolves to {address}, which is not a public address")
    chosen = addresses[0]
    shown = f"[{chosen}]" if chosen.version == 6 else str(chosen)
    netloc = shown if parts.port is None else f"{shown}:{parts.port}"
    host_header = parts.netloc.rpartition("@")[2]
    extensions = {"sni_hostname": host} if parts.scheme == "https" else {}
    return Pinned(
        urlunsplit(parts._replace(netloc=netloc)),
        host,
        str(chosen),
        {"Host": host_header},
        extensions,
    )
