"""An organization's verified email domains (spec 4.4, 3.2): listed verified or pending.

``PUT`` replaces the list: a domain already listed keeps its state and token, a new one is
pending with a fresh token to publish as the TXT record ``_devyard-verification.<domain>``;
``POST .../domains/{domain}/verify`` looks that record up (`accounts.domains`) and marks the
domain verified when it holds the token. A record not (yet) there leaves it pending (200,
``status: pending``): DNS propagation takes time, so the client asks again later; a resolver
that does not answer is 503. A verified domain binds invitations (`invitations`) and is where
single sign-on finds its users. Domain names are compared in lower case without a final dot.
"""

from __future__ import annotations

from quart import Blueprint, Response, jsonify

from ...accounts.domains import DnsUnavailable, TxtVerifier, new_txt_token, record_name
from ...store import errors as store_errors
from ...store.accounts import DomainStatus, OrganizationDomain
from .._errors import NotFound, Unavailable
from ..context import body, same_organization, state
from ..views import timestamp
from .audit import record

__all__ = ["blueprint", "normalize_domain"]

blueprint = Blueprint("domains", __name__)


def normalize_domain(domain: str) -> str:
    return domain.strip().rstrip(".").lower()


def domain_view(domain: OrganizationDomain) -> dict[str, object]:
    return {
        "domain": domain.domain,
        "status": str(domain.status),
        "txtRecord": {"name": record_name(domain.domain), "value": domain.txt_token},
        "createdAt": timestamp(domain.created_at),
        "verifiedAt": None if domain.verified_at is None else timestamp(domain.verified_at),
    }


@blueprint.get("/organizations/<organizationId>/domains")
async def list_domains(organizationId: str) -> Response:
    caller = same_organization(organizationId)
    domains = await state().store.list_domains(caller.org_id)
    return jsonify([domain_view(d) for d in domains])


@blueprint.put("/organizations/<organizationId>/domains")
async def replace_domains(organizationId: str) -> Response:
    caller = same_organization(organizationId)
    api = state()
    wanted = sorted({normalize_domain(d) for d in body()["domains"]})
    domains = await api.store.replace_domains(
        caller.org_id, {domain: new_txt_token() for domain in wanted}
    )
    await record(
        caller,
        "domains_replaced",
        org_id=caller.org_id,
        subject=None,
        detail={"domains": wanted},
    )
    return jsonify([domain_view(d) for d in domains])


@blueprint.post("/organizations/<organizationId>/domains/<domain>/verify")
async def verify_domain(organizationId: str, domain: str) -> Response:
    caller = same_organization(organizationId)
    api = state()
    name = normalize_domain(domain)
    listed = {d.domain: d for d in await api.store.list_domains(caller.org_id)}
    found = listed.get(name)
    if found is None:
        raise NotFound(f"domain {name!r} is not listed by this organization")
    if found.status is DomainStatus.VERIFIED:
        return jsonify(domain_view(found))
    try:
        present = await TxtVerifier(api.config.accounts).verify(name, found.txt_token)
    except DnsUnavailable as exc:
        raise Unavailable(f"{exc}; retry later", retry_after=30) from None
    if not present:
        return jsonify(domain_view(found))
    try:
        verified = await api.store.mark_domain_verified(caller.org_id, name)
    except store_errors.NotFound:  # replaced meanwhile
        raise NotFound(f"domain {name!r} is not listed by this organization") from None
    await record(
        caller,
        "domain_verified",
        org_id=caller.org_id,
        subject=name,
    )
    return jsonify(domain_view(verified))
