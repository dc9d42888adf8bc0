"""Mail over SMTP (stdlib ``smtplib`` in a worker thread): invitations and support notices.

One connection per message: a server sends few of them, and a connection that outlives
the message is one more thing to keep alive. A send that fails raises `MailError` with the
SMTP server's reason (never the password, nor the body: an invitation body holds its token).
The worker thread is abandoned on cancellation; its socket timeout bounds how long it lingers.
"""

from __future__ import annotations

import smtplib
import ssl
from email.message import EmailMessage
from typing import Final

import attrs
import trio

from .settings import AccountsConfig, SmtpSecurity

__all__ = ["MailError", "Mailer", "Message"]

_MAX_REASON: Final = 200


class MailError(Exception):
    """The message could not be handed to the SMTP server."""


@attrs.frozen
class Message:
    to: str
    subject: str
    body: str = attrs.field(repr=False)  # may hold a secret (an invitation link)


class Mailer:
    """Sends `Message` s through the configured SMTP server."""

    def __init__(self, config: AccountsConfig) -> None:
        if config.smtp_host is None:
            raise ValueError("no SMTP server configured")
        self._config = config

    def __repr__(self) -> str:
        return f"<Mailer {self._config.smtp_host}:{self._config.smtp_port}>"

    async def send(self, message: Message) -> None:
        await trio.to_thread.run_sync(self._send, message, abandon_on_cancel=True)

    def _send(self, message: Message) -> None:
        config = self._config
        assert config.smtp_host is not None
        mail = EmailMessage()
        mail["From"] = config.smtp_sender
        mail["To"] = message.to
        mail["Subject"] = message.subject
        mail.set_content(message.body)
        try:
            if config.smtp_security is SmtpSecurity.TLS:
                smtp: smtplib.SMTP = smtplib.SMTP_SSL(
                    config.smtp_host,
                    config.smtp_port,
                    timeout=config.smtp_timeout_s,
                    context=ssl.create_default_context(),
                )
            else:
                smtp = smtplib.SMTP(
                    config.smtp_host, config.smtp_port, timeout=config.smtp_timeout_s
                )
            with smtp:
                if config.smtp_security is SmtpSecurity.STARTTLS:
                    smtp.starttls(context=ssl.create_default_context())
                if config.smtp_username is not None and config.smtp_password is not None:
                    smtp.login(config.smtp_username, config.smtp_password)
                smtp.send_message(mail)
        except (OSError, smtplib.SMTPException) as exc:
            reason = f"{type(exc).__name__}: {exc}"[:_MAX_REASON]
            raise MailError(f"SMTP {config.smtp_host}:{config.smtp_port}: {reason}") from None
