"""Tunnel selectors: which destinations a tunnel's connector may dial (docs/tunnels.md).

Pure: no trio, no I/O. One module for every side that checks a destination: the API
(validation), the edge (before it opens a ``tunnel-dial`` stream), the connector (before it
dials) and the host daemon's egress proxy (which traffic goes into the tunnel).

Grammar (case-insensitive; hosts are compared lowercased, without a trailing dot):

    selector  = exact | wildcard
    exact     = host ":" port                e.g. ``localhost:3000``, ``10.0.0.5:443``,
                                                  ``[fd00::1]:8080``
    wildcard  = "*." domain [":" port]       ``*.corp.example:443`` or ``*.corp.example``
                                             (any port); matches names *below* the domain,
                                             not the domain itself
    host      = DNS name | IPv4 | "[" IPv6 "]"
    port      = 1..65535

Names are resolved on the connector's machine, so a selector is matched against the name as
given, never against an address it resolves to.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from typing import Final

import attrs

__all__ = [
    "MAX_SELECTORS",
    "MAX_SELECTOR_LENGTH",
    "Selector",
    "SelectorError",
    "android_compatible",
    "matches",
    "parse_dest",
    "parse_selector",
    "parse_selectors",
]

MAX_SELECTORS: Final = 100
MAX_SELECTOR_LENGTH: Final = 261  # a 253-character name, a colon and a port
_LABEL: Final = r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?"
_NAME_RE: Final = re.compile(rf"{_LABEL}(?:\.{_LABEL})*")
_PORT_RE: Final = re.compile(r"[0-9]{1,5}")


class SelectorError(ValueError):
    """A selector or destination that does not follow the grammar; the message says why."""


@attrs.frozen
class Selector:
    """One parsed selector. ``port`` None means any port (wildcards only)."""

    host: str  # a lowercased name or address; for a wildcard, the domain after ``*.``
    port: int | None
    wildcard: bool = False

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        text = f"*.{host}" if self.wildcard else host
        return text if self.port is None else f"{text}:{self.port}"

    def matches(self, host: str, port: int) -> bool:
        if self.port is not None and self.port != port:
            return False
        if self.wildcard:
            return host.endswith("." + self.host)
        return host == self.host


def _port(text: str, where: str) -> int:
    if not _PORT_RE.fullmatch(text):
        raise SelectorError(f"{where}: the port must be a number from 1 to 65535")
    port = int(text)
    if not 1 <= port <= 65535:
        raise SelectorError(f"{where}: the port must be a number from 1 to 65535")
    return port


def _host(text: str, where: str) -> str:
    if text.startswith("["):
        if not text.endswith("]"):
            raise SelectorError(f"{where}: an IPv6 address goes in brackets")
        try:
            return str(ipaddress.IPv6Address(text[1:-1]))
        except ValueError:
            raise SelectorError(f"{where}: {text} is not an IPv6 address") from None
    host = text.lower().removesuffix(".")
    if not host or len(host) > 253 or not _NAME_RE.fullmatch(host):
        raise SelectorError(f"{where}: {text!r} is not a host name or address")
    return host


def _split(text: str, where: str) -> tuple[str, str | None]:
    """``host[:port]`` where host may be a bracketed IPv6 address."""
    if text.startswith("["):
        close = text.find("]")
        if close < 0:
            raise SelectorError(f"{where}: an IPv6 address goes in brackets")
        rest = text[close + 1 :]
        if rest and not rest.startswith(":"):
            raise SelectorError(f"{where}: expected :PORT after the address")
        return text[: close + 1], rest[1:] if rest else None
    host, colon, port = text.rpartition(":")
    if not colon:
        return text, None
    return host, port


def parse_selector(text: str) -> Selector:
    """One selector, or SelectorError saying what is wrong with it."""
    where = f"selector {text[:80]!r}"
    if not isinstance(text, str) or not text or len(text) > MAX_SELECTOR_LENGTH:
        raise SelectorError(f"{where}: must be 1 to {MAX_SELECTOR_LENGTH} characters")
    if text.startswith("*."):
        domain, port = _split(text[2:], where)
        host = _host(domain, where)
        if domain.startswith("[") or _is_ip(host):
            raise SelectorError(f"{where}: a wildcard takes a domain name, not an address")
        return Selector(host, None if port is None else _port(port, where), wildcard=True)
    if "*" in text:
        raise SelectorError(f"{where}: '*' is allowed only as a leading '*.'")
    host, port = _split(text, where)
    if port is None:
        raise SelectorError(f"{where}: an exact selector needs a port (HOST:PORT)")
    return Selector(_host(host, where), _port(port, where))


def parse_selectors(items: Iterable[str]) -> tuple[Selector, ...]:
    """A whole list (duplicates removed, order kept); SelectorError names the bad one."""
    parsed: list[Selector] = []
    for text in items:
        selector = parse_selector(text)
        if selector not in parsed:
            parsed.append(selector)
        if len(parsed) > MAX_SELECTORS:
            raise SelectorError(f"at most {MAX_SELECTORS} selectors")
    return tuple(parsed)


def parse_dest(text: str) -> tuple[str, int]:
    """A dial destination ``host:port`` as (normalized host, port)."""
    where = f"destination {text[:80]!r}"
    if not isinstance(text, str) or not text or len(text) > MAX_SELECTOR_LENGTH:
        raise SelectorError(f"{where}: expected HOST:PORT")
    host, port = _split(text, where)
    if port is None:
        raise SelectorError(f"{where}: expected HOST:PORT")
    return _host(host, where), _port(port, where)


def matches(selectors: Iterable[Selector], host: str, port: int) -> bool:
    """Whether any selector admits ``host:port`` (host as returned by `parse_dest`)."""
    return any(selector.matches(host, port) for selector in selectors)


def android_compatible(selectors: Iterable[Selector]) -> bool:
    """Android instances attach only when every exact selector's port is >= 1024."""
    return all(s.wildcard or (s.port is not None and s.port >= 1024) for s in selectors)


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True
