"""The billing page in-process with the provider ``none``: the plan catalog and the current
plan, invoices, what the provider cannot do shown as the API's message (portal, plan change),
CSRF, a member sees only the plans, another organization's page is its own."""

from __future__ import annotations

from .conftest import Console, signed_in


async def test_signed_out_goes_to_sign_in(console: Console) -> None:
    response = await console.client().get("/console/billing/")
    assert response.headers["Location"] == "/console/sign-in?next=/console/billing/"


async def test_the_plan_invoices_and_what_the_provider_cannot_do(console: Console) -> None:
    client = console.client()
    csrf = await signed_in(client, console.alice.key)
    response = await client.get("/console/billing/")
    page = await response.get_data(as_text=True)
    assert response.status_code == 200, page
    plans = await (await client.get(f"/organizations/{console.alice.org_id}/plans")).get_json()
    current = next(p["plan"] for p in plans if p["action"] == "current")
    assert f'id="current-plan">{current["name"]}<' in page
    for option in plans:
        assert f'data-plan="{option["plan"]["tid"]}"' in page
    assert 'id="invoices"' in page  # devyard's own invoices, by usage
    portal = await client.post("/console/billing/portal", form={"csrf": csrf})
    text = await portal.get_data(as_text=True)
    if portal.status_code == 303:  # a provider that has a portal: off to it
        assert portal.headers["Location"].startswith("http")
    else:
        assert 400 <= portal.status_code < 500 and 'role="alert"' in text
        assert "Traceback" not in text
    change = await client.post("/console/billing/plan", form={"csrf": csrf, "priceId": "price_x"})
    assert change.status_code in (303, 400, 404, 409, 422)
    assert "Traceback" not in await change.get_data(as_text=True)


async def test_csrf_admins_only_and_other_organizations(console: Console) -> None:
    client = console.client()
    await signed_in(client, console.alice.key)
    assert (await client.post("/console/billing/portal", form={})).status_code == 403
    assert (await client.post("/console/billing/plan", form={"priceId": "p"})).status_code == 403
    bob = console.client()
    await signed_in(bob, console.bob.key)
    assert "/console/billing/" not in await (await bob.get("/console/instances/")).get_data(True)
    # a member's page shows the plans (viewers may read them) and none of the admin's reads
    page = await (await bob.get("/console/billing/")).get_data(as_text=True)
    assert 'id="plans"' in page and 'id="invoices"' not in page and 'id="upcoming"' not in page
    olga = console.client()
    await signed_in(olga, console.olga.key)
    page = await (await olga.get("/console/billing/")).get_data(as_text=True)
    assert "globex" in page and "acme" not in page
