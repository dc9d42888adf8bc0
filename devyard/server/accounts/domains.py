"""DNS verification of an organization's email domain: a TXT record holding its token.

The organization publishes ``devyard-verification=<token>`` as a TXT record of
``_devyard-verification.<domain>`` (a name of its own, so it does not crowd the domain's
apex TXT set). `TxtVerifier.verify` asks the configured resolver (or the system's) with
dnspython in a worker thread, bounded by the configured timeout, and answers whether the
token is there. An NXDOMAIN or an empty answer is "not there"; a resolver that does not answer
is `DnsUnavailable` (the API says 503: retry later).
"""

from __future__ import annotations

import secrets
from typing import Final

import dns.exception
import dns.resolver
import trio

from .settings import AccountsConfig

__all__ = ["RECORD_PREFIX", "DnsUnavailable", "TxtVerifier", "new_txt_token", "record_name"]

RECORD_PREFIX: Final = "_devyard-verification"
VALUE_PREFIX: Final = "devyard-verification="


class DnsUnavailable(Exception):
    """The resolver did not answer in time, or refused."""


def new_txt_token() -> str:
    return VALUE_PREFIX + secrets.token_urlsafe(24)


def record_name(domain: str) -> str:
    return f"{RECORD_PREFIX}.{domain}"


class TxtVerifier:
    def __init__(self, config: AccountsConfig) -> None:
        self._nameserver = config.dns_nameserver
        self._timeout = config.dns_timeout_s

    def __repr__(self) -> str:
        return f"<TxtVerifier nameserver={self._nameserver}>"

    async def verify(self, domain: str, token: str) -> bool:
        """Whether the TXT record of *domain* holds *token*."""
        return await trio.to_thread.run_sync(self._verify, domain, token, abandon_on_cancel=True)

    def _resolver(self) -> dns.resolver.Resolver:
        if self._nameserver is None:
            resolver = dns.resolver.Resolver()
        else:
            resolver = dns.resolver.Resolver(configure=False)
            host, port = self._nameserver
            resolver.nameservers = [host]
            resolver.port = port
        resolver.lifetime = self._timeout
        resolver.timeout = self._timeout
        return resolver

    def _verify(self, domain: str, token: str) -> bool:
        try:
            answer = self._resolver().resolve(record_name(domain), "TXT", search=False)
        except (dns.resolver.NXDOMAIN, dns.resolver.NoAnswer):
            return False
        except (dns.exception.Timeout, dns.resolver.NoNameservers) as exc:
            raise DnsUnavailable(f"no DNS answer for {record_name(domain)}: {exc}") from None
        except dns.exception.DNSException as exc:
            raise DnsUnavailable(f"DNS error for {record_name(domain)}: {exc}") from None
        for record in answer:
            value = b"".join(record.strings).decode("utf-8", errors="replace")
            if secrets.compare_digest(value, token):
                return True
        return False
