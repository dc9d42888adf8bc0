"""The webhook verifier against the real `stripe` package's own signer
(`stripe.WebhookSignature.generate_signature_header`): the cases of
../shared/design/callbacks.md 5.1, with the future timestamp refused as we decided."""

from __future__ import annotations

import json
import time

import pytest
import stripe

from devyard.server.billing.webhook import WebhookRejected, verify_event

SECRET = "whsec_test_0123456789abcdef"
OLD_SECRET = "whsec_test_rotated_away"
BODY = json.dumps({"id": "evt_1", "type": "invoice.paid", "data": {"object": {}}}).encode()


def _header(body: bytes, secret: str, at: int) -> str:
    header: str = stripe.WebhookSignature.generate_signature_header(
        body.decode(), secret, timestamp=at
    )
    return header


def test_a_fresh_event_signed_with_the_secret_is_accepted() -> None:
    now = int(time.time())
    event = verify_event(BODY, _header(BODY, SECRET, now), [SECRET], now=now)
    assert event["id"] == "evt_1" and event["type"] == "invoice.paid"


@pytest.mark.parametrize("age", [-299, 299])
def test_within_the_tolerance_either_way_is_accepted(age: int) -> None:
    now = int(time.time())
    assert verify_event(BODY, _header(BODY, SECRET, now - age), [SECRET], now=now)


@pytest.mark.parametrize(("age", "why"), [(301, "tolerance"), (-3600, "tolerance")])
def test_stale_and_future_timestamps_are_refused(age: int, why: str) -> None:
    """The library accepts a future timestamp; we do not (callbacks.md 5.1)."""
    now = int(time.time())
    with pytest.raises(WebhookRejected, match=why):
        verify_event(BODY, _header(BODY, SECRET, now - age), [SECRET], now=now)


def test_a_tampered_body_a_wrong_secret_and_the_bare_secret_are_refused() -> None:
    now = int(time.time())
    header = _header(BODY, SECRET, now)
    tampered = BODY.replace(b"invoice.paid", b"invoice.void")
    for body, secrets in (
        (tampered, [SECRET]),
        (BODY, ["whsec_other"]),
        (BODY, [SECRET.removeprefix("whsec_")]),  # the key is the whole string
    ):
        with pytest.raises(WebhookRejected, match="no signature matches"):
            verify_event(body, header, secrets, now=now)


def test_rotation_any_live_secret_and_any_v1_entry_pass() -> None:
    now = int(time.time())
    header = _header(BODY, SECRET, now)
    assert verify_event(BODY, header, [OLD_SECRET, SECRET], now=now)
    stale_v1 = _header(BODY, OLD_SECRET, now).split(",")[1]
    two = f"{header.split(',')[0]},{stale_v1},{header.split(',')[1]}"  # t, bad v1, good v1
    assert verify_event(BODY, two, [SECRET], now=now)


def test_headers_without_v1_or_timestamp_and_unsigned_bodies_are_refused() -> None:
    now = int(time.time())
    good = _header(BODY, SECRET, now)
    v0_only = good.split(",")[0] + ",v0=" + good.split("v1=")[1]
    cases = [
        (None, "no Stripe-Signature"),
        ("", "no Stripe-Signature"),
        (v0_only, "no signature matches"),
        ("v1=" + good.split("v1=")[1], "no timestamp"),
        ("t=abc,v1=00", "no timestamp"),
    ]
    for header, why in cases:
        with pytest.raises(WebhookRejected, match=why):
            verify_event(BODY, header, [SECRET], now=now)
    with pytest.raises(WebhookRejected, match="no webhook secret"):
        verify_event(BODY, good, [], now=now)


def test_a_signed_body_that_is_not_an_event_is_refused() -> None:
    now = int(time.time())
    for body in (b"[1, 2]", b'{"type": "x"}', b'{"id": "evt_2"}', b"{nope"):
        with pytest.raises(WebhookRejected, match=r"not JSON|not an event|no type"):
            verify_event(body, _header(body, SECRET, now), [SECRET], now=now)
    with pytest.raises(WebhookRejected, match="not UTF-8"):
        verify_event(b"\xff\xfe", _header(BODY, SECRET, now), [SECRET], now=now)
