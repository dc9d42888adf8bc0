"""Issue 14 finding 6: nothing a client sends is a 500 or a traceback in the log.

Every operation of the document that takes a JSON body gets, over a real listener, a lone
surrogate both as a JSON escape and as its raw (invalid UTF-8) bytes, deep nesting and numbers
no field can hold: each is a 400 APIError, and the server logs no ERROR and no traceback.
Anonymous ``POST /feedback`` is among them. A lone surrogate percent-encoded in a path or a
query is a 400 on the same operations.
"""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path
from typing import Final

import httpx
import pytest
import trio

from devyard.server.api.app import api_state
from devyard.server.api.contract import MAX_DEPTH, Contract, Operation, load_document
from devyard.server.api.serve import BoundServer, serve_api
from devyard.server.config import ListenAddress, RateLimitConfig, ServerConfig
from devyard.server.store import Store

from .conftest import Callers

_BODIES: Final = {
    "escaped surrogate value": b'{"name": "\\ud800", "message": "\\ud800"}',
    "escaped surrogate key": b'{"\\udfff": 1}',
    "escaped surrogate deep": b'{"spec": {"labels": {"a": ["ok", "\\ud800"]}}}',
    "raw surrogate bytes": b'{"name": "\xed\xa0\x80", "message": "\xed\xa0\x80"}',
    "nesting past the bound": b"[" * (MAX_DEPTH + 5) + b"]" * (MAX_DEPTH + 5),
    "nesting past the parser": b"[" * 100_000 + b"]" * 100_000,
    "huge integer": b'{"name": 1' + b"0" * 4000 + b"}",
    "integer too long to parse": b'{"name": 1' + b"0" * 5000 + b"}",
    "huge float": b'{"name": 1e999999, "message": 1e999999}',
}
_SURROGATE: Final = "%ED%A0%80"


def _body_operations() -> list[Operation]:
    return [op for op in Contract(load_document()).operations if op.body is not None]


def _path(operation: Operation, callers: Callers, value: str | None = None) -> str:
    """The operation's path with each parameter filled: real ids, or *value* everywhere."""
    known = {"organizationId": callers.admin.org_id, "userName": "alice"}

    def fill(match: re.Match[str]) -> str:
        name = match.group(1)
        return value if value is not None else known.get(name, "nothing")

    return re.sub(r"\{([^}]+)\}", fill, operation.template)


@pytest.fixture
async def server(nursery: trio.Nursery, store: Store, tmp_path: Path) -> AsyncIterator[BoundServer]:
    config = ServerConfig(
        data_dir=tmp_path,
        listen=ListenAddress("127.0.0.1", 0),
        max_body_bytes=1024 * 1024,
        # hundreds of requests on one key in a few seconds: this test is about what a body may
        # hold, not about the rate limit (tests/server/api/test_ratelimit.py)
        rate_limit=RateLimitConfig(enabled=False),
    )
    shutdown = trio.Event()
    yield await nursery.start(
        partial(serve_api, api_state(store, config), shutdown_trigger=shutdown.wait)
    )
    shutdown.set()


def _assert_api_error(response: httpx.Response, what: str) -> None:
    assert response.status_code == 400, (what, response.status_code, response.text[:300])
    body = response.json()
    assert set(body) == {"message", "reason"} and body["message"], (what, body)


def _assert_quiet(caplog: pytest.LogCaptureFixture) -> None:
    loud = [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    assert loud == [], [f"{r.name}: {r.getMessage()}" for r in loud]


def test_every_json_body_operation_is_walked() -> None:
    # The walk below covers the document, so a new JSON-body operation is covered too.
    walked = {(op.method, op.template) for op in _body_operations()}
    assert ("POST", "/feedback") in walked
    assert len(walked) >= 13  # the audit's count of JSON-body endpoints


async def test_hostile_bodies_are_400_without_a_traceback(
    server: BoundServer, callers: Callers, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    async with httpx.AsyncClient(base_url=server.local_url, timeout=30) as http:
        for operation in _body_operations():
            path = _path(operation, callers)
            for what, data in _BODIES.items():
                # With the key, so the body is what is judged; /feedback also anonymously.
                keys = [callers.admin.headers] + ([{}] if operation.auth != "required" else [])
                for headers in keys:
                    response = await http.request(
                        operation.method,
                        path,
                        content=data,
                        headers={**headers, "Content-Type": "application/json"},
                    )
                    _assert_api_error(response, f"{operation.method} {path}: {what}")
    _assert_quiet(caplog)


async def test_a_surrogate_in_a_path_or_query_is_400_without_a_traceback(
    server: BoundServer, callers: Callers, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    async with httpx.AsyncClient(base_url=server.local_url, timeout=30) as http:
        for operation in _body_operations():
            targets = [f"{_path(operation, callers)}?x={_SURROGATE}"]
            if "{" in operation.template:
                targets.append(_path(operation, callers, _SURROGATE))
            for target in targets:
                response = await http.request(
                    operation.method, target, json={}, headers=callers.admin.headers
                )
                _assert_api_error(response, f"{operation.method} {target}")
        response = await http.get(
            f"/v1/assets?nameFilter={_SURROGATE}", headers=callers.admin.headers
        )
        _assert_api_error(response, "GET /v1/assets?nameFilter=")
    _assert_quiet(caplog)


async def test_a_nul_in_a_path_or_query_is_400_on_both_backends(
    server: BoundServer, callers: Callers, caplog: pytest.LogCaptureFixture
) -> None:
    """PostgreSQL refuses NUL in text (psycopg DataError) where SQLite stores it: a ``%00``
    in a filter once reached the driver and answered 500 (found by conformance fuzzing)."""
    caplog.set_level(logging.DEBUG)
    async with httpx.AsyncClient(base_url=server.local_url, timeout=30) as http:
        for target in (
            "/v1/assets?nameFilter=a%00b",
            "/v1/assets/asset%00x",
            "/v1/tunnels?labelSelector=a%00",
            f"/organizations/{callers.admin.org_id}/apiKeys/key%00",
        ):
            response = await http.get(target, headers=callers.admin.headers)
            _assert_api_error(response, f"GET {target}")
            assert "NUL" in response.json()["message"]
    _assert_quiet(caplog)
