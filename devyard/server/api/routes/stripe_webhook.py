"""``POST /stripe/webhook``: the payment provider's events (spec 4.3, 6; docs/billing.md).

Anonymous, proven by the ``Stripe-Signature`` of the raw body (`billing.webhook.verify_event`:
any configured endpoint secret, the timestamp within 300 s either way); nothing in the body is
read before that. A verified event is handled at most once: its id is stored in the
transaction that applies it (`BillingService.handle_event`). Answers:

- 200 ``{message, reason}`` with reason ``applied``, ``duplicate`` (seen before: nothing
  done), ``stale`` (older than the state it would change: recorded, nothing done) or
  ``unmatched`` (no organization of ours, or a kind we do not handle: recorded). The provider
  retries anything else, so every verified event is 200;
- 400 ``invalid_signature`` for an unsigned, forged or stale delivery (the provider's own
  docs ask for a 400 there);
- 404 when this deployment's provider is not stripe.
"""

from __future__ import annotations

import time

from quart import Blueprint, Response, jsonify, request

from ...billing.settings import ProviderKind
from ...billing.webhook import WebhookRejected, verify_event
from .._errors import BadRequest, NotFound
from ..context import state

__all__ = ["blueprint"]

blueprint = Blueprint("stripe_webhook", __name__)


@blueprint.post("/stripe/webhook")
async def stripe_webhook() -> Response:
    api = state()
    config = api.config.payments
    if config.provider is not ProviderKind.STRIPE:
        raise NotFound("this deployment has no stripe payment provider (billing.provider)")
    raw = await request.get_data(as_text=False)
    payload = raw if isinstance(raw, bytes) else raw.encode()
    try:
        event = verify_event(
            payload,
            request.headers.get("Stripe-Signature"),
            config.stripe_webhook_secrets,
            now=time.time(),
        )
    except WebhookRejected as exc:
        raise BadRequest(str(exc), reason="invalid_signature") from None
    outcome = await api.billing.handle_event(event)
    return jsonify({"message": f"event {event['id']} ({event['type']}): {outcome.value}",
                    "reason": outcome.value})  # fmt: skip
