"""Tunnel selectors: which destinations a tunnel's connector may dial (docs/tunnels.md).

Pure: no trio, no I/O. One module for every side that checks a destination: the API
(validation), the edge (before it opens a ``tunnel-dial`` stream), the connector (before it
dials) and the host daemon's egress proxy (which traffic goes into the tunnel).

Grammar (case-insensitive; hosts are compared lowercased, without a trailing dot):

    selector  = exact | wildcard
    exact     = host ":" port                e.g. ``localhost:3000``, ``10.0.0.5:443``
    wildcard  = "*." host [":" port]         ``*.corp.example:443`` or ``*.corp.example``
                                             (any port); matches names *below* the domain,
                                             not the domain itself
    host      = label *("." label) ["."]     a DNS name or an IPv4 address
    label     = 1-63 of [A-Za-z0-9-], not starting or ending with "-"
    port      = 1..65535, no leading zero

The grammar is exactly `SELECTOR_PATTERN`, which the API's document uses too, so a selector
the document admits is never refused here (the conformance test relies on it). IPv6 literals
are not selectors (yet): a name that resolves to one works. Names are resolved on the
connector's machine, so a selector is matched against the name as given, never against an
address it resolves to.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Final

import attrs

__all__ = [
    "KEPT_VERSIONS",
    "MAX_SELECTORS",
    "MAX_SELECTOR_LENGTH",
    "SELECTOR_PATTERN",
    "Selector",
    "SelectorError",
    "SelectorHistory",
    "android_compatible",
    "matches",
    "parse_dest",
    "parse_selector",
    "parse_selectors",
]

MAX_SELECTORS: Final = 100
MAX_SELECTOR_LENGTH: Final = 261  # "*.", a 253-character name, a colon and a port
_LABEL: Final = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_NAME: Final = rf"{_LABEL}(?:\.{_LABEL})*\.?"
_PORT: Final = (
    r"(?:6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}|[1-9][0-9]{0,3})"
)
#: The whole grammar as one regular expression (openapi.yaml's TunnelSelectors uses it).
SELECTOR_PATTERN: Final = rf"^(?:\*\.{_NAME}(?::{_PORT})?|{_NAME}:{_PORT})$"
_NAME_RE: Final = re.compile(_NAME)
_PORT_RE: Final = re.compile(_PORT)


class SelectorError(ValueError):
    """A selector or destination that does not follow the grammar; the message says why."""


@attrs.frozen
class Selector:
    """One parsed selector. ``port`` None means any port (wildcards only)."""

    host: str  # a lowercased name or address; for a wildcard, the domain after ``*.``
    port: int | None
    wildcard: bool = False

    def __str__(self) -> str:
        text = f"*.{self.host}" if self.wildcard else self.host
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
    return int(text)


def _host(text: str, where: str) -> str:
    if not _NAME_RE.fullmatch(text):
        raise SelectorError(f"{where}: {text[:80]!r} is not a host name or IPv4 address")
    return text.lower().removesuffix(".")


def _split(text: str) -> tuple[str, str | None]:
    host, colon, port = text.rpartition(":")
    return (text, None) if not colon else (host, port)


def _check_length(text: object, where: str) -> str:
    if not isinstance(text, str) or not text or len(text) > MAX_SELECTOR_LENGTH:
        raise SelectorError(f"{where}: must be 1 to {MAX_SELECTOR_LENGTH} characters")
    return text


def parse_selector(text: str) -> Selector:
    """One selector, or SelectorError saying what is wrong with it."""
    where = f"selector {str(text)[:80]!r}"
    text = _check_length(text, where)
    if text.startswith("*."):
        domain, port = _split(text[2:])
        host = _host(domain, where)
        return Selector(host, None if port is None else _port(port, where), wildcard=True)
    if "*" in text:
        raise SelectorError(f"{where}: '*' is allowed only as a leading '*.'")
    host, port = _split(text)
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
    where = f"destination {str(text)[:80]!r}"
    host, port = _split(_check_length(text, where))
    if port is None:
        raise SelectorError(f"{where}: expected HOST:PORT")
    return _host(host, where), _port(port, where)


def matches(selectors: Iterable[Selector], host: str, port: int) -> bool:
    """Whether any selector admits ``host:port`` (host as returned by `parse_dest`)."""
    return any(selector.matches(host, port) for selector in selectors)


def android_compatible(selectors: Iterable[Selector]) -> bool:
    """Android instances attach only when every exact selector's port is >= 1024."""
    return all(s.wildcard or (s.port is not None and s.port >= 1024) for s in selectors)


#: Selector versions a `SelectorHistory` keeps (the newest ones).
KEPT_VERSIONS: Final = 16


class SelectorHistory:
    """The selector versions of one tunnel seen since this process started, newest last.

    An instance attached while version N was current keeps N's selectors until the connector
    restarts (spec 4.6 rule 3), so both the edge (before it opens a ``tunnel-dial``) and the
    connector (before it dials) check a destination against the version the instance names.
    A version not (or no longer) kept falls back to the newest. Bounded: the oldest learned
    version is forgotten past `KEPT_VERSIONS`.
    """

    def __init__(self, kept: int = KEPT_VERSIONS) -> None:
        self._kept = kept
        self._versions: dict[int, tuple[Selector, ...]] = {}

    def __repr__(self) -> str:
        return f"SelectorHistory(versions={list(self._versions)})"

    def learn(self, version: int, selectors: tuple[Selector, ...]) -> None:
        """*version* is now the current one (learning it again makes it the newest)."""
        self._versions.pop(version, None)
        self._versions[version] = selectors
        while len(self._versions) > self._kept:
            del self._versions[next(iter(self._versions))]

    @property
    def versions(self) -> list[int]:
        """The kept versions, oldest first."""
        return list(self._versions)

    def admits(self, version: object, host: str, port: int) -> bool:
        """Whether *version*'s selectors (else the newest) admit ``host:port``; False while
        nothing was learned."""
        chosen = self._versions.get(version) if isinstance(version, int) else None
        if chosen is None and self._versions:
            chosen = next(reversed(self._versions.values()))
        return chosen is not None and matches(chosen, host, port)
