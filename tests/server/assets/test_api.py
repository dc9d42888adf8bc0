"""``/v1/assets`` and the signed ``/blobs/`` URLs on a real server, SQLite and PostgreSQL."""

from __future__ import annotations

import hashlib
import time
from urllib.parse import parse_qsl, urlencode, urlsplit

import httpx
import trio

from devyard.server.blobs import Operation, UrlSigner, load_signing_key
from tests.polling import eventually

from .conftest import Callers, Served

OCTET = {"Content-Type": "application/octet-stream"}


async def test_upload_flow_get_or_create_then_put_then_download(
    served: Served, callers: Callers
) -> None:
    created = await served.upsert(callers.member, "app.apk", os="android")
    assert set(created) == {
        "id",
        "name",
        "os",
        "createdAt",
        "signedUploadUrl",
        "signedDownloadUrl",
        "kind",  # the SDKs' names (docs/compatibility.md)
        "platform",
    }
    assert created["os"] == "android"
    again = await served.upsert(callers.member, "app.apk")
    assert again["id"] == created["id"]

    data = b"\x00apk bytes" * 100_000
    # No API key: the signature is the permission.
    put = await served.http.put(str(created["signedUploadUrl"]), content=data, headers=OCTET)
    assert put.status_code == 200, put.text
    md5 = hashlib.md5(data).hexdigest()
    assert put.json() == {"id": created["id"], "name": "app.apk", "md5": md5, "size": len(data)}

    got = await served.http.get(
        f"{served.url}/v1/assets/{created['id']}",
        params={"includeDownloadUrl": "true"},
        headers=callers.viewer.headers,
    )
    assert got.status_code == 200
    record = got.json()
    assert record["md5"] == md5 and record["size"] == len(data)
    assert "signedUploadUrl" not in record
    download = await served.http.get(record["signedDownloadUrl"])
    assert download.status_code == 200
    assert download.content == data
    assert download.headers["etag"] == f'"{md5}"'
    plain = await served.http.get(
        f"{served.url}/v1/assets/{created['id']}", headers=callers.viewer.headers
    )
    assert "signedDownloadUrl" not in plain.json()

    # A second upload replaces the bytes and the md5.
    put = await served.http.put(str(created["signedUploadUrl"]), content=b"v2", headers=OCTET)
    assert put.json()["md5"] == hashlib.md5(b"v2").hexdigest()
    assert (await served.http.get(record["signedDownloadUrl"])).content == b"v2"
    blob_files = [p for p in (served.config.data_dir / "blobs").iterdir() if p.is_file()]
    assert len(blob_files) == 1  # the old bytes were deleted


async def test_list_filters_urls_and_limit(served: Served, callers: Callers) -> None:
    for name in ["a_1", "a%2", "ab", "b"]:
        await served.upsert(callers.member, name)
    await served.upsert(callers.other_admin, "a_9")

    async def names(**query: str) -> list[str]:
        response = await served.http.get(
            f"{served.url}/v1/assets", params=query, headers=callers.viewer.headers
        )
        assert response.status_code == 200, response.text
        items = response.json()
        assert isinstance(items, list)
        return [item["name"] for item in items]

    assert await names() == ["a_1", "a%2", "ab", "b"]
    assert await names(limit="2") == ["a_1", "a%2"]
    assert await names(namePrefixFilter="a_") == ["a_1"]
    assert await names(nameFilter="ab") == ["ab"]
    response = await served.http.get(
        f"{served.url}/v1/assets",
        params={"nameFilter": "b", "includeUploadUrl": "true", "includeDownloadUrl": "true"},
        headers=callers.member.headers,
    )
    [item] = response.json()
    assert "signedUploadUrl" in item and "signedDownloadUrl" in item
    # An upload URL writes: a viewer may read the list, not get one (it got one before).
    refused = await served.http.get(
        f"{served.url}/v1/assets",
        params={"includeUploadUrl": "true"},
        headers=callers.viewer.headers,
    )
    assert refused.status_code == 403, refused.text
    assert refused.json()["reason"] == "forbidden"
    # Repeat until an empty result (spec 4.1): ``startingAfter`` is the last id seen.
    seen: list[str] = []
    after: dict[str, str] = {}
    while page := (
        await served.http.get(
            f"{served.url}/v1/assets",
            params={"limit": "3", **after},
            headers=callers.viewer.headers,
        )
    ).json():
        seen += [i["name"] for i in page]
        after = {"startingAfter": page[-1]["id"]}
    assert seen == ["a_1", "a%2", "ab", "b"]
    bare = await served.http.get(f"{served.url}/v1/assets", headers=callers.viewer.headers)
    assert all("signedUploadUrl" not in i and "signedDownloadUrl" not in i for i in bare.json())


