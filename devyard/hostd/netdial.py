"""Connections the host makes for a device, checked against the `NetPolicy` (netpolicy.py).

`open_checked` resolves a name, asks the policy about every address, and connects only to
an address it allowed, by number: a second DNS answer (rebinding) is never consulted. A
refused destination fails before any packet leaves, so the error is the same for every port
of it (no port-scan oracle). The host's own addresses (by name and by the default routes'
source addresses) are refused like loopback.

`DeviceNetwork` is what a device's network commands need and a user of the device must not
be able to change: the policy and, on a tunnel, the instance's own proxy with its
credentials. The supervisor assigns it per device (`assign`); the device's writable
``http_proxy`` setting is honoured only when it names that proxy (or a public one).
"""

from __future__ import annotations

import enum
import ipaddress
import socket
import weakref
from typing import Final
from urllib.parse import quote

import attrs
import trio

from .netpolicy import IPAddress, NetPolicy, Refusal
from .proxy_protocol import Credentials

__all__ = [
    "DeviceNetwork",
    "DialReason",
    "DialRefused",
    "ProxyEndpoint",
    "assign",
    "host_addresses",
    "network_of",
    "open_checked",
]

_PROBES: Final = ("192.0.2.1", "2001:db8::1")  # documentation addresses: no packet is sent


class DialReason(enum.Enum):
    NOT_ALLOWED = "not allowed by the host's network policy"
    NO_SUCH_HOST = "could not resolve host"
    REFUSED = "connection refused"
    TIMEOUT = "timed out"
    UNREACHABLE = "unreachable"


class DialRefused(Exception):
    """A checked connection was not made; ``reason`` says which class of failure."""

    def __init__(self, reason: DialReason, refusal: Refusal | None = None) -> None:
        super().__init__(reason.value)
        self.reason = reason
        self.refusal = refusal  # for the host's log: which rule refused


@attrs.frozen(repr=False)
class ProxyEndpoint:
    host: str
    port: int
    credentials: Credentials

    def __repr__(self) -> str:
        return f"ProxyEndpoint({self.host}:{self.port})"

    @property
    def url(self) -> str:
        """``http://USER:PASSWORD@HOST:PORT`` (the emulator's ``-http-proxy``); a secret."""
        user, password = (
            quote(c, safe="") for c in (self.credentials.username, self.credentials.password)
        )
        return f"http://{user}:{password}@{self.host}:{self.port}"


@attrs.frozen
class DeviceNetwork:
    policy: NetPolicy = attrs.field(factory=NetPolicy)
    proxy: ProxyEndpoint | None = None
    #: (host, port) origins fetched from whatever their address: the devyard server, which
    #: signs asset URLs (an install from an asset's URL, as initial apps do: fetch.py)
    trusted: frozenset[tuple[str, int]] = frozenset()


_NETWORKS: weakref.WeakKeyDictionary[object, DeviceNetwork] = weakref.WeakKeyDictionary()


def assign(device: object, network: DeviceNetwork) -> None:
    """Give *device* its network (the supervisor does, once it has started the device)."""
    _NETWORKS[device] = network


def network_of(device: object) -> DeviceNetwork:
    """*device*'s network; a device nobody configured gets the default policy, no proxy."""
    return _NETWORKS.get(device) or DeviceNetwork()


_host_addresses: frozenset[IPAddress] | None = None


def _find_host_addresses() -> frozenset[IPAddress]:
    found: set[IPAddress] = set()
    try:
        for info in socket.getaddrinfo(socket.gethostname(), None):
            found.add(ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]))
    except OSError:
        pass
    for family, probe in ((socket.AF_INET, _PROBES[0]), (socket.AF_INET6, _PROBES[1])):
        try:
            with socket.socket(family, socket.SOCK_DGRAM) as sock:
                sock.connect((probe, 9))  # UDP connect: picks a route, sends nothing
                found.add(ipaddress.ip_address(str(sock.getsockname()[0]).split("%", 1)[0]))
        except OSError:
            pass
    return frozenset(found)


async def host_addresses() -> frozenset[IPAddress]:
    """This host's own addresses (looked up once per process)."""
    global _host_addresses  # noqa: PLW0603 - a per-process cache of a per-process fact
    if _host_addresses is None:
        _host_addresses = await trio.to_thread.run_sync(_find_host_addresses)
    return _host_addresses


async def resolve_checked(host: str, port: int, policy: NetPolicy) -> list[IPAddress]:
    """The addresses of *host* that *policy* allows, in the resolver's order."""
    try:
        infos = await trio.socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError):
        raise DialRefused(DialReason.NO_SUCH_HOST) from None
    policy = policy.with_host_addresses(await host_addresses())
    allowed: list[IPAddress] = []
    refusal: Refusal | None = None
    for info in infos:
        address = ipaddress.ip_address(str(info[4][0]).split("%", 1)[0])
        why = policy.check(address)
        if why is None:
            if address not in allowed:
                allowed.append(address)
        else:
            refusal = refusal or why
    if not allowed:
        raise DialRefused(DialReason.NOT_ALLOWED, refusal)
    return allowed


async def open_checked(
    host: str, port: int, policy: NetPolicy, *, limit_s: float = 15.0
) -> trio.SocketStream:
    """A TCP connection to host:port if *policy* allows one of its addresses."""
    with trio.move_on_after(limit_s) as scope:
        addresses = await resolve_checked(host, port, policy)
        errors: list[OSError] = []
        for address in addresses:
            try:
                return await trio.open_tcp_stream(str(address), port)
            except OSError as exc:
                errors.append(exc)
    if scope.cancelled_caught:
        raise DialRefused(DialReason.TIMEOUT)
    refused = any(isinstance(e, ConnectionRefusedError) for e in errors)
    raise DialRefused(DialReason.REFUSED if refused else DialReason.UNREACHABLE)
