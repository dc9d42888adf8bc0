"""The payment provider's webhook signature (Stripe's scheme), verified on the raw body.

``Stripe-Signature: t=<unix seconds>,v1=<hex>[,v1=...]``; ``v1`` is HMAC-SHA256 keyed with the
whole endpoint secret (``whsec_...``) over ``"{t}.{raw body}"``. The `stripe` package checks
the HMAC and the age (`stripe.WebhookSignature.verify_header`); we add what it leaves out
(../shared/design/callbacks.md 5.1): a timestamp too far in the *future* is refused too, and
several endpoint secrets may be live at once (rotation). Only a verified body is parsed.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Final

import stripe

__all__ = ["TOLERANCE_S", "WebhookRejected", "verify_event"]

TOLERANCE_S: Final = 300


class WebhookRejected(Exception):
    """Not a genuine, fresh event; the message says which check failed (never a secret)."""


def _timestamp(header: str) -> int:
    for item in header.split(","):
        key, _, value = item.strip().partition("=")
        if key == "t":
            try:
                return int(value)
            except ValueError:
                break
    raise WebhookRejected("the signature header has no timestamp")


def verify_event(
    payload: bytes,
    header: str | None,
    secrets: Sequence[str],
    *,
    now: float,
    tolerance: int = TOLERANCE_S,
) -> dict[str, Any]:
    """The event of a body signed with one of *secrets* within *tolerance* seconds of *now*
    (either way), else `WebhookRejected`."""
    if not header:
        raise WebhookRejected("no Stripe-Signature header")
    if not secrets:
        raise WebhookRejected("no webhook secret is configured")
    if abs(now - _timestamp(header)) > tolerance:
        raise WebhookRejected("the signature's timestamp is outside the tolerance")
    try:
        text = payload.decode("utf-8")  # what the provider signs: the body as UTF-8 text
    except UnicodeDecodeError:
        raise WebhookRejected("the body is not UTF-8") from None
    for secret in secrets:
        try:
            stripe.WebhookSignature.verify_header(text, header, secret, tolerance)
        except stripe.SignatureVerificationError:
            continue
        break
    else:
        raise WebhookRejected("no signature matches a configured secret")
    try:
        event = json.loads(text)
    except ValueError:
        raise WebhookRejected("the signed body is not JSON") from None
    if not isinstance(event, dict) or not isinstance(event.get("id"), str):
        raise WebhookRejected("the signed body is not an event")
    if not isinstance(event.get("type"), str):
        raise WebhookRejected("the event has no type")
    return event
