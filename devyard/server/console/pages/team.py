"""Team: members and roles, invitations (and joining by an invitation's link), API keys,
verified domains with the TXT record to publish, the single sign-on (OIDC) connection, and
the audit log. All through ``/organizations/{id}/...`` as the signed-in session: everyone
sees the members and their own keys; what only admins may read (invitations, every key,
domains, the OIDC connection, the audit log) is fetched only for admins, and every change is
the API's to allow.

Secrets are shown once, in the answer to the post that made them: a new API key, an
invitation's link when the server has no SMTP to mail it. Joining by an invitation's link is
`join` (``/console/team/join``).
"""

from __future__ import annotations

from typing import Any, Final
from urllib.parse import quote

from quart import Blueprint, Response, request

from ..context import api, checked_form, form_csrf, redirect_to, render, viewer
from ..inprocess import ApiFailure
from ..nav import NavEntry

__all__ = ["NAV", "blueprint"]

blueprint = Blueprint("team", __name__, url_prefix="/console/team")
NAV = NavEntry("Team", "/console/team/")

ROLES: Final = ("viewer", "member", "admin")


def _org(who: Any, rest: str = "") -> str:
    return f"/organizations/{quote(who.org_id, safe='')}{rest}"


async def _index(error: str | None = None, status: int = 200, **shown: Any) -> Any:
    who = await viewer()
    values: dict[str, Any] = {
        "members": await api().json("GET", _org(who, "/members")),
        "keys": await api().json("GET", _org(who, "/apiKeys")),
        "invitations": [],
        "domains": [],
        "oidc": None,
    }
    if who.admin:
        values["invitations"] = await api().json("GET", _org(who, "/invitations"))
        values["domains"] = await api().json("GET", _org(who, "/domains"))
        answer = await api().call("GET", _org(who, "/oidcConnection"))
        values["oidc"] = answer.json() if answer.status == 200 else None
    names = {m["user"]["id"]: m["user"]["name"] for m in values["members"]}
    page = await render(
        "console/team/index.html",
        who=who,
        error=error,
        roles=ROLES,
        names=names,
        notice=request.args.get("notice", "")[:200],
        **values,
        **shown,
    )
    return page, status


@blueprint.get("/")
async def index() -> Any:
    return await _index()


async def _change(method: str, path: str, body: object = None, params: Any = None) -> Any:
    """One change through the API; its refusal re-renders the page with the message."""
    try:
        return await api().json(method, path, body=body, params=params, csrf=form_csrf())
    except ApiFailure as exc:
        if exc.status == 401:
            raise
        raise _Refused(exc) from None


class _Refused(Exception):
    def __init__(self, cause: ApiFailure) -> None:
        super().__init__(cause.message)
        self.cause = cause


@blueprint.errorhandler(_Refused)
async def _refused(exc: _Refused) -> Any:
    return await _index(exc.cause.message, exc.cause.status)


def _back(notice: str) -> Response:
    return redirect_to(f"/console/team/?notice={quote(notice)}")


# ---- members ------------------------------------------------------------------------------


@blueprint.post("/members/<name>/role")
async def change_role(name: str) -> Response:
    form = await checked_form()
    who = await viewer()
    role = form.get("role", "")
    await _change("PATCH", _org(who, f"/members/{quote(name, safe='')}"), {"role": role})
    return _back(f"{name} is now {role}.")


@blueprint.post("/members/<name>/remove")
async def remove_member(name: str) -> Response:
    await checked_form()
    who = await viewer()
    await _change("DELETE", _org(who, f"/members/{quote(name, safe='')}"))
    return _back(f"Removed {name}.")


# ---- invitations --------------------------------------------------------------------------


