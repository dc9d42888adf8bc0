"""``POST /github_revoke``: GitHub's secret scanning reports tokens of ours it found public.

Spec 4.3 and 6; docs/security.md. The request is anonymous and proven by its signature
(`secret_scanning.signatures`): the raw body is verified before it is parsed, and nothing in it
is acted on unless the signature holds. Answers:

- 200 with one ``{token_raw, token_type, label}`` per reported token, in the order reported,
  ``token_type`` echoing the reported ``type`` (GitHub's name for our pattern);
- 403 ``missing_signature`` / ``malformed_signature`` / ``unknown_signing_key`` /
  ``invalid_signature`` when the request is not shown to come from the code host (all 403:
  the document declares no required header, so a request without one is well-formed but
  unproven, like a missing key elsewhere);
- 400 ``invalid_request`` when a signed body is not the partner format;
- 503 ``signing_keys_unavailable`` (retryable) when the key endpoint cannot be reached;
- 413 for a body above ``max_body_bytes``.

``GET /organizations/{organizationId}/auditEvents`` (admins) is where the organization reads
what was done: one ``token_leaked`` event per revoked credential.

The key ring lives in the API's state (one per app), so its cache and cooldown hold across
requests.
"""

from __future__ import annotations

from quart import Blueprint, Response, jsonify, request

from ...cluster.tokens import open_host_tokens
from ...secret_scanning import (
    KEY_ID_HEADER,
    SIGNATURE_HEADER,
    LeakResponder,
    ReportError,
    SignatureError,
    SignatureReason,
    parse_reports,
)
from .._errors import BadRequest, Forbidden, Unavailable
from ..context import int_param, same_organization, state
from ..views import timestamp

__all__ = ["blueprint"]

blueprint = Blueprint("secret_scanning", __name__)

_RETRY_AFTER = 60.0


def _refusal(exc: SignatureError) -> Exception:
    if exc.reason is SignatureReason.KEYS_UNAVAILABLE:
        return Unavailable(exc.message, retry_after=_RETRY_AFTER)
    return Forbidden(exc.message, reason=exc.reason.value)


@blueprint.post("/github_revoke")
async def github_revoke() -> Response:
    raw = await request.get_data(as_text=False)
    body = raw if isinstance(raw, bytes) else raw.encode()
    try:
        await state().key_ring.verify(
            body, request.headers.get(KEY_ID_HEADER), request.headers.get(SIGNATURE_HEADER)
        )
    except SignatureError as exc:
        raise _refusal(exc) from None
    try:
        reports = parse_reports(body)
    except ReportError as exc:
        raise BadRequest(str(exc)) from None
    api = state()
    # the data-dir file, or clustered the table every replica shares (its own short-lived
    # pool: reports are rare)
    async with open_host_tokens(api.config, import_file=False) as host_tokens:
        responder = LeakResponder(
            api.store, tunnels=api.tunnels, instances=api.instances, host_tokens=host_tokens
        )
        answer = []
        for report in reports:
            label = await responder.handle(report)
            answer.append({"token_raw": report.token, "token_type": report.type, "label": label})
    return jsonify(answer)


@blueprint.get("/organizations/<organizationId>/auditEvents")
async def list_audit_events(organizationId: str) -> Response:
    caller = same_organization(organizationId)
    limit = int_param("limit")
    assert limit is not None  # the contract gives it a default
    events = await state().store.list_audit_events(caller.org_id, limit=limit)
    return jsonify(
        [
            {
                "id": event.id,
                "kind": event.kind,
                "subject": event.subject,
                "detail": dict(event.detail),
                "createdAt": timestamp(event.created_at),
            }
            for event in events
        ]
    )
