"""The ``[accounts]`` settings of the server config: who creates organizations, invitations,
SMTP, DNS. Parsed by `devyard.server.config` (the keys below, ``accounts.`` prefixed; the
environment variables are ``DEVYARD_ACCOUNTS_<KEY>``)::

    [accounts]
    organization_creation = "operators"  # or "users": any signed-in user (public deployment)
    invitation_ttl_s = 604800            # an invitation expires this long after it is sent
    smtp_host = "mail.example.com"       # unset: no mail; the accept link goes to the inviter
    smtp_port = 587
    smtp_security = "starttls"           # "starttls", "tls" (implicit) or "none"
    smtp_username = "devyard"            # optional, with smtp_password
    smtp_password = "..."                # never logged nor shown in a repr
    smtp_sender = "devyard@example.com"
    dns_nameserver = "10.0.0.53:53"      # unset: the system's resolvers
    dns_timeout_s = 5.0
    session_ttl_s = 43200                # a browser session lives this long (12 hours)
    oidc_timeout_s = 10.0                # one request to an identity provider, at most
    oidc_login_ttl_s = 600               # a single sign-on must come back this soon
    oidc_allowed_networks = ["10.20.0.0/16"]  # an identity provider may be there too (below)

An organization's identity provider is fetched by the server, so its issuer's host must
resolve to public addresses only (the connection is pinned to the address checked:
`devyard.core.pinning`); ``oidc_allowed_networks`` lists the private networks an internal
provider may sit in (CIDR; the environment variable takes them comma-separated). Empty by
default: no tenant can make the server fetch from its own loopback or private network.
"""

from __future__ import annotations

import enum
import ipaddress
from collections.abc import Callable, Mapping
from typing import Any, Final

import attrs

from ...core.pinning import AddressPolicy

__all__ = ["PARSERS", "AccountsConfig", "OrganizationCreation", "SmtpSecurity", "build"]


class OrganizationCreation(enum.StrEnum):
    OPERATORS = "operators"
    USERS = "users"


class SmtpSecurity(enum.StrEnum):
    STARTTLS = "starttls"
    TLS = "tls"
    NONE = "none"


@attrs.frozen
class AccountsConfig:
    organization_creation: OrganizationCreation = OrganizationCreation.OPERATORS
    invitation_ttl_s: int = 7 * 24 * 3600
    smtp_host: str | None = None
    smtp_port: int = 587
    smtp_security: SmtpSecurity = SmtpSecurity.STARTTLS
    smtp_username: str | None = None
    smtp_password: str | None = attrs.field(default=None, repr=False)
    smtp_sender: str = "devyard@localhost"
    smtp_timeout_s: float = 30.0
    dns_nameserver: tuple[str, int] | None = None
    dns_timeout_s: float = 5.0
    session_ttl_s: int = 12 * 3600
    oidc_timeout_s: float = 10.0
    oidc_login_ttl_s: int = 600
    oidc_allowed_networks: tuple[str, ...] = ()

    @property
    def mail_enabled(self) -> bool:
        return self.smtp_host is not None


def _text(value: object) -> str:
    if not isinstance(value, str) or not value or value != value.strip():
        raise ValueError(f"expected a non-empty string, got {value!r}")
    return value


def _int(value: object, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ValueError(f"expected an integer, got {value!r}")
    number = int(value)
    if not low <= number <= high:
        raise ValueError(f"expected {low}..{high}, got {number}")
    return number


def _seconds(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"expected a number of seconds, got {value!r}")
    number = float(value)
    if not 0 < number <= 3600:
        raise ValueError(f"expected 0 < seconds <= 3600, got {value!r}")
    return number


def _nameserver(value: object) -> tuple[str, int]:
    text = _text(value)
    host, sep, port = text.rpartition(":")
    if not sep:
        host, port = text, "53"
    host = host.removeprefix("[").removesuffix("]")
    ipaddress.ip_address(host)  # an address: resolving the resolver's name would need DNS
    return host, _int(port, 1, 65535)


def _networks(value: object) -> tuple[str, ...]:
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)):
        raise ValueError(f"expected a list of networks in CIDR form, got {value!r}")
    networks = tuple(_text(item).strip() for item in items if str(item).strip())
    AddressPolicy.parse(networks)  # ValueError names the bad one
    return networks


PARSERS: Final[Mapping[str, Callable[[object], Any]]] = {
    "organization_creation": lambda v: OrganizationCreation(_text(v)),
    "invitation_ttl_s": lambda v: _int(v, 60, 90 * 24 * 3600),
    "smtp_host": _text,
    "smtp_port": lambda v: _int(v, 1, 65535),
    "smtp_security": lambda v: SmtpSecurity(_text(v)),
    "smtp_username": _text,
    "smtp_password": _text,
    "smtp_sender": _text,
    "smtp_timeout_s": _seconds,
    "dns_nameserver": _nameserver,
    "dns_timeout_s": _seconds,
    "session_ttl_s": lambda v: _int(v, 60, 30 * 24 * 3600),
    "oidc_timeout_s": _seconds,
    "oidc_login_ttl_s": lambda v: _int(v, 60, 3600),
    "oidc_allowed_networks": _networks,
}


def build(values: Mapping[str, Any]) -> AccountsConfig:
    """The settings from parsed values keyed without the ``accounts.`` prefix."""
    if ("smtp_username" in values) != ("smtp_password" in values):
        raise ValueError("accounts.smtp_username and accounts.smtp_password go together")
    return AccountsConfig(**values)
