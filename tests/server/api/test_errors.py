"""Every error is one APIError shape; bad input is 400 naming the field, never a 500."""

from __future__ import annotations

import logging

import pytest
from quart.typing import TestClientProtocol as Client
from quart_trio import QuartTrio

from devyard.server.api._errors import Conflict, RateLimited, install_error_handlers

from .conftest import Callers, assert_api_error


async def test_unknown_route_is_a_404_api_error(client: Client) -> None:
    body = await assert_api_error(await client.get("/no/such/thing"), 404, "/no/such/thing")
    assert body["reason"] == "no_route"


async def test_wrong_method_is_a_405_api_error_with_allow(client: Client) -> None:
    response = await client.delete("/livez")
    await assert_api_error(response, 405, "DELETE")
    assert set(response.headers["Allow"].split(", ")) == {"GET", "HEAD"}


async def test_options_is_not_answered_by_the_framework(client: Client) -> None:
    await assert_api_error(await client.options("/whoami"), 405)


@pytest.mark.parametrize(
    ("data", "words"),
    [
        (b"{not json", ("not valid JSON",)),
        (b"", ("JSON request body is required",)),
        (b'{"name": NaN}', ("not valid JSON", "NaN")),
        (b"\xff\xfe", ("not valid JSON",)),
        (b"[]", ("body", "object")),
        (b'{"name": 5}', ("name", "string")),
        (b'{"name": ""}', ("name", "empty")),
        (b'{"name": "  padded  "}', ("name", "pattern")),
        (b'{"name": "x", "color": "red"}', ("unknown field", "color")),
        (b'{"settings": {"inactivityTimeoutSeconds": 5}}', ("inactivityTimeoutSeconds", "60")),
        (b'{"settings": {"inactivityTimeoutSeconds": 1e400}}', ("inactivityTimeoutSeconds",)),
        (b'{"settings": {"inactivityTimeoutSeconds": "600"}}', ("inactivityTimeoutSeconds",)),
        (b'{"settings": {"iphoneDuoEnabled": true}}', ("unknown field", "iphoneDuoEnabled")),
    ],
)
async def test_bad_bodies_are_400_naming_the_field(
    client: Client, callers: Callers, data: bytes, words: tuple[str, ...]
) -> None:
    response = await client.patch(
        f"/organizations/{callers.admin.org_id}",
        data=data,
        headers={**callers.admin.headers, "Content-Type": "application/json"},
    )
    await assert_api_error(response, 400, *words)


async def test_unknown_enum_value_is_400_naming_the_field(client: Client, callers: Callers) -> None:
    response = await client.post(
        f"/organizations/{callers.admin.org_id}/members",
        json={"userName": "dave", "role": "owner"},
        headers=callers.admin.headers,
    )
    await assert_api_error(response, 400, "role", "owner")


async def test_bad_query_parameter_is_400_naming_it(client: Client, callers: Callers) -> None:
    response = await client.get(
        f"/organizations/{callers.admin.org_id}/apiKeys?includeRevoked=maybe",
        headers=callers.admin.headers,
    )
    await assert_api_error(response, 400, "includeRevoked", "true or false")


async def test_too_large_body_is_413(client: Client, callers: Callers) -> None:
    response = await client.post(
        "/feedback", json={"message": "x" * 100_000}, headers=callers.admin.headers
    )
    await assert_api_error(response, 413)


async def test_a_conflict_is_409_naming_the_field(client: Client, callers: Callers) -> None:
    response = await client.post(
        f"/organizations/{callers.admin.org_id}/members",
        json={"userName": "bob", "role": "viewer"},
        headers=callers.admin.headers,
    )
    await assert_api_error(response, 409, "name", "taken")


# -- the error module on a bare app: what no real route of ours does on purpose ---------------


def _bare_app() -> QuartTrio:
    app = QuartTrio(__name__, static_folder=None)
    install_error_handlers(app)

    @app.get("/boom")
    async def boom() -> str:
        raise RuntimeError("secret internals")

    @app.get("/limited")
    async def limited() -> str:
        raise RateLimited("slow down", retry_after=0.2)

    @app.get("/conflict")
    async def conflict() -> str:
        raise Conflict("already there", reason="taken")

    return app


async def test_unexpected_exception_is_a_500_api_error_without_internals(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.ERROR, logger="devyard.server.api._errors"):
        response = await _bare_app().test_client().get("/boom")
    body = await assert_api_error(response, 500, "internal error")
    assert "secret internals" not in body["message"]
    assert body["reason"] == "internal_error"
    # Logged once, with the traceback, where it was handled.
    [record] = [r for r in caplog.records if r.name == "devyard.server.api._errors"]
    assert record.exc_info is not None


async def test_rate_limited_rounds_retry_after_up_to_whole_seconds() -> None:
    response = await _bare_app().test_client().get("/limited")
    await assert_api_error(response, 429, "slow down")
    assert response.headers["Retry-After"] == "1"


async def test_a_raised_error_keeps_its_reason() -> None:
    body = await assert_api_error(await _bare_app().test_client().get("/conflict"), 409)
    assert body == {"message": "already there", "reason": "taken"}
