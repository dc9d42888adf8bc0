"""Invitations (spec 4.4): admins invite an email with a role; the invited person accepts.

An invitation's token is shown only in the accept link: mailed to the invited address when
SMTP is configured (`accounts.mail`), else returned once to the inviting admin, who passes it
on. The store keeps only its hash. Accepting (``POST .../invitations/accept?token=...``) is
single-use and bound to the invited person:

- with an API key (any organization's: the invited person is not yet a member, so the usual
  organization check of the pipeline does not apply here), or a browser session *with its
  CSRF token* in ``X-CSRF-Token`` (the console's join page), the caller's user joins if its
  email is the invited one, or is in a domain the organization has verified and the invited
  email is in the same domain; anyone else is 403. A session cookie without the CSRF token
  is ignored (a cross-site form post brings the cookie, never the token);
- without either, a new user with the invited email joins (holding the mailed token proves the
  address), named ``userName`` or the email's local part.

Either way the answer carries a first API key of the user in the joined organization, shown
once: a key belongs to one organization, so without it the new member could not enter.
``GET .../invitations/preview?token=`` tells the token's holder what it would join (the
organization's name and the role), changing nothing, for the console's confirmation page.

An unknown, revoked, expired or used token is 404, the same answer for each.
"""

from __future__ import annotations

import re
import secrets
from typing import Final
from urllib.parse import quote, urlencode

from quart import Blueprint, Response, jsonify, request
from werkzeug.routing import BaseConverter

from ...accounts import sessions
from ...accounts.mail import Mailer, MailError, Message
from ...store import errors as store_errors
from ...store import tokens
from ...store.accounts import DomainStatus, Invitation
from ...store.base import Role
from .._errors import Conflict, Forbidden, NotFound, Unavailable
from ..auth import Principal, require_csrf
from ..context import body, same_organization, state, str_param
from ..views import api_key_view, base_url, timestamp
from .audit import record

__all__ = ["blueprint", "invitation_view"]

blueprint = Blueprint("invitations", __name__)


class _InvitationId(BaseConverter):
    """Any path segment but ``accept``: ``.../invitations/accept`` is another resource, so the
    revoke rule must not match it (its ``Allow`` would list DELETE)."""

    regex = r"(?!(?:accept|preview)\b)[^/]+"


blueprint.record_once(lambda setup: setup.app.url_map.converters.update(invitation=_InvitationId))

TOKEN_PREFIX: Final = "dyinv_"  # noqa: S105 - a prefix, not a secret
_SUCCESS: Final = {"success": True}
_NAME_CHARS: Final = re.compile(r"[^A-Za-z0-9._-]")


def invitation_view(invitation: Invitation) -> dict[str, object]:
    return {
        "id": invitation.id,
        "email": invitation.email,
        "role": str(invitation.role),
        "invitedBy": invitation.invited_by,
        "createdAt": timestamp(invitation.created_at),
        "expiresAt": timestamp(invitation.expires_at),
    }


def _accept_url(org_id: str, token: str) -> str:
    return f"{base_url()}/organizations/{org_id}/invitations/accept?token={quote(token)}"


def _mail(org_name: str, inviter: str, role: Role, url: str) -> str:
    return (
        f"{inviter} invites you to join the organization {org_name!r} on devyard as {role}.\n\n"
        f"Accept the invitation:\n\n    {url}\n\n"
        "(Open it in a browser to accept in the devyard console, signed in or as a new user;\n"
        "or POST to it with an API key of your user.) The link works once. If you did not\n"
        "expect it, ignore this message.\n"
    )


@blueprint.get("/organizations/<organizationId>/invitations")
async def list_invitations(organizationId: str) -> Response:
    caller = same_organization(organizationId)
    invitations = await state().store.list_open_invitations(caller.org_id)
    return jsonify([invitation_view(i) for i in invitations])


@blueprint.post("/organizations/<organizationId>/invitations")
async def create_invitation(organizationId: str) -> Response:
    caller = same_organization(organizationId)
    api = state()
    data = body()
    email = str(data["email"]).lower()
    role = Role(data.get("role", Role.MEMBER))
    for member in await api.store.list_members(caller.org_id):
        if member.user.email is not None and member.user.email.lower() == email:
            raise Conflict(f"{email} is already a member", reason="already_member")
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    invitation = await api.store.create_invitation(
        org_id=caller.org_id,
        email=email,
        role=role,
        token_hash=tokens.hash_secret(token),
        invited_by=caller.user_id,
        ttl_s=api.config.accounts.invitation_ttl_s,
    )
    url = _accept_url(caller.org_id, token)
    answer: dict[str, object] = {"success": True, "invitationId": invitation.id}
    if api.config.accounts.mail_enabled:
        message = Message(
            to=email,
            subject=f"Join {caller.organization.name} on devyard",
            body=_mail(caller.organization.name, caller.user.name, role, url),
        )
        try:
            await Mailer(api.config.accounts).send(message)
        except MailError as exc:
            await api.store.revoke_invitation(caller.org_id, invitation.id)
            raise Unavailable(
                f"the mail server did not take the invitation ({exc}); nothing was sent, retry",
                retry_after=30,
            ) from None
        answer["emailed"] = True
    else:
        answer["emailed"] = False
        answer["acceptUrl"] = url
    await record(
        caller,
        "invitation_created",
        org_id=caller.org_id,
        subject=invitation.id,
        detail={"email": email, "role": str(role)},
    )
    return jsonify(answer)


