"""The typed client against a real server, and its retry policy against scripted answers."""

from __future__ import annotations

import httpx
import pytest
import trio

from devyard.client import (
    DEFAULT_TIMEOUT,
    AsyncClient,
    AuthenticationError,
    BadRequestError,
    ConflictError,
    NotFoundError,
    PermissionDeniedError,
    RateLimitError,
    ResponseError,
    RetryPolicy,
    Role,
    ServerError,
    TransportError,
    UnprocessableError,
)
from devyard.client.output import to_json
from tests.ports import free_port

from .conftest import Server


async def test_identity_members_and_keys_round_trip(server: Server) -> None:
    async with AsyncClient(server.url, server.admin_key) as admin:
        me = await admin.whoami()
        assert (me.user.name, me.role, me.organization.id) == ("alice", Role.ADMIN, server.org_id)
        member = await admin.add_member(server.org_id, "bob", Role.MEMBER, email="b@example.com")
        assert member.user.email == "b@example.com"
        created = await admin.create_api_key(server.org_id, "bob-ci", user_name="bob")
        assert created.key.startswith("dy_") and created.key not in repr(created)
        async with AsyncClient(server.url, created.key) as bob:
            assert (await bob.whoami()).role == Role.MEMBER
            with pytest.raises(PermissionDeniedError) as denied:
                await bob.update_member(server.org_id, "alice", Role.VIEWER)
            assert denied.value.status == 403 and denied.value.reason == "insufficient_role"
            assert [k.name for k in await bob.list_api_keys(server.org_id)] == ["bob-ci"]
        members = await admin.list_members(server.org_id)
        assert [(m.user.name, m.role) for m in members] == [
            ("alice", Role.ADMIN),
            ("bob", Role.MEMBER),
        ]
        revoked = await admin.revoke_api_key(server.org_id, created.api_key.id)
        assert revoked.revoked_at is not None
        org = await admin.update_organization(server.org_id, inactivity_timeout_seconds=120)
        assert org.settings.inactivity_timeout_seconds == 120
        assert [r.name for r in await admin.list_regions()] == ["local"]
        assert (await admin.get_plan("self-hosted")).tid == "self-hosted"
        await admin.send_feedback("works", email="a@example.com")
        await admin.send_support_message(server.org_id, "help")
        assert await admin.readyz() == "ready"


async def test_errors_are_typed_and_carry_the_servers_message(server: Server) -> None:
    async with AsyncClient(server.url, server.admin_key) as admin:
        with pytest.raises(NotFoundError, match="nobody"):
            await admin.get_user("nobody")
        with pytest.raises(ConflictError, match="taken"):
            await admin.add_member(server.org_id, "alice", Role.VIEWER)
        with pytest.raises(UnprocessableError, match="last admin"):
            await admin.update_member(server.org_id, "alice", Role.VIEWER)
        with pytest.raises(BadRequestError, match="inactivityTimeoutSeconds"):
            await admin.update_organization(server.org_id, inactivity_timeout_seconds=1)
    async with AsyncClient(server.url, "dy_wrong") as stranger:
        with pytest.raises(AuthenticationError) as error:
            await stranger.whoami()
    assert str(error.value) == "invalid API key (HTTP 401)"


async def test_the_json_of_models_is_the_apis_json(server: Server) -> None:
    async with AsyncClient(server.url, server.admin_key) as admin:
        await admin.whoami()  # records the key's first use, so both reads below agree
        raw = await admin.request("GET", "/whoami")
        assert to_json(await admin.whoami()) == raw


async def test_an_unreachable_server_is_a_transport_error_after_retries(
    autojump_clock: trio.testing.MockClock,
) -> None:
    port = free_port()  # nobody listens there
    async with AsyncClient(f"http://127.0.0.1:{port}", "dy_x") as client:
        start = trio.current_time()
        with pytest.raises(TransportError):
            await client.livez()
        assert trio.current_time() - start >= 0.25 + 0.5  # two backoffs: >= half of 0.5, 1.0


# -- the retry policy, with scripted answers (httpx's own mock transport) -----------------------


