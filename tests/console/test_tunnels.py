"""The tunnels page in-process: list, create (the token once, with the connector command),
edit the selectors, rotate, delete; the API's refusals as messages; CSRF; admins only; another
organization sees none of it. (The browser test with a real connector: test_pages_browser.)"""

from __future__ import annotations

import re

from .conftest import Console, signed_in


def _token(page: str) -> str:
    match = re.search(r'id="tunnel-token">(dyt_[^<]+)<', page)
    assert match is not None, page
    return match.group(1)


async def test_signed_out_goes_to_sign_in(console: Console) -> None:
    response = await console.client().get("/console/tunnels/")
    assert response.status_code == 303
    assert response.headers["Location"] == "/console/sign-in?next=/console/tunnels/"


async def test_create_shows_the_token_once_with_the_command(console: Console) -> None:
    client = console.client()
    csrf = await signed_in(client, console.alice.key)
    response = await client.post(
        "/console/tunnels/new",
        form={
            "csrf": csrf,
            "name": "intranet",
            "selectors": "db.internal:5432\n*.corp.example",
            "tokenExpiryMonths": "6",
        },
    )
    page = await response.get_data(as_text=True)
    assert response.status_code == 200, page
    token = _token(page)
    assert f"DEVYARD_TUNNEL_TOKEN={token} devyard connector run --server http" in page
    assert response.headers["Cache-Control"] == "no-store"
    # the API has it; the list and the tunnel's page never show the token again
    got = await client.get("/v1/tunnels/intranet")
    assert (await got.get_json())["selectors"] == ["db.internal:5432", "*.corp.example"]
    for path in ("/console/tunnels/", "/console/tunnels/table", "/console/tunnels/intranet"):
        response = await client.get(path)
        text = await response.get_data(as_text=True)
        assert response.status_code == 200 and "intranet" in text, path
        assert token not in text and "offline" in text, path
    assert "Quick" not in await (await client.get("/console/tunnels/table")).get_data(as_text=True)


async def test_quick_tunnels_are_marked_quick(console: Console) -> None:
    client = console.client()
    csrf = await signed_in(client, console.alice.key)
    form = {"csrf": csrf, "name": "quick-one", "selectors": "localhost:8080", "ephemeral": "1"}
    assert (await client.post("/console/tunnels/new", form=form)).status_code == 200
    table = await (await client.get("/console/tunnels/table")).get_data(as_text=True)
    assert re.search(r"quick-one</a> <span class=\"label quick\">Quick</span>", table)


async def test_edit_rotate_and_delete(console: Console) -> None:
    client = console.client()
    csrf = await signed_in(client, console.alice.key)
    form = {"csrf": csrf, "name": "lab", "selectors": "10.0.0.1:8080"}
    first = _token(await (await client.post("/console/tunnels/new", form=form)).get_data(True))
    edited = await client.post(
        "/console/tunnels/lab/selectors", form={"csrf": csrf, "selectors": "a.lab:9000, b.lab:9001"}
    )
    assert (edited.status_code, edited.headers["Location"]) == (303, "/console/tunnels/lab")
    tunnel = await (await client.get("/v1/tunnels/lab")).get_json()
    assert tunnel["selectors"] == ["a.lab:9000", "b.lab:9001"] and tunnel["selectorVersion"] == 2
    rotated = await client.post(
        "/console/tunnels/lab/rotate", form={"csrf": csrf, "tokenExpiryMonths": "24"}
    )
    second = _token(await rotated.get_data(as_text=True))
    assert second != first and "Rotated the token of" in await rotated.get_data(as_text=True)
    deleted = await client.post("/console/tunnels/lab/delete", form={"csrf": csrf})
    assert (deleted.status_code, deleted.headers["Location"]) == (303, "/console/tunnels/")
    assert (await client.get("/v1/tunnels/lab")).status_code == 404
    assert (await client.get("/console/tunnels/lab")).status_code == 404


async def test_the_api_refusal_is_shown_on_the_form(console: Console) -> None:
    client = console.client()
    csrf = await signed_in(client, console.alice.key)
    response = await client.post(
        "/console/tunnels/new", form={"csrf": csrf, "name": "Not A Name", "selectors": "x:1"}
    )
    page = await response.get_data(as_text=True)
    assert response.status_code == 400
    assert 'role="alert"' in page and "Traceback" not in page and "dyt_" not in page
    assert 'value="Not A Name"' in page  # the form keeps what was typed
    form = {"csrf": csrf, "name": "dup", "selectors": "x.y:1"}
    assert (await client.post("/console/tunnels/new", form=form)).status_code == 200
    again = await client.post("/console/tunnels/new", form=form)
    assert again.status_code == 409 and 'role="alert"' in await again.get_data(as_text=True)
    bad = await client.post("/console/tunnels/dup/selectors", form={"csrf": csrf, "selectors": ""})
    assert bad.status_code == 400 and 'role="alert"' in await bad.get_data(as_text=True)


async def test_a_post_without_csrf_is_refused_and_changes_nothing(console: Console) -> None:
    client = console.client()
    csrf = await signed_in(client, console.alice.key)
    assert (
        await client.post(
            "/console/tunnels/new", form={"csrf": csrf, "name": "keep", "selectors": "k:1"}
        )
    ).status_code == 200
    for path, form in (
        ("/console/tunnels/new", {"name": "other", "selectors": "o:1"}),
        ("/console/tunnels/keep/delete", {"csrf": "wrong"}),
        ("/console/tunnels/keep/rotate", {}),
        ("/console/tunnels/keep/selectors", {"selectors": "z:2"}),
    ):
        response = await client.post(path, form=form)
        assert response.status_code == 403, path
    names = [t["name"] for t in await (await client.get("/v1/tunnels")).get_json()]
    assert names == ["keep"]
    assert (await (await client.get("/v1/tunnels/keep")).get_json())["selectors"] == ["k:1"]


async def test_members_and_other_organizations_see_none_of_it(console: Console) -> None:
    alice = console.client()
    csrf = await signed_in(alice, console.alice.key)
    form = {"csrf": csrf, "name": "acme-secret", "selectors": "s:1"}
    assert (await alice.post("/console/tunnels/new", form=form)).status_code == 200
    bob = console.client()
    await signed_in(bob, console.bob.key)
    menu = await (await bob.get("/console/instances/")).get_data(as_text=True)
    assert "/console/tunnels/" not in menu  # the page is for admins
    response = await bob.get("/console/tunnels/")
    assert response.status_code == 403 and "acme-secret" not in await response.get_data(True)
    olga = console.client()
    olga_csrf = await signed_in(olga, console.olga.key)
    page = await (await olga.get("/console/tunnels/")).get_data(as_text=True)
    assert "acme-secret" not in page and "No tunnels yet" in page
    assert (await olga.get("/console/tunnels/acme-secret")).status_code == 404
    for action in ("delete", "rotate"):
        response = await olga.post(
            f"/console/tunnels/acme-secret/{action}", form={"csrf": olga_csrf}
        )
        assert response.status_code == 404, action
    assert (await alice.get("/v1/tunnels/acme-secret")).status_code == 200