async def test_bad_input_and_permissions_are_4xx_api_errors(
    served: Served, callers: Callers
) -> None:
    url = f"{served.url}/v1/assets"
    cases = [
        (await served.http.put(url, json={}, headers=callers.member.headers), 400),
        (
            await served.http.put(
                url, json={"name": "x", "os": "win"}, headers=callers.member.headers
            ),
            400,
        ),
        (
            await served.http.put(
                url, json={"name": "x", "ttl": 0}, headers=callers.member.headers
            ),
            400,
        ),
        (await served.http.put(url, json={"name": ""}, headers=callers.member.headers), 400),
        (await served.http.put(url, json={"name": "x"}), 401),
        (await served.http.put(url, json={"name": "x"}, headers=callers.viewer.headers), 403),
        (await served.http.get(url, params={"limit": "0"}, headers=callers.viewer.headers), 400),
        (await served.http.get(url, params={"limit": "501"}, headers=callers.viewer.headers), 400),
        (await served.http.get(f"{url}/asset_nope", headers=callers.viewer.headers), 404),
        (await served.http.delete(f"{url}/asset_nope", headers=callers.member.headers), 404),
    ]
    for response, status in cases:
        assert response.status_code == status, (response.request.url, response.text)
        assert set(response.json()) <= {"message", "reason"}

    theirs = await served.upsert(callers.other_admin, "secret")
    mine = await served.http.get(f"{url}/{theirs['id']}", headers=callers.admin.headers)
    assert mine.status_code == 404
    gone = await served.http.delete(f"{url}/{theirs['id']}", headers=callers.admin.headers)
    assert gone.status_code == 404


async def test_delete_removes_the_record_and_the_bytes(served: Served, callers: Callers) -> None:
    asset = await served.upsert(callers.member, "doomed")
    await served.http.put(str(asset["signedUploadUrl"]), content=b"bytes", headers=OCTET)
    deleted = await served.http.delete(
        f"{served.url}/v1/assets/{asset['id']}", headers=callers.member.headers
    )
    assert deleted.status_code == 200 and deleted.json()["id"] == asset["id"]
    download = await served.http.get(str(asset["signedDownloadUrl"]))
    assert download.status_code == 404 and download.json()["reason"] == "not_found"
    upload = await served.http.put(str(asset["signedUploadUrl"]), content=b"x", headers=OCTET)
    assert upload.status_code == 404
    assert [p for p in (served.config.data_dir / "blobs").iterdir() if p.is_file()] == []


def _with(url: str, **changes: str) -> str:
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query))
    query.update(changes)
    return parts._replace(query=urlencode(query)).geturl()


async def test_tampered_expired_and_misused_urls_are_refused(
    served: Served, callers: Callers
) -> None:
    one = await served.upsert(callers.member, "one")
    two = await served.upsert(callers.member, "two")
    upload, download = str(one["signedUploadUrl"]), str(one["signedDownloadUrl"])

    async def refused(response: httpx.Response, reason: str) -> None:
        assert response.status_code == 403, response.text
        assert response.json()["reason"] == reason

    sig = dict(parse_qsl(urlsplit(upload).query))["sig"]
    flipped = ("0" if sig[0] != "0" else "1") + sig[1:]
    await refused(
        await served.http.put(_with(upload, sig=flipped), content=b"x", headers=OCTET),
        "bad_signature",
    )
    await refused(
        await served.http.put(_with(upload, expires="9999999999"), content=b"x", headers=OCTET),
        "bad_signature",
    )
    await refused(await served.http.put(download, content=b"x", headers=OCTET), "bad_signature")
    await refused(await served.http.get(upload), "bad_signature")
    await refused(await served.http.get(_with(download, op="upload")), "bad_signature")
    moved = upload.replace(str(one["id"]), str(two["id"]))
    await refused(await served.http.put(moved, content=b"x", headers=OCTET), "bad_signature")
    await refused(await served.http.get(download.split("?", maxsplit=1)[0]), "bad_signature")

    # Signed with the server's own key, but already expired.
    signer = UrlSigner(load_signing_key(served.config.data_dir))
    expired = signer.url(served.url, Operation.UPLOAD, str(one["id"]), int(time.time()) - 1)
    await refused(await served.http.put(expired, content=b"x", headers=OCTET), "expired_signature")
    fresh = signer.url(served.url, Operation.UPLOAD, str(one["id"]), int(time.time()) + 60)
    assert (await served.http.put(fresh, content=b"x", headers=OCTET)).status_code == 200

    wrong_type = await served.http.put(upload, content=b"x", headers={"Content-Type": "text/plain"})
    assert wrong_type.status_code == 415
    assert (await served.http.post(upload, content=b"x")).status_code == 405


async def test_an_interrupted_upload_leaves_the_previous_bytes(
    served: Served, callers: Callers
) -> None:
    asset = await served.upsert(callers.member, "app.apk")
    upload = str(asset["signedUploadUrl"])
    assert (await served.http.put(upload, content=b"v1", headers=OCTET)).status_code == 200

    parts = urlsplit(upload)
    head = (
        f"PUT {parts.path}?{parts.query} HTTP/1.1\r\nHost: {parts.netloc}\r\n"
        "Content-Type: application/octet-stream\r\nContent-Length: 50000000\r\n\r\n"
    ).encode()
    stream = await trio.open_tcp_stream("127.0.0.1", served.bound.port)
    await stream.send_all(head + b"y" * 3_000_000)
    tmp = served.config.data_dir / "blobs" / ".tmp"
    await eventually(lambda: any(tmp.iterdir()))  # the server is writing the new bytes
    await stream.aclose()  # the client goes away mid-upload
    await eventually(lambda: not any(tmp.iterdir()))  # and the partial file is removed

    record = await served.http.get(
        f"{served.url}/v1/assets/{asset['id']}",
        params={"includeDownloadUrl": "true"},
        headers=callers.viewer.headers,
    )
    assert record.json()["md5"] == hashlib.md5(b"v1").hexdigest()
    assert (await served.http.get(record.json()["signedDownloadUrl"])).content == b"v1"
    files = [p.name for p in (served.config.data_dir / "blobs").iterdir() if p.is_file()]
    assert len(files) == 1