@blueprint.delete("/organizations/<organizationId>/invitations/<invitation:invitationId>")
async def revoke_invitation(organizationId: str, invitationId: str) -> Response:
    caller = same_organization(organizationId)
    api = state()
    try:
        await api.store.revoke_invitation(caller.org_id, invitationId)
    except store_errors.NotFound:
        raise NotFound(f"open invitation {invitationId!r} not found") from None
    await record(
        caller,
        "invitation_revoked",
        org_id=caller.org_id,
        subject=invitationId,
    )
    return jsonify(_SUCCESS)


async def _optional_caller() -> Principal | None:
    header = request.headers.get("Authorization")
    if header:
        caller = await state().authenticator.authenticate(header)
    else:
        found = await _session_caller()
        if found is None:
            return None
        caller = found
    if caller.scopes is not None or caller.api_key.read_only:
        raise Forbidden("accepting an invitation needs a full API key", reason="insufficient_scope")
    return caller


async def _session_caller() -> Principal | None:
    """The browser session, only when the request brings its CSRF token: a cookie alone is
    ignored, as another site's form post would bring it (and join a signed-in victim)."""
    cookie = request.cookies.get(sessions.SESSION_COOKIE)
    presented = request.headers.get(sessions.CSRF_HEADER)
    if not cookie or not presented:
        return None
    caller = await state().authenticator.authenticate_session(cookie)
    require_csrf(caller, presented)
    return caller


def _domain(email: str) -> str:
    return email.rpartition("@")[2].lower()


async def _bound_to(caller: Principal, invitation: Invitation) -> bool:
    """Whether *caller* may accept: its email is the invited one, or both are in a domain
    the organization verified."""
    email = (caller.user.email or "").lower()
    if not email:
        return False
    if email == invitation.email:
        return True
    domain = _domain(email)
    if domain != _domain(invitation.email):
        return False
    domains = await state().store.list_domains(invitation.org_id)
    return any(d.domain == domain and d.status is DomainStatus.VERIFIED for d in domains)


def _default_name(email: str) -> str:
    local = _NAME_CHARS.sub("-", email.partition("@")[0]).strip("-._") or "user"
    return local[:64]


@blueprint.get("/organizations/<organizationId>/invitations/accept")
async def open_invitation_link(organizationId: str) -> Response:
    """The mailed link opened in a browser: to the console's join page, which accepts by the
    POST below (the link itself changes nothing: a GET never does)."""
    query = urlencode({"organization": organizationId, "token": str_param("token") or ""})
    return Response("", status=303, headers={"Location": f"/console/team/join?{query}"})


async def _open_invitation(organization_id: str, token: str) -> Invitation:
    try:
        return await state().store.get_invitation_by_token(
            organization_id, tokens.hash_secret(token)
        )
    except store_errors.NotFound:
        raise NotFound("no open invitation with this token", reason="invitation_not_open") from None


@blueprint.get("/organizations/<organizationId>/invitations/preview")
async def preview_invitation(organizationId: str) -> Response:
    """What the token would join, for its holder's confirmation; changes nothing."""
    token = str_param("token")
    assert token is not None  # required by the document
    invitation = await _open_invitation(organizationId, token)
    organization = await state().store.get_organization(invitation.org_id)
    return jsonify(
        {
            "organizationId": organization.id,
            "organizationName": organization.name,
            "role": str(invitation.role),
            "expiresAt": timestamp(invitation.expires_at),
        }
    )


@blueprint.post("/organizations/<organizationId>/invitations/accept")
async def accept_invitation(organizationId: str) -> Response:
    api = state()
    token = str_param("token")
    assert token is not None  # required by the document
    try:
        invitation = await api.store.get_invitation_by_token(
            organizationId, tokens.hash_secret(token)
        )
    except store_errors.NotFound:
        invitation = None
    caller = await _optional_caller()
    if invitation is None:
        raise NotFound("no open invitation with this token", reason="invitation_not_open")
    answer: dict[str, object] = {"success": True, "organizationId": invitation.org_id}
    try:
        if caller is not None:
            if not await _bound_to(caller, invitation):
                raise Forbidden(
                    "this invitation is for another email address", reason="not_invited"
                )
            await api.store.accept_invitation(invitation.org_id, invitation.id, caller.user_id)
            user_id = caller.user_id
        else:
            name = str_param("userName") or _default_name(invitation.email)
            user, _ = await api.store.accept_invitation_as_new_user(
                invitation.org_id, invitation.id, name
            )
            user_id = user.id
    except store_errors.NotFound:
        raise NotFound("no open invitation with this token", reason="invitation_not_open") from None
    except store_errors.Conflict as exc:
        what = "already a member" if exc.field is None else f"{exc.field} is taken"
        raise Conflict(f"cannot accept: {what}", reason="taken") from None
    secret = tokens.new_api_key()
    key = await api.store.create_api_key(
        org_id=invitation.org_id,
        user_id=user_id,
        name="invitation",
        lookup_id=secret.lookup_id,
        secret_hash=secret.secret_hash,
    )
    answer["apiKey"] = {**api_key_view(key), "key": secret.plaintext}
    await record(
        caller,
        "invitation_accepted",
        org_id=invitation.org_id,
        subject=invitation.id,
        detail={"role": str(invitation.role)},
        actor=user_id,
    )
    return jsonify(answer)