@blueprint.post("/invitations")
async def invite() -> Any:
    form = await checked_form()
    who = await viewer()
    body = {"email": form.get("email", "").strip(), "role": form.get("role", "member")}
    sent = await _change("POST", _org(who, "/invitations"), body)
    if sent.get("acceptUrl"):  # no SMTP: the link to pass on, shown this once
        return await _index(invited=body["email"], accept_url=sent["acceptUrl"])
    return _back(f"Invited {body['email']}: the link went out by mail.")


@blueprint.post("/invitations/<invitation_id>/revoke")
async def revoke_invitation(invitation_id: str) -> Response:
    await checked_form()
    who = await viewer()
    await _change("DELETE", _org(who, f"/invitations/{quote(invitation_id, safe='')}"))
    return _back("The invitation was revoked; its link no longer works.")


# ---- API keys -----------------------------------------------------------------------------


@blueprint.post("/keys")
async def create_key() -> Any:
    form = await checked_form()
    who = await viewer()
    body: dict[str, Any] = {"name": form.get("name", "").strip()}
    if form.get("readOnly"):
        body["readOnly"] = True
    if form.get("userName"):
        body["userName"] = form.get("userName")
    made = await _change("POST", _org(who, "/apiKeys"), body)
    return await _index(new_key=made)


@blueprint.post("/keys/<key_id>/revoke")
async def revoke_key(key_id: str) -> Response:
    await checked_form()
    who = await viewer()
    await _change("DELETE", _org(who, f"/apiKeys/{quote(key_id, safe='')}"))
    return _back("The key was revoked.")


# ---- domains and single sign-on -------------------------------------------------------------


async def _domain_names(who: Any) -> list[str]:
    return [d["domain"] for d in await api().json("GET", _org(who, "/domains"))]


@blueprint.post("/domains")
async def add_domain() -> Response:
    form = await checked_form()
    who = await viewer()
    domain = form.get("domain", "").strip().lower()
    names = await _domain_names(who)
    await _change("PUT", _org(who, "/domains"), {"domains": [*names, domain]})
    return _back(f"Added {domain}: publish its TXT record, then verify.")


@blueprint.post("/domains/<domain>/remove")
async def remove_domain(domain: str) -> Response:
    await checked_form()
    who = await viewer()
    names = [d for d in await _domain_names(who) if d != domain]
    await _change("PUT", _org(who, "/domains"), {"domains": names})
    return _back(f"Removed {domain}.")


@blueprint.post("/domains/<domain>/verify")
async def verify_domain(domain: str) -> Response:
    await checked_form()
    who = await viewer()
    found = await _change("POST", _org(who, f"/domains/{quote(domain, safe='')}/verify"))
    return _back(f"{domain} is {found['status']}.")


@blueprint.post("/oidc")
async def save_oidc() -> Response:
    form = await checked_form()
    who = await viewer()
    body: dict[str, Any] = {
        "issuer": form.get("issuer", "").strip(),
        "clientId": form.get("clientId", "").strip(),
        "allowedDomains": [d for d in form.get("allowedDomains", "").replace(",", " ").split()],
        "defaultRole": form.get("defaultRole", "member"),
    }
    if form.get("clientSecret"):
        body["clientSecret"] = form.get("clientSecret")
    await _change("PUT", _org(who, "/oidcConnection"), body)
    return _back("Saved the single sign-on connection.")


@blueprint.post("/oidc/delete")
async def delete_oidc() -> Response:
    await checked_form()
    who = await viewer()
    await _change("DELETE", _org(who, "/oidcConnection"))
    return _back("Removed the single sign-on connection.")


# ---- audit log ----------------------------------------------------------------------------


@blueprint.get("/audit")
async def audit() -> str:
    who = await viewer()
    params = {"limit": "100"}
    before = request.args.get("before", "")
    if before:
        params["before"] = before
    entries = await api().json("GET", _org(who, "/audit"), params=params)
    members = await api().json("GET", _org(who, "/members"))
    names = {m["user"]["id"]: m["user"]["name"] for m in members}
    return await render("console/team/audit.html", who=who, entries=entries, names=names)