def _scripted(*answers: httpx.Response | Exception) -> tuple[httpx.MockTransport, list[str]]:
    queue = list(answers)
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("Authorization", ""))
        answer = queue.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    return httpx.MockTransport(handler), seen


def _ok() -> httpx.Response:
    return httpx.Response(200, json={"message": "alive"})


def _error(status: int, **headers: str) -> httpx.Response:
    return httpx.Response(status, json={"message": f"nope {status}"}, headers=headers)


@pytest.mark.parametrize("status", [408, 409, 429, 500, 502, 503])
async def test_retryable_statuses_are_retried_twice(
    status: int, autojump_clock: trio.testing.MockClock
) -> None:
    transport, seen = _scripted(_error(status), _error(status), _ok())
    async with AsyncClient("http://devyard.test", "dy_k", transport=transport) as client:
        assert await client.livez() == "alive"
    assert seen == ["Bearer dy_k"] * 3


async def test_after_two_retries_the_error_is_raised(
    autojump_clock: trio.testing.MockClock,
) -> None:
    transport, seen = _scripted(_error(503), _error(503), _error(503))
    async with AsyncClient("http://devyard.test", transport=transport) as client:
        with pytest.raises(ServerError, match="nope 503"):
            await client.livez()
    assert len(seen) == 3


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422])
async def test_client_errors_are_not_retried(status: int) -> None:
    transport, seen = _scripted(_error(status))
    async with AsyncClient("http://devyard.test", transport=transport) as client:
        with pytest.raises(Exception) as error:
            await client.livez()
    assert getattr(error.value, "status", None) == status
    assert len(seen) == 1


async def test_retry_after_is_waited_for(autojump_clock: trio.testing.MockClock) -> None:
    transport, _ = _scripted(_error(429, **{"Retry-After": "7"}), _ok())
    async with AsyncClient("http://devyard.test", transport=transport) as client:
        start = trio.current_time()
        await client.livez()
    assert trio.current_time() - start >= 7


async def test_rate_limit_error_carries_retry_after() -> None:
    transport, _ = _scripted(_error(429, **{"Retry-After": "3"}))
    retry = RetryPolicy(max_retries=0)
    async with AsyncClient("http://devyard.test", transport=transport, retry=retry) as client:
        with pytest.raises(RateLimitError) as error:
            await client.livez()
    assert error.value.retry_after == 3.0


async def test_connection_errors_are_retried(autojump_clock: trio.testing.MockClock) -> None:
    transport, seen = _scripted(httpx.ConnectError("refused"), _ok())
    async with AsyncClient("http://devyard.test", transport=transport) as client:
        assert await client.livez() == "alive"
    assert len(seen) == 2


async def test_a_read_timeout_is_not_retried() -> None:
    transport, seen = _scripted(httpx.ReadTimeout("slow"), _ok())
    async with AsyncClient("http://devyard.test", transport=transport) as client:
        with pytest.raises(TransportError):
            await client.livez()
    assert len(seen) == 1


async def test_an_answer_that_is_not_the_apis_is_a_response_error() -> None:
    transport, _ = _scripted(httpx.Response(200, text="<html>proxy</html>"))
    async with AsyncClient("http://devyard.test", transport=transport) as client:
        with pytest.raises(ResponseError):
            await client.livez()
    transport, _ = _scripted(httpx.Response(502, text="<html>bad gateway</html>"))
    retry = RetryPolicy(max_retries=0)
    async with AsyncClient("http://devyard.test", transport=transport, retry=retry) as client:
        with pytest.raises(ServerError, match="HTTP 502"):
            await client.livez()


def test_backoff_grows_and_is_capped() -> None:
    policy = RetryPolicy(base=0.5, cap=2.0)
    for attempt, ceiling in [(0, 0.5), (1, 1.0), (2, 2.0), (5, 2.0)]:
        delay = policy.delay(attempt)
        assert ceiling / 2 <= delay <= ceiling
    assert policy.delay(0, retry_after=30) == 30
    assert policy.delay(0, retry_after=3600) == 60  # a server cannot park us for an hour


def test_the_default_timeout_is_five_minutes() -> None:
    assert DEFAULT_TIMEOUT == 300.0
