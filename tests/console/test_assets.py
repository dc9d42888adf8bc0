"""The assets page in-process: the record's upsert answering its signed upload URL (JSON for
the page's script, a page with the curl command without it), the bytes PUT to that URL, the
table's size and md5, download by the signed URL, delete; refusals; CSRF; viewers and other
organizations. (The browser's drag-and-drop upload: test_tunnels_assets_usage_browser.)"""

from __future__ import annotations

import hashlib
from urllib.parse import urlsplit

from .conftest import Console, signed_in

BYTES = b"PK\x03\x04 not really an apk " * 100


def _local(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.path}?{parts.query}"


async def test_signed_out_goes_to_sign_in(console: Console) -> None:
    response = await console.client().get("/console/assets/")
    assert response.headers["Location"] == "/console/sign-in?next=/console/assets/"


async def test_upload_list_download_and_delete(console: Console) -> None:
    client = console.client()
    csrf = await signed_in(client, console.bob.key)
    made = await client.post(
        "/console/assets/new",
        form={"csrf": csrf, "name": "app.apk", "platform": "android", "ttl": "24h"},
        headers={"Accept": "application/json"},
    )
    body = await made.get_json()
    assert made.status_code == 200 and set(body) == {"id", "name", "signedUploadUrl"}
    page = await (await client.get("/console/assets/")).get_data(as_text=True)
    assert "app.apk" in page and "not uploaded" in page and 'id="dropzone"' in page
    put = await client.put(
        _local(body["signedUploadUrl"]),
        data=BYTES,
        headers={"Content-Type": "application/octet-stream"},
    )
    assert put.status_code in (200, 201, 204), await put.get_data(as_text=True)
    table = await (await client.get("/console/assets/table")).get_data(as_text=True)
    assert hashlib.md5(BYTES).hexdigest() in table
    assert "2.2 KB" in table and "android" in table
    download = await client.get(f"/console/assets/{body['id']}/download")
    assert download.status_code == 303
    got = await client.get(_local(download.headers["Location"]))
    assert await got.get_data(as_text=False) == BYTES
    deleted = await client.post(f"/console/assets/{body['id']}/delete", form={"csrf": csrf})
    assert (deleted.status_code, deleted.headers["Location"]) == (303, "/console/assets/")
    assert "No assets yet" in await (await client.get("/console/assets/table")).get_data(True)


async def test_without_javascript_the_form_shows_the_upload_command(console: Console) -> None:
    client = console.client()
    csrf = await signed_in(client, console.alice.key)
    response = await client.post("/console/assets/new", form={"csrf": csrf, "name": "b.ipa"})
    page = await response.get_data(as_text=True)
    assert response.status_code == 200
    assert "curl --fail -X PUT -H &#39;Content-Type: application/octet-stream&#39;" in page
    assert "--data-binary @FILE &#39;http" in page


async def test_the_api_refusal_is_a_message(console: Console) -> None:
    client = console.client()
    csrf = await signed_in(client, console.alice.key)
    form = {"csrf": csrf, "name": "c.apk", "ttl": "forever"}
    response = await client.post("/console/assets/new", form=form)
    page = await response.get_data(as_text=True)
    assert response.status_code == 400 and 'role="alert"' in page and "Traceback" not in page
    as_json = await client.post(
        "/console/assets/new", form=form, headers={"Accept": "application/json"}
    )
    assert as_json.status_code == 400 and (await as_json.get_json())["message"]
    missing = await client.post("/console/assets/asset_nothing/delete", form={"csrf": csrf})
    assert missing.status_code == 404


async def test_a_post_without_csrf_is_refused(console: Console) -> None:
    client = console.client()
    csrf = await signed_in(client, console.alice.key)
    form = {"csrf": csrf, "name": "keep.apk"}
    made = await client.post(
        "/console/assets/new", form=form, headers={"Accept": "application/json"}
    )
    asset_id = (await made.get_json())["id"]
    assert (await client.post("/console/assets/new", form={"name": "x.apk"})).status_code == 403
    refused = await client.post(f"/console/assets/{asset_id}/delete", form={"csrf": "no"})
    assert refused.status_code == 403
    names = [a["name"] for a in await (await client.get("/v1/assets")).get_json()]
    assert names == ["keep.apk"]


async def test_viewers_and_other_organizations(console: Console) -> None:
    alice = console.client()
    csrf = await signed_in(alice, console.alice.key)
    made = await alice.post(
        "/console/assets/new",
        form={"csrf": csrf, "name": "acme-secret.apk"},
        headers={"Accept": "application/json"},
    )
    asset_id = (await made.get_json())["id"]
    carol = console.client()
    carol_csrf = await signed_in(carol, console.carol.key)
    page = await (await carol.get("/console/assets/")).get_data(as_text=True)
    assert "acme-secret.apk" in page and 'id="dropzone"' not in page and "Delete" not in page
    refused = await carol.post(f"/console/assets/{asset_id}/delete", form={"csrf": carol_csrf})
    assert refused.status_code == 403
    olga = console.client()
    olga_csrf = await signed_in(olga, console.olga.key)
    page = await (await olga.get("/console/assets/")).get_data(as_text=True)
    assert "acme-secret" not in page and asset_id not in page
    assert (await olga.get(f"/console/assets/{asset_id}/download")).status_code == 404
    gone = await olga.post(f"/console/assets/{asset_id}/delete", form={"csrf": olga_csrf})
    assert gone.status_code == 404
    assert (await alice.get(f"/v1/assets/{asset_id}")).status_code == 200
