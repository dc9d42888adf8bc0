"""A build's network allowlist: ``spec.buildNetwork.allow`` (docs/xcode.md, "Network").

Builds have no network by default. Each allowlist entry lets one destination through the
instance's filtering proxy: ``"host:port"`` where *host* is a DNS name, ``*.suffix`` (any name
under *suffix*, not *suffix* itself) or an IPv4 address (no IPv6 literals: name the host), and
*port* a number 1-65535 or ``*`` (any port); exactly what openapi.yaml's pattern says.
Pure: the server checks entries at create time (400 on a bad one) and hostd's proxy matches
destinations against the parsed list; the host's network policy (hostd/netpolicy.py) still
decides which resolved addresses may be dialled.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Mapping
from typing import Any, Final

import attrs

__all__ = [
    "MAX_ENTRIES",
    "AllowEntry",
    "BuildNetworkError",
    "allowed",
    "allowlist_of",
    "parse_allowlist",
]

MAX_ENTRIES: Final = 64
_LABEL: Final = re.compile(r"(?!-)[a-z0-9-]{1,63}(?<!-)")


class BuildNetworkError(ValueError):
    """A malformed allowlist (its message names the entry)."""


@attrs.frozen
class AllowEntry:
    host: str  # lower case: "*.example.com", a name or an IPv4 address
    port: int | None  # None: any port

    def matches(self, host: str, port: int) -> bool:
        if self.port is not None and port != self.port:
            return False
        host = host.lower().rstrip(".").strip("[]")
        if self.host.startswith("*."):
            return host.endswith(self.host[1:])
        return host == self.host

    def __str__(self) -> str:
        return f"{self.host}:{'*' if self.port is None else self.port}"


def _host(text: str, entry: str) -> str:
    name = text.lower()
    try:
        return str(ipaddress.IPv4Address(name))
    except ValueError:
        pass
    labels = name.split(".")
    wildcard = labels[0] == "*"
    if wildcard:
        labels = labels[1:]
    if not labels or not all(_LABEL.fullmatch(label) for label in labels):
        raise BuildNetworkError(
            f"allow entry {entry!r}: the host must be a DNS name, '*.suffix' or an IPv4 address"
        )
    if wildcard and len(labels) < 2:
        raise BuildNetworkError(f"allow entry {entry!r}: '*.' needs a suffix of two labels")
    return ("*." if wildcard else "") + ".".join(labels)


def _entry(item: object) -> AllowEntry:
    if not isinstance(item, str) or len(item) < 3 or len(item) > 300:
        raise BuildNetworkError(f"allow entries are 'host:port' strings, not {item!r}")
    host, sep, port_text = item.partition(":")
    if not sep or not host:
        raise BuildNetworkError(f"allow entry {item!r}: 'host:port' (port a number or '*')")
    port: int | None = None
    if port_text != "*":
        if not re.fullmatch(r"[1-9][0-9]{0,4}", port_text) or int(port_text) > 65535:
            raise BuildNetworkError(f"allow entry {item!r}: the port must be 1-65535 or '*'")
        port = int(port_text)
    return AllowEntry(_host(host, item), port)


def parse_allowlist(items: object) -> tuple[AllowEntry, ...]:
    """The entries of an ``allow`` list; `BuildNetworkError` on a bad one."""
    if items is None:
        return ()
    if not isinstance(items, list) or len(items) > MAX_ENTRIES:
        raise BuildNetworkError(f"allow must be a list of at most {MAX_ENTRIES} entries")
    return tuple(_entry(item) for item in items)


def allowlist_of(spec: Mapping[str, Any]) -> tuple[AllowEntry, ...]:
    """``spec.buildNetwork.allow`` of an instance spec (empty when absent)."""
    network = spec.get("buildNetwork")
    if network is None:
        return ()
    if not isinstance(network, dict) or set(network) - {"allow"}:
        raise BuildNetworkError("buildNetwork is an object with one field, 'allow'")
    return parse_allowlist(network.get("allow"))


def allowed(entries: Iterable[AllowEntry], host: str, port: int) -> bool:
    return any(entry.matches(host, port) for entry in entries)
