"""Fixtures of the accounts tests: the API fixtures (tests/server/api/conftest.py) on both
backends, plus real peers on loopback: an SMTP server (aiosmtpd, in its own thread) that
keeps what it receives, and a DNS server (dnslib) that answers the TXT records a test sets.
``accounts`` is the ``[accounts]`` config the app is built with; tests override it."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from email import message_from_bytes
from email.message import Message
from pathlib import Path
from typing import Any

import attrs
import pytest
from quart.typing import TestClientProtocol as Client
from quart_trio import QuartTrio

from devyard.server.accounts.settings import AccountsConfig, SmtpSecurity
from devyard.server.api.app import api_state, create_app
from devyard.server.config import RateLimitConfig, ServerConfig
from devyard.server.store import Store
from tests.ports import free_port
from tests.server.accounts.oidc_provider import LOOPBACK
from tests.server.api.conftest import Callers, ManualClock, callers, store

__all__ = ["Callers", "DnsPeer", "SmtpPeer", "callers", "smtp_accounts", "store"]


@pytest.fixture
def accounts() -> AccountsConfig:
    return AccountsConfig(oidc_allowed_networks=LOOPBACK)


@pytest.fixture
def config(tmp_path: Path, accounts: AccountsConfig) -> ServerConfig:
    return ServerConfig(
        data_dir=tmp_path,
        rate_limit=RateLimitConfig(enabled=True, rate=1000.0, burst=1000),
        max_body_bytes=64 * 1024,
        accounts=accounts,
    )


@pytest.fixture
def app(store: Store, config: ServerConfig) -> QuartTrio:
    return create_app(api_state(store, config, clock=ManualClock()))


@pytest.fixture
def client(app: QuartTrio) -> Client:
    return app.test_client()


class Mailbox:
    """What the SMTP server received, in order (filled from aiosmtpd's thread)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._messages: list[tuple[str, list[str], Message]] = []

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        message = message_from_bytes(envelope.content)
        with self._lock:
            self._messages.append((envelope.mail_from, list(envelope.rcpt_tos), message))
        return "250 OK"

    @property
    def messages(self) -> list[tuple[str, list[str], Message]]:
        with self._lock:
            return list(self._messages)


@attrs.frozen
class SmtpPeer:
    port: int
    mailbox: Mailbox


@pytest.fixture
def smtp_server() -> Iterator[SmtpPeer]:
    from aiosmtpd.controller import Controller  # noqa: PLC0415 - dev dependency

    mailbox = Mailbox()
    port = free_port()
    controller = Controller(mailbox, hostname="127.0.0.1", port=port)
    controller.start()
    try:
        yield SmtpPeer(port=port, mailbox=mailbox)
    finally:
        controller.stop()


def smtp_accounts(peer: SmtpPeer) -> AccountsConfig:
    return AccountsConfig(
        smtp_host="127.0.0.1",
        smtp_port=peer.port,
        smtp_security=SmtpSecurity.NONE,
        smtp_sender="devyard@test.invalid",
        smtp_timeout_s=10.0,
        oidc_allowed_networks=LOOPBACK,
    )


class TxtRecords:
    """A dnslib resolver answering TXT questions from a dict the test fills."""

    def __init__(self) -> None:
        self.records: dict[str, list[str]] = {}
        self.questions: list[str] = []

    def resolve(self, request: Any, handler: Any) -> Any:
        from dnslib import QTYPE, RCODE, RR, TXT  # noqa: PLC0415

        reply = request.reply()
        name = str(request.q.qname).rstrip(".").lower()
        self.questions.append(name)
        values = self.records.get(name)
        if values is None:
            reply.header.rcode = RCODE.NXDOMAIN
        elif request.q.qtype == QTYPE.TXT:
            for value in values:
                reply.add_answer(RR(request.q.qname, QTYPE.TXT, rdata=TXT(value), ttl=1))
        return reply


@attrs.frozen
class DnsPeer:
    port: int
    records: TxtRecords


@pytest.fixture
def dns_server() -> Iterator[DnsPeer]:
    from dnslib.server import DNSLogger, DNSServer  # noqa: PLC0415 - dev dependency

    records = TxtRecords()
    port = free_port()
    quiet = DNSLogger(logf=lambda _line: None)
    server = DNSServer(records, port=port, address="127.0.0.1", logger=quiet)
    server.start_thread()
    try:
        yield DnsPeer(port=port, records=records)
    finally:
        server.stop()
        server.server.server_close()  # dnslib stops the loop but leaves the socket open
