"""The operators' API: what the deployment's operators (docs/accounts.md) read and answer
across organizations: the support messages and feedback, newest first, each with its
answers (an answer is stored and mailed to the sender's email when SMTP is configured), and
the host daemons linked to this server. Any other caller: 403."""

from __future__ import annotations

import logging
from collections import defaultdict

from quart import Blueprint, Response, jsonify

from ...accounts.mail import Mailer, MailError, Message
from ...hosts import HostInfo
from ...store import errors as store_errors
from ...store.base import Feedback
from ...store.sso import SupportAnswer
from .._errors import Forbidden, NotFound
from ..auth import Principal
from ..context import body, int_param, principal, state
from ..views import timestamp

__all__ = ["blueprint"]

log = logging.getLogger(__name__)

blueprint = Blueprint("operator", __name__)


def _answer_view(answer: SupportAnswer) -> dict[str, object]:
    return {
        "id": answer.id,
        "messageId": answer.feedback_id,
        "message": answer.message,
        "answeredBy": answer.answered_by,
        "emailed": answer.emailed,
        "createdAt": timestamp(answer.created_at),
    }


def _view(feedback: Feedback, answers: list[SupportAnswer]) -> dict[str, object]:
    return {
        "id": feedback.id,
        "kind": str(feedback.kind),
        "message": feedback.message,
        "email": feedback.email,
        "organizationId": feedback.org_id,
        "userId": feedback.user_id,
        "createdAt": timestamp(feedback.created_at),
        "answers": [_answer_view(a) for a in answers],
    }


async def _operator() -> Principal:
    caller = principal()
    if not await state().store.is_operator(caller.user_id):
        raise Forbidden("only the operators of this deployment", reason="not_operator")
    return caller


def _host_view(host: HostInfo) -> dict[str, object]:
    return {
        "id": host.id,
        "name": host.name,
        "region": host.region,
        "capacity": host.capacity,
        "running": host.running,
        "free": host.free,
        "platforms": sorted(host.platforms),
        "drivers": sorted(host.drivers),
        "version": host.version,
        "connectedAt": timestamp(host.connected_at),
    }


@blueprint.get("/operator/hosts")
async def list_hosts() -> Response:
    await _operator()
    registry = state().hosts
    hosts = [] if registry is None else registry.hosts()
    return jsonify([_host_view(h) for h in sorted(hosts, key=lambda h: (h.name, h.id))])


@blueprint.get("/operator/supportMessages")
async def list_support_messages() -> Response:
    await _operator()
    store = state().store
    limit = int_param("limit")
    messages = await store.list_feedback()
    answers: defaultdict[str, list[SupportAnswer]] = defaultdict(list)
    for answer in await store.list_support_answers():
        answers[answer.feedback_id].append(answer)
    return jsonify([_view(m, answers[m.id]) for m in reversed(messages[-limit:])])


@blueprint.post("/operator/supportMessages/<messageId>/answer")
async def answer_support_message(messageId: str) -> Response:
    caller = await _operator()
    api = state()
    try:
        feedback = await api.store.get_feedback(messageId)
    except store_errors.NotFound:
        raise NotFound(f"support message {messageId!r} not found") from None
    text = str(body()["message"])
    emailed = False
    if feedback.email is not None and api.config.accounts.mail_enabled:
        mail = Message(
            to=feedback.email,
            subject=f"Re: your devyard {feedback.kind} {feedback.id}",
            body=f"{text}\n\n-- the operators of this devyard, answering:\n\n{feedback.message}\n",
        )
        try:
            await Mailer(api.config.accounts).send(mail)
        except MailError as exc:
            log.warning("the answer to %s was not mailed: %s", feedback.id, exc)
        else:
            emailed = True
    answer = await api.store.add_support_answer(
        feedback.id, message=text, answered_by=caller.user_id, emailed=emailed
    )
    return jsonify(_answer_view(answer))
