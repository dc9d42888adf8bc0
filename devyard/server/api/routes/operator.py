"""The operators' API: what the deployment's operators (docs/accounts.md) read across
organizations. Today the support messages and feedback, newest first. Any other caller: 403.
"""

from __future__ import annotations

from quart import Blueprint, Response, jsonify

from ...store.base import Feedback
from .._errors import Forbidden
from ..context import int_param, principal, state
from ..views import timestamp

__all__ = ["blueprint"]

blueprint = Blueprint("operator", __name__)


def _view(feedback: Feedback) -> dict[str, object]:
    return {
        "id": feedback.id,
        "kind": str(feedback.kind),
        "message": feedback.message,
        "email": feedback.email,
        "organizationId": feedback.org_id,
        "userId": feedback.user_id,
        "createdAt": timestamp(feedback.created_at),
    }


@blueprint.get("/operator/supportMessages")
async def list_support_messages() -> Response:
    caller = principal()
    api = state()
    if not await api.store.is_operator(caller.user_id):
        raise Forbidden("only the operators of this deployment", reason="not_operator")
    limit = int_param("limit")
    messages = await api.store.list_feedback()
    return jsonify([_view(m) for m in reversed(messages[-limit:])])
