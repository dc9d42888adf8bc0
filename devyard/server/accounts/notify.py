"""Telling the operators about a support message: one mail per operator with an email, when
SMTP is configured. The message is stored before (the store is the record; the operators list
it through ``GET /operator/supportMessages``), so a mail server that refuses loses nothing: it
is logged, without the message, and the caller's request still succeeds."""

from __future__ import annotations

import logging
from typing import Final

from ..store.base import Feedback, Store
from .mail import Mailer, MailError, Message
from .settings import AccountsConfig

__all__ = ["notify_operators"]

log = logging.getLogger(__name__)

_MAX_OPERATORS: Final = 50


async def notify_operators(
    store: Store, config: AccountsConfig, feedback: Feedback, *, org_name: str | None
) -> int:
    """Mails *feedback* to the operators; the number of mails the server took."""
    if not config.mail_enabled:
        return 0
    mailer = Mailer(config)
    where = f"organization {org_name!r} ({feedback.org_id})" if org_name else "an anonymous user"
    body = (
        f"A {feedback.kind} message from {where}, user {feedback.user_id or '-'}, "
        f"reply to {feedback.email or '-'}:\n\n{feedback.message}\n\n"
        f"Id {feedback.id}; all of them: GET /operator/supportMessages\n"
    )
    sent = 0
    for email in (await store.list_operator_emails())[:_MAX_OPERATORS]:
        message = Message(to=email, subject=f"devyard {feedback.kind} {feedback.id}", body=body)
        try:
            await mailer.send(message)
        except MailError as exc:
            log.warning("support notice %s to an operator not sent: %s", feedback.id, exc)
        else:
            sent += 1
    return sent
